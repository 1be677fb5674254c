package solver

import (
	"cmp"
	"math/bits"
	"slices"
)

// reclaim gives MIG GPUs with nothing in use, and nothing given to a pod
// this round, back to whole, after the round's pods and within its cap and
// the cooldown (Policy.ReclaimIdle). Only as many as the demand mix asks
// for: free instances the mix's MIG pods can use are kept while their
// share of the free capacity is no more than the mix's MIG share, so that
// the next MIG pod takes one without a change instead of a whole GPU being
// carved again (each way is a repartition). They are not kept on a node
// whose other GPUs are all idle or whole: made all whole, it can take a
// multi-GPU pod. With a mix of MIG pods only every free instance stays. A
// reserved GPU is made whole in any case: its pod waits for it whole.
func (r *round) reclaim() {
	var idle []int32
	for gi := range r.gpus {
		k := r.gpus[gi].key
		if k.tab < 0 || !k.migEnabled || k.occ != 0 || k.whole || !k.canChange(r.capped) {
			continue
		}
		if k.reserved {
			r.toWhole(int32(gi))
		} else if r.pol.ReclaimIdle {
			idle = append(idle, int32(gi))
		}
	}
	if len(idle) == 0 || !r.mix.asksWhole() {
		return
	}
	migShare := 1.0
	for _, w := range r.mix.whole {
		migShare -= w
	}
	migFree, wholeFree := r.freeSupply()
	// Nodes with the most GPUs that are or will be whole first: the
	// instances kept are on the nodes furthest from all whole.
	slices.SortStableFunc(idle, func(a, b int32) int {
		return cmp.Compare(r.nodes[r.gpus[b].node].wholeFree, r.nodes[r.gpus[a].node].wholeFree)
	})
	for _, gi := range idle {
		k := r.gpus[gi].key
		c := r.usableFree(k)
		n := &r.nodes[r.gpus[gi].node]
		spare := c > 0 && n.wholeFree < len(n.gpus) && migFree-c < migShare*(migFree-c+wholeFree+1)-1e-9
		if !k.canChange(r.capped) || spare {
			continue
		}
		migFree, wholeFree = migFree-c, wholeFree+1
		r.toWhole(gi)
	}
}

// toWhole disables MIG on an idle GPU, within the round's cap.
func (r *round) toWhole(gi int32) {
	g := &r.gpus[gi]
	k := g.key
	if !k.touched {
		r.touched++
		r.capped = r.pol.MaxGPUsPerRound > 0 && r.touched >= r.pol.MaxGPUsPerRound
	}
	k.migEnabled, k.free, k.touched = false, 0, true
	g.toWhole, g.reclaimed = true, true
	r.setKey(gi, k)
}

// freeSupply is the free capacity after the round's pods: the memory share
// of the free instances the mix asks for, and the idle whole GPUs. GPUs of
// dynamic nodes are left out (their placements are made on demand, whole
// or MIG), and so are reserved ones (held for their pod).
func (r *round) freeSupply() (mig float64, whole float64) {
	for gi := range r.gpus {
		k := r.gpus[gi].key
		switch {
		case k.reserved || k.dynamic:
		case !k.migEnabled:
			if !k.whole && k.occ == 0 {
				whole++
			}
		default:
			mig += r.usableFree(k)
		}
	}
	return mig, whole
}

// usableFree is the memory share of a MIG GPU's free instances whose
// profile the mix asks for.
func (r *round) usableFree(k classKey) float64 {
	if k.tab < 0 || int(k.tab) >= len(r.mix.prof) {
		return 0
	}
	t, w := r.tabs[k.tab], r.mix.prof[k.tab]
	c := 0.0
	for f := k.free; f != 0; f &= f - 1 {
		if p := t.xs[bits.TrailingZeros64(f)].prof; w[p] > 0 {
			c += t.size[p]
		}
	}
	return c
}
