package dra

import (
	"context"
	"fmt"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/testsupport/testenv"
)

// apiSlices is a pool as the ResourceSlice controller writes it: one
// object per slice, all at one generation, each counting the pool's
// slices.
func apiSlices(node string, res resourceslice.DriverResources) []resourceapi.ResourceSlice {
	pool := res.Pools[node]
	out := make([]resourceapi.ResourceSlice, len(pool.Slices))
	for i, s := range pool.Slices {
		out[i] = resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%d", node, DriverName, i)},
			Spec: resourceapi.ResourceSliceSpec{
				Driver:         DriverName,
				NodeName:       ptr.To(node),
				Pool:           resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: int64(len(pool.Slices))},
				Devices:        s.Devices,
				SharedCounters: s.SharedCounters,
			},
		}
	}
	return out
}

// The API server's own validation (kube-apiserver of the pinned minor,
// with no feature gate or runtime-config set: resource.k8s.io/v1 is on by
// default and DRAPartitionableDevices is beta and on from 1.36) accepts
// the pool of an 8-GPU node of every built-in model, and of a node that
// mixes MIG, MIG off and a GPU without MIG, and stores the counters and
// what each device consumes instead of dropping them as it does for a
// field whose gate is off. The refusals at the end show the limits this
// package keeps to are the server's.
func TestIntegrationDynamicSlicesPassTheAPI(t *testing.T) {
	cfg := testenv.Start(t)
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()

	create := func(t *testing.T, node string, res resourceslice.DriverResources) {
		t.Helper()
		for _, s := range apiSlices(node, res) {
			got, err := client.ResourceV1().ResourceSlices().Create(ctx, &s, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("slice %s: %v", s.Name, err)
			}
			if len(got.Spec.SharedCounters) != len(s.Spec.SharedCounters) || len(got.Spec.Devices) != len(s.Spec.Devices) {
				t.Fatalf("slice %s stored with %d counter sets and %d devices, sent %d and %d", s.Name,
					len(got.Spec.SharedCounters), len(got.Spec.Devices), len(s.Spec.SharedCounters), len(s.Spec.Devices))
			}
			for i, d := range got.Spec.Devices {
				if len(d.ConsumesCounters) != len(s.Spec.Devices[i].ConsumesCounters) {
					t.Fatalf("slice %s: device %s stored consuming %v, sent %v (is DRAPartitionableDevices off?)", s.Name, d.Name, d.ConsumesCounters, s.Spec.Devices[i].ConsumesCounters)
				}
			}
		}
	}
	nodeOf := func(model string) string { return strings.ToLower(model) }

	for _, m := range gpumodel.Builtin() {
		t.Run(m.Name, func(t *testing.T) {
			var gpus []mig.GPU
			for i := range 8 {
				gpus = append(gpus, gpu(t, i, m.Name))
			}
			offers, err := Offers(gpus)
			if err != nil {
				t.Fatal(err)
			}
			node := nodeOf(m.Name)
			res, err := DynamicResources(node, offers, nil, UnhealthyTaint)
			if err != nil {
				t.Fatal(err)
			}
			create(t, node, res)
			devices := 0
			for _, o := range offers {
				devices += len(o.Devices)
			}
			t.Logf("%d devices in %d slices", devices, len(res.Pools[node].Slices))
		})
	}

	t.Run("mixed node, one GPU tainted", func(t *testing.T) {
		noMIG := mig.GPU{Index: 2, Minor: 2, UUID: "GPU-2", Model: "NVIDIA L4", MemoryMiB: 23034}
		offers, err := Offers([]mig.GPU{gpu(t, 0, "H100-SXM5-80GB"), wholeGPU(t, 1, "H100-SXM5-80GB"), noMIG, gpu(t, 3, "A30-24GB")})
		if err != nil {
			t.Fatal(err)
		}
		res, err := DynamicResources("mixed", offers, map[string]Fault{"GPU-3": {Xid: 79}}, UnhealthyTaint)
		if err != nil {
			t.Fatal(err)
		}
		create(t, "mixed", res)
	})

	// What the API refuses, so the acceptance above means something.
	offers, err := Offers([]mig.GPU{gpu(t, 0, "H200-SXM-141GB"), gpu(t, 1, "H200-SXM-141GB"), gpu(t, 2, "H200-SXM-141GB")})
	if err != nil {
		t.Fatal(err)
	}
	res, err := DynamicResources("refused", offers, nil, UnhealthyTaint)
	if err != nil {
		t.Fatal(err)
	}
	good := apiSlices("refused", res)
	var all []resourceapi.Device
	for _, s := range good[1:] {
		all = append(all, s.Spec.Devices...)
	}
	refusals := []struct {
		name  string
		spec  func(s *resourceapi.ResourceSliceSpec)
		wants string
	}{
		{"counters and devices in one slice", func(s *resourceapi.ResourceSliceSpec) {
			s.SharedCounters, s.Devices = good[0].Spec.SharedCounters, good[1].Spec.Devices
		}, "only one of"},
		{"65 devices consuming counters", func(s *resourceapi.ResourceSliceSpec) {
			s.Devices = all[:resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures+1]
		}, "Too many"},
		{"nine counter sets", func(s *resourceapi.ResourceSliceSpec) {
			for i := range 9 {
				cs := good[0].Spec.SharedCounters[0]
				cs.Name = CounterSetName(10 + i)
				s.SharedCounters = append(s.SharedCounters, cs)
			}
		}, "Too many"},
	}
	for _, r := range refusals {
		t.Run("refused: "+r.name, func(t *testing.T) {
			s := good[0]
			s.Name = "refused-" + strings.ReplaceAll(r.name, " ", "-")
			s.Spec.SharedCounters, s.Spec.Devices = nil, nil
			r.spec(&s.Spec)
			_, err := client.ResourceV1().ResourceSlices().Create(ctx, &s, metav1.CreateOptions{})
			if err == nil || !strings.Contains(err.Error(), r.wants) {
				t.Errorf("err = %v, want one saying %q", err, r.wants)
			}
		})
	}
}
