package certgen

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"

	"github.com/migflex/migflex/internal/testsupport/testenv"
)

const (
	testNS      = "gpu-webhook"
	testSvc     = "gpu-webhook"
	testSecret  = "gpu-webhook-tls"
	testConfig  = "gpu-allocation-webhook"
	otherConfig = "someone-elses-webhook"
)

// webhookConfig is a configuration with one webhook calling the Service and
// one calling another, which certgen must leave alone.
func webhookConfig(name string) *admissionregistrationv1.MutatingWebhookConfiguration {
	none := admissionregistrationv1.SideEffectClassNone
	ignore := admissionregistrationv1.Ignore
	hook := func(hookName, svc string, bundle []byte) admissionregistrationv1.MutatingWebhook {
		return admissionregistrationv1.MutatingWebhook{
			Name: hookName,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				Service:  &admissionregistrationv1.ServiceReference{Namespace: testNS, Name: svc},
				CABundle: bundle,
			},
			// A rule that matches nothing this test creates: the API
			// server must never call the (absent) webhook.
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"example.io"}, APIVersions: []string{"v1"}, Resources: []string{"widgets"}},
			}},
			SideEffects:             &none,
			FailurePolicy:           &ignore,
			AdmissionReviewVersions: []string{"v1"},
		}
	}
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			hook("other.example.io", "another-service", []byte("someone else's CA")),
			hook("gpu-fallback.migflex.io", testSvc, nil),
		},
	}
}

func TestRunAgainstAPIServer(t *testing.T) {
	cfg := testenv.Start(t)
	client := kubernetes.NewForConfigOrDie(cfg)
	if _, err := client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(t.Context(), webhookConfig(testConfig), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	opts := func(now time.Time) Options {
		return Options{
			Namespace: testNS, SecretName: testSecret, ServiceName: testSvc, WebhookConfigName: testConfig,
			Validity: 365 * 24 * time.Hour, RenewBefore: 30 * 24 * time.Hour,
			Now: func() time.Time { return now },
		}
	}
	now := time.Now()
	names := dnsNames(testSvc, testNS, DefaultClusterDomain)

	// state reads the Secret and the configuration, and checks they agree:
	// the bundle of the webhook calling the Service is the Secret's ca.crt,
	// which verifies its certificate; the other webhook is untouched.
	type state struct {
		secret *corev1.Secret
		config *admissionregistrationv1.MutatingWebhookConfiguration
	}
	read := func(t *testing.T, at time.Time) state {
		t.Helper()
		s, err := client.CoreV1().Secrets(testNS).Get(t.Context(), testSecret, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(t.Context(), testConfig, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if s.Type != corev1.SecretTypeTLS {
			t.Errorf("Secret type %q, want %q", s.Type, corev1.SecretTypeTLS)
		}
		if err := check(s.Data, names, at, time.Hour); err != nil {
			t.Errorf("stored Secret is not usable: %v", err)
		}
		if got := c.Webhooks[1].ClientConfig.CABundle; !bytes.Equal(got, s.Data[KeyCA]) {
			t.Errorf("caBundle of %s is\n%s\nwant the Secret's ca.crt\n%s", c.Webhooks[1].Name, got, s.Data[KeyCA])
		}
		if got := string(c.Webhooks[0].ClientConfig.CABundle); got != "someone else's CA" {
			t.Errorf("the webhook calling another Service got caBundle %q", got)
		}
		return state{s, c}
	}

	run := func(t *testing.T, o Options) error {
		t.Helper()
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithTimeout(ctx, time.Minute) // hang protection
		defer cancel()
		return Run(ctx, client, o)
	}

	var first state
	t.Run("first run creates the Secret and injects the CA", func(t *testing.T) {
		if err := run(t, opts(now)); err != nil {
			t.Fatal(err)
		}
		first = read(t, now)
		if first.secret.Labels["app.kubernetes.io/managed-by"] != "migflex-certgen" {
			t.Errorf("Secret labels %v", first.secret.Labels)
		}
		checkOwner(t, first.secret, first.config)
	})

	t.Run("second run changes nothing", func(t *testing.T) {
		if err := run(t, opts(now)); err != nil {
			t.Fatal(err)
		}
		again := read(t, now)
		if again.secret.ResourceVersion != first.secret.ResourceVersion {
			t.Errorf("Secret rewritten: resourceVersion %s -> %s", first.secret.ResourceVersion, again.secret.ResourceVersion)
		}
		if again.config.ResourceVersion != first.config.ResourceVersion {
			t.Errorf("configuration patched: resourceVersion %s -> %s", first.config.ResourceVersion, again.config.ResourceVersion)
		}
	})

	t.Run("a certificate in its renewal window is replaced, the old CA kept in the bundle", func(t *testing.T) {
		later := now.Add(340 * 24 * time.Hour)
		if err := run(t, opts(later)); err != nil {
			t.Fatal(err)
		}
		renewed := read(t, later)
		if bytes.Equal(renewed.secret.Data[KeyCert], first.secret.Data[KeyCert]) {
			t.Fatal("certificate not replaced")
		}
		if !bytes.HasSuffix(renewed.secret.Data[KeyCA], first.secret.Data[KeyCA]) {
			t.Errorf("renewed bundle does not keep the previous CA")
		}
		// The webhook still serving the old certificate is trusted.
		old := map[string][]byte{KeyCert: first.secret.Data[KeyCert], KeyKey: first.secret.Data[KeyKey], KeyCA: renewed.config.Webhooks[1].ClientConfig.CABundle}
		if err := check(old, names, later, time.Hour); err != nil {
			t.Errorf("old certificate against the injected bundle: %v", err)
		}
	})

	t.Run("a broken Secret is repaired", func(t *testing.T) {
		s, err := client.CoreV1().Secrets(testNS).Get(t.Context(), testSecret, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Data[KeyKey] = []byte("garbage")
		s.Data["unrelated"] = []byte("kept")
		if _, err := client.CoreV1().Secrets(testNS).Update(t.Context(), s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := run(t, opts(now)); err != nil {
			t.Fatal(err)
		}
		repaired := read(t, now)
		if string(repaired.secret.Data["unrelated"]) != "kept" {
			t.Errorf("a key certgen does not own was lost: %q", repaired.secret.Data["unrelated"])
		}
	})

	t.Run("a Secret of another type is left alone with a clear error", func(t *testing.T) {
		opaque := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "opaque", Namespace: testNS},
			Data:       map[string][]byte{"password": []byte("hunter2")},
		}
		if _, err := client.CoreV1().Secrets(testNS).Create(t.Context(), opaque, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		o := opts(now)
		o.SecretName = "opaque"
		err := run(t, o)
		if err == nil || !strings.Contains(err.Error(), `has type "Opaque", not "kubernetes.io/tls"`) {
			t.Fatalf("Run: %v, want the type named", err)
		}
		got, err := client.CoreV1().Secrets(testNS).Get(t.Context(), "opaque", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Data) != 1 || string(got.Data["password"]) != "hunter2" {
			t.Errorf("the Opaque Secret changed: %v", got.Data)
		}
	})

	t.Run("no webhook-config: only the Secret", func(t *testing.T) {
		o := opts(now)
		o.SecretName, o.WebhookConfigName = "secret-only", ""
		if err := run(t, o); err != nil {
			t.Fatal(err)
		}
		s, err := client.CoreV1().Secrets(testNS).Get(t.Context(), "secret-only", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := check(s.Data, names, now, time.Hour); err != nil {
			t.Error(err)
		}
		if len(s.OwnerReferences) != 0 {
			t.Errorf("owner references %+v without a configuration, want none", s.OwnerReferences)
		}
	})

	t.Run("waits for a configuration created after it started", func(t *testing.T) {
		o := opts(now)
		o.WebhookConfigName = "created-later"
		o.PollInterval = 50 * time.Millisecond
		waiting := make(chan struct{})
		var once sync.Once
		o.Logger = funcr.New(func(_, args string) {
			if strings.Contains(args, "Waiting for the MutatingWebhookConfiguration") {
				once.Do(func() { close(waiting) })
			}
		}, funcr.Options{})
		done := make(chan error, 1)
		go func() { done <- run(t, o) }()
		select {
		case <-waiting:
		case err := <-done:
			t.Fatalf("Run returned before waiting: %v", err)
		}
		if _, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(t.Context(), webhookConfig("created-later"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		c, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(t.Context(), "created-later", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Webhooks[1].ClientConfig.CABundle) == 0 {
			t.Error("no caBundle injected")
		}
	})

	t.Run("gives up on a configuration that never appears", func(t *testing.T) {
		o := opts(now)
		o.WebhookConfigName = "never"
		o.WaitTimeout, o.PollInterval = 300*time.Millisecond, 50*time.Millisecond
		err := run(t, o)
		if err == nil || !strings.Contains(err.Error(), "MutatingWebhookConfiguration never did not appear within 300ms") {
			t.Fatalf("Run: %v, want a timeout naming the configuration", err)
		}
	})

	t.Run("a configuration with no webhook calling the Service is an error", func(t *testing.T) {
		if _, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(t.Context(), webhookConfig(otherConfig), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		o := opts(now)
		o.WebhookConfigName, o.ServiceName = otherConfig, "not-called"
		o.SecretName = "not-called-tls"
		err := run(t, o)
		if err == nil || !strings.Contains(err.Error(), "has no webhook calling Service gpu-webhook/not-called") {
			t.Fatalf("Run: %v", err)
		}
	})

	t.Run("a configuration created again owns the Secret instead of the old one", func(t *testing.T) {
		o := opts(now)
		o.WebhookConfigName, o.SecretName = "recreated", "recreated-tls"
		configs := client.AdmissionregistrationV1().MutatingWebhookConfigurations()
		old, err := configs.Create(t.Context(), webhookConfig(o.WebhookConfigName), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := run(t, o); err != nil {
			t.Fatal(err)
		}
		// No garbage collector runs here: the Secret outlives its owner,
		// as it would while the collector is behind.
		if err := configs.Delete(t.Context(), old.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		again, err := configs.Create(t.Context(), webhookConfig(o.WebhookConfigName), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := run(t, o); err != nil {
			t.Fatal(err)
		}
		s, err := client.CoreV1().Secrets(testNS).Get(t.Context(), o.SecretName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		checkOwner(t, s, again)
	})
}

// checkOwner checks that the configuration is the Secret's only owner.
func checkOwner(t *testing.T, s *corev1.Secret, cfg *admissionregistrationv1.MutatingWebhookConfiguration) {
	t.Helper()
	want := []metav1.OwnerReference{{
		APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration", Name: cfg.Name, UID: cfg.UID,
	}}
	if diff := cmp.Diff(want, s.OwnerReferences); diff != "" {
		t.Errorf("Secret %s owner references (-want +got):\n%s", s.Name, diff)
	}
}
