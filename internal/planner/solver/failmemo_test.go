package solver_test

import (
	"reflect"
	"testing"

	"github.com/migflex/migflex/internal/planner/solver"
)

// TestFailedPodsShortcut: skipping the search for a pod that needs what an
// earlier pod of the round failed to get, where it could land, changes no
// decision and no explanation, with or without the round's GPU cap.
func TestFailedPodsShortcut(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		for _, maxGPUs := range []int{0, 3, 64} {
			snap := bigScenarioBusy(seed, 40, 300, 0.9)
			pol := solver.DefaultPolicy()
			pol.MaxGPUsPerRound = maxGPUs
			pl, err := solver.New(pol)
			if err != nil {
				t.Fatal(err)
			}
			*solver.NoFailMemo = true
			want, err := pl.Plan(snap)
			*solver.NoFailMemo = false
			if err != nil {
				t.Fatal(err)
			}
			got, err := pl.Plan(snap)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("seed %d, cap %d: the shortcut changed the round", seed, maxGPUs)
			}
			failed := 0
			for _, p := range got.Pods {
				if p.Action == solver.ActionNone {
					failed++
				}
			}
			if failed < 10 {
				t.Errorf("seed %d, cap %d: %d pods failed; the case hardly tests the shortcut", seed, maxGPUs, failed)
			}
		}
	}
}
