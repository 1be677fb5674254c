package dra

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/internal/domain/mig"
)

// steerGPU is a GPU of a steering case: a built-in model with MIG on and
// the devices in use ("1g.5gb@0"), or with MIG off.
type steerGPU struct {
	model  string
	inUse  []string
	migOff bool
}

// steerNode makes the offers and the in-use set of a case's GPUs.
func steerNode(t *testing.T, gpus []steerGPU) ([]Offer, map[string]bool) {
	t.Helper()
	var list []mig.GPU
	for i, g := range gpus {
		if g.migOff {
			list = append(list, wholeGPU(t, i, g.model))
		} else {
			list = append(list, gpu(t, i, g.model))
		}
	}
	offers, err := Offers(list)
	if err != nil {
		t.Fatal(err)
	}
	inUse := map[string]bool{}
	for i, g := range gpus {
		for _, spec := range g.inUse {
			j := slices.IndexFunc(offers[i].Devices, func(d OfferedDevice) bool { return placement(d) == spec })
			if j < 0 {
				t.Fatalf("GPU %d has no device %s", i, spec)
			}
			inUse[offers[i].Devices[j].Name] = true
		}
	}
	return offers, inUse
}

// placement is "1g.5gb@0", or "whole".
func placement(d OfferedDevice) string {
	if !d.MIG {
		return "whole"
	}
	return fmt.Sprintf("%s@%d", d.Profile, d.Start)
}

func profileIs(profile string) func(OfferedDevice) bool {
	return func(d OfferedDevice) bool {
		if profile == "" {
			return !d.MIG
		}
		return d.MIG && d.Profile == profile
	}
}

// What the scheduler's first fit takes from steered offers: the examples
// the design in docs/DRA.md ("Dynamic mode: steering") is judged by.
func TestSteer(t *testing.T) {
	const a100 = "A100-SXM4-40GB"
	tests := []struct {
		name    string
		gpus    []steerGPU
		profile string // "" for the whole GPU
		count   int
		want    []string // "gpu/placement"; nil: refused
	}{
		{"a 1g beside a 1g at 0 goes to 1, not 6", []steerGPU{{model: a100, inUse: []string{"1g.5gb@0"}}}, "1g.5gb", 1, []string{"0/1g.5gb@1"}},
		{"a 1g beside a 1g at 6 keeps the 4g's placement", []steerGPU{{model: a100, inUse: []string{"1g.5gb@6"}}}, "1g.5gb", 1, []string{"0/1g.5gb@5"}},
		{"a 2g beside a 1g at 6 keeps the 4g", []steerGPU{{model: a100, inUse: []string{"1g.5gb@6"}}}, "2g.10gb", 1, []string{"0/2g.10gb@4"}},
		{"a 1g on an empty GPU keeps a 4g and a 2g", []steerGPU{{model: a100}}, "1g.5gb", 1, []string{"0/1g.5gb@6"}},
		{"a used GPU is filled before a free one, which keeps its 4g/3g split", []steerGPU{{model: a100}, {model: a100, inUse: []string{"3g.20gb@4"}}}, "1g.5gb", 1, []string{"1/1g.5gb@3"}},
		{"a 4g goes beside a 3g, not onto the free GPU", []steerGPU{{model: a100}, {model: a100, inUse: []string{"3g.20gb@4"}}}, "4g.20gb", 1, []string{"1/4g.20gb@0"}},
		{"the most used GPU first", []steerGPU{{model: a100, inUse: []string{"1g.5gb@0"}}, {model: a100, inUse: []string{"3g.20gb@4", "2g.10gb@2"}}}, "1g.5gb", 1, []string{"1/1g.5gb@1"}},
		{"a 7g takes the free GPU", []steerGPU{{model: a100, inUse: []string{"1g.5gb@0"}}, {model: a100}}, "7g.40gb", 1, []string{"1/7g.40gb@0"}},
		{"a whole GPU is a GPU with MIG off first", []steerGPU{{model: a100}, {model: a100, migOff: true}}, "", 1, []string{"1/whole"}},
		{"then a free MIG GPU's whole device", []steerGPU{{model: a100, inUse: []string{"1g.5gb@0"}}, {model: a100}}, "", 1, []string{"1/whole"}},
		{"two 1g in one claim, in the published order", []steerGPU{{model: a100, inUse: []string{"1g.5gb@0"}}}, "1g.5gb", 2, []string{"0/1g.5gb@1", "0/1g.5gb@3"}},
		{"two 3g: the search goes on past a GPU with room for one", []steerGPU{{model: a100, inUse: []string{"3g.20gb@4"}}, {model: a100}}, "3g.20gb", 2, []string{"0/3g.20gb@0", "1/3g.20gb@4"}},
		{"no placement left: refused", []steerGPU{{model: a100, inUse: []string{"7g.40gb@0"}}}, "1g.5gb", 1, nil},
		{"H100: a 1g beside a 1g at 0 goes to 1", []steerGPU{{model: "H100-SXM5-80GB", inUse: []string{"1g.10gb@0"}}}, "1g.10gb", 1, []string{"0/1g.10gb@1"}},
		{"A30: a 1g beside a 1g at 0 goes to 1, keeping the 2g at 2", []steerGPU{{model: "A30-24GB", inUse: []string{"1g.6gb@0"}}}, "1g.6gb", 1, []string{"0/1g.6gb@1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			offers, inUse := steerNode(t, tt.gpus)
			got, ok := FirstFit(Steer(offers, inUse), inUse, profileIs(tt.profile), tt.count)
			var names []string
			for _, d := range got {
				names = append(names, fmt.Sprintf("%d/%s", d.GPUIndex, placement(d)))
			}
			if !slices.Equal(names, tt.want) || ok != (tt.want != nil) {
				t.Errorf("first fit on the steered offers took %v (%v), want %v", names, ok, tt.want)
			}
			// Unsteered, the default order says otherwise in most cases:
			// the test proves the steering, not the defaults.
			if _, ok := FirstFit(offers, inUse, profileIs(tt.profile), tt.count); ok != (tt.want != nil) {
				t.Errorf("unsteered offers served it: %v, steered %v", ok, tt.want != nil)
			}
		})
	}
}

// Steer only reorders: on every built-in model, for random uses of two
// GPUs, each GPU keeps every device with its counters, and every request
// (any profile, the whole GPU, one to three devices) that the unsteered
// offers could serve the steered ones serve, and the other way round: no
// claim is made unschedulable, whatever its selectors pick.
func TestSteerChangesOnlyTheOrder(t *testing.T) {
	for _, m := range gpumodel.Builtin() {
		t.Run(m.Name, func(t *testing.T) {
			offers, err := Offers([]mig.GPU{gpu(t, 0, m.Name), gpu(t, 1, m.Name), wholeGPU(t, 2, m.Name)})
			if err != nil {
				t.Fatal(err)
			}
			var profiles []string
			for _, p := range m.MIGProfiles() {
				profiles = append(profiles, p.Name)
			}
			profiles = append(profiles, "")
			rng := rand.New(rand.NewPCG(7, uint64(len(m.Name))))
			for range 40 {
				inUse := map[string]bool{}
				// A random use, made by allocating: always one NVML could make.
				for range rng.IntN(8) {
					got, ok := FirstFit(offers, inUse, profileIs(profiles[rng.IntN(len(profiles))]), 1)
					if ok {
						inUse[got[0].Name] = true
					}
				}
				steered := Steer(offers, inUse)
				if !sameDevices(offers, steered) {
					t.Fatalf("steering beside %v changed the devices offered", slices.Sorted(maps.Keys(inUse)))
				}
				for _, p := range profiles {
					for count := 1; count <= 3; count++ {
						_, before := FirstFit(offers, inUse, profileIs(p), count)
						_, after := FirstFit(steered, inUse, profileIs(p), count)
						if before != after {
							t.Errorf("%d of %q beside %v: served %v unsteered, %v steered", count, p, slices.Sorted(maps.Keys(inUse)), before, after)
						}
					}
				}
			}
		})
	}
}

// sameDevices: the same GPUs with the same counters and the same devices
// (name and consumption), in any order.
func sameDevices(a, b []Offer) bool {
	key := func(offers []Offer) []string {
		var out []string
		for _, o := range offers {
			out = append(out, fmt.Sprintf("set %d %s %v", o.GPUIndex, o.CounterSet, o.Counters))
			for _, d := range o.Devices {
				out = append(out, fmt.Sprintf("%d %s %v", o.GPUIndex, d.Name, d.Consumes))
			}
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(key(a), key(b))
}

// Steering is a function of the offers and the use: the same use gives
// the same order, and a name that is no device changes nothing, so an
// agent at rest republishes nothing new.
func TestSteerIsStable(t *testing.T) {
	offers, inUse := steerNode(t, []steerGPU{{model: "H100-SXM5-80GB", inUse: []string{"1g.10gb@0", "3g.40gb@4"}}, {model: "H100-SXM5-80GB"}})
	a := Steer(offers, inUse)
	inUse["gpu-9-mig-1g10gb-19-0"] = true
	b := Steer(offers, inUse)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Errorf("the same use steered two ways:\n%v\n%v", a, b)
	}
	if a[0].GPUIndex != 0 || b[1].GPUIndex != 1 {
		t.Errorf("GPU order %d, %d, want the used GPU 0 first", a[0].GPUIndex, a[1].GPUIndex)
	}
}

// FirstFit is the scheduler's choice: the scheduler's own structured
// allocator (each of its three implementations), given the steered offers
// published as DynamicResources writes them and the devices in use as
// allocated, takes the device FirstFit names, for every profile and the
// whole GPU, on the TestSteer nodes.
func TestFirstFitIsTheSchedulersChoice(t *testing.T) {
	ctx := context.Background()
	nodes := [][]steerGPU{
		{{model: "A100-SXM4-40GB", inUse: []string{"1g.5gb@0"}}},
		{{model: "A100-SXM4-40GB"}, {model: "A100-SXM4-40GB", inUse: []string{"3g.20gb@4"}}, {model: "A100-SXM4-40GB", migOff: true}},
		{{model: "H100-SXM5-80GB", inUse: []string{"1g.10gb@6", "2g.20gb@2"}}, {model: "H100-SXM5-80GB", inUse: []string{"1g.10gb@0"}}},
	}
	for _, impl := range []string{"stable", "incubating", "experimental"} {
		t.Run(impl, func(t *testing.T) {
			structured.EnableAllocators(impl)
			t.Cleanup(func() { structured.EnableAllocators() })
			for n, gpus := range nodes {
				offers, inUse := steerNode(t, gpus)
				steered := Steer(offers, inUse)
				resSlices, classes, profiles := schedulerView(t, steered, gpu(t, 0, gpus[0].model))
				allocated := sets.New[structured.DeviceID]()
				for name := range inUse {
					allocated.Insert(structured.MakeDeviceID(DriverName, "node", name))
				}
				node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node"}}
				for _, p := range append(profiles, "") {
					class := ClassGPU
					if p != "" {
						class = ProfileClass(p)
					}
					claim := &resourceapi.ResourceClaim{
						ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "uid"},
						Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
							Name:    "r",
							Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
						}}}},
					}
					alloc, err := structured.NewAllocator(ctx, structured.Features{PartitionableDevices: true}, structured.AllocatedState{AllocatedDevices: allocated}, classes, resSlices, cel.NewCache(10, cel.Features{}))
					if err != nil {
						t.Fatal(err)
					}
					results, err := alloc.Allocate(ctx, node, []*resourceapi.ResourceClaim{claim})
					if err != nil {
						t.Fatal(err)
					}
					want, ok := FirstFit(steered, inUse, profileIs(p), 1)
					var got string
					if len(results) > 0 {
						got = results[0].Devices.Results[0].Device
					}
					if ok != (got != "") || ok && got != want[0].Name {
						t.Errorf("node %d, %q: the allocator took %q, FirstFit %v (%v)", n, p, got, names(want), ok)
					}
				}
			}
		})
	}
}

func names(devs []OfferedDevice) string {
	out := make([]string, len(devs))
	for i, d := range devs {
		out[i] = d.Name
	}
	return strings.Join(out, ",")
}
