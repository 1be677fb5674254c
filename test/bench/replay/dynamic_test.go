package replay

import (
	"testing"

	"github.com/migflex/migflex/internal/domain/resourcename"
)

// migflex-dynamic carves where the scheduler's first fit takes the first
// device of the agent's steered order (dra.Steer, dra.FirstFit), on H100s.
func TestMigflexDynamicPlacement(t *testing.T) {
	for _, tc := range []struct {
		name     string
		busy     [][]inst
		res      string // a MIG profile, or "" for whole GPUs
		count    int
		firstFit string
		want     string // "" when nothing fits
	}{{
		// Both take slice 1: first fit as the lowest free start, steering
		// as the one that keeps a 3g.40gb at 4 and the most placements.
		name: "beside a 1g at 0", busy: [][]inst{{{profile: "1g.10gb", start: 0}}}, res: "1g.10gb", count: 1,
		firstFit: "[0:1g.10gb@1]", want: "[0:1g.10gb@1]",
	}, {
		// A 1g.10gb in use at slice 4: slice 5 keeps slices 0 to 3 for a
		// 4g.40gb (HAMi's choice too); first fit's slice 0 loses it.
		name: "keeps the 4g", busy: [][]inst{{{profile: "1g.10gb", start: 4}}}, res: "1g.10gb", count: 1,
		firstFit: "[0:1g.10gb@0]", want: "[0:1g.10gb@5]",
	}, {
		name: "fills the used GPU first", busy: [][]inst{nil, {{profile: "1g.10gb", start: 0}}}, res: "1g.10gb", count: 1,
		firstFit: "[0:1g.10gb@0]", want: "[1:1g.10gb@1]",
	}, {
		name: "a whole GPU from the free one", busy: [][]inst{{{profile: "1g.10gb", start: 0}}, nil}, res: "", count: 1,
		firstFit: "[1:@-1]", want: "[1:@-1]",
	}, {
		name: "two 3g on an empty GPU", busy: [][]inst{nil}, res: "3g.40gb", count: 2,
		firstFit: "[0:3g.40gb@0 0:3g.40gb@4]", want: "[0:3g.40gb@0 0:3g.40gb@4]",
	}, {
		name: "does not fit", busy: [][]inst{{{profile: "3g.40gb", start: 0}}}, res: "4g.40gb", count: 1,
		firstFit: "[]", want: "",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			n := oneNode(t, tc.busy...)
			res := resourcename.GPU
			if tc.res != "" {
				res = resourcename.MIG(tc.res)
			}
			p := &simPod{req: request{res: res, count: tc.count}}
			ff, _ := firstFit{}.carvePlan(nil, p, n)
			if got := planString(ff); got != tc.firstFit {
				t.Errorf("first fit: %s, want %s", got, tc.firstFit)
			}
			pol := &migflexDynamic{nodes: map[string]*nodeOffers{}}
			plan, ok := pol.carvePlan(nil, p, n)
			if ok != (tc.want != "") || ok && planString(plan) != tc.want {
				t.Errorf("migflex-dynamic: %v %s, want %q", ok, planString(plan), tc.want)
			}
		})
	}
}
