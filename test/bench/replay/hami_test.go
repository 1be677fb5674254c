package replay

import (
	"fmt"
	"slices"
	"testing"

	"github.com/migflex/migflex/internal/domain/resourcename"
)

// oneNode is a node of H100s with the given instances in use per GPU.
func oneNode(t *testing.T, busy ...[]inst) *node {
	t.Helper()
	mi, err := newModelInfo(DefaultModel)
	if err != nil {
		t.Fatal(err)
	}
	n := &node{name: "n0"}
	for i, list := range busy {
		g := &gpu{node: n, index: i, model: mi, whole: -1, mig: true}
		for _, in := range list {
			in.pod, in.res = 1, resourcename.MIG(in.profile)
			g.insts = append(g.insts, in)
		}
		if !mi.lay.Valid(instances(g.insts)) {
			t.Fatalf("GPU %d: %v is not a layout", i, list)
		}
		n.gpus = append(n.gpus, g)
	}
	return n
}

func planString(plan []carved) string {
	var out []string
	for _, c := range plan {
		out = append(out, fmt.Sprintf("%d:%s@%d", c.g.index, c.profile, c.start))
	}
	slices.Sort(out)
	return fmt.Sprint(out)
}

func TestHAMiPlacement(t *testing.T) {
	for _, tc := range []struct {
		name      string
		busy      [][]inst
		profile   string
		count     int
		firstFit  string
		hami      string
		hamiFails bool
	}{{
		// A 1g.10gb in use at slice 4: first fit takes slice 0 and no
		// 3g.40gb fits any more; HAMi takes slice 5, leaving slices 0 to 3
		// whole (a tie with 6, to the lower start).
		name: "largest free run left", busy: [][]inst{{{profile: "1g.10gb", start: 4}}}, profile: "1g.10gb", count: 1,
		firstFit: "[0:1g.10gb@0]", hami: "[0:1g.10gb@5]",
	}, {
		// Binpack: HAMi fills the GPU already in use, first fit GPU 0.
		name: "most allocated GPU", busy: [][]inst{nil, {{profile: "1g.10gb", start: 0}}}, profile: "1g.10gb", count: 1,
		firstFit: "[0:1g.10gb@0]", hami: "[1:1g.10gb@1]",
	}, {
		// Two 3g.40gb on an empty GPU: both halves.
		name: "two on one GPU", busy: [][]inst{nil}, profile: "3g.40gb", count: 2,
		firstFit: "[0:3g.40gb@0 0:3g.40gb@4]", hami: "[0:3g.40gb@0 0:3g.40gb@4]",
	}, {
		name: "does not fit", busy: [][]inst{{{profile: "3g.40gb", start: 0}}}, profile: "4g.40gb", count: 1,
		firstFit: "[]", hamiFails: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			n := oneNode(t, tc.busy...)
			p := &simPod{req: request{res: resourcename.MIG(tc.profile), count: tc.count}}
			ff, _ := firstFit{}.carvePlan(nil, p, n)
			if got := planString(ff); got != tc.firstFit {
				t.Errorf("first fit: %s, want %s", got, tc.firstFit)
			}
			h, ok := hami{}.carvePlan(nil, p, n)
			if ok == tc.hamiFails {
				t.Fatalf("hami placed %v (%s), want failure %v", ok, planString(h), tc.hamiFails)
			}
			if got := planString(h); ok && got != tc.hami {
				t.Errorf("hami: %s, want %s", got, tc.hami)
			}
		})
	}
}

// TestHAMiBacktracks: requests the greedy choice cannot all place, which a
// search can (the case HAMi's pull request added its fallback for).
func TestHAMiBacktracks(t *testing.T) {
	for _, tc := range []struct {
		busy     []inst
		requests []string
		want     string
	}{
		// The 1g.20gb goes first (larger) to slice 4, the best run; then
		// only one 1g.10gb fits. The search puts it at 6.
		{[]inst{{profile: "3g.40gb", start: 0}}, []string{"1g.10gb", "1g.10gb", "1g.20gb"}, "[0:1g.10gb@4 0:1g.10gb@5 0:1g.20gb@6]"},
		// 3g.40gb first at 0 leaves room for one 2g.20gb; at 4, for two.
		{nil, []string{"2g.20gb", "2g.20gb", "3g.40gb"}, "[0:2g.20gb@0 0:2g.20gb@2 0:3g.40gb@4]"},
	} {
		n := oneNode(t, tc.busy)
		plan, ok := hamiPlace(n, tc.requests)
		if !ok || planString(plan) != tc.want {
			t.Errorf("%v on %v: %v %s, want %s", tc.requests, tc.busy, ok, planString(plan), tc.want)
		}
	}
}
