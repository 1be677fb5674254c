package schedview

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/migflex/migflex/internal/domain/jointfit"
)

// Names of the driver's dynamic-mode slices that the supply reads; they
// are internal/domain/dra's (a test holds them equal).
const (
	draCapMemorySlice = "memorySlice"
	draAttrParentUUID = "parentUUID"
	draAttrUUID       = "uuid"
)

// maxSearch bounds the subsets one Free call walks on one GPU. A served
// class selects one profile (or whole GPUs): at most 7 placements of one
// profile on a GPU of the built-in models, 128 subsets. Past the bound
// the count is what the subsets walked so far found, a lower bound.
const maxSearch = jointfit.DefaultMaxSteps

// Pool is what one DRA node's pool of migflex's driver can still serve,
// read from its ResourceSlices (the pool's newest generation) and the
// devices allocated to ResourceClaims in it. In static mode every device
// is an instance that exists; in dynamic mode (the pool publishes counter
// sets) a device is a placement that consumes its GPU's counters, and
// placements overlap: what is free is what the counters left by the
// allocated devices still let the scheduler allocate, not every device
// unallocated. It is pure.
type Pool struct {
	// Dynamic: the pool publishes counter sets (the agent's
	// --dra-mode=dynamic).
	Dynamic bool
	// GPUs are the pool's GPUs in slice order: one per counter set, and
	// one per whole GPU offered without counters (MIG off, no MIG, or
	// static mode's whole GPUs). Static mode's MIG devices have no GPU
	// here: each is its own supply.
	GPUs []PoolGPU

	devices []poolDevice
	// left is what the allocated devices leave of each counter set;
	// capacity is each counter set whole.
	left, capacity map[string]map[string]int64
}

// PoolGPU is one GPU of a Pool and what is allocated on it.
type PoolGPU struct {
	// CounterSet is the GPU's counter set; "" for a GPU offered whole
	// only.
	CounterSet string
	// UUID is the GPU's, from its devices (parentUUID, or uuid of the
	// whole GPU); "" when none says.
	UUID string
	// Used are the devices allocated on it, by placement.
	Used []UsedDevice
	// Full: no device of the GPU can be allocated any more (every one is
	// allocated, tainted, or beyond what the counters leave).
	Full bool
}

// State says it in a word: free (nothing allocated), partly used, or
// full.
func (g PoolGPU) State() string {
	switch {
	case g.Full:
		return "full"
	case len(g.Used) > 0:
		return "partly used"
	}
	return "free"
}

// UsedDevice is a device allocated to a claim.
type UsedDevice struct {
	Name string
	// Profile is the MIG profile; "" for a whole GPU.
	Profile string
	// Start and Size are the placement in memory slices (the
	// memorySlice<i> capacities); Size 0 for a whole GPU.
	Start, Size int
}

type poolDevice struct {
	d *resourceapi.Device
	// gpu indexes Pool.GPUs; -1 for a static MIG device.
	gpu int
	// usable: no NoSchedule or NoExecute taint, and not a whole GPU that
	// consumes counters (see NewPool).
	usable bool
	taken  bool
}

// NewPool reads node's pool: our driver's slices of pool node at its
// newest generation, and the results of claims allocated in it (admin
// access takes nothing).
//
// A device with a NoSchedule or NoExecute taint (unhealthy) is no supply;
// allocated, it still consumes its counters. A whole GPU that consumes
// counters (dynamic mode's whole GPU of a GPU with MIG on) is no supply
// either: the agent's Prepare refuses it, because it does not change MIG
// mode at Prepare.
func NewPool(node string, sl []*resourceapi.ResourceSlice, claims []*resourceapi.ResourceClaim) *Pool {
	var gen int64 = -1
	for _, s := range sl {
		if s.Spec.Driver == DRADriver && s.Spec.Pool.Name == node && s.Spec.Pool.Generation > gen {
			gen = s.Spec.Pool.Generation
		}
	}
	p := &Pool{left: map[string]map[string]int64{}, capacity: map[string]map[string]int64{}}
	bySet := map[string]int{}
	var devs []*resourceapi.Device
	for _, s := range sl {
		if s.Spec.Driver != DRADriver || s.Spec.Pool.Name != node || s.Spec.Pool.Generation != gen {
			continue
		}
		for _, cs := range s.Spec.SharedCounters {
			if _, dup := p.left[cs.Name]; dup {
				continue
			}
			p.Dynamic = true
			left := make(map[string]int64, len(cs.Counters))
			for name, c := range cs.Counters {
				left[name] = c.Value.Value()
			}
			p.left[cs.Name], p.capacity[cs.Name] = left, maps.Clone(left)
		}
		for i := range s.Spec.Devices {
			devs = append(devs, &s.Spec.Devices[i])
		}
	}
	taken := map[string]bool{}
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver == DRADriver && r.Pool == node && (r.AdminAccess == nil || !*r.AdminAccess) {
				taken[r.Device] = true
			}
		}
	}
	for _, d := range devs {
		pd := poolDevice{d: d, gpu: -1, taken: taken[d.Name], usable: !unschedulable(d)}
		set := counterSetOf(d)
		whole := attribute(d, draAttrType) == draTypeGPU
		switch {
		case set != "":
			gi, ok := bySet[set]
			if !ok {
				gi = len(p.GPUs)
				bySet[set] = gi
				p.GPUs = append(p.GPUs, PoolGPU{CounterSet: set})
			}
			pd.gpu = gi
			pd.usable = pd.usable && !whole
		case whole:
			pd.gpu = len(p.GPUs)
			p.GPUs = append(p.GPUs, PoolGPU{})
		}
		if g := pd.gpu; g >= 0 && p.GPUs[g].UUID == "" {
			p.GPUs[g].UUID = attribute(d, draAttrParentUUID)
			if whole {
				p.GPUs[g].UUID = cmp.Or(p.GPUs[g].UUID, attribute(d, draAttrUUID))
			}
		}
		if pd.taken {
			p.consume(d)
			if pd.gpu >= 0 {
				start, size := placement(d)
				p.GPUs[pd.gpu].Used = append(p.GPUs[pd.gpu].Used, UsedDevice{Name: d.Name, Profile: attribute(d, draAttrProfile), Start: start, Size: size})
			}
		}
		p.devices = append(p.devices, pd)
	}
	for gi := range p.GPUs {
		slices.SortStableFunc(p.GPUs[gi].Used, func(a, b UsedDevice) int { return cmp.Compare(a.Start, b.Start) })
		p.GPUs[gi].Full = !slices.ContainsFunc(p.devices, func(pd poolDevice) bool { return pd.gpu == gi && p.fits(pd) })
	}
	return p
}

// Free is how many more devices of the selection the pool can serve at
// once: on each GPU, the most devices of the selection that the counters
// left let be allocated together (the largest set of placements that do
// not overlap and fit the other counters, not the first ones found), and
// each free device without counters. A served class selects one
// profile, or whole GPUs, so the count is per profile: devices of two
// profiles draw on the same counters, and Free of each is what the pool
// can serve of it alone.
func (p *Pool) Free(s Selection) int64 { return p.FreeOf(s.matches) }

// FreeOf is Free of the devices match selects (a class's and a request's
// CEL selectors, as kubectl migflex explain evaluates them).
func (p *Pool) FreeOf(match func(*resourceapi.Device) bool) int64 {
	var n int64
	perGPU := map[int][]*resourceapi.Device{}
	for _, pd := range p.devices {
		if !p.fits(pd) || !match(pd.d) {
			continue
		}
		if counterSetOf(pd.d) == "" {
			n++
			continue
		}
		perGPU[pd.gpu] = append(perGPU[pd.gpu], pd.d)
	}
	for _, cands := range perGPU {
		n += int64(p.mostTogether(cands))
	}
	return n
}

// Allocated is how many devices of the selection are allocated.
func (p *Pool) Allocated(s Selection) int64 {
	var n int64
	for _, pd := range p.devices {
		if pd.taken && s.matches(pd.d) {
			n++
		}
	}
	return n
}

// AllocatedByProfile is Allocated of each MIG profile, and of whole GPUs
// under "".
func (p *Pool) AllocatedByProfile() map[string]int64 {
	out := map[string]int64{}
	for _, pd := range p.devices {
		if pd.taken {
			out[attribute(pd.d, draAttrProfile)]++
		}
	}
	return out
}

// FreeByProfile is Free of each MIG profile the pool offers, and of whole
// GPUs under "" (zero counts left out).
func (p *Pool) FreeByProfile() map[string]int64 {
	out := p.FreeEveryProfile()
	maps.DeleteFunc(out, func(_ string, n int64) bool { return n == 0 })
	return out
}

// FreeEveryProfile is FreeByProfile with the zero counts: every profile
// the pool offers (whole GPUs under ""), even where none can be made now.
func (p *Pool) FreeEveryProfile() map[string]int64 {
	out := map[string]int64{}
	for _, pd := range p.devices {
		profile := attribute(pd.d, draAttrProfile)
		if _, seen := out[profile]; seen {
			continue
		}
		s := Selection{Type: draTypeMIG, Profile: profile}
		if profile == "" {
			s = Selection{Type: draTypeGPU}
		}
		out[profile] = p.Free(s)
	}
	return out
}

// fits tells whether the device could be allocated now, alone.
func (p *Pool) fits(pd poolDevice) bool {
	if !pd.usable || pd.taken {
		return false
	}
	for _, c := range pd.d.ConsumesCounters {
		left, ok := p.left[c.CounterSet]
		if !ok {
			return false
		}
		for name, v := range c.Counters {
			if left[name] < v.Value.Value() {
				return false
			}
		}
	}
	return true
}

func (p *Pool) consume(d *resourceapi.Device) {
	for _, c := range d.ConsumesCounters {
		if left, ok := p.left[c.CounterSet]; ok {
			for name, v := range c.Counters {
				left[name] -= v.Value.Value()
			}
		}
	}
}

// mostTogether is the size of the largest subset of cands (each fits
// alone) whose consumptions fit the counters left together: a search
// over subsets, largest first found, pruned when what is left cannot beat
// the best.
func (p *Pool) mostTogether(cands []*resourceapi.Device) int {
	left := scratchFor(cands, p.left)
	fit := left.take
	best, steps := 0, 0
	var walk func(i, n int)
	walk = func(i, n int) {
		steps++
		best = max(best, n)
		if i == len(cands) || n+len(cands)-i <= best || steps > maxSearch {
			return
		}
		if fit(cands[i], 1) {
			walk(i+1, n+1)
		}
		fit(cands[i], -1)
		walk(i+1, n)
	}
	walk(0, 0)
	return best
}

// scratch is a copy of the counter sets some devices draw on, for a
// search to take their consumptions from and give them back.
type scratch map[string]map[string]int64

// scratchFor copies from the counter sets devs consume from.
func scratchFor(devs []*resourceapi.Device, from map[string]map[string]int64) scratch {
	s := scratch{}
	for _, d := range devs {
		for _, c := range d.ConsumesCounters {
			if _, ok := s[c.CounterSet]; !ok {
				s[c.CounterSet] = maps.Clone(from[c.CounterSet])
			}
		}
	}
	return s
}

// take takes d's consumption (sign 1) or gives it back (-1); false when
// a counter is then below zero.
func (s scratch) take(d *resourceapi.Device, sign int64) bool {
	ok := true
	for _, c := range d.ConsumesCounters {
		for name, v := range c.Counters {
			s[c.CounterSet][name] -= sign * v.Value.Value()
			if s[c.CounterSet][name] < 0 {
				ok = false
			}
		}
	}
	return ok
}

func unschedulable(d *resourceapi.Device) bool {
	return slices.ContainsFunc(d.Taints, func(t resourceapi.DeviceTaint) bool {
		return t.Effect == resourceapi.DeviceTaintEffectNoSchedule || t.Effect == resourceapi.DeviceTaintEffectNoExecute
	})
}

// counterSetOf is the first counter set the device consumes from; ""
// for none. migflex's devices consume from their GPU's set only.
func counterSetOf(d *resourceapi.Device) string {
	if len(d.ConsumesCounters) == 0 {
		return ""
	}
	return d.ConsumesCounters[0].CounterSet
}

// attribute is a string attribute of our driver's, named with or without
// the driver's domain; "" when absent.
func attribute(d *resourceapi.Device, name string) string {
	if a, ok := d.Attributes[resourceapi.QualifiedName(name)]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	if a, ok := d.Attributes[resourceapi.QualifiedName(DRADriver+"/"+name)]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}

// placement is a MIG device's first memory slice and their number, from
// its memorySlice<i> capacities; 0, 0 for a whole GPU.
func placement(d *resourceapi.Device) (start, size int) {
	start = -1
	for name := range d.Capacity {
		i, err := strconv.Atoi(strings.TrimPrefix(strings.TrimPrefix(string(name), DRADriver+"/"), draCapMemorySlice))
		if err != nil || !strings.Contains(string(name), draCapMemorySlice) {
			continue
		}
		if start < 0 || i < start {
			start = i
		}
		size++
	}
	return max(start, 0), size
}
