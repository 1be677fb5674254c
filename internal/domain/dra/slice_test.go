package dra

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/internal/domain/mig"
)

func TestAPIDevice(t *testing.T) {
	str := func(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: ptr.To(s)} }
	qty := func(s string) resourceapi.DeviceCapacity {
		return resourceapi.DeviceCapacity{Value: resource.MustParse(s)}
	}
	tests := []struct {
		name string
		dev  Device
		want resourceapi.Device
	}{
		{
			name: "MIG device",
			dev: Device{
				Name: "gpu-0-mig-2g10gb-14-2", UUID: "MIG-a", MIG: true, Profile: "2g.10gb", ProfileID: 14,
				GPUUUID: "GPU-p", Model: "A100-SXM4-40GB", Start: 2, Size: 2,
				MemoryMB: 9856, SMs: 28, Engines: mig.Engines{CopyEngines: 2, Decoders: 1, Encoders: 0, JPEGs: 0, OFAs: 0},
			},
			want: resourceapi.Device{
				Name: "gpu-0-mig-2g10gb-14-2",
				Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
					"type": str("mig"), "uuid": str("MIG-a"), "parentUUID": str("GPU-p"),
					"profile": str("2g.10gb"), "productName": str("A100-SXM4-40GB"),
				},
				Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
					"memory": qty("9856Mi"), "multiprocessors": qty("28"), "copyEngines": qty("2"),
					"decoders": qty("1"), "encoders": qty("0"), "jpegEngines": qty("0"), "ofaEngines": qty("0"),
					"memorySlice2": qty("1"), "memorySlice3": qty("1"),
				},
			},
		},
		{
			name: "whole GPU",
			dev:  Device{Name: "gpu-1", UUID: "GPU-q", GPUUUID: "GPU-q", Model: "A30-24GB", MemoryMB: 24576},
			want: resourceapi.Device{
				Name: "gpu-1",
				Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
					"type": str("gpu"), "uuid": str("GPU-q"), "productName": str("A30-24GB"),
				},
				Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": qty("24Gi")},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := APIDevice(tt.dev)
			// Quantities compare by value, not by their cached string form.
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
				t.Errorf("(-want,+got):\n%s", diff)
			}
		})
	}
}

func TestResources(t *testing.T) {
	devs, err := Devices([]mig.GPU{
		gpu(t, 0, "A100-SXM4-40GB", "3g.20gb@4", "2g.10gb@0", "1g.5gb@2"),
		wholeGPU(t, 1, "A30-24GB"),
	})
	if err != nil {
		t.Fatal(err)
	}
	unhealthy := map[string]Fault{"MIG-0-0": {Xid: 79, Reason: "Xid 79"}, "GPU-1": {Reason: "GPU lost"}}
	type dev struct{ name, taint string }
	tests := []struct {
		name      string
		unhealthy map[string]Fault
		policy    UnhealthyPolicy
		want      []dev
	}{
		{"all healthy", nil, UnhealthyTaint, []dev{{"gpu-0-mig-2g10gb-14-0", ""}, {"gpu-0-mig-1g5gb-19-2", ""}, {"gpu-0-mig-3g20gb-9-4", ""}, {"gpu-1", ""}}},
		{"unhealthy tainted, Xid as the value", unhealthy, UnhealthyTaint, []dev{
			{"gpu-0-mig-2g10gb-14-0", "gpu.migflex.io/xid=79:NoSchedule"}, {"gpu-0-mig-1g5gb-19-2", ""},
			{"gpu-0-mig-3g20gb-9-4", ""}, {"gpu-1", "gpu.migflex.io/gpu-lost=:NoSchedule"},
		}},
		{"unhealthy withdrawn", unhealthy, UnhealthyWithdraw, []dev{{"gpu-0-mig-1g5gb-19-2", ""}, {"gpu-0-mig-3g20gb-9-4", ""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Resources("node-a", devs, tt.unhealthy, tt.policy)
			if err != nil {
				t.Fatal(err)
			}
			pool, ok := res.Pools["node-a"]
			if len(res.Pools) != 1 || !ok || len(pool.Slices) != 1 {
				t.Fatalf("want one pool node-a with one slice, got %+v", res)
			}
			var got []dev
			for _, d := range pool.Slices[0].Devices {
				var taints []string
				for _, tn := range d.Taints {
					taints = append(taints, fmt.Sprintf("%s=%s:%s", tn.Key, tn.Value, tn.Effect))
				}
				got = append(got, dev{d.Name, strings.Join(taints, ",")})
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(dev{})); diff != "" {
				t.Errorf("devices (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestResourcesSlicing(t *testing.T) {
	for _, n := range []int{0, 1, MaxDevicesPerSlice, MaxDevicesPerSlice + 1, 2*MaxDevicesPerSlice + 3} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			devs := make([]Device, n)
			for i := range devs {
				devs[i] = Device{Name: fmt.Sprintf("gpu-%d", i), UUID: fmt.Sprintf("GPU-%d", i)}
			}
			res, err := Resources("n", devs, nil, UnhealthyTaint)
			if err != nil {
				t.Fatal(err)
			}
			var sizes []int
			next := 0
			for _, s := range res.Pools["n"].Slices {
				sizes = append(sizes, len(s.Devices))
				for _, d := range s.Devices {
					if want := fmt.Sprintf("gpu-%d", next); d.Name != want {
						t.Fatalf("device %q where %q belongs: order lost", d.Name, want)
					}
					next++
				}
			}
			want := []int{}
			for left := n; left > 0 || len(want) == 0; left -= MaxDevicesPerSlice {
				want = append(want, min(left, MaxDevicesPerSlice))
			}
			if diff := cmp.Diff(want, sizes); diff != "" {
				t.Errorf("slice sizes (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestResourcesErrors(t *testing.T) {
	if _, err := Resources("", nil, nil, UnhealthyTaint); err == nil {
		t.Error("no pool name: want an error")
	}
	if _, err := Resources("n", nil, nil, "ignore"); err == nil || !strings.Contains(err.Error(), `"ignore"`) {
		t.Errorf("unknown policy: err = %v", err)
	}
}

// The API allows 32 attributes and capacities per device; a MIG device
// has one capacity per memory slice it covers, so the largest profile of
// every built-in model must still fit.
func TestAPIDeviceFitsTheAPILimits(t *testing.T) {
	for _, m := range gpumodel.Builtin() {
		for _, p := range m.MIGProfiles() {
			d := Device{Name: "x", UUID: "MIG-x", MIG: true, Profile: p.Name, Start: p.Placements[0], Size: p.MemorySlices, MemoryMB: p.MemoryMiB, SMs: p.SMs, Engines: p.Engines}
			api := APIDevice(d)
			if n := len(api.Attributes) + len(api.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
				t.Errorf("%s %s: %d attributes and capacities, more than the API's %d", m.Name, p.Name, n, resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice)
			}
			for name := range api.Capacity {
				if len(name) > resourceapi.DeviceMaxIDLength {
					t.Errorf("%s %s: capacity name %q longer than %d", m.Name, p.Name, name, resourceapi.DeviceMaxIDLength)
				}
			}
		}
	}
}
