package schedview

import (
	"slices"

	"github.com/migflex/migflex/internal/domain/jointfit"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
)

// Want is one of a pod's needs on one pool: Count devices that Match
// selects.
type Want struct {
	Match func(*resourceapi.Device) bool
	Count int64
}

// maxStates bounds the count vectors Together tracks (the product over
// the wants of Count+1): a pod's GPU needs on one node are a few devices
// of a few types, far below it.
const maxStates = jointfit.DefaultMaxStates

// Together reports whether the pool can serve every want at once, each
// device to one want: Free counts each selection alone, and on a dynamic
// pool two profiles draw on the same counters (a free H100 makes a
// 4g.40gb, a 3g.40gb or a 1g.10gb, not the three). The search is exact:
// for each GPU, every set of its devices the counters left let be
// allocated together, as counts per want; then whether the GPUs' counts
// add up to every want. Past maxSearch steps on a GPU, or past maxStates
// count vectors, it answers as the counts alone would (Free of each want
// covers it), which is what it answered before the search: a reader
// never refuses a pod on a bound it hit.
func (p *Pool) Together(wants []Want) bool { return p.together(wants, false) }

// TogetherEver is Together with nothing allocated: whether the pool could
// ever serve every want at once (what its GPUs hold whole, untainted).
func (p *Pool) TogetherEver(wants []Want) bool { return p.together(wants, true) }

func (p *Pool) together(wants []Want, ever bool) bool {
	if len(wants) == 0 {
		return true
	}
	alone := true
	states := 1
	for _, w := range wants {
		if !ever {
			alone = alone && p.FreeOf(w.Match) >= w.Count
		}
		if states *= int(w.Count) + 1; states > maxStates {
			return alone
		}
	}
	if !alone {
		return false
	}
	need := make([]int64, len(wants))
	for i, w := range wants {
		need[i] = w.Count
	}
	units, ok := p.units(wants, ever)
	if !ok {
		return true
	}
	_, found, bounded := jointfit.Combine(units, need, maxStates)
	return found || bounded
}

// units are what each independent part of the pool can serve of wants
// together, as count vectors (capped at each want's Count): per GPU with
// counters, every set of its devices that fits what the counters left
// (ever: the counters whole, every untainted device); per device without
// counters, itself. ok is false past maxSearch steps on a GPU.
func (p *Pool) units(wants []Want, ever bool) (units [][][]int64, ok bool) {
	perGPU := map[int][]poolDevice{}
	var gpus []int
	for _, pd := range p.devices {
		candidate := p.fits(pd)
		if ever {
			candidate = pd.usable
		}
		if !candidate || !slices.ContainsFunc(wants, func(w Want) bool { return w.Match(pd.d) }) {
			continue
		}
		if counterSetOf(pd.d) == "" {
			var u [][]int64
			u = append(u, make([]int64, len(wants)))
			for i, w := range wants {
				if w.Match(pd.d) {
					v := make([]int64, len(wants))
					v[i] = 1
					u = append(u, v)
				}
			}
			units = append(units, u)
			continue
		}
		if _, seen := perGPU[pd.gpu]; !seen {
			gpus = append(gpus, pd.gpu)
		}
		perGPU[pd.gpu] = append(perGPU[pd.gpu], pd)
	}
	for _, g := range gpus {
		u, ok := p.onGPU(perGPU[g], wants, ever)
		if !ok {
			return nil, false
		}
		units = append(units, u)
	}
	return units, true
}

// onGPU walks the sets of cands (one GPU's devices, each fitting alone)
// whose consumptions fit the counters left (ever: whole), each device
// given to one want it matches, and returns their distinct count vectors.
func (p *Pool) onGPU(cands []poolDevice, wants []Want, ever bool) ([][]int64, bool) {
	matches := make([][]int, len(cands))
	for j, pd := range cands {
		for i, w := range wants {
			if w.Match(pd.d) {
				matches[j] = append(matches[j], i)
			}
		}
	}
	from := p.left
	if ever {
		from = p.capacity
	}
	devs := make([]*resourceapi.Device, len(cands))
	for j, pd := range cands {
		devs[j] = pd.d
	}
	take := scratchFor(devs, from).take
	count := make([]int64, len(wants))
	for i, w := range wants {
		count[i] = w.Count
	}
	var seen jointfit.Distinct[struct{}]
	ok := jointfit.Subsets(matches, count,
		func(j, _ int) bool { return take(cands[j].d, 1) },
		func(j, _ int) { take(cands[j].d, -1) },
		func(vec []int64) { seen.Add(vec, func() struct{} { return struct{}{} }) },
		maxSearch)
	if !ok {
		return nil, false
	}
	return seen.Vectors, true
}

// WantsOf are the wants of an extended-resource need on a DRA node: each
// resource's devices as the class serving it selects them. ok is false
// when a class of ours serves none of some resource (its need is not the
// pool's to answer).
func (c *DRAClasses) WantsOf(need map[corev1.ResourceName]int64) (wants []Want, ok bool) {
	if c == nil {
		return nil, false
	}
	for r, n := range need {
		s, served := c.served[r]
		if !served {
			return nil, false
		}
		wants = append(wants, Want{Match: s.matches, Count: n})
	}
	return wants, true
}

// SetDRAPool sets a DRA node's supply from its pool, as DRASupply counts
// it, and, on a dynamic pool, the joint check Member.Fits asks: whether
// the pool serves a need of several types at once.
func (n *Node) SetDRAPool(c *DRAClasses, p *Pool) {
	n.SetDRA(c.Supply(p))
	n.Together, n.TogetherEver = nil, nil
	if p.Dynamic {
		n.Together = func(need map[corev1.ResourceName]int64) bool {
			wants, ok := c.WantsOf(need)
			return !ok || p.Together(wants)
		}
		n.TogetherEver = func(need map[corev1.ResourceName]int64) bool {
			wants, ok := c.WantsOf(need)
			return !ok || p.TogetherEver(wants)
		}
	}
}

// Fits reports whether the node has need free, every type at once: each
// type's free devices cover its need and, on a dynamic DRA node, whose
// types draw on the same counters, the pool serves them together
// (Pool.Together).
func (m *Member) Fits(need map[corev1.ResourceName]int64) bool {
	for t, n := range need {
		if f, ok := m.free[t]; !ok || f < n {
			return false
		}
	}
	return len(need) < 2 || m.together == nil || m.together(need)
}

// Holds reports whether the node could ever hold need, used or not, every
// type at once: each type's allocatable devices cover its need and, on a
// dynamic DRA node, its pool with nothing allocated serves them together
// (Pool.TogetherEver).
func (m *Member) Holds(need map[corev1.ResourceName]int64) bool {
	for t, n := range need {
		if a, ok := m.alloc[t]; !ok || a < n {
			return false
		}
	}
	return len(need) < 2 || m.togetherEver == nil || m.togetherEver(need)
}
