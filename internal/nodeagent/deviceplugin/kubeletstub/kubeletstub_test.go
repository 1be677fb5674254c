package kubeletstub

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

func TestRegisterRejects(t *testing.T) {
	k, client := startStub(t)

	for name, tc := range map[string]struct {
		req  *pluginapi.RegisterRequest
		want string
	}{
		"old version":        {req: &pluginapi.RegisterRequest{Version: "v1alpha", ResourceName: "example.com/x", Endpoint: "x.sock"}, want: `unsupported device plugin API version "v1alpha"`},
		"unqualified name":   {req: &pluginapi.RegisterRequest{Version: pluginapi.Version, ResourceName: "gpu", Endpoint: "x.sock"}, want: `"gpu" is not an extended resource name`},
		"kubernetes.io name": {req: &pluginapi.RegisterRequest{Version: pluginapi.Version, ResourceName: "kubernetes.io/gpu", Endpoint: "x.sock"}, want: "not an extended resource name"},
		"invalid name":       {req: &pluginapi.RegisterRequest{Version: pluginapi.Version, ResourceName: "nvidia.com/mig-1g.10gb+me", Endpoint: "x.sock"}, want: `resource name "nvidia.com/mig-1g.10gb+me"`},
		"endpoint with path": {req: &pluginapi.RegisterRequest{Version: pluginapi.Version, ResourceName: "example.com/x", Endpoint: "/tmp/x.sock"}, want: "is not a socket name"},
		"nothing listening":  {req: &pluginapi.RegisterRequest{Version: pluginapi.Version, ResourceName: "example.com/x", Endpoint: "x.sock"}, want: "getting options of example.com/x"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := client.Register(ctx, tc.req)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Register error = %v, want one containing %q", err, tc.want)
			}
		})
	}
	st := k.State()
	if len(st.Registrations) != 0 || len(st.Rejected) != 6 {
		t.Errorf("state after rejections: %d registrations, %d rejected; want 0 and 6", len(st.Registrations), len(st.Rejected))
	}
	if _, err := k.Allocate(context.Background(), "example.com/x", "a"); err == nil {
		t.Error("Allocate without a registered plugin succeeded")
	}
}

func TestRegisterHook(t *testing.T) {
	k, client := startStub(t)
	// A valid request the stand-in would try to dial back, were it not
	// for the hook.
	req := &pluginapi.RegisterRequest{Version: pluginapi.Version, ResourceName: "example.com/x", Endpoint: "x.sock"}

	seen := make(chan string, 1)
	k.SetRegisterHook(func(_ context.Context, r *pluginapi.RegisterRequest) error {
		seen <- r.ResourceName
		return errors.New("held by the test")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := client.Register(ctx, req); err == nil || !strings.Contains(err.Error(), "held by the test") {
		t.Errorf("Register error = %v, want the hook's", err)
	}
	if got := <-seen; got != "example.com/x" {
		t.Errorf("hook saw %q", got)
	}

	// Without the hook the stand-in handles the request itself again.
	k.SetRegisterHook(nil)
	if _, err := client.Register(ctx, req); err == nil || !strings.Contains(err.Error(), "getting options of example.com/x") {
		t.Errorf("Register error = %v, want the stand-in's own", err)
	}
	if st := k.State(); len(st.Rejected) != 2 {
		t.Errorf("%d rejected, want 2", len(st.Rejected))
	}
}

// startStub starts a stand-in kubelet for the test and a registration
// client connected to its socket; both stop when the test ends.
func startStub(t *testing.T) (*Kubelet, pluginapi.RegistrationClient) {
	t.Helper()
	k, err := Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	conn, err := grpc.NewClient("unix://"+k.Socket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return k, pluginapi.NewRegistrationClient(conn)
}
