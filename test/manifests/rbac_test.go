package manifests

import (
	"context"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"

	"github.com/migflex/migflex/internal/testsupport/testenv"
	"github.com/migflex/migflex/internal/webhook"
	"github.com/migflex/migflex/internal/webhook/certgen"
)

// The certgen Job's RBAC, applied from each rendering, is enough for
// certgen to do its whole job as that ServiceAccount, and no more: other
// Secrets and other webhook configurations stay out of its reach.
func TestCertgenRBAC(t *testing.T) {
	renderings := map[string]objects{
		"helm":      helmTemplate(t, scenarioNamed(t, "default")),
		"kustomize": kustomizeBuild(t, "overlays/real"),
	}
	cfg := testenv.Start(t)
	admin := kubernetes.NewForConfigOrDie(cfg)
	c := newCluster(t, cfg)
	ctx := t.Context()
	mustCreate(t, admin.CoreV1().Namespaces(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})
	mustCreate(t, admin.CoreV1().Secrets(namespace), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "someone-elses", Namespace: namespace},
		Data:       map[string][]byte{"password": []byte("hunter2")},
	})

	for _, name := range []string{"helm", "kustomize"} {
		objs := renderings[name]
		t.Run(name, func(t *testing.T) {
			for _, o := range objs {
				switch {
				case strings.HasPrefix(o.GetName(), "migflex-certgen") && o.GetKind() != "Job",
					o.GetKind() == "MutatingWebhookConfiguration":
					if err := c.apply(ctx, o, false); err != nil {
						t.Fatal(err)
					}
				}
			}
			// A clean start for each rendering.
			if err := admin.CoreV1().Secrets(namespace).Delete(ctx, "gpu-webhook-tls", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
			sa := impersonate(cfg, "system:serviceaccount:"+namespace+":migflex-certgen")

			_, logCtx := ktesting.NewTestContext(t)
			runCtx, cancel := context.WithTimeout(logCtx, time.Minute) // hang protection
			defer cancel()
			o := certgen.Options{Namespace: namespace, SecretName: "gpu-webhook-tls", ServiceName: "gpu-webhook", WebhookConfigName: "gpu-allocation-webhook"}
			if err := certgen.Run(runCtx, sa, o); err != nil {
				t.Fatalf("certgen as its ServiceAccount: %v", err)
			}
			s, err := admin.CoreV1().Secrets(namespace).Get(ctx, "gpu-webhook-tls", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			mwc, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "gpu-allocation-webhook", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := string(mwc.Webhooks[0].ClientConfig.CABundle); got == "" || got != string(s.Data[certgen.KeyCA]) {
				t.Errorf("caBundle %q, want the Secret's ca.crt", got)
			}
			// A second run (helm upgrade, kubectl apply again) keeps it.
			if err := certgen.Run(runCtx, sa, o); err != nil {
				t.Fatalf("second run: %v", err)
			}

			if _, err := sa.CoreV1().Secrets(namespace).Get(ctx, "someone-elses", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
				t.Errorf("certgen reading another Secret: %v, want forbidden", err)
			}
			if _, err := sa.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
				t.Errorf("certgen creating a Secret in default: %v, want forbidden", err)
			}
			o.WebhookConfigName = "another-webhook"
			o.WaitTimeout = time.Second
			err = certgen.Run(runCtx, sa, o)
			if !apierrors.IsForbidden(err) {
				t.Errorf("certgen reading another webhook configuration: %v, want forbidden at once", err)
			}
		})
	}
}

// impersonate returns a client acting as a ServiceAccount user, with the
// groups the API server gives ServiceAccounts.
func impersonate(cfg *rest.Config, user string) kubernetes.Interface {
	c := rest.CopyConfig(cfg)
	ns := strings.Split(user, ":")[2]
	c.Impersonate = rest.ImpersonationConfig{
		UserName: user,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}
	return kubernetes.NewForConfigOrDie(c)
}

// Each component's ServiceAccount gets what it needs and no more, with the
// switches that widen it: the webhook reads pods only in capacity mode, the
// agent evicts pods only with busyPolicy evict, and writes its Node's
// status only with publishAllocatable (the default).
func TestComponentPermissions(t *testing.T) {
	type check struct {
		user                string
		group               string
		verb, resource, sub string
		namespace, name     string
		allowed             bool
	}
	agent := "system:serviceaccount:" + namespace + ":migflex-agent"
	webhook := "system:serviceaccount:" + namespace + ":gpu-webhook"
	common := []check{
		{user: agent, verb: "patch", resource: "nodes", allowed: true},
		{user: agent, verb: "watch", resource: "nodes", allowed: true},
		{user: agent, verb: "update", resource: "nodes", sub: "status"},
		{user: agent, verb: "delete", resource: "nodes"},
		{user: agent, verb: "create", resource: "events", namespace: "default", allowed: true},
		{user: agent, verb: "list", resource: "pods", namespace: "team-a"},
		{user: agent, verb: "get", resource: "secrets", namespace: namespace},
		{user: webhook, verb: "list", resource: "nodes", allowed: true},
		{user: webhook, verb: "watch", resource: "nodes", allowed: true},
		{user: webhook, verb: "get", resource: "nodes", name: "gpu-1"},
		{user: webhook, verb: "patch", resource: "nodes"},
		{user: webhook, verb: "get", resource: "secrets", namespace: namespace, name: "gpu-webhook-tls"},
		{user: webhook, group: "resource.k8s.io", verb: "list", resource: "resourceslices", allowed: true},
		{user: webhook, group: "resource.k8s.io", verb: "watch", resource: "deviceclasses", allowed: true},
		{user: webhook, group: "resource.k8s.io", verb: "create", resource: "resourceslices"},
	}
	helmPath(t) // skip before starting a control plane
	cfg := testenv.Start(t)
	admin := kubernetes.NewForConfigOrDie(cfg)
	c := newCluster(t, cfg)
	mustCreate(t, admin.CoreV1().Namespaces(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})
	// One API server, the scenarios applied in turn: server-side apply
	// under one field manager makes each object exactly what the current
	// scenario renders, and no scenario lacks an object an earlier one has.
	for _, tc := range []struct {
		scenario string
		checks   []check
	}{
		{"default", append(common,
			check{user: agent, verb: "patch", resource: "nodes", sub: "status", allowed: true},
			check{user: webhook, verb: "list", resource: "pods", namespace: "team-a"},
			check{user: webhook, group: "resource.k8s.io", verb: "list", resource: "resourceclaims", namespace: "team-a"},
			check{user: agent, verb: "create", resource: "pods", sub: "eviction", namespace: "team-a"},
		)},
		{"capacity", append(common,
			check{user: webhook, verb: "list", resource: "pods", namespace: "team-a", allowed: true},
			check{user: webhook, verb: "watch", resource: "pods", namespace: "team-a", allowed: true},
			check{user: webhook, verb: "get", resource: "pods", namespace: "team-a", name: "train"},
			check{user: webhook, verb: "delete", resource: "pods", namespace: "team-a"},
			check{user: webhook, group: "resource.k8s.io", verb: "watch", resource: "resourceclaims", namespace: "team-a", allowed: true},
			check{user: webhook, group: "resource.k8s.io", verb: "update", resource: "resourceclaims", sub: "status", namespace: "team-a"},
		)},
		{"no-publish", append(common,
			check{user: agent, verb: "patch", resource: "nodes", sub: "status"},
		)},
		{"evict", append(common,
			check{user: agent, verb: "create", resource: "pods", sub: "eviction", namespace: "team-a", allowed: true},
			check{user: agent, verb: "delete", resource: "pods", namespace: "team-a"},
		)},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			objs := helmTemplate(t, scenarioNamed(t, tc.scenario))
			for _, o := range objs {
				switch o.GetKind() {
				case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
					if err := c.apply(t.Context(), o, false); err != nil {
						t.Fatal(err)
					}
				}
			}
			for _, ck := range tc.checks {
				sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
					User:   ck.user,
					Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
					ResourceAttributes: &authorizationv1.ResourceAttributes{
						Group: ck.group, Verb: ck.verb, Resource: ck.resource, Subresource: ck.sub, Namespace: ck.namespace, Name: ck.name,
					},
				}}
				got, err := admin.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), sar, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if got.Status.Allowed != ck.allowed {
					t.Errorf("%s %s %s/%s in %q: allowed %v, want %v", ck.user, ck.verb, ck.resource, ck.sub, ck.namespace, got.Status.Allowed, ck.allowed)
				}
			}
			// What the webhook does with them is enough: its informers
			// (pods too in capacity mode) sync as its ServiceAccount.
			if withPods, ok := map[string]bool{"default": false, "capacity": true}[tc.scenario]; ok {
				informersSync(t, impersonate(cfg, webhook), withPods)
			}
		})
	}
}

// informersSync runs the webhook's informer source with client until its
// caches have synced, failing the test when they do not.
func informersSync(t *testing.T, client kubernetes.Interface, withPods bool) {
	t.Helper()
	src, err := webhook.NewInformerSource(client, withPods, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, time.Minute) // hang protection
	done := make(chan struct{})
	go func() {
		defer close(done)
		src.Run(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	err = wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		_, synced := src.Snapshot()
		return synced, nil
	})
	if err != nil {
		t.Errorf("the webhook's informers (pods %v) did not sync as its ServiceAccount: %v", withPods, err)
	}
}
