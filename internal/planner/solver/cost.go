package solver

import (
	"math"
	"math/bits"
)

// classKey is everything the cost of serving a device on a GPU depends on.
// GPUs with equal keys cost the same, so options are computed once per key
// and resource, however many GPUs share it.
type classKey struct {
	tab int32 // -1: no MIG table
	// occ is the layout (table id) of the instances in use or given to a
	// pod this round; free the other existing instances (placement bits).
	occ        int32
	free       uint64
	migEnabled bool
	// whole: MIG disabled and the GPU held as a whole.
	whole bool
	// reshapable: opted in and understood; the planner may change it,
	// perhaps not this round (block).
	reshapable bool
	// dynamic: a GPU of a DRA node in dynamic mode. Its placements that
	// its instances leave free are made by the scheduler and the agent's
	// Prepare, on demand: they serve a pod as free instances do (no
	// write, no cap, no cooldown); the planner never changes the GPU
	// itself (no layout, no MIG mode).
	dynamic bool
	block   blockReason
	touched bool
	// held: new MIG instances stay off the GPU this round, for a pod
	// waiting for several whole GPUs on its node (Policy.HoldForMultiGPU).
	held bool
	// reserved: a reservation holds the GPU for a pod the scheduler
	// binds (GPU.Reserved); the round gives it to no pod.
	reserved bool
	// When the GPU is idle and can be whole, nodeIdle is the node's count
	// of such GPUs and nodeWhole its count of GPUs that are or will be
	// whole (see wholePotential); both -1 otherwise.
	nodeIdle, nodeWhole int8
}

// servesWhole: the GPU is idle and is, or can be made, a whole GPU.
func (k classKey) servesWhole() bool {
	return !k.whole && !k.reserved && k.occ == 0 && (!k.migEnabled || k.reshapable && !k.dynamic)
}

// wholePotential: the GPU is, or will be when its pod ends, a whole GPU
// for pods asking for several on one node: idle and able to be whole, or
// held whole now.
func (k classKey) wholePotential() bool {
	return k.servesWhole() || k.whole && !k.migEnabled
}

// canChange: this round may repartition the GPU.
func (k classKey) canChange(capped bool) bool {
	return k.reshapable && !k.dynamic && k.block == blockNone && (k.touched || !capped)
}

// option is the cheapest way to serve one device of a resource on a GPU
// class.
type option struct {
	state    uint8 // optUnknown, optOK, optNone
	existing bool  // uses a free instance that exists
	touch    bool  // repartitions a GPU not yet changed this round
	x        int8  // placement; -1 for a whole GPU
	destroys int8
	cost     float64
	// occ and keep are the GPU's occupied layout and kept free instances
	// after the device is placed.
	occ  int32
	keep uint64
}

const (
	optUnknown uint8 = iota
	optOK
	optNone
)

func (r *round) intern(k classKey) int32 {
	if id, ok := r.classes[k]; ok {
		return id
	}
	id := int32(len(r.keys))
	r.classes[k] = id
	r.keys = append(r.keys, k)
	n := len(r.res.names)
	for i := range r.opts {
		r.opts[i] = append(r.opts[i], make([]option, n)...)
	}
	return id
}

// classOf is the GPU's class now, with its node's idle count.
func (r *round) classOf(gi int32) int32 {
	g := &r.gpus[gi]
	k := g.key
	k.nodeIdle, k.nodeWhole = -1, -1
	if k.servesWhole() {
		n := &r.nodes[g.node]
		k.nodeIdle, k.nodeWhole = int8(min(n.idle, math.MaxInt8)), int8(min(n.wholeFree, math.MaxInt8))
	}
	g.key = k
	return r.intern(k)
}

// option returns the cheapest way to serve one device of res on class c.
func (r *round) option(c int32, res int32) *option {
	capIdx := 0
	if r.capped {
		capIdx = 1
	}
	o := &r.opts[capIdx][int(c)*len(r.res.names)+int(res)]
	if o.state == optUnknown {
		*o = r.computeOption(r.keys[c], res, r.capped)
	}
	return o
}

func (r *round) computeOption(k classKey, res int32, capped bool) option {
	none := option{state: optNone}
	if k.whole || k.reserved {
		return none
	}
	w := r.pol.Weights
	before := r.usable(k)
	if k.nodeIdle >= 0 {
		// Serving anything takes the GPU out of the node's idle ones;
		// serving a MIG device takes it out of the node's whole ones for
		// good, as far as pods asking for several GPUs are concerned.
		before += r.mix.wholeValue(int(k.nodeIdle)) - r.mix.wholeValue(int(k.nodeIdle)-1)
		if res != 0 {
			before += r.mix.wholeValue(int(k.nodeWhole)) - r.mix.wholeValue(int(k.nodeWhole)-1)
		}
	}
	if k.dynamic && k.migEnabled {
		return r.dynamicOption(k, res, before)
	}
	if res == 0 { // a whole GPU
		if k.occ != 0 {
			return none
		}
		o := option{state: optOK, x: -1, cost: w.Fragmentation * before}
		switch {
		case !k.migEnabled:
			o.existing = true
		case k.canChange(capped):
			o.touch = !k.touched
			o.destroys = int8(bits.OnesCount64(k.free))
			o.cost += w.Touch*b2f(o.touch) + w.Destroy*float64(o.destroys)
		default:
			return none
		}
		return o
	}
	if k.tab < 0 {
		return none
	}
	p := r.res.prof[k.tab][res]
	if p < 0 {
		return none
	}
	t := r.tabs[k.tab]
	best := none
	consider := func(o option) {
		if best.state != optOK || o.cost < best.cost {
			best = o
		}
	}
	if k.migEnabled {
		for _, x := range t.byProfile[p] {
			if k.free&(1<<x) == 0 {
				continue
			}
			occ := t.add(k.occ, x)
			free := k.free &^ (1 << x)
			after := r.usable(classKey{tab: k.tab, occ: occ, free: free, migEnabled: true, reshapable: k.reshapable})
			consider(option{state: optOK, existing: true, x: int8(x), occ: occ, keep: free, cost: w.Fragmentation * (before - after)})
		}
	}
	if !k.canChange(capped) || k.held {
		return best
	}
	for _, x := range t.byProfile[p] {
		if k.free&(1<<x) != 0 {
			continue
		}
		occ := t.add(k.occ, x)
		if occ < 0 {
			continue
		}
		keep := r.keepFree(k.tab, occ, k.free)
		o := option{state: optOK, touch: !k.touched, x: int8(x), occ: occ, keep: keep,
			destroys: int8(bits.OnesCount64(k.free) - bits.OnesCount64(keep))}
		after := r.usable(classKey{tab: k.tab, occ: occ, free: keep, migEnabled: true, reshapable: k.reshapable})
		o.cost = w.Touch*b2f(o.touch) + w.Destroy*float64(o.destroys) + w.Fragmentation*(before-after)
		consider(o)
	}
	return best
}

// dynamicOption is the cheapest placement of one device of res that a
// dynamic GPU's instances leave free: made at Prepare, so it counts as
// existing. A whole GPU is none: dynamic mode does not change MIG mode.
func (r *round) dynamicOption(k classKey, res int32, before float64) option {
	none := option{state: optNone}
	if res == 0 || k.tab < 0 {
		return none
	}
	p := r.res.prof[k.tab][res]
	if p < 0 {
		return none
	}
	t := r.tabs[k.tab]
	best := none
	for _, x := range t.byProfile[p] {
		occ := t.add(k.occ, x)
		if occ < 0 {
			continue
		}
		after := r.usable(classKey{tab: k.tab, occ: occ, migEnabled: true, reshapable: true})
		o := option{state: optOK, existing: true, x: int8(x), occ: occ, cost: r.pol.Weights.Fragmentation * (before - after)}
		if best.state != optOK || o.cost < best.cost {
			best = o
		}
	}
	return best
}

// after is the class a GPU of class k moves to when o serves res on it.
func after(k classKey, res int32, o *option) classKey {
	k.nodeIdle, k.nodeWhole = -1, -1
	if res == 0 {
		k.whole, k.free, k.occ = true, 0, 0
		if k.migEnabled {
			k.migEnabled = false
			k.touched = true
		}
		return k
	}
	k.occ, k.free = o.occ, o.keep
	if !o.existing {
		k.touched, k.migEnabled = true, true
	}
	return k
}

// usable is the GPU's capacity usable by the recent demand mix, without the
// whole-GPU term (which belongs to the node): for each MIG profile, its
// weight in the mix times its size times how many instances of it the GPU
// could still hold. A GPU the planner may reshape could hold whatever fits
// next to its occupied instances; one it may not, only its free instances.
func (r *round) usable(k classKey) float64 {
	if k.whole || k.tab < 0 {
		return 0
	}
	t := r.tabs[k.tab]
	w := r.mix.prof[k.tab]
	u := 0.0
	for p, wp := range w {
		if wp == 0 {
			continue
		}
		var n int
		switch {
		case k.reshapable:
			n = t.room(k.occ, p)
		case k.migEnabled:
			for _, x := range t.byProfile[p] {
				if k.free&(1<<x) != 0 {
					n++
				}
			}
		}
		u += wp * t.size[p] * float64(n)
	}
	return u
}

type keepKey struct {
	tab  int32
	occ  int32
	free uint64
}

// keepFree returns the largest subset of free that can stay next to the
// occupied layout occ; the rest is destroyed.
func (r *round) keepFree(tab, occ int32, free uint64) uint64 {
	kk := keepKey{tab, occ, free}
	if v, ok := r.keepMemo[kk]; ok {
		return v
	}
	t := r.tabs[tab]
	base := t.sets[occ]
	best, bestN := uint64(0), -1
	// Every subset of free, largest value first; ties keep the first found.
	for s := free; ; s = (s - 1) & free {
		if n := bits.OnesCount64(s); n > bestN {
			if _, ok := t.layoutOf(base | s); ok {
				best, bestN = s, n
			}
		}
		if s == 0 {
			break
		}
	}
	r.keepMemo[kk] = best
	return best
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
