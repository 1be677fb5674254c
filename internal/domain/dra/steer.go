package dra

import (
	"cmp"
	"slices"
	"sort"
)

// Steer orders dynamic mode's offers so that the scheduler's first fit is
// migflex's best fit, given the devices in use (allocated or prepared, by
// name). The scheduler has no device scoring: it takes the first device
// that fits, in slice and device order (docs/DRA.md, "Dynamic mode:
// steering"). Steer only reorders: every offer keeps every device, with
// the same counters and taints, so a claim the unsteered offers could
// serve the steered ones serve too.
//
// The GPUs come in this order: those offered whole only (MIG off: the
// only ones whose whole device Prepare can serve), then the MIG GPUs in
// use, the most used first (a small instance fills a used GPU before it
// cuts into a free one), then the free MIG GPUs, each group by index. On a
// MIG GPU each profile's devices that fit beside those in use come first,
// best first: the placement after which the largest device of the GPU
// still fits, then the one after which the most devices still fit (HAMi's
// placement score, Project-HAMi/HAMi pull request 2855, measured on the
// counters the scheduler checks rather than on runs of memory slices,
// which ignore where larger profiles may start), ties in the offers'
// order; then the devices that do not fit now, in the offers' order; the
// whole GPU stays last. Profiles keep the offers' order, so a claim that
// several profiles satisfy still gets the smallest first.
//
// The result is a function of the offers and the devices in use only, so
// an agent republishing it writes nothing while its GPUs' use is
// unchanged.
func Steer(offers []Offer, inUse map[string]bool) []Offer {
	type ranked struct {
		o     Offer
		group int // 0: whole only, 1: MIG in use, 2: MIG free
		used  int64
	}
	out := make([]ranked, len(offers))
	for i, o := range offers {
		if o.CounterSet == "" {
			out[i] = ranked{o: o}
			continue
		}
		st := newCounterState(o, inUse)
		steered := o
		steered.Devices = st.order()
		out[i] = ranked{o: steered, group: 2, used: st.usedMemory()}
		if out[i].used > 0 {
			out[i].group = 1
		}
	}
	slices.SortStableFunc(out, func(a, b ranked) int {
		return cmp.Or(cmp.Compare(a.group, b.group), cmp.Compare(b.used, a.used), cmp.Compare(a.o.GPUIndex, b.o.GPUIndex))
	})
	res := make([]Offer, len(out))
	for i, r := range out {
		res[i] = r.o
	}
	return res
}

// counterState is one MIG GPU's counters as vectors: what is free beside
// the devices in use, and what each device consumes.
type counterState struct {
	o      Offer
	names  []string
	free   []int64
	cons   [][]int64 // by device, nil for a device without counters
	memory []bool    // by counter: a memory slice
}

func newCounterState(o Offer, inUse map[string]bool) *counterState {
	st := &counterState{o: o, names: make([]string, 0, len(o.Counters))}
	for name := range o.Counters {
		st.names = append(st.names, name)
	}
	sort.Strings(st.names)
	idx := make(map[string]int, len(st.names))
	st.free = make([]int64, len(st.names))
	st.memory = make([]bool, len(st.names))
	for i, name := range st.names {
		idx[name] = i
		st.free[i] = o.Counters[name]
		st.memory[i] = len(name) > len(CounterMemorySlicePrefix) && name[:len(CounterMemorySlicePrefix)] == CounterMemorySlicePrefix
	}
	st.cons = make([][]int64, len(o.Devices))
	for j, d := range o.Devices {
		if len(d.Consumes) == 0 {
			continue
		}
		v := make([]int64, len(st.names))
		for name, n := range d.Consumes {
			if i, ok := idx[name]; ok {
				v[i] = n
			}
		}
		st.cons[j] = v
		if inUse[d.Name] {
			for i := range v {
				st.free[i] -= v[i]
			}
		}
	}
	return st
}

// usedMemory is the number of the GPU's memory slices in use.
func (st *counterState) usedMemory() int64 {
	var n int64
	for i, m := range st.memory {
		if m && st.free[i] <= 0 {
			n++
		}
	}
	return n
}

func fitsIn(free, cons []int64) bool {
	if cons == nil {
		return true
	}
	for i, n := range cons {
		if n > free[i] {
			return false
		}
	}
	return true
}

// after scores device j: the size of the largest MIG device and the number
// of MIG devices that still fit once j is taken.
func (st *counterState) after(j int) (largest, survivors int) {
	left := slices.Clone(st.free)
	for i, n := range st.cons[j] {
		left[i] -= n
	}
	for k, d := range st.o.Devices {
		if !d.MIG || !fitsIn(left, st.cons[k]) {
			continue
		}
		survivors++
		largest = max(largest, d.Size)
	}
	return largest, survivors
}

// order is the GPU's devices in steered order (see Steer).
func (st *counterState) order() []OfferedDevice {
	type scored struct {
		j                  int
		profile            int // first position of the device's profile
		fits               bool
		largest, survivors int
	}
	first := map[string]int{}
	var mig []scored
	var rest []OfferedDevice
	for j, d := range st.o.Devices {
		if !d.MIG {
			rest = append(rest, d)
			continue
		}
		if _, ok := first[d.Profile]; !ok {
			first[d.Profile] = j
		}
		s := scored{j: j, profile: first[d.Profile], fits: fitsIn(st.free, st.cons[j])}
		if s.fits {
			s.largest, s.survivors = st.after(j)
		}
		mig = append(mig, s)
	}
	slices.SortStableFunc(mig, func(a, b scored) int {
		return cmp.Or(cmp.Compare(a.profile, b.profile), -cmpBool(a.fits, b.fits),
			cmp.Compare(b.largest, a.largest), cmp.Compare(b.survivors, a.survivors), cmp.Compare(a.j, b.j))
	})
	out := make([]OfferedDevice, 0, len(st.o.Devices))
	for _, s := range mig {
		out = append(out, st.o.Devices[s.j])
	}
	return append(out, rest...)
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// FirstFit is what the scheduler's structured allocator does with one
// request of count devices on one node's offers, as published in this
// order: it walks the devices in order, takes each that matches, is not
// in use and fits its GPU's counters beside what is in use and what it
// has taken, and backtracks when the rest cannot be found after a device
// (the allocator's depth-first search,
// k8s.io/dynamic-resource-allocation/structured, allocateOne). It returns
// the first set found in that order, or false. The replay's dynamic
// policies and the tests use it as the scheduler.
func FirstFit(offers []Offer, inUse map[string]bool, match func(OfferedDevice) bool, count int) ([]OfferedDevice, bool) {
	type cand struct {
		gpu int // index into states
		j   int
	}
	states := make([]*counterState, len(offers))
	var cands []cand
	for g, o := range offers {
		states[g] = newCounterState(o, inUse)
		for j, d := range o.Devices {
			if !inUse[d.Name] && match(d) {
				cands = append(cands, cand{g, j})
			}
		}
	}
	const maxSteps = 1 << 16
	steps := 0
	picked := make([]cand, 0, count)
	var search func(from int) bool
	search = func(from int) bool {
		if len(picked) == count {
			return true
		}
		for k := from; k < len(cands); k++ {
			if steps++; steps > maxSteps {
				return false
			}
			c := cands[k]
			st := states[c.gpu]
			if !fitsIn(st.free, st.cons[c.j]) {
				continue
			}
			for i, n := range st.cons[c.j] {
				st.free[i] -= n
			}
			picked = append(picked, c)
			if search(k + 1) {
				return true
			}
			picked = picked[:len(picked)-1]
			for i, n := range st.cons[c.j] {
				st.free[i] += n
			}
		}
		return false
	}
	if count <= 0 || !search(0) {
		return nil, false
	}
	out := make([]OfferedDevice, len(picked))
	for i, c := range picked {
		out[i] = offers[c.gpu].Devices[c.j]
	}
	return out, true
}
