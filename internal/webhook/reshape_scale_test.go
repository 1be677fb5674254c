package webhook

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

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
