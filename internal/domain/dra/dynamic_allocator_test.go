package dra

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/internal/domain/mig"
)

type classLister map[string]*resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(l))
	for _, c := range l {
		out = append(out, c)
	}
	return out, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if c, ok := l[name]; ok {
		return c, nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}

// The scheduler's own allocator (k8s.io/dynamic-resource-allocation's
// structured allocator, as kube-scheduler v1.37 runs it with
// DRAPartitionableDevices on), given dynamic mode's slices and the
// DeviceClasses behind nvidia.com/mig-* and nvidia.com/gpu, allocates
// claims one at a time as pods come and go: whatever it has allocated
// together NVML could create together, and it refuses a claim only when
// no placement of the profile could be created beside what is allocated.
// Each of the allocator's three implementations (which one the scheduler
// runs depends on its feature gates) is checked.
func TestSchedulersAllocatorKeepsToNVMLsRules(t *testing.T) {
	for _, impl := range []string{"stable", "incubating", "experimental"} {
		t.Run(impl, func(t *testing.T) {
			structured.EnableAllocators(impl)
			t.Cleanup(func() { structured.EnableAllocators() })
			for _, m := range gpumodel.Builtin() {
				t.Run(m.Name, func(t *testing.T) { allocateAndFree(t, m) })
			}
		})
	}
}

// schedulerView is what the scheduler's allocator is given on node "node":
// the offers published as DynamicResources writes them, and the
// DeviceClasses of g's profiles (returned too) and of whole GPUs.
func schedulerView(t *testing.T, offers []Offer, g mig.GPU) ([]*resourceapi.ResourceSlice, classLister, []string) {
	t.Helper()
	res, err := DynamicResources("node", offers, nil, UnhealthyTaint)
	if err != nil {
		t.Fatal(err)
	}
	var resSlices []*resourceapi.ResourceSlice
	for _, s := range apiSlices("node", res) {
		resSlices = append(resSlices, &s)
	}
	var profiles []string
	for _, p := range g.Profiles {
		profiles = append(profiles, p.Name)
	}
	list, err := DeviceClasses(profiles)
	if err != nil {
		t.Fatal(err)
	}
	classes := classLister{}
	for i := range list {
		classes[list[i].Name] = &list[i]
	}
	return resSlices, classes, profiles
}

func allocateAndFree(t *testing.T, m gpumodel.Model) {
	ctx := context.Background()
	g := gpu(t, 0, m.Name)
	offers, err := Offers([]mig.GPU{g})
	if err != nil {
		t.Fatal(err)
	}
	resSlices, classes, profiles := schedulerView(t, offers, g)
	byName := map[string]OfferedDevice{}
	for _, d := range offers[0].Devices {
		byName[d.Name] = d
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node"}}
	celCache := cel.NewCache(100, cel.Features{})
	allocated := sets.New[structured.DeviceID]()
	var held []OfferedDevice

	rng := rand.New(rand.NewPCG(1, uint64(len(m.Name))))
	served, refused := 0, 0
	for step := range 300 {
		if len(held) > 0 && rng.IntN(3) == 0 {
			i := rng.IntN(len(held))
			allocated.Delete(structured.MakeDeviceID(DriverName, "node", held[i].Name))
			held = slices.Delete(held, i, i+1)
			continue
		}
		want := "" // the whole GPU
		class := ClassGPU
		if n := rng.IntN(len(profiles) + 1); n < len(profiles) {
			want, class = profiles[n], ProfileClass(profiles[n])
		}
		claim := &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%d", step), Namespace: "ns", UID: types.UID(fmt.Sprintf("uid-%d", step))},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name:    "r",
				Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
			}}}},
		}
		alloc, err := structured.NewAllocator(ctx, structured.Features{PartitionableDevices: true}, structured.AllocatedState{AllocatedDevices: allocated}, classes, resSlices, celCache)
		if err != nil {
			t.Fatal(err)
		}
		results, err := alloc.Allocate(ctx, node, []*resourceapi.ResourceClaim{claim})
		if err != nil {
			t.Fatal(err)
		}
		if len(results) == 0 {
			refused++
			if couldServe(t, g, byName, held, want) {
				t.Errorf("step %d: %s refused beside %s, though NVML could create it", step, orWhole(want), describeSet(held))
			}
			continue
		}
		served++
		name := results[0].Devices.Results[0].Device
		d := byName[name]
		if d.Profile != want {
			t.Fatalf("step %d: asked for %s, got %s", step, orWhole(want), name)
		}
		held = append(held, d)
		allocated.Insert(structured.MakeDeviceID(DriverName, "node", name))
		if !createTogether(t, g, held) {
			t.Errorf("step %d: allocated %s, which NVML cannot create together", step, describeSet(held))
		}
	}
	t.Logf("%d claims served, %d refused", served, refused)
}

func orWhole(profile string) string {
	if profile == "" {
		return "the whole GPU"
	}
	return profile
}

// createTogether is creatable, with the whole GPU allowed alone.
func createTogether(t *testing.T, g mig.GPU, held []OfferedDevice) bool {
	for _, d := range held {
		if !d.MIG {
			return len(held) == 1
		}
	}
	return creatable(t, g, held)
}

// couldServe reports whether NVML could create an instance of profile (or
// the whole GPU, for "") beside those held.
func couldServe(t *testing.T, g mig.GPU, byName map[string]OfferedDevice, held []OfferedDevice, profile string) bool {
	for _, d := range byName {
		if d.Profile == profile && createTogether(t, g, append(slices.Clip(held), d)) {
			return true
		}
	}
	return false
}
