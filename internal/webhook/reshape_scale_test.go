package webhook

import (
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/migflex/migflex/test/bench/scale"
)

// BenchmarkReshapeViewRebuild5000 is one rebuild of the reshape view on the
// scale benchmark's fleet (test/bench/scale, 5,000 opted-in nodes of eight
// H100s) and one answer from it: what each admission pays at most once a
// second while Nodes change.
func BenchmarkReshapeViewRebuild5000(b *testing.B) {
	v, err := NewReshapeView("migflex-planner", time.Minute, 2*time.Minute, 0)
	if err != nil {
		b.Fatal(err)
	}
	for i := range 5000 {
		n, err := scale.Node(i)
		if err != nil {
			b.Fatal(err)
		}
		slim, err := transformReshapeNode(n)
		if err != nil {
			b.Fatal(err)
		}
		v.SetNode(slim.(*corev1.Node))
	}
	pod := scale.Pod(5) // 4g.40gb: no node offers one
	b.ReportAllocs()
	for b.Loop() {
		v.mu.Lock()
		v.dirty, v.built = true, time.Time{}
		v.mu.Unlock()
		if plan, ok := v.CanSupply(pod); !ok || plan.Node == "" {
			b.Fatalf("no answer: %+v %v", plan, ok)
		}
	}
}

// heapSink keeps BenchmarkHeap5000's last source alive to the end of the
// benchmark, where -memprofile samples what is in use.
var heapSink *InformerSource

// BenchmarkHeap5000 is the webhook's live heap in reshape-first mode with
// the scale benchmark's 5,000 Nodes as its informer hands them over
// (transform, then the event handler): nodes-MiB with the Nodes alone,
// view-MiB more once the reshape view has decoded them (the first
// admission that asks the planner), rebuild-alloc-MiB what a rebuild of
// the view allocates when no Node changed, changed-alloc-MiB when a
// tenth of them did (new objects, as a round of the planner's writes
// brings), rest-MiB more than the Nodes alone once the view has let its
// Supplier go (dropOld). `-memprofile` shows what is live then: the
// Nodes and the view's readings.
func BenchmarkHeap5000(b *testing.B) {
	live := func() float64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return float64(ms.HeapAlloc) / (1 << 20)
	}
	for b.Loop() {
		heapSink = nil
		base := live()
		s, err := NewInformerSource(fake.NewClientset(), true, 0)
		if err != nil {
			b.Fatal(err)
		}
		v, err := NewReshapeView("migflex-planner", time.Minute, 2*time.Minute, 0)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.WithReshape(v); err != nil {
			b.Fatal(err)
		}
		s.ready.Store(true)
		for i := range 5000 {
			n, err := scale.Node(i)
			if err != nil {
				b.Fatal(err)
			}
			st, err := scale.Status(i)
			if err != nil {
				b.Fatal(err)
			}
			n.Status = st
			slim, err := s.transformNode(n)
			if err != nil {
				b.Fatal(err)
			}
			s.setNode(slim)
		}
		withNodes := live()
		pod := scale.Pod(5)
		if _, ok := v.CanSupply(pod); !ok {
			b.Fatal("no answer")
		}
		withView := live()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		v.mu.Lock()
		v.dirty, v.built = true, time.Time{}
		v.mu.Unlock()
		if _, ok := v.CanSupply(pod); !ok {
			b.Fatal("no answer")
		}
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/(1<<20), "rebuild-alloc-MiB")
		var changed runtime.MemStats
		for i := 0; i < 5000; i += 10 {
			n, err := scale.Node(i)
			if err != nil {
				b.Fatal(err)
			}
			slim, err := s.transformNode(n)
			if err != nil {
				b.Fatal(err)
			}
			s.setNode(slim)
		}
		runtime.ReadMemStats(&before)
		v.mu.Lock()
		v.built = time.Time{}
		v.mu.Unlock()
		if _, ok := v.CanSupply(pod); !ok {
			b.Fatal("no answer")
		}
		runtime.ReadMemStats(&changed)
		b.ReportMetric(float64(changed.TotalAlloc-before.TotalAlloc)/(1<<20), "changed-alloc-MiB")
		b.ReportMetric(withNodes-base, "nodes-MiB")
		b.ReportMetric(withView-withNodes, "view-MiB")
		// At rest: the Supplier let go at its age, the readings kept.
		v.mu.Lock()
		v.built = v.built.Add(-v.maxAge)
		v.mu.Unlock()
		v.dropOld()
		b.ReportMetric(live()-withNodes, "rest-MiB")
		heapSink = s
	}
}
