package solver_test

import (
	"strings"
	"sync"
	"testing"
	"time"

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

// When the planner cannot serve a pod now, the webhook still needs to know
// whether it could once what blocks it passes: a pod left waiting at its
// size is served then, one whose profile no changeable GPU has never is.
func TestCanSupplyLater(t *testing.T) {
	pl, err := solver.New(solver.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	cooling := migGPU(0, "1g.10gb@0", "1g.10gb@1", "1g.10gb@2", "1g.10gb@3", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6")
	cooling.LastChanged = t0.Add(-time.Minute)
	for name, tc := range map[string]struct {
		node  solver.Node
		pod   *corev1.Pod
		later bool
	}{
		"cooling down":                   {node("n", optedIn, gpus(cooling)), pod("p", mig3g, "1"), true},
		"instances in use where it fits": {node("n", optedIn, gpus(migGPU(0, "1g.10gb@0*", "1g.10gb@4*"))), pod("p", mig7g, "1"), true},
		"frozen":                         {node("n", optedIn, gpus(migGPU(0)), frozen("agent state pending")), pod("p", mig3g, "1"), true},
		"not opted in":                   {node("n", optedOut, gpus(migGPU(0, "1g.10gb@0*"))), pod("p", mig3g, "1"), false},
		"its model lacks the profile":    {node("n", optedIn, gpus(modelGPU(a100Name, 0, "1g.5gb@0*"))), pod("p", mig3g, "1"), false},
	} {
		t.Run(name, func(t *testing.T) {
			sup, err := pl.NewSupplier(snapshot([]solver.Node{tc.node}))
			if err != nil {
				t.Fatal(err)
			}
			got := sup.CanSupply(tc.pod)
			if got.Action != solver.ActionNone {
				t.Fatalf("CanSupply = %s, want none", outcome(got))
			}
			if got.Later != tc.later {
				t.Errorf("Later = %v, want %v (%s)", got.Later, tc.later, got.Reason)
			}
		})
	}
}
