package schedview

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/testsupport/draslices"
)

// The dynamic-mode names read here are the driver's own.
func TestPoolNamesAreTheDrivers(t *testing.T) {
	for got, want := range map[string]string{draCapMemorySlice: dra.CapMemorySlicePrefix, draAttrParentUUID: dra.AttrParentUUID, draAttrUUID: dra.AttrUUID} {
		if got != want {
			t.Errorf("schedview reads %q where internal/domain/dra says %q", got, want)
		}
	}
}

func dynamicSlices(t *testing.T, node, model string, migOn ...bool) []*resourceapi.ResourceSlice {
	return draslices.Pointers(draslices.Dynamic(t, node, model, migOn...))
}

// placementName is the device dynamic mode publishes for an H100's
// profile at a placement.
func placementName(minor int, profile string, start int) string {
	ids := map[string]int{"1g.10gb": 19, "1g.20gb": 15, "2g.20gb": 14, "3g.40gb": 9, "4g.40gb": 5, "7g.80gb": 0}
	return fmt.Sprintf("gpu-%d-mig-%s-%d-%d", minor, map[string]string{
		"1g.10gb": "1g10gb", "1g.20gb": "1g20gb", "2g.20gb": "2g20gb", "3g.40gb": "3g40gb", "4g.40gb": "4g40gb", "7g.80gb": "7g80gb",
	}[profile], ids[profile], start)
}

func claimsOn(node string, devices ...string) []*resourceapi.ResourceClaim {
	var out []*resourceapi.ResourceClaim
	for i, d := range devices {
		out = append(out, allocatedClaim("c"+strconv.Itoa(i), result(dra.DriverName, node, d)))
	}
	return out
}

// What a dynamic pool can still serve: per profile, the most instances
// the counters left by the allocated devices let be made together.
func TestPoolDynamic(t *testing.T) {
	const h100 = "H100-SXM5-80GB"
	empty := map[string]int64{"1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1}
	tests := []struct {
		name   string
		migOn  []bool
		claims []string
		free   map[string]int64
		states []string
		used   [][]UsedDevice
	}{
		{name: "an empty GPU: every profile alone; its whole device is no supply (MIG on)", migOn: []bool{true},
			free: empty, states: []string{"free"}, used: [][]UsedDevice{nil}},
		{name: "a 1g at 0 takes the low 3g and 4g and 7g", migOn: []bool{true}, claims: []string{placementName(0, "1g.10gb", 0)},
			free:   map[string]int64{"1g.10gb": 6, "1g.10gb+me": 1, "1g.20gb": 3, "2g.20gb": 2, "3g.40gb": 1},
			states: []string{"partly used"}, used: [][]UsedDevice{{{Name: placementName(0, "1g.10gb", 0), Profile: "1g.10gb", Start: 0, Size: 1}}}},
		{name: "1g at 1 and at 5: one 2g left (at 2), no 3g", migOn: []bool{true},
			claims: []string{placementName(0, "1g.10gb", 1), placementName(0, "1g.10gb", 5)},
			free:   map[string]int64{"1g.10gb": 5, "1g.10gb+me": 1, "1g.20gb": 2, "2g.20gb": 1},
			states: []string{"partly used"}, used: [][]UsedDevice{{
				{Name: placementName(0, "1g.10gb", 1), Profile: "1g.10gb", Start: 1, Size: 1},
				{Name: placementName(0, "1g.10gb", 5), Profile: "1g.10gb", Start: 5, Size: 1},
			}}},
		{name: "two 3g take every memory slice", migOn: []bool{true},
			claims: []string{placementName(0, "3g.40gb", 0), placementName(0, "3g.40gb", 4)},
			free:   map[string]int64{}, states: []string{"full"}, used: [][]UsedDevice{{
				{Name: placementName(0, "3g.40gb", 0), Profile: "3g.40gb", Start: 0, Size: 4},
				{Name: placementName(0, "3g.40gb", 4), Profile: "3g.40gb", Start: 4, Size: 4},
			}}},
		{name: "the 7g takes the GPU; the other GPU stays free", migOn: []bool{true, true}, claims: []string{placementName(0, "7g.80gb", 0)},
			free: empty, states: []string{"full", "free"}, used: [][]UsedDevice{{{Name: placementName(0, "7g.80gb", 0), Profile: "7g.80gb", Start: 0, Size: 8}}, nil}},
		{name: "a whole GPU with MIG on allocated takes every counter", migOn: []bool{true}, claims: []string{"gpu-0"},
			free: map[string]int64{}, states: []string{"full"}, used: [][]UsedDevice{{{Name: "gpu-0"}}}},
		{name: "a GPU with MIG off is offered whole, beside a MIG one", migOn: []bool{false, true},
			free: func() map[string]int64 {
				m := map[string]int64{"": 1}
				for k, v := range empty {
					m[k] = v
				}
				return m
			}(), states: []string{"free", "free"}, used: [][]UsedDevice{nil, nil}},
		{name: "a whole GPU with MIG off allocated", migOn: []bool{false, true}, claims: []string{"gpu-0"},
			free: empty, states: []string{"full", "free"}, used: [][]UsedDevice{{{Name: "gpu-0"}}, nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewPool("n1", dynamicSlices(t, "n1", h100, tt.migOn...), claimsOn("n1", tt.claims...))
			if !p.Dynamic {
				t.Error("a pool with counter sets is not read as dynamic")
			}
			if diff := cmp.Diff(tt.free, p.FreeByProfile()); diff != "" {
				t.Errorf("free by profile (-want,+got):\n%s", diff)
			}
			var states []string
			var used [][]UsedDevice
			for _, g := range p.GPUs {
				states, used = append(states, g.State()), append(used, g.Used)
			}
			if diff := cmp.Diff(tt.states, states); diff != "" {
				t.Errorf("GPU states (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.used, used); diff != "" {
				t.Errorf("used (-want,+got):\n%s", diff)
			}
		})
	}
}

// Every GPU is known by its UUID, the one the agent's layout names.
func TestPoolGPUUUIDs(t *testing.T) {
	p := NewPool("n1", dynamicSlices(t, "n1", "H100-SXM5-80GB", false, true), nil)
	var got []string
	for _, g := range p.GPUs {
		got = append(got, g.UUID+" "+g.CounterSet)
	}
	if diff := cmp.Diff([]string{"GPU-0 ", "GPU-1 gpu-1-counters"}, got); diff != "" {
		t.Errorf("GPUs (-want,+got):\n%s", diff)
	}
}

// counterDevice is a device of profile p at start, size memory slices,
// consuming set's memory-slice counters.
func counterDevice(name, profile, set string, start, size int) resourceapi.Device {
	d := dra.APIDevice(dra.Device{Name: name, MIG: true, Profile: profile, GPUUUID: "GPU-0", Start: start, Size: size})
	c := map[string]resourceapi.Counter{}
	for i := start; i < start+size; i++ {
		c[dra.CounterMemorySlicePrefix+strconv.Itoa(i)] = resourceapi.Counter{Value: resource.MustParse("1")}
	}
	d.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: set, Counters: c}}
	return d
}

// Placements of one profile that overlap each other: the most that fit
// together is not what taking them in slice order finds, and the count is
// the most.
func TestPoolOverlappingPlacements(t *testing.T) {
	counters := map[string]resourceapi.Counter{}
	for i := range 4 {
		counters[dra.CounterMemorySlicePrefix+strconv.Itoa(i)] = resourceapi.Counter{Value: resource.MustParse("1")}
	}
	sets := slice("n1", 1)
	sets.Spec.SharedCounters = []resourceapi.CounterSet{{Name: "gpu-0-counters", Counters: counters}}
	// In slice order 1 comes first: first fit takes 1 (slices 1, 2) and
	// then neither 0 nor 2 fits; 0 and 2 fit together.
	devs := slice("n1", 1,
		counterDevice("p1", "2g", "gpu-0-counters", 1, 2),
		counterDevice("p0", "2g", "gpu-0-counters", 0, 2),
		counterDevice("p2", "2g", "gpu-0-counters", 2, 2),
		counterDevice("q3", "1g", "gpu-0-counters", 3, 1))
	tests := []struct {
		name   string
		claims []string
		free   map[string]int64
	}{
		{name: "nothing allocated: two of 2g, not one", free: map[string]int64{"2g": 2, "1g": 1}},
		{name: "1g at 3 allocated: one 2g (0 or 1)", claims: []string{"q3"}, free: map[string]int64{"2g": 1}},
		{name: "2g at 1 allocated: nothing but the 1g", claims: []string{"p1"}, free: map[string]int64{"1g": 1}},
		{name: "2g at 0 allocated: one 2g (at 2), or the 1g", claims: []string{"p0"}, free: map[string]int64{"2g": 1, "1g": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewPool("n1", []*resourceapi.ResourceSlice{sets, devs}, claimsOn("n1", tt.claims...))
			if diff := cmp.Diff(tt.free, p.FreeByProfile()); diff != "" {
				t.Errorf("free by profile (-want,+got):\n%s", diff)
			}
		})
	}
}

// A dynamic node's supply for extended resources: a class's free devices
// are what the counters allow, and Allocatable less Allocated is that.
func TestDRASupplyDynamic(t *testing.T) {
	c := classes(t, "1g.10gb", "3g.40gb", "7g.80gb")
	mig3g, mig7g := corev1.ResourceName("nvidia.com/mig-3g.40gb"), corev1.ResourceName("nvidia.com/mig-7g.80gb")
	tainted := dynamicSlices(t, "n1", "H100-SXM5-80GB", true)
	for _, s := range tainted {
		for i := range s.Spec.Devices {
			if s.Spec.Devices[i].Name == placementName(0, "1g.10gb", 6) {
				s.Spec.Devices[i].Taints = []resourceapi.DeviceTaint{{Key: dra.TaintXid, Value: "79", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
			}
		}
	}
	tests := []struct {
		name            string
		slices          []*resourceapi.ResourceSlice
		claims          []string
		alloc, allocted alloc
	}{
		{name: "an empty MIG GPU: each profile alone, no whole GPU", slices: dynamicSlices(t, "n1", "H100-SXM5-80GB", true),
			alloc: alloc{mig1g10: 7, mig3g: 2, mig7g: 1}, allocted: alloc{}},
		{name: "one 3g allocated: one 3g more, three 1g", slices: dynamicSlices(t, "n1", "H100-SXM5-80GB", true),
			claims: []string{placementName(0, "3g.40gb", 4)},
			alloc:  alloc{mig1g10: 4, mig3g: 2}, allocted: alloc{mig3g: 1}},
		{name: "two 1g allocated over both 3g placements", slices: dynamicSlices(t, "n1", "H100-SXM5-80GB", true),
			claims: []string{placementName(0, "1g.10gb", 1), placementName(0, "1g.10gb", 5)},
			alloc:  alloc{mig1g10: 7}, allocted: alloc{mig1g10: 2}},
		{name: "a tainted placement is no supply", slices: tainted,
			alloc: alloc{mig1g10: 6, mig3g: 2, mig7g: 1}, allocted: alloc{}},
		{name: "a whole GPU with MIG off", slices: dynamicSlices(t, "n1", "H100-SXM5-80GB", false), claims: []string{"gpu-0"},
			alloc: alloc{gpu: 1}, allocted: alloc{gpu: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gotA, gotU := DRASupply("n1", tt.slices, claimsOn("n1", tt.claims...), c)
			if diff := cmp.Diff(tt.alloc, gotA); diff != "" {
				t.Errorf("allocatable (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.allocted, gotU); diff != "" {
				t.Errorf("allocated (-want,+got):\n%s", diff)
			}
		})
	}
}
