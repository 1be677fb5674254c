package dra

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/migconfig"
)

func memorySliceCounters(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = CounterMemorySlicePrefix + strconv.Itoa(i)
	}
	return out
}

// Per model, the devices one GPU with MIG on offers (every profile at
// every placement, and the whole GPU) and its counters.
func TestOffersPerModel(t *testing.T) {
	sevenSlice := 7 + 7 + 4 + 3 + 2 + 1 + 1 + 1 // 1g, 1g+me, 1g two slices, 2g, 3g, 4g, 7g, whole
	tests := []struct {
		model    string
		devices  int
		counters map[string]int64 // besides the memory slices
		memory   int
	}{
		{"A100-SXM4-40GB", sevenSlice, map[string]int64{CounterComputeSlices: 7, CounterDecoders: 5, CounterJPEGEngines: 1, CounterOFAEngines: 1}, 8},
		{"A100-SXM4-80GB", sevenSlice, map[string]int64{CounterComputeSlices: 7, CounterDecoders: 5, CounterJPEGEngines: 1, CounterOFAEngines: 1}, 8},
		{"H100-SXM5-80GB", sevenSlice, map[string]int64{CounterComputeSlices: 7, CounterDecoders: 7, CounterJPEGEngines: 7, CounterOFAEngines: 1}, 8},
		{"H200-SXM-141GB", sevenSlice, map[string]int64{CounterComputeSlices: 7, CounterDecoders: 7, CounterJPEGEngines: 7, CounterOFAEngines: 1}, 8},
		{"B200-180GB", sevenSlice, map[string]int64{CounterComputeSlices: 7, CounterDecoders: 7, CounterJPEGEngines: 7, CounterOFAEngines: 1}, 8},
		{"A30-24GB", 4 + 4 + 2 + 2 + 1 + 1, map[string]int64{CounterComputeSlices: 4, CounterDecoders: 4, CounterJPEGEngines: 1, CounterOFAEngines: 1}, 4},
		{"RTX-PRO-6000-Server-96GB", 5*4 + 4*2 + 2*1 + 1, map[string]int64{CounterComputeSlices: 4, CounterDecoders: 4, CounterEncoders: 4, CounterJPEGEngines: 4, CounterOFAEngines: 1}, 12},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			offers, err := Offers([]mig.GPU{gpu(t, 0, tt.model)})
			if err != nil {
				t.Fatal(err)
			}
			o := offers[0]
			if len(o.Devices) != tt.devices {
				t.Errorf("%d devices, want %d", len(o.Devices), tt.devices)
			}
			want := maps.Clone(tt.counters)
			for _, name := range memorySliceCounters(tt.memory) {
				want[name] = 1
			}
			if diff := cmp.Diff(want, o.Counters); diff != "" {
				t.Errorf("counters (-want,+got):\n%s", diff)
			}
			if o.CounterSet != "gpu-0-counters" {
				t.Errorf("counter set %q", o.CounterSet)
			}
			last := o.Devices[len(o.Devices)-1]
			if last.Name != "gpu-0" || last.MIG || !maps.Equal(last.Consumes, o.Counters) {
				t.Errorf("last device %s (MIG %v) consumes %v; want the whole GPU consuming every counter", last.Name, last.MIG, last.Consumes)
			}
		})
	}
}

// Every built-in model: each profile at each placement is offered once,
// the devices of a profile from the highest placement down, and a device
// consumes the memory slices of its placement, its compute slices and its
// media engines.
func TestOffersEveryPlacement(t *testing.T) {
	for _, m := range gpumodel.Builtin() {
		t.Run(m.Name, func(t *testing.T) {
			g := gpu(t, 0, m.Name)
			offers, err := Offers([]mig.GPU{g})
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, p := range g.Profiles {
				starts := slices.Sorted(slices.Values(p.Placements))
				slices.Reverse(starts)
				for _, s := range starts {
					want = append(want, fmt.Sprintf("%s@%d", p.Name, s))
				}
			}
			var got []string
			for _, d := range offers[0].Devices {
				if !d.MIG {
					continue
				}
				got = append(got, fmt.Sprintf("%s@%d", d.Profile, d.Start))
				p, _ := g.Profile(d.Profile)
				for i := range offers[0].Counters {
					if !strings.HasPrefix(i, CounterMemorySlicePrefix) {
						continue
					}
					slice, _ := strconv.Atoi(strings.TrimPrefix(i, CounterMemorySlicePrefix))
					inside := slice >= d.Start && slice < d.Start+p.MemorySlices
					if _, ok := d.Consumes[i]; ok != inside {
						t.Errorf("%s consumes %s: %v, want %v", d.Name, i, ok, inside)
					}
				}
				if d.Consumes[CounterComputeSlices] != int64(p.Slices) || d.Consumes[CounterDecoders] != int64(p.Engines.Decoders) {
					t.Errorf("%s consumes %v", d.Name, d.Consumes)
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("placements offered (-want,+got):\n%s", diff)
			}
		})
	}
}

// A claim names the same thing in both modes: the device dynamic mode
// offers at a placement has the name, attributes and capacities static
// mode publishes once the instance exists there, but for the UUID it does
// not have yet. The whole GPU is the same device as static mode's with MIG
// off.
func TestOffersNameWhatStaticModeNames(t *testing.T) {
	for _, m := range gpumodel.Builtin() {
		t.Run(m.Name, func(t *testing.T) {
			g := withMinor(gpu(t, 2, m.Name), 5)
			offers, err := Offers([]mig.GPU{g})
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range offers[0].Devices {
				var static mig.GPU
				if d.MIG {
					static = withMinor(gpu(t, 2, m.Name, fmt.Sprintf("%s@%d", d.Profile, d.Start)), 5)
				} else {
					static = g
					static.MigEnabled = false
				}
				devs, err := Devices([]mig.GPU{static})
				if err != nil {
					t.Fatal(err)
				}
				want := APIDevice(devs[0])
				if d.MIG {
					delete(want.Attributes, AttrUUID)
				}
				if diff := cmp.Diff(want, APIDevice(d.Device)); diff != "" {
					t.Errorf("%s@%d: static (-) and dynamic (+) differ:\n%s", d.Profile, d.Start, diff)
				}
			}
		})
	}
}

func TestOffersWholeOnly(t *testing.T) {
	a100 := gpu(t, 0, "A100-SXM4-40GB")
	off := wholeGPU(t, 1, "H100-SXM5-80GB")
	noMIG := mig.GPU{Index: 2, Minor: 2, UUID: "GPU-2", Model: "NVIDIA L4", MemoryMiB: 23034}
	offers, err := Offers([]mig.GPU{noMIG, off, a100})
	if err != nil {
		t.Fatal(err)
	}
	if len(offers) != 3 || offers[0].GPUIndex != 0 || offers[2].GPUIndex != 2 {
		t.Fatalf("offers not one per GPU by index: %+v", offers)
	}
	for _, o := range offers[1:] {
		if o.CounterSet != "" || o.Counters != nil || len(o.Devices) != 1 {
			t.Errorf("GPU %d: counter set %q, %d devices; want the whole GPU alone", o.GPUIndex, o.CounterSet, len(o.Devices))
			continue
		}
		d := o.Devices[0]
		if d.MIG || d.Name != fmt.Sprintf("gpu-%d", o.GPUIndex) || d.UUID != o.GPUUUID || d.Consumes != nil {
			t.Errorf("GPU %d: device %+v", o.GPUIndex, d)
		}
	}
}

func TestOffersErrors(t *testing.T) {
	noUUID := gpu(t, 0, "A100-SXM4-40GB")
	noUUID.UUID = ""
	noPlacement := gpu(t, 0, "A100-SXM4-40GB")
	noPlacement.Profiles[0].Placements = nil
	// 40 memory slices: more counters than the API's 32 in a set.
	wide := gpu(t, 0, "A100-SXM4-40GB")
	wide.Profiles[0].Placements = nil
	for s := range 40 {
		wide.Profiles[0].Placements = append(wide.Profiles[0].Placements, s)
	}
	tests := []struct {
		name string
		gpus []mig.GPU
		want string
	}{
		{"no UUID", []mig.GPU{noUUID}, "GPU 0 has no UUID"},
		{"a profile without placements", []mig.GPU{noPlacement}, "has no placement"},
		{"more counters than a set holds", []mig.GPU{wide}, "GPU 0 needs 44 counters, more than the API's 32 per counter set"},
		{"two GPUs with one minor", []mig.GPU{gpu(t, 0, "A30-24GB"), withMinor(gpu(t, 1, "A30-24GB"), 0)}, `device name "gpu-0-mig-1g6gb-14-3" is also the name of GPU 0`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Offers(tt.gpus); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to say %q", err, tt.want)
			}
		})
	}
}

// fits reports whether the devices' counters together stay within
// the GPU's.
func fits(counters map[string]int64, devs []OfferedDevice) bool {
	used := map[string]int64{}
	for _, d := range devs {
		for name, n := range d.Consumes {
			used[name] += n
			if used[name] > counters[name] {
				return false
			}
		}
	}
	return true
}

// creatable reports whether NVML could create the MIG devices together,
// as the config engine's validation decides for a layout of pinned
// placements: valid starts, no overlap, each profile's instance count,
// compute slices, media engines, +me.all beside -me only.
func creatable(t *testing.T, g mig.GPU, devs []OfferedDevice) bool {
	t.Helper()
	entry := migconfig.Entry{Devices: []int{g.Index}, MigEnabled: true}
	for _, d := range devs {
		entry.Placements = append(entry.Placements, migconfig.Placement{Profile: d.Profile, Start: d.Start, Size: d.Size})
	}
	_, err := migconfig.Validate(migconfig.Config{Name: "t", Entries: []migconfig.Entry{entry}}, []mig.GPU{g})
	return err == nil
}

// checkCountersExact walks every set of g's MIG devices whose counters fit
// (each once, in index order) and checks that NVML could create it, and
// that each device a set could be extended with fits the counters exactly
// when NVML could create the larger set. Both families are closed under
// taking subsets, so this proves them equal: the scheduler can allocate
// any set NVML can create, and no other. It returns the sets walked.
func checkCountersExact(t *testing.T, g mig.GPU) int {
	t.Helper()
	offers, err := Offers([]mig.GPU{g})
	if err != nil {
		t.Fatal(err)
	}
	o := offers[0]
	var migDevs []OfferedDevice
	for _, d := range o.Devices {
		if d.MIG {
			migDevs = append(migDevs, d)
		}
	}
	sets, failures := 0, 0
	var walk func(set []OfferedDevice, next int)
	walk = func(set []OfferedDevice, next int) {
		sets++
		for i := next; i < len(migDevs) && failures < 5; i++ {
			bigger := append(slices.Clip(set), migDevs[i])
			f, c := fits(o.Counters, bigger), creatable(t, g, bigger)
			if f != c {
				failures++
				t.Errorf("%s: counters fit %v, NVML could create %v: %s", g.Model, f, c, describeSet(bigger))
				continue
			}
			if f {
				walk(bigger, i+1)
			}
		}
	}
	walk(nil, 0)

	// The whole GPU fits alone, and with no other device.
	whole := o.Devices[len(o.Devices)-1]
	if !fits(o.Counters, []OfferedDevice{whole}) {
		t.Errorf("%s: the whole GPU does not fit its own counters", g.Model)
	}
	for _, d := range migDevs {
		if fits(o.Counters, []OfferedDevice{whole, d}) {
			t.Errorf("%s: the whole GPU fits beside %s", g.Model, d.Name)
		}
	}
	return sets
}

func describeSet(devs []OfferedDevice) string {
	parts := make([]string, len(devs))
	for i, d := range devs {
		parts[i] = fmt.Sprintf("%s@%d", d.Profile, d.Start)
	}
	return strings.Join(parts, " ")
}

// For every built-in model, a set of devices fits the counters exactly
// when NVML could create those instances together.
func TestCountersAreExactlyNVMLsRules(t *testing.T) {
	for _, m := range gpumodel.Builtin() {
		t.Run(m.Name, func(t *testing.T) {
			sets := checkCountersExact(t, gpu(t, 0, m.Name))
			t.Logf("%d sets of devices fit the counters", sets)
		})
	}
}

// Tables where a rule binds that binds on no built-in model: compute
// slices before memory slices, and where memory, compute and media
// counters are not enough, the extra counters, published only there.
func TestCountersForRulesTheOthersMiss(t *testing.T) {
	tests := []struct {
		name   string
		model  string
		change func(g *mig.GPU)
		extra  string // the counter the change needs
	}{
		{
			// Memory and compute let seven 1g.5gb fit; the table allows 3.
			name:  "an instance count below what fits",
			model: "A100-SXM4-40GB",
			change: func(g *mig.GPU) {
				for i := range g.Profiles {
					if g.Profiles[i].Name == "1g.5gb" {
						g.Profiles[i].MaxCount = 3
					}
				}
			},
			extra: "profile-19-instances",
		},
		{
			// Four 1g.10gb fit the memory slices but, at two compute slices
			// each, not the seven compute slices. No built-in table has a
			// profile that compute slices alone hold back.
			name:  "compute slices short before memory slices",
			model: "A100-SXM4-80GB",
			change: func(g *mig.GPU) {
				for i := range g.Profiles {
					if g.Profiles[i].Name == "1g.20gb" {
						g.Profiles[i].Slices = 2
					}
				}
			},
			extra: CounterComputeSlices,
		},
		{
			// Without media engines 1g.24gb no longer collides with
			// 1g.24gb+me.all through the decoders; nvml.h still forbids it.
			name:  "+me.all beside a profile with no engines counted",
			model: "RTX-PRO-6000-Server-96GB",
			change: func(g *mig.GPU) {
				for i := range g.Profiles {
					if mig.MediaOf(g.Profiles[i].Query) == mig.SomeMedia {
						g.Profiles[i].Engines = mig.Engines{CopyEngines: g.Profiles[i].Engines.CopyEngines}
					}
				}
			},
			extra: CounterAllMedia,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := gpu(t, 0, tt.model)
			tt.change(&g)
			offers, err := Offers([]mig.GPU{g})
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := offers[0].Counters[tt.extra]; !ok {
				t.Errorf("no counter %s in %v", tt.extra, slices.Sorted(maps.Keys(offers[0].Counters)))
			}
			checkCountersExact(t, g)
		})
	}
	// No built-in model needs them.
	for _, m := range gpumodel.Builtin() {
		offers, err := Offers([]mig.GPU{gpu(t, 0, m.Name)})
		if err != nil {
			t.Fatal(err)
		}
		for name := range offers[0].Counters {
			if strings.HasSuffix(name, "-instances") || name == CounterAllMedia {
				t.Errorf("%s: counter %s", m.Name, name)
			}
		}
	}
}

// An 8-GPU node of every built-in model: the counter sets in a slice of
// their own, the devices in slices of at most 64, none over the API's
// limits, every device's counters in its GPU's set.
func TestDynamicResourcesEightGPUs(t *testing.T) {
	tests := []struct {
		model  string
		slices int // counters-only slices first, then devices
	}{
		{"A100-SXM4-40GB", 1 + 4}, // 26 devices a GPU, two GPUs a slice
		{"H200-SXM-141GB", 1 + 4},
		{"B200-180GB", 1 + 4},
		{"A30-24GB", 1 + 2}, // 14 a GPU, four a slice
		{"RTX-PRO-6000-Server-96GB", 1 + 4},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			res := eightGPUs(t, tt.model)
			got := res.Pools["node"].Slices
			if len(got) != tt.slices {
				t.Errorf("%d slices, want %d", len(got), tt.slices)
			}
			if len(got[0].SharedCounters) != 8 || len(got[0].Devices) != 0 {
				t.Errorf("first slice: %d counter sets, %d devices; want the 8 counter sets alone", len(got[0].SharedCounters), len(got[0].Devices))
			}
			checkAPILimits(t, got)
		})
	}
}

func eightGPUs(t *testing.T, model string) resourceslice.DriverResources {
	t.Helper()
	var gpus []mig.GPU
	for i := range 8 {
		gpus = append(gpus, gpu(t, i, model))
	}
	offers, err := Offers(gpus)
	if err != nil {
		t.Fatal(err)
	}
	r, err := DynamicResources("node", offers, nil, UnhealthyTaint)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// checkAPILimits checks slices against resource.k8s.io/v1's limits
// (k8s.io/api/resource/v1 types.go) and the pool-wide rules the
// ResourceSlice controller checks: counter sets and devices unique, each
// consumed counter in the set named.
func checkAPILimits(t *testing.T, slicesOf []resourceslice.Slice) {
	t.Helper()
	sets := map[string]resourceapi.CounterSet{}
	for i, s := range slicesOf {
		if len(s.SharedCounters) > 0 && len(s.Devices) > 0 {
			t.Errorf("slice %d has counters and devices", i)
		}
		if len(s.SharedCounters) > resourceapi.ResourceSliceMaxCounterSets {
			t.Errorf("slice %d: %d counter sets", i, len(s.SharedCounters))
		}
		for _, cs := range s.SharedCounters {
			if _, dup := sets[cs.Name]; dup {
				t.Errorf("counter set %s twice", cs.Name)
			}
			sets[cs.Name] = cs
			if len(cs.Counters) > resourceapi.ResourceSliceMaxCountersPerCounterSet {
				t.Errorf("counter set %s: %d counters", cs.Name, len(cs.Counters))
			}
		}
	}
	names := map[string]bool{}
	for i, s := range slicesOf {
		if len(s.Devices) > resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures {
			t.Errorf("slice %d: %d devices", i, len(s.Devices))
		}
		for _, d := range s.Devices {
			if names[d.Name] {
				t.Errorf("device %s twice", d.Name)
			}
			names[d.Name] = true
			if n := len(d.Attributes) + len(d.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
				t.Errorf("%s: %d attributes and capacities", d.Name, n)
			}
			if len(d.ConsumesCounters) > resourceapi.ResourceSliceMaxDeviceCounterConsumptionsPerDevice {
				t.Errorf("%s: %d counter consumptions", d.Name, len(d.ConsumesCounters))
			}
			for _, c := range d.ConsumesCounters {
				if len(c.Counters) > resourceapi.ResourceSliceMaxCountersPerDeviceCounterConsumption {
					t.Errorf("%s: %d counters consumed", d.Name, len(c.Counters))
				}
				cs, ok := sets[c.CounterSet]
				if !ok {
					t.Errorf("%s: counter set %s not published", d.Name, c.CounterSet)
					continue
				}
				for name := range c.Counters {
					if _, ok := cs.Counters[name]; !ok {
						t.Errorf("%s: counter %s not in %s", d.Name, name, c.CounterSet)
					}
				}
			}
		}
	}
}

func TestDynamicResourcesMixedAndUnhealthy(t *testing.T) {
	gpus := []mig.GPU{gpu(t, 0, "A30-24GB"), wholeGPU(t, 1, "A30-24GB"), gpu(t, 2, "A30-24GB")}
	offers, err := Offers(gpus)
	if err != nil {
		t.Fatal(err)
	}
	type summary struct {
		Sets    []string
		Devices []string // name, and :taint or +counters
	}
	sum := func(r resourceslice.DriverResources) (out []summary) {
		for _, s := range r.Pools["n"].Slices {
			var x summary
			for _, cs := range s.SharedCounters {
				x.Sets = append(x.Sets, cs.Name)
			}
			for _, d := range s.Devices {
				if !strings.HasSuffix(d.Name, "-0") && strings.Contains(d.Name, "-mig-") {
					continue // placements above 0: enough to see the order
				}
				desc := d.Name
				for _, c := range d.ConsumesCounters {
					desc += "+" + c.CounterSet
				}
				for _, tn := range d.Taints {
					desc += ":" + tn.Key
				}
				x.Devices = append(x.Devices, desc)
			}
			out = append(out, x)
		}
		return out
	}
	mig0 := func(gpu int, taint string) []string {
		var out []string
		for _, p := range []string{"1g6gb-14", "2g12gb-5", "4g24gb-0", "1g6gb-me-21", "2g12gb-me-6"} { // the model's profile order
			out = append(out, fmt.Sprintf("gpu-%d-mig-%s-0+gpu-%d-counters%s", gpu, p, gpu, taint))
		}
		return append(out, fmt.Sprintf("gpu-%d+gpu-%d-counters%s", gpu, gpu, taint))
	}
	tests := []struct {
		name      string
		unhealthy map[string]Fault
		policy    UnhealthyPolicy
		want      []summary
	}{
		{
			name:   "healthy",
			policy: UnhealthyTaint,
			want: []summary{
				{Sets: []string{"gpu-0-counters", "gpu-2-counters"}},
				{Devices: append(append(mig0(0, ""), "gpu-1"), mig0(2, "")...)},
			},
		},
		{
			name:      "GPU 2 tainted",
			unhealthy: map[string]Fault{"GPU-2": {Xid: 79}},
			policy:    UnhealthyTaint,
			want: []summary{
				{Sets: []string{"gpu-0-counters", "gpu-2-counters"}},
				{Devices: append(append(mig0(0, ""), "gpu-1"), mig0(2, ":"+TaintXid)...)},
			},
		},
		{
			name:      "GPU 0 withdrawn, its counters kept",
			unhealthy: map[string]Fault{"GPU-0": {}},
			policy:    UnhealthyWithdraw,
			want: []summary{
				{Sets: []string{"gpu-0-counters", "gpu-2-counters"}},
				{Devices: append([]string{"gpu-1"}, mig0(2, "")...)},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := DynamicResources("n", offers, tt.unhealthy, tt.policy)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, sum(r)); diff != "" {
				t.Errorf("(-want,+got):\n%s", diff)
			}
		})
	}
}

func TestDynamicResourcesSlicing(t *testing.T) {
	offer := func(gpu, devices int, counters bool) Offer {
		o := Offer{GPUIndex: gpu, GPUUUID: fmt.Sprintf("GPU-%d", gpu)}
		if counters {
			o.CounterSet, o.Counters = CounterSetName(gpu), map[string]int64{CounterComputeSlices: 1}
		}
		for i := range devices {
			d := OfferedDevice{Device: Device{Name: fmt.Sprintf("d-%d-%d", gpu, i)}}
			if counters {
				d.Consumes = map[string]int64{CounterComputeSlices: 1}
			}
			o.Devices = append(o.Devices, d)
		}
		return o
	}
	tests := []struct {
		name   string
		offers []Offer
		want   []string // per slice: "c<sets>" or "d<devices>"
	}{
		{"no GPUs: one empty slice", nil, []string{"d0"}},
		{"whole GPUs only: no counter slice", []Offer{offer(0, 1, false), offer(1, 1, false)}, []string{"d2"}},
		{"GPUs kept whole in a slice", []Offer{offer(0, 30, true), offer(1, 30, true), offer(2, 30, true)}, []string{"c3", "d60", "d30"}},
		{"a GPU of more than 64 devices split", []Offer{offer(0, 10, true), offer(1, 130, true)}, []string{"c2", "d10", "d64", "d64", "d2"}},
		{"nine counter sets: two slices", func() (o []Offer) {
			for i := range 9 {
				o = append(o, offer(i, 1, true))
			}
			return o
		}(), []string{"c8", "c1", "d9"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := DynamicResources("n", tt.offers, nil, UnhealthyTaint)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			var order []string
			for _, s := range r.Pools["n"].Slices {
				if len(s.SharedCounters) > 0 {
					got = append(got, fmt.Sprintf("c%d", len(s.SharedCounters)))
					continue
				}
				got = append(got, fmt.Sprintf("d%d", len(s.Devices)))
				for _, d := range s.Devices {
					order = append(order, d.Name)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("slices (-want,+got):\n%s", diff)
			}
			var want []string
			for _, o := range tt.offers {
				for _, d := range o.Devices {
					want = append(want, d.Name)
				}
			}
			if diff := cmp.Diff(want, order); diff != "" {
				t.Errorf("device order lost (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestDynamicResourcesErrors(t *testing.T) {
	if _, err := DynamicResources("", nil, nil, UnhealthyTaint); err == nil {
		t.Error("no pool name: want an error")
	}
	if _, err := DynamicResources("n", nil, nil, "ignore"); err == nil || !strings.Contains(err.Error(), `"ignore"`) {
		t.Errorf("unknown policy: err = %v", err)
	}
}
