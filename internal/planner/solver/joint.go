package solver

import "github.com/migflex/migflex/internal/domain/jointfit"

// assignJoint places needs on node ni's dynamic GPUs by the exact bounded
// search the webhook and kubectl migflex explain ask of a dynamic pool
// (jointfit, the algorithm of schedview.Pool.Together), on this round's
// table of the model's valid layouts: for each dynamic GPU, every set of
// placements the layouts admit beside what it holds, as counts per need;
// then one set per GPU adding up to every need. assignNode asks it when
// placing the devices one by one, each at its cheapest placement, found
// no fit: on a dynamic GPU the placement of the first device can leave
// no room for the next, where another placement would. It returns nil
// when no fit exists, when a need is a whole GPU (dynamic mode makes none
// of a MIG GPU), or past the search's bounds (the answer assignNode gave).
// The fit it returns is the cheapest (jointfit.Cheapest): each GPU's set
// priced as its options are, the fragmentation dynamicOption prices a
// placement at, summed over its devices in the order they are placed, and
// the GPUs' sets chosen for the least total. The first fit found
// (jointfit.Combine) may leave none of the demand's profile where another
// fit leaves some (TestPlanDynamicNodeCheapestJointFit).
func (r *round) assignJoint(ni int32, needs []need) []assignment {
	if noJointSearch {
		return nil
	}
	count := make([]int64, len(needs))
	for i, nd := range needs {
		if nd.res == 0 {
			return nil
		}
		count[i] = nd.count
	}
	var (
		units     [][][]int64
		costs     [][]float64
		witnesses [][][]jointPick
		gpus      []int32
	)
	for _, gi := range r.nodes[ni].gpus {
		k := r.gpus[gi].key
		if !k.dynamic || !k.migEnabled || k.tab < 0 || k.whole || k.reserved {
			continue
		}
		t := r.tabs[k.tab]
		var xs []int
		var matches [][]int
		for i, nd := range needs {
			if p := r.res.prof[k.tab][nd.res]; p >= 0 {
				for _, x := range t.byProfile[p] {
					xs, matches = append(xs, x), append(matches, []int{i})
				}
			}
		}
		occ := []int32{k.occ}
		base := r.usable(k)
		var taken []jointPick
		var sets jointfit.Distinct[[]jointPick]
		ok := jointfit.Subsets(matches, count,
			func(j, i int) bool {
				next := int32(-1)
				if cur := occ[len(occ)-1]; cur >= 0 {
					next = t.add(cur, xs[j])
				}
				occ, taken = append(occ, next), append(taken, jointPick{i, xs[j]})
				return next >= 0
			},
			func(int, int) { occ, taken = occ[:len(occ)-1], taken[:len(taken)-1] },
			func(vec []int64) {
				// placeJoint's costs, summed: a dynamic GPU's class is
				// reshapable, so each step's usable capacity before is
				// the last one's after, and the sum is what the set
				// leaves of the GPU's.
				cost := r.pol.Weights.Fragmentation * (base - r.usable(classKey{tab: k.tab, occ: occ[len(occ)-1], migEnabled: true, reshapable: true}))
				sets.AddCost(vec, cost, func() []jointPick { return append([]jointPick(nil), taken...) })
			},
			jointfit.DefaultMaxSteps)
		if !ok {
			return nil
		}
		units, costs, witnesses, gpus = append(units, sets.Vectors), append(costs, sets.Cost), append(witnesses, sets.Witness), append(gpus, gi)
	}
	var choice []int
	var found bool
	if firstJointFit {
		choice, found, _ = jointfit.Combine(units, count, jointfit.DefaultMaxStates)
	} else {
		choice, found, _ = jointfit.Cheapest(units, costs, count, jointfit.DefaultMaxStates, jointfit.DefaultMaxSteps)
	}
	if !found {
		return nil
	}
	var out []assignment
	for u, c := range choice {
		r.placeJoint(r.gpus[gpus[u]].key, needs, witnesses[u][c], func(res int32, o option) {
			out = append(out, assignment{gpu: gpus[u], res: res, opt: o, fixed: true})
		})
	}
	return out
}

// jointPick is one device of a joint fit: which need, at which placement.
type jointPick struct{ need, x int }

// placeJoint places picks one after the other on a dynamic GPU of class k
// and calls each with its option, priced as dynamicOption prices one:
// the fragmentation of the usable capacity it takes.
func (r *round) placeJoint(k classKey, needs []need, picks []jointPick, each func(res int32, o option)) {
	t := r.tabs[k.tab]
	for _, p := range picks {
		occ := t.add(k.occ, p.x)
		o := option{state: optOK, existing: true, x: int8(p.x), occ: occ,
			cost: r.pol.Weights.Fragmentation * (r.usable(k) - r.usable(classKey{tab: k.tab, occ: occ, migEnabled: true, reshapable: true}))}
		res := needs[p.need].res
		each(res, o)
		k = after(k, res, &o)
	}
}

// noJointSearch turns assignJoint off, for the test that shows the one by
// one placement missing a fit it finds.
var noJointSearch bool

// firstJointFit has assignJoint take the first fit found, not the
// cheapest, for the test that shows the two differ.
var firstJointFit bool
