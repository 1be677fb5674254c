package fallback

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/migflex/migflex/internal/domain/schedview"
)

// The decision sees the usage a Builder keeps from pod events.
func TestBuilderUsage(t *testing.T) {
	d, err := NewDecider(Options{Policy: DefaultPolicy(), Mode: ModeCapacity})
	if err != nil {
		t.Fatal(err)
	}
	pod := gpuPod(mig2g20, "1")
	decide := func(b *schedview.Builder) []Rewrite { return d.Decide(pod, b.Snapshot()).Rewrites }
	exhausted := []Rewrite{{mig2g20, mig1g10, ReasonExhausted}}

	b := schedview.NewBuilder(nil)
	// A pod event may arrive before its node's.
	b.SetPod("ns/early", "a", alloc{mig2g20: 1})
	b.SetNode(schedview.NodeFromAPI(node("a", alloc{mig2g20: 2})))
	b.SetNode(schedview.NodeFromAPI(node("b", alloc{mig1g10: 7})))
	if got := decide(b); got != nil {
		t.Fatalf("1 of 2 used: rewrites %v, want none", got)
	}
	before := b.Snapshot()
	b.SetPod("ns/second", "a", alloc{mig2g20: 1})
	if diff := cmp.Diff(exhausted, decide(b)); diff != "" {
		t.Fatalf("2 of 2 used (-want +got):\n%s", diff)
	}
	if got := d.Decide(pod, before).Rewrites; got != nil {
		t.Errorf("an earlier snapshot changed with the usage: %v", got)
	}
	// Updating a pod with the same usage is a no-op; moving it frees a.
	s := b.Snapshot()
	b.SetPod("ns/second", "a", alloc{mig2g20: 1})
	if b.Snapshot() != s {
		t.Error("same usage replaced the snapshot")
	}
	b.SetPod("ns/second", "b", alloc{mig1g10: 1})
	if got := decide(b); got != nil {
		t.Fatalf("after move: rewrites %v, want none", got)
	}
	b.SetPod("ns/third", "a", alloc{mig2g20: 1})
	if diff := cmp.Diff(exhausted, decide(b)); diff != "" {
		t.Fatalf("third pod (-want +got):\n%s", diff)
	}
	b.DeletePod("ns/third")
	if got := decide(b); got != nil {
		t.Fatalf("after delete: rewrites %v, want none", got)
	}
	// The node going away and coming back keeps the usage of its pods.
	b.DeleteNode("a")
	b.SetPod("ns/third", "a", alloc{mig2g20: 1})
	b.SetNode(schedview.NodeFromAPI(node("a", alloc{mig2g20: 2})))
	if diff := cmp.Diff(exhausted, decide(b)); diff != "" {
		t.Fatalf("node re-added (-want +got):\n%s", diff)
	}
}

// In existence mode a rewrite goes to the nearest type with a free device,
// as the agents report their use (the webhook records it as the node's
// use); when every type of the chain is held, to the nearest that exists,
// with a warning that the pod will wait.
func TestExistenceRewriteToAllInUseWarns(t *testing.T) {
	d, err := NewDecider(Options{Policy: DefaultPolicy(), Mode: ModeExistence})
	if err != nil {
		t.Fatal(err)
	}
	pod := gpuPod(mig7g80, "1")
	for _, tc := range []struct {
		name     string
		held     alloc
		want     []Rewrite
		wantWarn bool
	}{
		{name: "the only 4g.40gb free", held: nil, want: []Rewrite{{mig7g80, mig4g40, ReasonAbsent}}},
		{name: "the only 4g.40gb held, a 1g.10gb free", held: alloc{mig4g40: 1}, want: []Rewrite{{mig7g80, mig1g10, ReasonAbsent}}},
		{name: "everything held", held: alloc{mig4g40: 1, mig1g10: 3}, want: []Rewrite{{mig7g80, mig4g40, ReasonAbsent}}, wantWarn: true},
		{name: "another type held", held: alloc{mig1g10: 3}, want: []Rewrite{{mig7g80, mig4g40, ReasonAbsent}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := schedview.NewBuilder(nil)
			b.SetNode(schedview.NodeFromAPI(node("a", alloc{mig4g40: 1, mig1g10: 3})))
			b.SetPod("agent-reported:a", "a", tc.held)
			got := d.Decide(pod, b.Snapshot())
			if !cmp.Equal(got.Rewrites, tc.want) {
				t.Fatalf("rewrites %v, want %v", got.Rewrites, tc.want)
			}
			warned := false
			for _, w := range got.Warnings {
				if strings.Contains(w, "every 4g.40gb device on the nodes this pod may land on is in use") {
					warned = true
				}
			}
			if warned != tc.wantWarn {
				t.Errorf("warnings %q; want the all-in-use warning: %v", got.Warnings, tc.wantWarn)
			}
		})
	}
}
