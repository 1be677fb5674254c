package jointfit_test

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/migflex/migflex/internal/domain/jointfit"
)

// A part of 4 slots; candidates are runs of slots, none may overlap.
type run struct{ start, size int }

func vectorsOf(t *testing.T, runs []run, matches [][]int, count []int64, maxSteps int) ([][]int64, [][]int, bool) {
	t.Helper()
	used := make([]int, 4)
	var taken []int
	var d jointfit.Distinct[[]int]
	ok := jointfit.Subsets(matches, count,
		func(j, _ int) bool {
			fits := true
			for s := runs[j].start; s < runs[j].start+runs[j].size; s++ {
				used[s]++
				fits = fits && used[s] == 1
			}
			taken = append(taken, j)
			return fits
		},
		func(j, _ int) {
			for s := runs[j].start; s < runs[j].start+runs[j].size; s++ {
				used[s]--
			}
			taken = taken[:len(taken)-1]
		},
		func(vec []int64) { d.Add(vec, func() []int { return slices.Clone(taken) }) },
		maxSteps)
	return d.Vectors, d.Witness, ok
}

// Subsets reports each count vector the part can hold once, with the
// first set that made it, and stops past its bound.
func TestSubsets(t *testing.T) {
	// Want 0: runs of 2 (at 0, 1, 2); want 1: runs of 1 (at 0, 3).
	runs := []run{{0, 2}, {1, 2}, {2, 2}, {0, 1}, {3, 1}}
	matches := [][]int{{0}, {0}, {0}, {1}, {1}}
	vecs, witness, ok := vectorsOf(t, runs, matches, []int64{2, 2}, 1<<10)
	if !ok {
		t.Fatal("stopped below the bound")
	}
	got := map[string][]int{}
	for i, v := range vecs {
		got[string(rune('0'+v[0]))+string(rune('0'+v[1]))] = witness[i]
	}
	want := map[string][]int{
		"00": nil, "01": {4}, "02": {3, 4}, "10": {2}, "11": {2, 3}, "12": {1, 3, 4}, "20": {0, 2},
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b []int) bool { return slices.Equal(a, b) })); diff != "" {
		t.Errorf("vectors and witnesses (-want +got):\n%s", diff)
	}
	if _, _, ok := vectorsOf(t, runs, matches, []int64{2, 2}, 5); ok {
		t.Error("Subsets did not stop at 5 steps")
	}
}

// Combine finds one vector per unit adding up to the need, says which,
// and says when the bound stopped it.
func TestCombine(t *testing.T) {
	units := [][][]int64{
		{{0, 0}, {2, 0}, {0, 1}},
		{{0, 0}, {1, 1}},
		{{0, 0}, {0, 2}},
	}
	for _, tc := range []struct {
		name    string
		need    []int64
		choice  []int
		found   bool
		bounded bool
		states  int
	}{
		{"first unit alone", []int64{2, 0}, []int{1, 0, 0}, true, false, 16},
		{"two units", []int64{2, 1}, []int{1, 1, 0}, true, false, 16},
		{"all three", []int64{3, 3}, []int{1, 1, 1}, true, false, 16},
		{"more than all", []int64{3, 4}, nil, false, false, 16},
		{"nothing needed", []int64{0, 0}, []int{0, 0, 0}, true, false, 16},
		{"bounded", []int64{3, 4}, nil, false, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			choice, found, bounded := jointfit.Combine(units, tc.need, tc.states)
			if found != tc.found || bounded != tc.bounded || !slices.Equal(choice, tc.choice) {
				t.Fatalf("Combine = %v, %v, %v; want %v, %v, %v", choice, found, bounded, tc.choice, tc.found, tc.bounded)
			}
			if !found {
				return
			}
			sum := make([]int64, len(tc.need))
			for u, c := range choice {
				for i, n := range units[u][c] {
					sum[i] += n
				}
			}
			for i := range sum {
				if sum[i] < tc.need[i] {
					t.Errorf("the choice %v serves %v, less than %v", choice, sum, tc.need)
				}
			}
		})
	}
}

// Cheapest finds the least costly vector per unit adding up to exactly
// the need, where Combine takes the first (two of its rows show Combine
// choosing otherwise), never serves a want more often than asked, and
// says when a bound stopped it.
func TestCheapest(t *testing.T) {
	// Each unit offers every sub-vector of what it can hold, as Subsets
	// reports a part's sets; unit 0 is dear, unit 1 cheap.
	units := [][][]int64{
		{{0, 0}, {1, 0}, {0, 1}, {1, 1}},
		{{0, 0}, {1, 0}, {0, 1}, {1, 1}},
		{{0, 0}, {0, 1}},
	}
	costs := [][]float64{{0, 5, 5, 10}, {0, 1, 1, 2}, {0, 0.5}}
	for _, tc := range []struct {
		name    string
		units   [][][]int64
		costs   [][]float64
		need    []int64
		choice  []int
		cost    float64
		found   bool
		bounded bool
		states  int
		steps   int
		// combineDiffers: Combine's first fit is another choice.
		combineDiffers bool
	}{
		{name: "the cheap units, not the first", need: []int64{1, 1}, choice: []int{0, 1, 1}, cost: 1.5, found: true, combineDiffers: true},
		{name: "spread where that is cheaper", need: []int64{1, 2}, choice: []int{0, 3, 1}, cost: 2.5, found: true, combineDiffers: true},
		{name: "all three", need: []int64{2, 3}, choice: []int{3, 3, 1}, cost: 12.5, found: true},
		{name: "more than all", need: []int64{3, 3}},
		{name: "nothing needed", need: []int64{0, 0}, choice: []int{0, 0, 0}, found: true},
		{name: "a tie goes the same way every time", units: [][][]int64{{{0}, {1}}, {{0}, {1}}}, costs: [][]float64{{0, 1}, {0, 1}},
			need: []int64{1}, choice: []int{0, 1}, cost: 1, found: true, combineDiffers: true},
		{name: "bounded by the states", need: []int64{2, 3}, bounded: true, states: 2},
		{name: "bounded by the steps", need: []int64{2, 3}, bounded: true, steps: 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			us, cs := units, costs
			if tc.units != nil {
				us, cs = tc.units, tc.costs
			}
			states, steps := 16, 1<<10
			if tc.states > 0 {
				states = tc.states
			}
			if tc.steps > 0 {
				steps = tc.steps
			}
			choice, found, bounded := jointfit.Cheapest(us, cs, tc.need, states, steps)
			if found != tc.found || bounded != tc.bounded || !slices.Equal(choice, tc.choice) {
				t.Fatalf("Cheapest = %v, %v, %v; want %v, %v, %v", choice, found, bounded, tc.choice, tc.found, tc.bounded)
			}
			if !found {
				return
			}
			sum, cost := make([]int64, len(tc.need)), 0.0
			for u, c := range choice {
				for i, n := range us[u][c] {
					sum[i] += n
				}
				cost += cs[u][c]
			}
			if !slices.Equal(sum, tc.need) || cost != tc.cost {
				t.Errorf("the choice %v serves %v at cost %v, want exactly %v at %v", choice, sum, cost, tc.need, tc.cost)
			}
			first, ok, _ := jointfit.Combine(us, tc.need, states)
			if differs := ok && !slices.Equal(first, choice); differs != tc.combineDiffers {
				t.Errorf("Combine chose %v (found %v), Cheapest %v: differs %v, want %v", first, ok, choice, differs, tc.combineDiffers)
			}
		})
	}
}

// AddCost keeps the cheapest witness of each vector, ties to the first.
func TestDistinctAddCost(t *testing.T) {
	var d jointfit.Distinct[string]
	for _, a := range []struct {
		vec  []int64
		cost float64
		w    string
	}{{[]int64{1}, 3, "a"}, {[]int64{0}, 0, "z"}, {[]int64{1}, 2, "b"}, {[]int64{1}, 2, "c"}, {[]int64{1}, 4, "d"}} {
		d.AddCost(a.vec, a.cost, func() string { return a.w })
	}
	if diff := cmp.Diff([]string{"b", "z"}, d.Witness); diff != "" {
		t.Errorf("witnesses (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]float64{2, 0}, d.Cost); diff != "" {
		t.Errorf("costs (-want +got):\n%s", diff)
	}
}
