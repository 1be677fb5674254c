package webhook

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2/ktesting"

	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/webhook/fallback"
)

// The adversarial pods of issue 14, point 4, generated: what anyone who may
// create pods can send, up to the API server's request size.

// namesPod has one container whose limits name n distinct MIG profiles.
func namesPod(n int) *corev1.Pod {
	p := gpuPod("big", mig2g20, "1")
	l := corev1.ResourceList{}
	for i := range n {
		l[corev1.ResourceName(fmt.Sprintf("nvidia.com/mig-%dg.%dgb", i%7+1, 100+i))] = resource.MustParse("1")
	}
	p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Limits: l}
	return p
}

// widePod has containers containers each asking for the same eight MIG
// profiles, with container names of nameLen bytes.
func widePod(containers, nameLen int) *corev1.Pod {
	p := gpuPod("wide", mig2g20, "1")
	p.Spec.Containers = nil
	types := []corev1.ResourceName{mig2g20, "nvidia.com/mig-3g.40gb", "nvidia.com/mig-4g.40gb", "nvidia.com/mig-7g.80gb",
		"nvidia.com/mig-1g.20gb", "nvidia.com/mig-2g.10gb", "nvidia.com/mig-3g.20gb", "nvidia.com/mig-4g.20gb"}
	for c := range containers {
		l := corev1.ResourceList{}
		for _, r := range types {
			l[r] = resource.MustParse("1")
		}
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{
			Name: fmt.Sprintf("c%0*d", nameLen-1, c), Image: "cuda",
			Resources: corev1.ResourceRequirements{Requests: l, Limits: l},
		})
	}
	return p
}

// totalAlloc is the bytes f allocates (runtime.MemStats), averaged over runs
// after one warm-up.
func totalAlloc(runs int, f func()) uint64 {
	f()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(runs)
}

// decodeCost is what reading and decoding body costs before any decision:
// the floor of any admission of it, measured in the same run.
func decodeCost(t *testing.T, body []byte) uint64 {
	t.Helper()
	return totalAlloc(2, func() {
		b, err := io.ReadAll(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		review, err := decodeReview(b)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodePod(review.Request); err != nil {
			t.Fatal(err)
		}
	})
}

// Work, memory, answer and log per admission are bounded for the issue's
// pods: 55,000 distinct names (239 MiB in the webhook before), 20,000 names
// on a cluster where none fits (a 5.2 MB denial and log line before), 500
// containers of 8 types (an annotation the API server refused before). The
// admission allocates little more than decoding the request does, answers
// in under 4 KiB and logs at most one short line.
// (Numbers in docs/BENCHMARKS.md.)
func TestHandlerBoundedWork(t *testing.T) {
	a100 := snapshotOf(gpuNode("a100", map[corev1.ResourceName]int64{mig1g10: 28 * 500}))
	cpuOnly := snapshotOf(gpuNode("cpu", nil))
	tests := map[string]struct {
		pod    *corev1.Pod
		snap   *schedview.Snapshot
		result string
		// factor bounds the admission's allocations as a multiple of
		// decoding's: a pod over the cap is not decided at all; one within
		// it costs work linear in its containers (the rewrite's need per
		// node and original resources are computed before the annotation
		// is found too large).
		factor float64
	}{
		"55000 distinct names":                 {namesPod(55000), a100, string(fallback.OutcomeTooManyTypes), 1.25},
		"20000 names, none fits":               {namesPod(20000), cpuOnly, string(fallback.OutcomeTooManyTypes), 1.25},
		"500 containers x 8 types, annotation": {widePod(500, 40), a100, string(fallback.OutcomeTooLarge), 4},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d, err := fallback.NewDecider(fallback.Options{Policy: fallback.DefaultPolicy()})
			if err != nil {
				t.Fatal(err)
			}
			logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true), ktesting.Verbosity(1)))
			m := NewMetrics(prometheus.NewRegistry())
			h, err := NewHandler(HandlerOptions{Decider: d, Source: StaticSource{tc.snap}, Metrics: m, Logger: logger})
			if err != nil {
				t.Fatal(err)
			}
			body := reviewFor(t, tc.pod, nil)
			post := func() *httptest.ResponseRecorder {
				r := httptest.NewRequest(http.MethodPost, "/mutate", bytes.NewReader(body))
				r.Header.Set("Content-Type", "application/json")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w
			}

			w := post()
			resp := decodeResponse(t, w)
			if !resp.Allowed || resp.Patch != nil {
				t.Errorf("allowed %v, patch of %d bytes: want the pod allowed as it is", resp.Allowed, len(resp.Patch))
			}
			if len(resp.Warnings) != 1 {
				t.Errorf("warnings %q, want one", resp.Warnings)
			}
			if w.Body.Len() > 4<<10 {
				t.Errorf("answer is %d bytes for a %d-byte request, want at most 4 KiB", w.Body.Len(), len(body))
			}
			if got := counterValue(t, m.admissions.WithLabelValues(tc.result)); got != 1 {
				t.Errorf("admissions{result=%q} = %v, want 1", tc.result, got)
			}
			underlier, ok := logger.GetSink().(ktesting.Underlier)
			if !ok {
				t.Fatalf("sink %T has no buffer", logger.GetSink())
			}
			entries := underlier.GetBuffer().Data()
			logged := len(underlier.GetBuffer().String())
			if len(entries) > 1 || logged > 2<<10 {
				t.Errorf("%d log lines, %d bytes, want at most one line of 2 KiB", len(entries), logged)
			}

			floor := decodeCost(t, body)
			got := totalAlloc(2, func() { post() })
			t.Logf("request %d bytes: admission allocates %d bytes, decoding alone %d (%.2fx)", len(body), got, floor, float64(got)/float64(floor))
			if float64(got) > tc.factor*float64(floor)+1<<20 {
				t.Errorf("admission allocates %d bytes, decoding the request alone %d: want at most %vx + 1 MiB", got, floor, tc.factor)
			}
		})
	}
}

// A request whose caller is gone is not decided: its context ends when the
// API server drops the connection or its webhook timeout passes.
func TestHandlerStopsWhenCallerGone(t *testing.T) {
	f := newFixture(t, StaticSource{snapshotOf(gpuNode("n", map[corev1.ResourceName]int64{mig1g10: 7}))}, fallback.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := httptest.NewRequest(http.MethodPost, "/mutate", bytes.NewReader(reviewFor(t, gpuPod("p", mig2g20, "1"), nil))).WithContext(ctx)
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	if w.Code != http.StatusServiceUnavailable {
		t.Errorf("status %d (%s), want 503", w.Code, strings.TrimSpace(w.Body.String()))
	}
	if got := counterValue(t, f.m.admissions.WithLabelValues(resultCanceled)); got != 1 {
		t.Errorf("admissions{result=%q} = %v, want 1", resultCanceled, got)
	}
	if got := gather(t, f.reg, "migflex_webhook_fallbacks_total"); len(got) != 0 {
		t.Errorf("a rewrite was counted for an abandoned request: %v", got)
	}
}

// The API server sends its webhook timeout as ?timeout=; the request's
// context ends then at the latest.
func TestRequestContextTakesTheCallersTimeout(t *testing.T) {
	for query, want := range map[string]time.Duration{
		"?timeout=5s":   5 * time.Second,
		"?timeout=30s":  30 * time.Second,
		"":              0,
		"?timeout=junk": 0,
		"?timeout=-1s":  0,
	} {
		r := httptest.NewRequest(http.MethodPost, "/mutate"+query, nil)
		before := time.Now()
		ctx, cancel := requestContext(r)
		deadline, ok := ctx.Deadline()
		cancel()
		if want == 0 {
			if ok {
				t.Errorf("%q: deadline %v, want none", query, deadline)
			}
			continue
		}
		if !ok || deadline.Before(before.Add(want)) || deadline.After(time.Now().Add(want)) {
			t.Errorf("%q: deadline %v (set %v), want %v after the request", query, deadline, ok, want)
		}
	}
}

// holdSource holds every Snapshot call until release is closed, and says on
// entered when one starts.
type holdSource struct {
	snap    *schedview.Snapshot
	entered chan string
	release chan struct{}
}

func (s *holdSource) Snapshot() (*schedview.Snapshot, bool) {
	s.entered <- "entered"
	<-s.release
	return s.snap, true
}

// Requests are decoded together only up to a budget of request bytes, so
// that parallel large pods cannot add up past the webhook's memory limit: a
// second large request waits until the first is answered, and one that
// waits past its context is not decided.
func TestHandlerBoundsBytesInFlight(t *testing.T) {
	src := &holdSource{snap: snapshotOf(gpuNode("n", map[corev1.ResourceName]int64{mig1g10: 7})), entered: make(chan string, 4), release: make(chan struct{})}
	d, err := fallback.NewDecider(fallback.Options{Policy: fallback.DefaultPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	body := reviewFor(t, namesPod(fallback.DefaultMaxTypes), nil)
	m := NewMetrics(prometheus.NewRegistry())
	h, err := NewHandler(HandlerOptions{Decider: d, Source: src, Metrics: m, MaxInflightBytes: int64(len(body)) * 3 / 2,
		Logger: ktesting.NewLogger(t, ktesting.NewConfig())})
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan struct{}, 4)
	h.waiting = func() { waiting <- struct{}{} }
	serve := func(ctx context.Context) <-chan int {
		done := make(chan int, 1)
		go func() {
			r := httptest.NewRequest(http.MethodPost, "/mutate", bytes.NewReader(body)).WithContext(ctx)
			r.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			done <- w.Code
		}()
		return done
	}

	first := serve(context.Background())
	<-src.entered
	// A second one does not fit beside it: it waits, undecided.
	ctx, cancel := context.WithCancel(context.Background())
	abandoned := serve(ctx)
	<-waiting
	cancel()
	if code := <-abandoned; code != http.StatusServiceUnavailable {
		t.Errorf("request abandoned while waiting: status %d, want 503", code)
	}
	// A third waits too, and is served once the first is answered.
	third := serve(context.Background())
	<-waiting
	select {
	case <-src.entered:
		t.Fatal("a request was decoded beside the first although both do not fit in the budget")
	default:
	}
	close(src.release)
	for name, done := range map[string]<-chan int{"first": first, "third": third} {
		if code := <-done; code != http.StatusOK {
			t.Errorf("%s request: status %d, want 200", name, code)
		}
	}
	if got := counterValue(t, m.admissions.WithLabelValues(resultCanceled)); got != 1 {
		t.Errorf("admissions{result=canceled} = %v, want 1", got)
	}
}

// A pod's name is validated only after mutating admission: a huge one is
// cut in the log lines that name the pod.
func TestHandlerLogsBoundedPodNames(t *testing.T) {
	d, err := fallback.NewDecider(fallback.Options{Policy: fallback.DefaultPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	h, err := NewHandler(HandlerOptions{Decider: d, Source: StaticSource{snapshotOf(gpuNode("n", map[corev1.ResourceName]int64{mig1g10: 7}))},
		Metrics: NewMetrics(prometheus.NewRegistry()), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	pod := gpuPod(strings.Repeat("p", 1<<20), mig2g20, "1")
	w := (&fixture{h: h}).post(http.MethodPost, "application/json", reviewFor(t, pod, nil))
	if resp := decodeResponse(t, w); resp.Patch == nil {
		t.Fatal("not rewritten")
	}
	underlier := logger.GetSink().(ktesting.Underlier)
	if n := len(underlier.GetBuffer().Data()); n != 1 {
		t.Errorf("%d log lines, want the one rewrite line", n)
	}
	if logged := len(underlier.GetBuffer().String()); logged > 1<<10 {
		t.Errorf("logged %d bytes for a pod with a 1 MiB name, want at most 1 KiB", logged)
	}
}
