package dra

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/migflex/migflex/internal/domain/mig"
)

// Counter names of a GPU's counter set in dynamic mode. Each is a DNS
// label, as the API requires of counter names.
const (
	// CounterMemorySlicePrefix followed by i is memory slice i of the GPU,
	// capacity 1: a device consumes the slices its placement covers, so
	// two overlapping placements can never both be allocated.
	CounterMemorySlicePrefix = "memory-slice-"
	// CounterComputeSlices is the GPU's compute slices (7 on A100..B200).
	CounterComputeSlices = "compute-slices"
	// The media engines, where the GPU has any: the most any profile
	// gets (the whole-GPU one, or a +me.all one), as NVML shares them out.
	CounterDecoders    = "decoders"
	CounterEncoders    = "encoders"
	CounterJPEGEngines = "jpeg-engines"
	CounterOFAEngines  = "ofa-engines"
	// CounterAllMedia keeps an +me.all instance alone with -me ones, as
	// nvml.h says of the _ALL_ME profiles: its capacity is the number of
	// memory slices (more instances never fit), an +me.all device takes
	// all of it and any other device with media engines one. Published
	// only where the engine counters alone would let such a pair fit.
	CounterAllMedia = "all-media"
)

// counterInstances names the counter that holds a profile to its NVML
// instance count; published only where the other counters would let more
// instances fit than NVML allows.
func counterInstances(p mig.Profile) string {
	return fmt.Sprintf("profile-%d-instances", p.ID)
}

// CounterSetName is the name of a GPU's counter set: one per GPU, unique in
// the node's pool because the minor is.
func CounterSetName(minor int) string { return fmt.Sprintf("gpu-%d-counters", minor) }

// Offer is what dynamic mode publishes for one GPU: its counter set and
// every device that could be made on it. A GPU with MIG off, or without
// MIG, is offered whole and has no counters.
type Offer struct {
	GPUIndex int
	GPUUUID  string
	// CounterSet is the counter set's name; empty when the GPU is offered
	// whole only.
	CounterSet string
	// Counters are the counters and their capacities.
	Counters map[string]int64
	// Devices are the GPU's devices in publishing order (see Offers).
	Devices []OfferedDevice
}

// OfferedDevice is a device of an Offer: a MIG placement that does not
// exist yet (no UUID), or the whole GPU, and what it takes from the
// GPU's counters.
type OfferedDevice struct {
	Device
	// Consumes maps counter names to the amount the device takes; empty
	// for a GPU offered whole only.
	Consumes map[string]int64
}

// Offers returns what dynamic mode publishes for each GPU, ordered by GPU
// index. For a GPU with MIG on, every profile it supports at every valid
// placement is a device, named as static mode names the instance it would
// be (so a claim names the same thing in both modes), and the whole GPU is
// one more, consuming every counter in full. The counters are chosen so
// that a set of devices fits them exactly when NVML could create those
// instances together: memory slices by position, compute slices, media
// engines, and the two rules the others do not imply on every model (a
// profile's instance count, +me.all alone with -me) where they would
// otherwise be broken.
//
// The MIG devices come profile by profile, in the GPU's profile order, and
// each profile's from the highest placement down: the scheduler takes the
// first device that fits, and the high memory slices are the ones only
// small profiles can use, so first fit then leaves the low placements that
// large profiles need.
//
// It fails, with no partial result, on a GPU it cannot describe: no UUID,
// a profile without placements, memory slices or compute slices, more
// counters than the API allows in a set, two devices with one name.
func Offers(gpus []mig.GPU) ([]Offer, error) {
	gpus = slices.Clone(gpus)
	slices.SortStableFunc(gpus, func(a, b mig.GPU) int { return a.Index - b.Index })
	out := make([]Offer, 0, len(gpus))
	names := map[string]string{}
	for i := range gpus {
		o, err := offer(&gpus[i])
		if err != nil {
			return nil, err
		}
		for _, d := range o.Devices {
			if errs := validation.IsDNS1123Label(d.Name); len(errs) > 0 {
				return nil, fmt.Errorf("%s: device name %q: %s", d.describeOffered(), d.Name, strings.Join(errs, "; "))
			}
			if other, ok := names[d.Name]; ok {
				return nil, fmt.Errorf("%s: device name %q is also the name of %s", d.describeOffered(), d.Name, other)
			}
			names[d.Name] = d.describeOffered()
		}
		out = append(out, o)
	}
	return out, nil
}

func (d OfferedDevice) describeOffered() string {
	if d.MIG {
		return fmt.Sprintf("GPU %d %s at %d", d.GPUIndex, d.Profile, d.Start)
	}
	return fmt.Sprintf("GPU %d", d.GPUIndex)
}

func offer(g *mig.GPU) (Offer, error) {
	if g.UUID == "" {
		return Offer{}, fmt.Errorf("GPU %d has no UUID", g.Index)
	}
	whole := OfferedDevice{Device: Device{
		Name: fmt.Sprintf("gpu-%d", g.Minor), UUID: g.UUID,
		GPUIndex: g.Index, GPUUUID: g.UUID, Minor: g.Minor, Model: g.Model,
		MemoryMB: g.MemoryMiB,
	}}
	o := Offer{GPUIndex: g.Index, GPUUUID: g.UUID}
	if !g.MigEnabled || len(g.Profiles) == 0 {
		o.Devices = []OfferedDevice{whole}
		return o, nil
	}
	counters, err := gpuCounters(g)
	if err != nil {
		return Offer{}, err
	}
	o.CounterSet, o.Counters = CounterSetName(g.Minor), counters
	for _, p := range g.Profiles {
		starts := slices.Clone(p.Placements)
		slices.Sort(starts)
		slices.Reverse(starts)
		for _, start := range starts {
			o.Devices = append(o.Devices, OfferedDevice{
				Device: Device{
					Name: migDeviceName(g.Minor, p.Name, p.ID, start),
					MIG:  true, Profile: p.Name, ProfileID: p.ID,
					GPUIndex: g.Index, GPUUUID: g.UUID, Minor: g.Minor, Model: g.Model,
					Start: start, Size: p.MemorySlices,
					MemoryMB: p.MemoryMiB, SMs: p.SMs, Engines: p.Engines,
				},
				Consumes: consumption(p, start, counters),
			})
		}
	}
	whole.Consumes = maps.Clone(counters)
	o.Devices = append(o.Devices, whole)
	return o, nil
}

// gpuCounters is a MIG GPU's counter set: its memory slices, compute
// slices and media engines, plus the instance-count and all-media
// counters where the GPU's table needs them.
func gpuCounters(g *mig.GPU) (map[string]int64, error) {
	memory, compute := 0, 0
	for _, p := range g.Profiles {
		if len(p.Placements) == 0 || p.MemorySlices <= 0 || p.Slices <= 0 {
			return nil, fmt.Errorf("GPU %d: profile %s has no placement, memory slices or compute slices", g.Index, p.Name)
		}
		for _, s := range p.Placements {
			if s < 0 {
				return nil, fmt.Errorf("GPU %d: profile %s has placement %d", g.Index, p.Name, s)
			}
			memory = max(memory, s+p.MemorySlices)
		}
		compute = max(compute, p.Slices)
	}
	// Memory slices are a 64-bit mask below; the API's limit on counters
	// is checked at the end.
	if memory > 64 {
		return nil, fmt.Errorf("GPU %d has %d memory slices, more than dynamic mode can offer", g.Index, memory)
	}
	c := map[string]int64{CounterComputeSlices: int64(compute)}
	for i := range memory {
		c[CounterMemorySlicePrefix+strconv.Itoa(i)] = 1
	}
	for name, n := range mediaCounters(g.MediaLimits()) {
		if n > 0 {
			c[name] = int64(n)
		}
	}
	geo := geometry{memory: memory, compute: compute, media: g.MediaLimits()}
	for _, p := range g.Profiles {
		if p.MaxCount < geo.mostAlone(p) {
			c[counterInstances(p)] = int64(p.MaxCount)
		}
	}
	if geo.allMediaShared(g.Profiles) {
		c[CounterAllMedia] = int64(memory)
	}
	if len(c) > resourceapi.ResourceSliceMaxCountersPerCounterSet {
		return nil, fmt.Errorf("GPU %d needs %d counters, more than the API's %d per counter set", g.Index, len(c), resourceapi.ResourceSliceMaxCountersPerCounterSet)
	}
	return c, nil
}

func mediaCounters(e mig.Engines) map[string]int {
	return map[string]int{CounterDecoders: e.Decoders, CounterEncoders: e.Encoders, CounterJPEGEngines: e.JPEGs, CounterOFAEngines: e.OFAs}
}

// consumption is what an instance of p at start takes from counters.
func consumption(p mig.Profile, start int, counters map[string]int64) map[string]int64 {
	c := map[string]int64{CounterComputeSlices: int64(p.Slices)}
	for i := start; i < start+p.MemorySlices; i++ {
		c[CounterMemorySlicePrefix+strconv.Itoa(i)] = 1
	}
	for name, n := range mediaCounters(p.Engines) {
		if n > 0 {
			c[name] = int64(n)
		}
	}
	if _, ok := counters[counterInstances(p)]; ok {
		c[counterInstances(p)] = 1
	}
	if total, ok := counters[CounterAllMedia]; ok {
		switch {
		case mig.MediaOf(p.Query) == mig.AllMedia:
			c[CounterAllMedia] = total
		case mig.MediaOf(p.Query) == mig.SomeMedia:
			c[CounterAllMedia] = 1
		}
	}
	return c
}

// geometry is what the always-published counters hold a GPU to.
type geometry struct {
	memory, compute int
	media           mig.Engines
}

// mostAlone is how many instances of p the memory, compute and media
// counters let fit on an empty GPU: the most placements of p that do not
// overlap (all have one size, so taking each that starts after the last
// one taken ends, lowest first, is the most), capped by compute slices and
// media engines.
func (geo geometry) mostAlone(p mig.Profile) int {
	starts := slices.Sorted(slices.Values(p.Placements))
	best, free := 0, 0
	for _, s := range starts {
		if s >= free {
			best++
			free = s + p.MemorySlices
		}
	}
	best = min(best, geo.compute/p.Slices)
	limits := mediaCounters(geo.media)
	for name, n := range mediaCounters(p.Engines) {
		if n > 0 {
			best = min(best, limits[name]/n)
		}
	}
	return best
}

// allMediaShared reports whether the memory, compute and media counters
// would let an +me.all instance share the GPU with another instance that
// has media engines (an +me.all or an ordinary one), which NVML refuses.
// Pairs suffice: a larger set that breaks the rule holds such a pair.
func (geo geometry) allMediaShared(profiles []mig.Profile) bool {
	for _, a := range profiles {
		if mig.MediaOf(a.Query) != mig.AllMedia {
			continue
		}
		for _, b := range profiles {
			if mig.MediaOf(b.Query) == mig.NoMedia {
				continue
			}
			if a.Slices+b.Slices > geo.compute || !a.Engines.Plus(b.Engines).MediaWithin(geo.media) {
				continue
			}
			if a.ID == b.ID && a.MaxCount < 2 {
				continue
			}
			for _, sa := range a.Placements {
				for _, sb := range b.Placements {
					if sliceMask(sa, a.MemorySlices)&sliceMask(sb, b.MemorySlices) == 0 {
						return true
					}
				}
			}
		}
	}
	return false
}

func sliceMask(start, size int) uint64 {
	if size >= 64 {
		return ^uint64(0) << start
	}
	return ((uint64(1) << size) - 1) << start
}

// DynamicResources is the node's one pool, named pool, in dynamic mode, in
// the shape resource.k8s.io/v1 requires from 1.35 on: a slice holds
// counter sets or devices, never both. The counter sets come first, by GPU
// index, at most ResourceSliceMaxCounterSets (8) to a slice; then the
// devices, the offers' GPUs in the offers' order (Steer's), at most MaxDevicesPerSlice (64, the API's limit once a
// device consumes counters) to a slice, and no GPU split across two unless
// it alone has more. A node without GPUs publishes one empty slice.
//
// unhealthy maps GPU UUIDs to their fault: every device of that GPU is
// tainted, or left out (its counter set stays) under UnhealthyWithdraw.
func DynamicResources(pool string, offers []Offer, unhealthy map[string]Fault, policy UnhealthyPolicy) (resourceslice.DriverResources, error) {
	if pool == "" {
		return resourceslice.DriverResources{}, fmt.Errorf("no pool name (the node's name)")
	}
	if policy != UnhealthyTaint && policy != UnhealthyWithdraw {
		return resourceslice.DriverResources{}, fmt.Errorf("unknown unhealthy-device policy %q", policy)
	}
	var out []resourceslice.Slice
	var sets []resourceapi.CounterSet
	// The counter sets by GPU index, whatever the devices' order (Steer
	// reorders the GPUs): a steered republication then leaves the
	// counters' slice as it was.
	byIndex := slices.SortedStableFunc(slices.Values(offers), func(a, b Offer) int { return a.GPUIndex - b.GPUIndex })
	for _, o := range byIndex {
		if o.CounterSet == "" {
			continue
		}
		cs := resourceapi.CounterSet{Name: o.CounterSet, Counters: make(map[string]resourceapi.Counter, len(o.Counters))}
		for name, n := range o.Counters {
			cs.Counters[name] = resourceapi.Counter{Value: *resource.NewQuantity(n, resource.DecimalSI)}
		}
		sets = append(sets, cs)
	}
	for chunk := range slices.Chunk(sets, resourceapi.ResourceSliceMaxCounterSets) {
		out = append(out, resourceslice.Slice{SharedCounters: chunk})
	}
	var devices []resourceapi.Device
	flush := func() {
		if len(devices) > 0 {
			out = append(out, resourceslice.Slice{Devices: devices})
			devices = nil
		}
	}
	for _, o := range offers {
		f, bad := unhealthy[o.GPUUUID]
		if bad && policy == UnhealthyWithdraw {
			continue
		}
		if len(devices)+len(o.Devices) > MaxDevicesPerSlice {
			flush()
		}
		for _, d := range o.Devices {
			if len(devices) == MaxDevicesPerSlice {
				flush()
			}
			ad := APIDevice(d.Device)
			if len(d.Consumes) > 0 {
				counters := make(map[string]resourceapi.Counter, len(d.Consumes))
				for name, n := range d.Consumes {
					counters[name] = resourceapi.Counter{Value: *resource.NewQuantity(n, resource.DecimalSI)}
				}
				ad.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: o.CounterSet, Counters: counters}}
			}
			if bad {
				ad.Taints = []resourceapi.DeviceTaint{taint(f)}
			}
			devices = append(devices, ad)
		}
	}
	flush()
	if len(out) == 0 {
		out = []resourceslice.Slice{{}}
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{pool: {Slices: out}}}, nil
}
