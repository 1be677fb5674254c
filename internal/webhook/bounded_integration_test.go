package webhook

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/testsupport/testenv"
	"github.com/migflex/migflex/internal/testsupport/testutil"
	"github.com/migflex/migflex/internal/webhook/fallback"
)

// warnings collects the API server's warnings to one client.
type warnings struct {
	mu  sync.Mutex
	got []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.got = append(w.got, text)
}

// take returns the warnings so far and forgets them.
func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.got
	w.got = nil
	return out
}

// What issue 14 (points 4 and 5) found, against a real kube-apiserver: the
// webhook leaves alone what it must not or cannot decide, the API server
// passes its warnings to the client, and a pod the webhook leaves alone is
// stored as the user wrote it (or refused with the API server's own
// message). Then: when the API server gives up on the webhook (its
// timeoutSeconds), the webhook stops deciding.
func TestBoundsAgainstAPIServer(t *testing.T) {
	cfg := testenv.Start(t)
	_, ctx := ktesting.NewTestContext(t)
	warned := &warnings{}
	withWarnings := rest.CopyConfig(cfg)
	withWarnings.WarningHandler = warned
	client, err := kubernetes.NewForConfig(withWarnings)
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, ctx: ctx, client: client}
	c.node("a100", nil, map[corev1.ResourceName]int64{mig1g10: 7 * 500}, false)
	c.node("h100", nil, map[corev1.ResourceName]int64{"nvidia.com/mig-7g.80gb": 1}, false)
	c.namespaces()
	d, err := fallback.NewDecider(fallback.Options{Policy: fallback.DefaultPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	c.startWebhook(d)
	testutil.Eventually(t, "the webhook to be called", func() bool {
		p, err := c.create("team", gpuPod("probe", mig2g20, "1"), true)
		if err != nil {
			t.Fatalf("dry-run create: %v", err)
		}
		return p.Annotations[fallback.AnnotationFallback] != ""
	})
	warned.take()

	// left checks that the webhook left the stored pod's GPU resources as
	// they were and that one warning contains want.
	left := func(t *testing.T, sent, got *corev1.Pod, want string) {
		t.Helper()
		if v, ok := got.Annotations[fallback.AnnotationOriginal]; ok {
			t.Errorf("pod was rewritten: %s=%.200s", fallback.AnnotationOriginal, v)
		}
		if len(got.Spec.Containers) != len(sent.Spec.Containers) {
			t.Fatalf("%d containers stored, %d sent", len(got.Spec.Containers), len(sent.Spec.Containers))
		}
		for i := range sent.Spec.Containers {
			if w, g := sent.Spec.Containers[i].Resources.Limits, got.Spec.Containers[i].Resources.Limits; !cmp.Equal(w, g, qtyEqual) {
				t.Fatalf("container %d: limits changed: %d sent, %d stored", i, len(w), len(g))
			}
		}
		ws := warned.take()
		if !strings.Contains(strings.Join(ws, "\n"), want) {
			t.Errorf("warnings %q lack %q", ws, want)
		}
	}

	t.Run("unknown MIG name: stored as written, with a warning naming it", func(t *testing.T) {
		p := gpuPod("unknown", "nvidia.com/mig-9g.99gb", "1")
		left(t, p, c.stored("team", p), "unknown GPU resource nvidia.com/mig-9g.99gb left as it is")
	})

	t.Run("500 containers x 8 types: stored as written, with a warning, not refused as too long", func(t *testing.T) {
		p := widePod(500, 40)
		got, err := c.create("team", p, true)
		if err != nil {
			t.Fatalf("the API server refused the pod the webhook left alone: %.500v", err)
		}
		left(t, p, got, "over the API server's limit of 262144")
		// The same pod with fewer bytes of container names fits: rewritten,
		// and the API server takes the annotations.
		q := widePod(500, 4)
		got, err = c.create("team", q, true)
		if err != nil {
			t.Fatalf("rewritten pod refused: %.500v", err)
		}
		if got.Annotations[fallback.AnnotationOriginal] == "" {
			t.Errorf("pod within the limit was not rewritten: %v", got.Annotations[fallback.AnnotationFallback])
		}
		warned.take()
	})

	t.Run("55000 distinct names: left alone with the cap's warning", func(t *testing.T) {
		p := namesPod(55000)
		got, err := c.create("team", p, true)
		if err != nil {
			t.Fatalf("create: %.500v", err)
		}
		left(t, p, got, fmt.Sprintf("more than %d GPU resource types", fallback.DefaultMaxTypes))
	})

	t.Run("more devices than any node has: admitted with a warning", func(t *testing.T) {
		p := gpuPod("three-7g", "nvidia.com/mig-7g.80gb", "3")
		left(t, p, c.stored("team", p), "3 nvidia.com/mig-7g.80gb (at most 1 on one node)")
	})

	t.Run("invalid quantities: the API server's message names what the user wrote", func(t *testing.T) {
		for name, res := range map[string]corev1.ResourceRequirements{
			"1.5":                 {Limits: corev1.ResourceList{mig2g20: resource.MustParse("1.5")}},
			"100m":                {Limits: corev1.ResourceList{mig2g20: resource.MustParse("100m")}},
			"requests != limits":  {Requests: corev1.ResourceList{mig2g20: resource.MustParse("1")}, Limits: corev1.ResourceList{mig2g20: resource.MustParse("2")}},
			"request, no limit":   {Requests: corev1.ResourceList{mig2g20: resource.MustParse("1")}},
			"other vendor's 500m": {Limits: corev1.ResourceList{mig2g20: resource.MustParse("1"), "example.com/fpga": resource.MustParse("500m")}},
		} {
			p := gpuPod("invalid", mig2g20, "1")
			p.Spec.Containers[0].Resources = res
			_, err := c.create("team", p, true)
			if err == nil {
				t.Errorf("%s: admitted", name)
				continue
			}
			if strings.Contains(err.Error(), string(mig1g10)) {
				t.Errorf("%s: the API server's error names %s, which the user never wrote: %v", name, mig1g10, err)
			}
			if !strings.Contains(err.Error(), "spec.containers[0].resources") {
				t.Errorf("%s: error %v is not the API server's validation", name, err)
			}
		}
		warned.take()
	})

	t.Run("the API server gives up: the webhook stops deciding", func(t *testing.T) {
		if err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, webhookConfigName, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		gate := &gateSource{snap: snapshotOf(gpuNode("a100", map[corev1.ResourceName]int64{mig1g10: 7})), release: make(chan struct{})}
		_, srv := c.serve(Options{Decider: d, Source: gate, Registry: prometheus.NewRegistry()}, func(wc *admissionregistrationv1.MutatingWebhookConfiguration) {
			wc.Webhooks[0].TimeoutSeconds = ptr.To[int32](1)
		})
		testutil.Eventually(t, "the new webhook to be called", func() bool {
			p, err := c.create("team", gpuPod("probe", mig2g20, "1"), true)
			return err == nil && p.Annotations[fallback.AnnotationFallback] != ""
		})
		before := counterValue(t, srv.metrics.admissions.WithLabelValues(resultCanceled))
		rewrites := srv.metrics.fallbacks.WithLabelValues("2g.20gb", "1g.10gb")
		rewritten := counterValue(t, rewrites)

		gate.armed.Store(true)
		// On a loaded machine the API server's 1 s can run out before the
		// request reaches the handler; only one held there is abandoned
		// in it, so try until one was.
		for try := 1; gate.held.Load() == 0; try++ {
			_, err = c.create("team", gpuPod("slow", mig2g20, "1"), true)
			if err == nil || !strings.Contains(err.Error(), "context deadline exceeded") {
				t.Fatalf("create with the webhook held past its timeout: %v, want the API server's timeout (failurePolicy Fail)", err)
			}
			if try == 5 && gate.held.Load() == 0 {
				t.Fatal("5 creations timed out at the API server and none reached the handler")
			}
		}
		// The API server has given up; now let the handler go on.
		gate.armed.Store(false)
		close(gate.release)
		held := float64(gate.held.Load())
		testutil.Eventually(t, "the abandoned requests to be counted as canceled", func() bool {
			return counterValue(t, srv.metrics.admissions.WithLabelValues(resultCanceled)) == before+held
		})
		if got := counterValue(t, rewrites); got != rewritten {
			t.Errorf("the abandoned request was decided: rewrites counted %v, before it %v", got, rewritten)
		}
	})
}

// gateSource holds Snapshot calls while armed, until release is closed, so
// that a test can keep a request in the handler past the API server's
// timeout.
type gateSource struct {
	snap    *schedview.Snapshot
	armed   atomic.Bool
	held    atomic.Int32 // calls held while armed
	release chan struct{}
}

func (g *gateSource) Snapshot() (*schedview.Snapshot, bool) {
	if g.armed.Load() {
		g.held.Add(1)
		<-g.release
	}
	return g.snap, true
}
