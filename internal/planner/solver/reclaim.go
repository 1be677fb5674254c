package solver

// reclaim gives MIG GPUs with nothing in use, and nothing given to a pod
// this round, back to whole, after the round's pods and within its cap and
// the cooldown (Policy.ReclaimIdle). Only when the demand mix asks for
// whole GPUs: otherwise nothing but MIG pods could use the GPU, and its
// free instances serve them without a change. A reserved GPU is made
// whole in any case: its pod waits for it whole.
func (r *round) reclaim() {
	all := r.pol.ReclaimIdle && r.mix.asksWhole()
	for gi := range r.gpus {
		g := &r.gpus[gi]
		k := g.key
		if !all && !k.reserved || k.tab < 0 || !k.migEnabled || k.occ != 0 || k.whole || !k.canChange(r.capped) {
			continue
		}
		if !k.touched {
			r.touched++
			r.capped = r.pol.MaxGPUsPerRound > 0 && r.touched >= r.pol.MaxGPUsPerRound
		}
		k.migEnabled, k.free, k.touched = false, 0, true
		g.toWhole, g.reclaimed = true, true
		r.setKey(int32(gi), k)
	}
}
