package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/platform/certwatch/certtest"
	"github.com/migflex/migflex/internal/testsupport/testenv"
	"github.com/migflex/migflex/internal/testsupport/testutil"
	"github.com/migflex/migflex/internal/webhook/fallback"
)

// Names the manifests use (deployments/kustomize/base/webhook-configuration.yaml,
// which the chart renders alike): the configuration, the webhook within it,
// and the opt-out label on pods and namespaces. TestManifestNames keeps them
// equal.
const (
	webhookConfigName = "gpu-allocation-webhook"
	webhookName       = "gpu-fallback.migflex.io"
	optOutLabel       = "migflex.io/fallback"
	optOutValue       = "disabled"
)

// manifestConfig is the MutatingWebhookConfiguration the manifests install.
func manifestConfig(t testing.TB) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	path := filepath.Join("..", "..", "deployments", "kustomize", "base", "webhook-configuration.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := yaml.UnmarshalStrict(data, cfg); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(cfg.Webhooks) != 1 {
		t.Fatalf("%s: %d webhooks, want 1", path, len(cfg.Webhooks))
	}
	return cfg
}

// webhookConfig is the manifests' configuration with a url instead of the
// Service (nothing routes ClusterIPs here), and failurePolicy Fail instead of
// Ignore, so that an unreachable webhook fails the test loudly.
func webhookConfig(t testing.TB, url string, caBundle []byte) *admissionregistrationv1.MutatingWebhookConfiguration {
	cfg := manifestConfig(t)
	wh := &cfg.Webhooks[0]
	wh.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caBundle}
	wh.FailurePolicy = ptr.To(admissionregistrationv1.Fail)
	return cfg
}

// The names the tests below assert on (the denial names the webhook, the
// opt-out label) are the manifests'.
func TestManifestNames(t *testing.T) {
	cfg := manifestConfig(t)
	wh := cfg.Webhooks[0]
	if cfg.Name != webhookConfigName || wh.Name != webhookName {
		t.Errorf("manifests name the configuration %q and its webhook %q, the tests %q and %q", cfg.Name, wh.Name, webhookConfigName, webhookName)
	}
	optOut := metav1.LabelSelectorRequirement{Key: optOutLabel, Operator: metav1.LabelSelectorOpNotIn, Values: []string{optOutValue}}
	for what, sel := range map[string]*metav1.LabelSelector{"namespaceSelector": wh.NamespaceSelector, "objectSelector": wh.ObjectSelector} {
		if sel == nil || !slices.ContainsFunc(sel.MatchExpressions, func(e metav1.LabelSelectorRequirement) bool { return cmp.Equal(e, optOut) }) {
			t.Errorf("manifests' %s %+v lacks the opt-out %s NotIn [%s]", what, sel, optOutLabel, optOutValue)
		}
	}
}

type cluster struct {
	t      *testing.T
	ctx    context.Context
	client kubernetes.Interface
}

func (c *cluster) node(name string, labels map[string]string, alloc map[corev1.ResourceName]int64, cordon bool) {
	c.t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}}}
	for k, v := range labels {
		n.Labels[k] = v
	}
	n.Spec.Unschedulable = cordon
	n, err := c.client.CoreV1().Nodes().Create(c.ctx, n, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	// The API server's TaintNodesByCondition admission taints a new node
	// not-ready:NoSchedule, which keeps pods (and so the webhook) off it until
	// the node lifecycle controller sees it Ready. There is no such
	// controller here; play its part.
	n.Spec.Taints = nil
	if n, err = c.client.CoreV1().Nodes().Update(c.ctx, n, metav1.UpdateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	c.setAllocatable(n, alloc)
}

func (c *cluster) setAllocatable(n *corev1.Node, alloc map[corev1.ResourceName]int64) {
	c.t.Helper()
	n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi")}
	for r, v := range alloc {
		n.Status.Allocatable[r] = *resource.NewQuantity(v, resource.DecimalSI)
	}
	n.Status.Capacity = n.Status.Allocatable.DeepCopy()
	if _, err := c.client.CoreV1().Nodes().UpdateStatus(c.ctx, n, metav1.UpdateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

func (c *cluster) create(ns string, p *corev1.Pod, dryRun bool) (*corev1.Pod, error) {
	opts := metav1.CreateOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	p = p.DeepCopy()
	p.Namespace = ns
	return c.client.CoreV1().Pods(ns).Create(c.ctx, p, opts)
}

// stored is the pod as etcd has it, read back with a GET.
func (c *cluster) stored(ns string, p *corev1.Pod) *corev1.Pod {
	c.t.Helper()
	if _, err := c.create(ns, p, false); err != nil {
		c.t.Fatalf("creating pod %s: %v", p.Name, err)
	}
	got, err := c.client.CoreV1().Pods(ns).Get(c.ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	return got
}

type runningWebhook struct {
	addr    string
	ca      *certtest.CA
	certDir string
}

// startWebhook runs a Server on 127.0.0.1 against the API server, waits
// until it is ready and registers it.
func (c *cluster) startWebhook(d *fallback.Decider) runningWebhook {
	c.t.Helper()
	w, _ := c.serve(Options{Decider: d, Client: c.client}, nil)
	return w
}

// serve runs a Server with o (listening on 127.0.0.1, with a new
// certificate), waits until it is ready and registers it with the
// manifests' configuration, changed by edit when it is not nil.
func (c *cluster) serve(o Options, edit func(*admissionregistrationv1.MutatingWebhookConfiguration)) (runningWebhook, *Server) {
	t := c.t
	t.Helper()
	ca := certtest.NewCA(t)
	certDir := t.TempDir()
	certtest.WriteSecretDir(t, certDir, ca.Issue(t))
	o.Listen, o.CertDir, o.CertPollInterval = "127.0.0.1:0", certDir, -1
	srv, err := NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(c.ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	addr := srv.Addr().String()
	https := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	testutil.Eventually(t, "/readyz", func() bool {
		resp, err := https.Get("https://" + addr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	// The API server picks the configuration up asynchronously; callers
	// probe with dry-run creations (answered like real ones, nothing stored).
	cfg := webhookConfig(t, "https://"+addr+"/mutate", ca.PEM())
	if edit != nil {
		edit(cfg)
	}
	if _, err := c.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(c.ctx, cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return runningWebhook{addr: addr, ca: ca, certDir: certDir}, srv
}

func (c *cluster) namespaces() {
	c.t.Helper()
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "team"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "opted-out", Labels: map[string]string{optOutLabel: optOutValue}}},
	} {
		if _, err := c.client.CoreV1().Namespaces().Create(c.ctx, ns, metav1.CreateOptions{}); err != nil {
			c.t.Fatal(err)
		}
	}
}

func limitsOnly(name string, r corev1.ResourceName, n string) *corev1.Pod {
	p := gpuPod(name, r, n)
	p.Spec.Containers[0].Resources.Requests = nil
	return p
}

// resources is the GPU requests and limits of every container, by name.
func resources(p *corev1.Pod) map[string]corev1.ResourceRequirements {
	out := map[string]corev1.ResourceRequirements{}
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range cs {
			out[c.Name] = corev1.ResourceRequirements{Requests: gpuOnly(c.Resources.Requests), Limits: gpuOnly(c.Resources.Limits)}
		}
	}
	return out
}

func rr(r corev1.ResourceName, n string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{r: resource.MustParse(n)},
		Limits:   corev1.ResourceList{r: resource.MustParse(n)},
	}
}

var qtyEqual = cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })

func TestAgainstAPIServer(t *testing.T) {
	cfg := testenv.Start(t)
	_, ctx := ktesting.NewTestContext(t)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, ctx: ctx, client: client}

	// a100: 1g.10gb only; v100 (pool=v100): whole GPUs; h100: 2g.20gb but cordoned.
	c.node("a100", map[string]string{"pool": "a100"}, map[corev1.ResourceName]int64{mig1g10: 28}, false)
	c.node("v100", map[string]string{"pool": "v100"}, map[corev1.ResourceName]int64{resourcename.GPU: 4}, false)
	c.node("h100", map[string]string{"pool": "h100"}, map[corev1.ResourceName]int64{mig2g20: 8}, true)
	c.namespaces()

	d, err := fallback.NewDecider(fallback.Options{Policy: fallback.DefaultPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	w := c.startWebhook(d)
	addr, ca, certDir := w.addr, w.ca, w.certDir
	probe := gpuPod("probe", mig2g20, "1")
	testutil.Eventually(t, "the webhook to be called", func() bool {
		p, err := c.create("team", probe, true)
		if err != nil {
			t.Fatalf("dry-run create: %v", err)
		}
		return p.Annotations[fallback.AnnotationFallback] != ""
	})

	t.Run("seeds scenario: 2g.20gb falls back to 1g.10gb", func(t *testing.T) {
		got := c.stored("team", gpuPod("train", mig2g20, "1"))
		if diff := cmp.Diff(map[string]corev1.ResourceRequirements{"main": rr(mig1g10, "1")}, resources(got), qtyEqual); diff != "" {
			t.Errorf("stored resources (-want +got):\n%s", diff)
		}
		if v := got.Annotations[fallback.AnnotationFallback]; v != "2g.20gb->1g.10gb" {
			t.Errorf("annotation %s = %q", fallback.AnnotationFallback, v)
		}
		var orig fallback.OriginalResources
		if err := json.Unmarshal([]byte(got.Annotations[fallback.AnnotationOriginal]), &orig); err != nil {
			t.Fatalf("annotation %s: %v", fallback.AnnotationOriginal, err)
		}
		if diff := cmp.Diff(map[string]fallback.ContainerResources{"main": {Requests: rr(mig2g20, "1").Requests, Limits: rr(mig2g20, "1").Limits}}, orig.Containers, qtyEqual); diff != "" {
			t.Errorf("original resources (-want +got):\n%s", diff)
		}
	})

	t.Run("limits only, quantity kept, init containers", func(t *testing.T) {
		p := limitsOnly("multi", "nvidia.com/mig-3g.40gb", "2")
		p.Spec.InitContainers = []corev1.Container{{Name: "warmup", Image: "cuda", Resources: rr(mig2g20, "1")}}
		got := c.stored("team", p)
		// The API server defaulted the requests from the rewritten limits.
		want := map[string]corev1.ResourceRequirements{"main": rr(mig1g10, "2"), "warmup": rr(mig1g10, "1")}
		if diff := cmp.Diff(want, resources(got), qtyEqual); diff != "" {
			t.Errorf("stored resources (-want +got):\n%s", diff)
		}
		if v := got.Annotations[fallback.AnnotationFallback]; v != "3g.40gb->1g.10gb,2g.20gb->1g.10gb" {
			t.Errorf("annotation = %q", v)
		}
	})

	t.Run("nodeSelector narrows to whole GPUs", func(t *testing.T) {
		p := gpuPod("v100-job", mig2g20, "1")
		p.Spec.NodeSelector = map[string]string{"pool": "v100"}
		got := c.stored("team", p)
		if diff := cmp.Diff(map[string]corev1.ResourceRequirements{"main": rr(resourcename.GPU, "1")}, resources(got), qtyEqual); diff != "" {
			t.Errorf("stored resources (-want +got):\n%s", diff)
		}
		if v := got.Annotations[fallback.AnnotationFallback]; v != "2g.20gb->gpu" {
			t.Errorf("annotation = %q", v)
		}
	})

	t.Run("no GPU request: untouched", func(t *testing.T) {
		got := c.stored("team", cpuPod("web"))
		if len(got.Annotations) != 0 {
			t.Errorf("annotations = %v, want none", got.Annotations)
		}
	})

	t.Run("opted out by pod label or namespace label: untouched", func(t *testing.T) {
		p := gpuPod("own-choice", mig2g20, "1")
		p.Labels = map[string]string{optOutLabel: optOutValue}
		for _, ns := range []string{"team", "opted-out"} {
			q := p.DeepCopy()
			if ns == "opted-out" {
				q.Labels = nil
			}
			got := c.stored(ns, q)
			if diff := cmp.Diff(map[string]corev1.ResourceRequirements{"main": rr(mig2g20, "1")}, resources(got), qtyEqual); diff != "" {
				t.Errorf("%s: stored resources (-want +got):\n%s", ns, diff)
			}
		}
	})

	t.Run("nothing fits: denied with the message", func(t *testing.T) {
		p := gpuPod("nowhere", mig2g20, "1")
		p.Spec.NodeSelector = map[string]string{"pool": "h100"}
		_, err := c.create("team", p, false)
		if !apierrors.IsForbidden(err) {
			t.Fatalf("create error = %v, want Forbidden", err)
		}
		for _, want := range []string{
			`admission webhook "` + webhookName + `" denied the request`,
			"nvidia.com/mig-2g.20gb is on no node this pod can be scheduled to (0 nodes of the cluster's 3)",
		} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not contain %q", err, want)
			}
		}
		if _, err := client.CoreV1().Pods("team").Get(ctx, "nowhere", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("denied pod was stored: %v", err)
		}
	})

	t.Run("uncordoned node is seen without a restart", func(t *testing.T) {
		n, err := client.CoreV1().Nodes().Get(ctx, "h100", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Spec.Unschedulable = false
		if _, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, "2g.20gb to be present", func() bool {
			p, err := c.create("team", probe, true)
			if err != nil {
				t.Fatal(err)
			}
			return p.Annotations[fallback.AnnotationFallback] == ""
		})
		got := c.stored("team", gpuPod("h100-job", mig2g20, "1"))
		if diff := cmp.Diff(map[string]corev1.ResourceRequirements{"main": rr(mig2g20, "1")}, resources(got), qtyEqual); diff != "" {
			t.Errorf("stored resources (-want +got):\n%s", diff)
		}
	})

	t.Run("rotated certificate is served without a restart", func(t *testing.T) {
		next := ca.Issue(t)
		certtest.WriteSecretDir(t, certDir, next)
		testutil.Eventually(t, "the new certificate", func() bool {
			conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool()})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			return conn.ConnectionState().PeerCertificates[0].SerialNumber.Cmp(next.Serial) == 0
		})
		// The API server keeps calling the webhook, now with the new certificate.
		p := gpuPod("after-rotation", "nvidia.com/mig-3g.40gb", "1")
		got := c.stored("team", p)
		if v := got.Annotations[fallback.AnnotationFallback]; v != "3g.40gb->2g.20gb" {
			t.Errorf("annotation = %q, want 3g.40gb->2g.20gb", v)
		}
	})
}

func TestCapacityModeAgainstAPIServer(t *testing.T) {
	cfg := testenv.Start(t)
	_, ctx := ktesting.NewTestContext(t)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, ctx: ctx, client: client}
	c.node("a", nil, map[corev1.ResourceName]int64{mig2g20: 2}, false)
	c.node("b", nil, map[corev1.ResourceName]int64{mig1g10: 7}, false)
	c.namespaces()
	// Running pods, bound to a by nodeName (no scheduler here); the
	// opted-out namespace keeps the webhook away from them.
	bound := func(name string) *corev1.Pod {
		p := gpuPod(name, mig2g20, "1")
		p.Spec.NodeName = "a"
		if _, err := c.create("opted-out", p, false); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bound("running-1")

	d, err := fallback.NewDecider(fallback.Options{Policy: fallback.DefaultPolicy(), Mode: fallback.ModeCapacity})
	if err != nil {
		t.Fatal(err)
	}
	c.startWebhook(d)
	probe := gpuPod("probe", mig2g20, "1")
	fallbackOf := func() string {
		p, err := c.create("team", probe, true)
		if err != nil {
			t.Fatalf("dry-run create: %v", err)
		}
		return p.Annotations[fallback.AnnotationFallback]
	}
	// One of two devices is free: unchanged. Only a webhook that answers
	// sets no annotation either, so first wait for it to answer at all.
	testutil.Eventually(t, "the webhook to be called", func() bool {
		p := gpuPod("absent", "nvidia.com/mig-3g.40gb", "1")
		got, err := c.create("team", p, true)
		if err != nil {
			t.Fatalf("dry-run create: %v", err)
		}
		return got.Annotations[fallback.AnnotationFallback] != ""
	})
	if got := fallbackOf(); got != "" {
		t.Fatalf("with a free 2g.20gb: fallback %q, want none", got)
	}

	bound("running-2")
	testutil.Eventually(t, "2g.20gb to be exhausted", func() bool { return fallbackOf() == "2g.20gb->1g.10gb" })
	got := c.stored("team", gpuPod("while-full", mig2g20, "1"))
	if v := got.Annotations[fallback.AnnotationReason]; v != "2g.20gb->1g.10gb=exhausted" {
		t.Errorf("reason = %q", v)
	}

	// A pod that finishes leaves the field-selected watch and frees its device.
	p, err := client.CoreV1().Pods("opted-out").Get(ctx, "running-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodSucceeded
	if _, err := client.CoreV1().Pods("opted-out").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the finished pod's device to be free", func() bool { return fallbackOf() == "" })
}

// requestLog records the API requests a client makes while it is open.
type requestLog struct {
	mu   sync.Mutex
	open bool
	seen int
	got  []string
}

func (l *requestLog) RoundTrip(next http.RoundTripper, r *http.Request) (*http.Response, error) {
	l.mu.Lock()
	l.seen++
	if l.open {
		l.got = append(l.got, requestVerb(r)+" "+r.URL.RequestURI())
	}
	l.mu.Unlock()
	return next.RoundTrip(r)
}

// requestVerb names a request by what it costs the API server: a GET is a
// list or a get unless it is a watch, which informers keep open.
func requestVerb(r *http.Request) string {
	if r.Method == http.MethodGet && r.URL.Query().Get("watch") == "true" {
		return "watch"
	}
	if r.Method == http.MethodGet {
		return "list/get"
	}
	return r.Method
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// The webhook decides from its informer caches: once they are synced, no
// admission makes an API request. Both informers run (capacity mode), and the
// admissions rewrite, keep and skip pods.
func TestNoAPIRequestPerAdmission(t *testing.T) {
	cfg := testenv.Start(t)
	_, ctx := ktesting.NewTestContext(t)
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, ctx: ctx, client: admin}
	c.node("a", nil, map[corev1.ResourceName]int64{mig2g20: 2}, false)
	c.node("b", nil, map[corev1.ResourceName]int64{mig1g10: 7}, false)
	running := gpuPod("running", mig2g20, "1")
	running.Spec.NodeName = "a"
	if _, err := c.create("default", running, false); err != nil {
		t.Fatal(err)
	}

	log := &requestLog{}
	counted := rest.CopyConfig(cfg)
	counted.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) { return log.RoundTrip(next, r) })
	})
	client, err := kubernetes.NewForConfig(counted)
	if err != nil {
		t.Fatal(err)
	}
	d, err := fallback.NewDecider(fallback.Options{Policy: fallback.DefaultPolicy(), Mode: fallback.ModeCapacity})
	if err != nil {
		t.Fatal(err)
	}
	ca := certtest.NewCA(t)
	certDir := t.TempDir()
	certtest.WriteSecretDir(t, certDir, ca.Issue(t))
	srv, err := NewServer(Options{Listen: "127.0.0.1:0", CertDir: certDir, CertPollInterval: -1, Decider: d, Client: client})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	base := "https://" + srv.Addr().String()
	https := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	testutil.Eventually(t, "/readyz", func() bool {
		resp, err := https.Get(base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	log.mu.Lock()
	seen := log.seen
	log.open = true
	log.mu.Unlock()
	// The informers' requests went through the counting transport.
	if seen == 0 {
		t.Fatal("no request counted while the caches synced; the client does not use the counting transport")
	}

	pods := map[string]*corev1.Pod{
		"rewritten": gpuPod("p", "nvidia.com/mig-3g.40gb", "1"),
		"unchanged": gpuPod("p", mig2g20, "1"),
		"no_gpu":    cpuPod("p"),
	}
	const n = 50
	results := map[string]int{}
	for i := range n {
		want := []string{"rewritten", "unchanged", "no_gpu"}[i%3]
		p := pods[want].DeepCopy()
		p.Name = fmt.Sprintf("pod-%d", i)
		resp, err := https.Post(base+"/mutate", "application/json", bytes.NewReader(reviewFor(t, p, nil)))
		if err != nil {
			t.Fatal(err)
		}
		var review admissionv1.AdmissionReview
		err = json.NewDecoder(resp.Body).Decode(&review)
		resp.Body.Close()
		if err != nil || review.Response == nil || !review.Response.Allowed {
			t.Fatalf("admission %d: %v %+v", i, err, review.Response)
		}
		if got := len(review.Response.Patch) > 0; got != (want == "rewritten") {
			t.Fatalf("admission %d (%s): patch %s", i, want, review.Response.Patch)
		}
		results[want]++
	}

	log.mu.Lock()
	log.open = false
	got := slices.DeleteFunc(slices.Clone(log.got), func(r string) bool { return strings.HasPrefix(r, "watch ") })
	log.mu.Unlock()
	if len(got) != 0 {
		t.Errorf("%d admissions (%v) made %d API requests besides watches, want none:\n%s", n, results, len(got), strings.Join(got, "\n"))
	}
}
