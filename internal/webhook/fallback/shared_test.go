package fallback

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/schedview"
)

// TestSharedRenamedByDefault: a MIG profile's replicas renamed by
// default (<name>.shared) are counted as the allocatable counts them: a
// pod asking for them is left as asked while one is free; with none free
// the name is a profile with an attribute, as .me is, so capacity mode
// falls back among .shared profiles, then to a whole GPU, and existence
// mode keeps it and warns, as INSTALL.md's sharing section says.
func TestSharedRenamedByDefault(t *testing.T) {
	const shared corev1.ResourceName = "nvidia.com/mig-1g.10gb.shared"
	for _, tc := range []struct {
		name string
		used int64
		mode Mode
		want []Rewrite
		warn bool
	}{
		{name: "a replica free, capacity", used: 1, mode: ModeCapacity},
		{name: "a replica free, existence", used: 1, mode: ModeExistence},
		{name: "none free, capacity", used: 2, mode: ModeCapacity, want: []Rewrite{{From: shared, To: gpu, Reason: ReasonExhausted}}},
		{name: "none free, existence", used: 2, mode: ModeExistence, warn: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := schedview.NewBuilder(nil)
			b.SetNode(schedview.NodeFromAPI(node("a", map[corev1.ResourceName]int64{shared: 2, mig3g40: 1, gpu: 1})))
			b.SetPod("ns/x", "a", map[corev1.ResourceName]int64{shared: tc.used})
			d, err := NewDecider(Options{Policy: DefaultPolicy(), Mode: tc.mode})
			if err != nil {
				t.Fatal(err)
			}
			dec := d.Decide(newPod(withContainer("c", both(string(shared), "1"))), b.Snapshot())
			if !cmp.Equal(tc.want, dec.Rewrites) {
				t.Errorf("rewrites %v, want %v", dec.Rewrites, tc.want)
			}
			if got := len(dec.Warnings) > 0; got != tc.warn {
				t.Errorf("warnings %q, want some: %v", dec.Warnings, tc.warn)
			}
		})
	}
}
