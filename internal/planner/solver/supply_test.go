package solver_test

import (
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/planner/solver"
)

// TestCanSupply is the question the webhook asks before it falls back.
func TestCanSupply(t *testing.T) {
	pl, err := solver.New(solver.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	nodes := []solver.Node{
		node("busy", optedIn, gpus(migGPU(0, "4g.40gb@0*", "3g.40gb@4*"))),
		node("free", optedIn, gpus(migGPU(0, "4g.40gb@0*", "1g.10gb@4", "1g.10gb@5"))),
		node("manual", optedOut, gpus(migGPU(0))),
	}
	sup, err := pl.NewSupplier(snapshot(nodes, pod("ignored", mig1g, "1")))
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		want string
	}{
		"a free instance exists":  {pod("p", mig1g, "1"), "existing free/0"},
		"reshape idle capacity":   {pod("p", mig3g, "1"), "reshape free/0"},
		"only busy or opted out":  {pod("p", mig7g, "1"), "none: 1 is on a node not opted in"},
		"nowhere it may land":     {with(pod("p", mig1g, "1"), selector("pool", "none")), "none: no node it may be scheduled to"},
		"a profile no model has":  {pod("p", "nvidia.com/mig-9g.99gb", "1"), "none: no GPU model in the cluster offers nvidia.com/mig-9g.99gb"},
		"pinned to the busy node": {with(pod("p", mig1g, "1"), selector(corev1.LabelHostname, "busy")), "none: 1 has no room"},
		"two devices on one node": {pod("p", mig1g, "2"), "existing free/0,free/0"},
	} {
		t.Run(name, func(t *testing.T) {
			got := outcome(sup.CanSupply(tc.pod))
			if rest, isNone := strings.CutPrefix(tc.want, "none: "); isNone {
				if !strings.HasPrefix(got, "none: ") || !strings.Contains(got, rest) {
					t.Errorf("CanSupply = %q, want none containing %q", got, rest)
				}
				return
			}
			if got != tc.want {
				t.Errorf("CanSupply = %q, want %q", got, tc.want)
			}
		})
	}
	// Asking reserves nothing, and many may ask at once.
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got := outcome(sup.CanSupply(pod("p", mig3g, "1"))); got != "reshape free/0" {
				t.Errorf("concurrent CanSupply = %q", got)
			}
		}()
	}
	wg.Wait()
}
