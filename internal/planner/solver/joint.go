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
// The fit it returns is the first found, not the cheapest; the options
// carry their fragmentation cost as dynamicOption prices them.
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
	type pick struct{ need, x int }
	var (
		units     [][][]int64
		witnesses [][][]pick
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
		var taken []pick
		var sets jointfit.Distinct[[]pick]
		ok := jointfit.Subsets(matches, count,
			func(j, i int) bool {
				next := int32(-1)
				if cur := occ[len(occ)-1]; cur >= 0 {
					next = t.add(cur, xs[j])
				}
				occ, taken = append(occ, next), append(taken, pick{i, xs[j]})
				return next >= 0
			},
			func(int, int) { occ, taken = occ[:len(occ)-1], taken[:len(taken)-1] },
			func(vec []int64) { sets.Add(vec, func() []pick { return append([]pick(nil), taken...) }) },
			jointfit.DefaultMaxSteps)
		if !ok {
			return nil
		}
		units, witnesses, gpus = append(units, sets.Vectors), append(witnesses, sets.Witness), append(gpus, gi)
	}
	choice, found, _ := jointfit.Combine(units, count, jointfit.DefaultMaxStates)
	if !found {
		return nil
	}
	var out []assignment
	for u, c := range choice {
		k := r.gpus[gpus[u]].key
		t := r.tabs[k.tab]
		for _, p := range witnesses[u][c] {
			occ := t.add(k.occ, p.x)
			o := option{state: optOK, existing: true, x: int8(p.x), occ: occ,
				cost: r.pol.Weights.Fragmentation * (r.usable(k) - r.usable(classKey{tab: k.tab, occ: occ, migEnabled: true, reshapable: true}))}
			res := needs[p.need].res
			out = append(out, assignment{gpu: gpus[u], res: res, opt: o, fixed: true})
			k = after(k, res, &o)
		}
	}
	return out
}

// noJointSearch turns assignJoint off, for the test that shows the one by
// one placement missing a fit it finds.
var noJointSearch bool
