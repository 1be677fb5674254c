// Package draslices makes, for tests, the ResourceSlices migflex's DRA
// agent publishes in dynamic mode for GPUs of a built-in model, with the
// real publishing code (internal/domain/dra's Offers and
// DynamicResources), so that readers of supply are tested on what the
// agent writes.
package draslices

import (
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/internal/domain/mig"
)

// Dynamic is node's pool in dynamic mode, generation 1: a GPU of model
// per entry of migOn, index and minor its position, UUID GPU-<index>,
// MIG on where migOn says so (off: offered whole).
func Dynamic(t testing.TB, node, model string, migOn ...bool) []resourceapi.ResourceSlice {
	t.Helper()
	m, ok := gpumodel.Lookup(model)
	if !ok {
		t.Fatalf("no built-in model %q", model)
	}
	gpus := make([]mig.GPU, 0, len(migOn))
	for i, on := range migOn {
		gpus = append(gpus, mig.GPU{Index: i, Minor: i, UUID: fmt.Sprintf("GPU-%d", i), Model: m.Name, MemoryMiB: m.MemoryMiB,
			MigCapable: true, MigEnabled: on, MigPending: on, Profiles: m.MIGProfiles()})
	}
	offers, err := dra.Offers(gpus)
	if err != nil {
		t.Fatal(err)
	}
	res, err := dra.DynamicResources(node, offers, nil, dra.UnhealthyTaint)
	if err != nil {
		t.Fatal(err)
	}
	pool := res.Pools[node]
	out := make([]resourceapi.ResourceSlice, 0, len(pool.Slices))
	for i, s := range pool.Slices {
		out = append(out, resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%d", node, dra.DriverName, i)},
			Spec: resourceapi.ResourceSliceSpec{
				Driver: dra.DriverName, NodeName: ptr.To(node),
				Pool:           resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: int64(len(pool.Slices))},
				SharedCounters: s.SharedCounters, Devices: s.Devices,
			},
		})
	}
	return out
}

// Pointers are the slices as informers hand them out.
func Pointers(sl []resourceapi.ResourceSlice) []*resourceapi.ResourceSlice {
	out := make([]*resourceapi.ResourceSlice, len(sl))
	for i := range sl {
		out[i] = &sl[i]
	}
	return out
}

// Claim is a ResourceClaim in namespace ns allocated the devices of
// node's pool.
func Claim(ns, name, node string, devices ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	var results []resourceapi.DeviceRequestAllocationResult
	for _, d := range devices {
		results = append(results, resourceapi.DeviceRequestAllocationResult{Request: "r", Driver: dra.DriverName, Pool: node, Device: d})
	}
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}
	return c
}
