package metricsserver

import (
	"context"
	"crypto/tls"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/migflex/migflex/internal/testsupport/testenv"
)

// Against a real kube-apiserver: the server, running as a ServiceAccount
// that has only system:auth-delegator, serves /metrics to a
// ServiceAccount's token that a ClusterRole lets get /metrics, refuses one
// that nothing lets, and a token the API server never issued; a removed
// binding takes effect once its answer expires.
func TestTokensAgainstAPIServer(t *testing.T) {
	cfg := testenv.Start(t)
	admin := kubernetes.NewForConfigOrDie(cfg)
	ctx := t.Context()
	for _, ns := range []string{"migflex", "monitoring"} {
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	token := func(ns, name string) string {
		t.Helper()
		if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	bind := func(name, role, ns, sa string) {
		t.Helper()
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa}},
		}
		if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	serverToken := token("migflex", "server")
	bind("server-auth", "system:auth-delegator", "migflex", "server")
	reader := token("monitoring", "prometheus")
	bind("prometheus-metrics", "metrics-reader", "monitoring", "prometheus")
	nobody := token("monitoring", "nobody")
	unprivileged := token("migflex", "unprivileged")

	// The server's client has only its ServiceAccount's token.
	asSA := func(tok string) kubernetes.Interface {
		c := rest.AnonymousClientConfig(cfg)
		c.BearerToken = tok
		return kubernetes.NewForConfigOrDie(c)
	}
	clk := testingclock.NewFakeClock(time.Now())
	reviewer := newReviewer(asSA(serverToken), clk)
	var healthy atomic.Bool
	healthy.Store(true)
	_, logCtx := ktesting.NewTestContext(t)
	s, err := New(Options{Addr: "127.0.0.1:0", Name: "migflex-test", Handler: Handler(testRegistry(), &healthy, ""), Reviewer: reviewer})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(logCtx)
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	defer func() {
		cancel()
		<-done
	}()
	scraper := client(&tls.Config{InsecureSkipVerify: true})
	url := "https://" + s.Addr().String()

	for _, tc := range []struct {
		name, path, token string
		wantCode          int
		wantBody          string
	}{
		{"a token that may read", "/metrics", reader, 200, "migflex_test_total 1"},
		{"a token that may not", "/metrics", nobody, 403, `user "system:serviceaccount:monitoring:nobody" may not get /metrics`},
		{"no token", "/metrics", "", 401, "Unauthorized"},
		{"a token the API server never issued", "/metrics", "eyJhbGciOiJSUzI1NiJ9.e30.c2ln", 401, "Unauthorized"},
		{"the probe's path, no token", "/healthz", "", 200, "ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body, _ := get(t, scraper, url+tc.path, tc.token)
			if code != tc.wantCode || !strings.Contains(body, tc.wantBody) {
				t.Errorf("GET %s: %d %q, want %d containing %q", tc.path, code, body, tc.wantCode, tc.wantBody)
			}
		})
	}

	t.Run("a removed binding, once its answer expires", func(t *testing.T) {
		if err := admin.RbacV1().ClusterRoleBindings().Delete(ctx, "prometheus-metrics", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if code, _, _ := get(t, scraper, url+"/metrics", reader); code != 200 {
			t.Errorf("right after the binding went: %d, want the cached 200", code)
		}
		// The API server's RBAC authorizer sees the deletion through its
		// own informer, a moment later.
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			clk.Step(DefaultAllowTTL)
			code, _, _ := get(t, scraper, url+"/metrics", reader)
			return code == 403, nil
		})
		if err != nil {
			t.Errorf("the reader still reads after its binding went: %v", err)
		}
	})

	// A server whose ServiceAccount may not review refuses with 500 and
	// says why in its log, rather than letting anyone in.
	t.Run("a server without system:auth-delegator", func(t *testing.T) {
		h := newReviewer(asSA(unprivileged), clock.RealClock{}).Wrap(okHandler, nil)
		rec := serve(h, "GET", "/metrics", "Bearer "+reader)
		if rec.Code != 500 {
			t.Errorf("%d %q, want 500", rec.Code, rec.Body)
		}
	})
}
