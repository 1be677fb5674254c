package certgen

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
)

// dialTimeout is the error client-go returns when the API server does not
// answer a connection attempt (a pod network that drops the replies, say):
// it matches context.DeadlineExceeded, as Go's dial timeouts do.
func dialTimeout(verb string) error {
	return &url.Error{Op: verb, URL: "https://10.96.0.1:443/api", Err: &net.OpError{
		Op: "dial", Net: "tcp", Err: fmt.Errorf("i/o timeout: %w", context.DeadlineExceeded),
	}}
}

// TestRunReportsEveryFailedRequest: a request that fails with an error
// matching a context error (a dial timeout, a cancelled request) fails Run.
// The Job's exit status is all Helm and kubectl see: a certgen that exits 0
// after such an error lets `helm install` go on as if the Secret existed,
// and the webhook's pods wait for it forever.
func TestRunReportsEveryFailedRequest(t *testing.T) {
	for _, tc := range []struct {
		name, verb, resource string
		err                  error
		want                 string
	}{
		{"reading the Secret times out", "get", "secrets", dialTimeout("Get"), "reading Secret"},
		{"reading the Secret is cancelled", "get", "secrets", fmt.Errorf("request: %w", context.Canceled), "reading Secret"},
		{"creating the Secret times out", "create", "secrets", dialTimeout("Post"), "creating Secret"},
		{"patching the caBundle times out", "patch", "mutatingwebhookconfigurations", dialTimeout("Patch"), "patching the caBundle"},
		{"taking ownership of the Secret times out", "update", "secrets", dialTimeout("Put"), "the owner of Secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(webhookConfig(testConfig))
			client.PrependReactor(tc.verb, tc.resource, func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, tc.err
			})
			_, ctx := ktesting.NewTestContext(t)
			err := Run(ctx, client, Options{
				Namespace: testNS, SecretName: testSecret, ServiceName: testSvc, WebhookConfigName: testConfig,
				WaitTimeout: time.Second, PollInterval: 10 * time.Millisecond,
			})
			if err == nil {
				t.Fatalf("Run returned nil after the %s of %s failed with %q", tc.verb, tc.resource, tc.err)
			}
			if !strings.Contains(err.Error(), tc.want) || !errors.Is(err, tc.err) {
				t.Errorf("Run: %v; want an error saying %q that wraps %q", err, tc.want, tc.err)
			}
		})
	}
}
