package solver_test

import (
	"testing"

	"github.com/migflex/migflex/internal/planner/simmodels"
	"github.com/migflex/migflex/internal/planner/solver"
)

func TestLayouts(t *testing.T) {
	h100, _ := simmodels.Get(h100Name)
	l, err := solver.NewLayouts(h100)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		have    []string
		profile string
		start   int
		ok      bool
	}{
		{nil, "3g.40gb", 0, true},
		{[]string{"1g.10gb@0"}, "3g.40gb", 4, true},
		{[]string{"1g.10gb@0", "1g.10gb@4"}, "3g.40gb", 0, false},
		{[]string{"1g.10gb@1"}, "2g.20gb", 2, true},
		{[]string{"4g.40gb@0", "2g.20gb@4"}, "1g.10gb", 6, true},
		{[]string{"4g.40gb@0", "2g.20gb@4", "1g.10gb@6"}, "1g.10gb", 0, false},
		{[]string{"2g.20gb@1"}, "1g.10gb", 0, false}, // not a layout
		{nil, "9g.99gb", 0, false},
	} {
		var have []solver.Instance
		for _, s := range tc.have {
			have = append(have, inst(s))
		}
		start, ok := l.Add(have, tc.profile)
		if ok != tc.ok || ok && start != tc.start {
			t.Errorf("Add(%v, %s) = %d, %v; want %d, %v", tc.have, tc.profile, start, ok, tc.start, tc.ok)
		}
	}
	geoms := l.Geometries()
	has := func(want map[string]int) bool {
		for _, g := range geoms {
			if len(g) == len(want) {
				same := true
				for k, v := range want {
					if g[k] != v {
						same = false
					}
				}
				if same {
					return true
				}
			}
		}
		return false
	}
	for _, want := range []map[string]int{
		{"1g.10gb": 7}, {"7g.80gb": 1}, {"3g.40gb": 2}, {"4g.40gb": 1, "3g.40gb": 1},
		{"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}, {"1g.20gb": 4},
	} {
		if !has(want) {
			t.Errorf("geometries lack %v", want)
		}
	}
	if has(map[string]int{"1g.10gb": 6}) {
		t.Error("a layout with room for one more 1g is listed as a geometry")
	}
	n := 0
	for _, c := range geoms[0] {
		n += c
	}
	if n != 7 {
		t.Errorf("first geometry %v, want one with the most instances (7)", geoms[0])
	}
}
