package dra

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/migflex/migflex/internal/domain/mig"
)

// TestHeld: which devices a reservation keeps from new claims, and when
// it lets them all go at once, in static mode (the devices that exist) and
// in dynamic mode (every placement and the whole GPU).
func TestHeld(t *testing.T) {
	const h100 = "H100-SXM5-80GB"
	static := []mig.GPU{wholeGPU(t, 0, h100), wholeGPU(t, 1, h100), gpu(t, 2, h100, "3g.40gb@0", "3g.40gb@4"), wholeGPU(t, 3, h100)}
	staticDevs, err := Devices(static)
	if err != nil {
		t.Fatal(err)
	}
	pending := static[1]
	pending.MigPending = true // MIG on at the next reset: not whole yet
	dynamic := []mig.GPU{wholeGPU(t, 0, h100), gpu(t, 1, h100), gpu(t, 2, h100, "1g.10gb@0"), wholeGPU(t, 3, h100)}
	offers, err := Offers(dynamic)
	if err != nil {
		t.Fatal(err)
	}
	var dynamicDevs []Device
	for _, o := range offers {
		for _, d := range o.Devices {
			dynamicDevs = append(dynamicDevs, d.Device)
		}
	}
	// of is every offered device of GPU i, less those named.
	of := func(i int, less ...string) []string {
		var out []string
		for _, d := range dynamicDevs {
			if d.GPUIndex == i && !slices.Contains(less, d.Name) {
				out = append(out, d.Name)
			}
		}
		return out
	}
	const (
		mig0    = "gpu-2-mig-3g40gb-9-0"
		mig4    = "gpu-2-mig-3g40gb-9-4"
		placed0 = "gpu-2-mig-1g10gb-19-0" // the dynamic GPU 2's instance, a claim's
	)
	use := func(names ...string) map[string]bool {
		out := map[string]bool{}
		for _, n := range names {
			out[n] = true
		}
		return out
	}
	tests := []struct {
		name      string
		reserved  []int
		gpus      []mig.GPU
		devs      []Device
		inUse     map[string]bool
		want      []string
		wantReady bool
	}{
		{name: "no reservation: nothing", gpus: static, devs: staticDevs},
		{name: "static: both whole and free: offered together", reserved: []int{0, 1}, gpus: static, devs: staticDevs, wantReady: true},
		{name: "static: a claim holds one: the other is kept, the held one never tainted", reserved: []int{0, 1}, gpus: static, devs: staticDevs,
			inUse: use("gpu-0"), want: []string{"gpu-1"}},
		{name: "static: a MIG GPU is not whole: its free instances are kept too", reserved: []int{1, 2}, gpus: static, devs: staticDevs,
			want: []string{"gpu-1", mig0, mig4}},
		{name: "static: an instance in use stays offered to its claim, the rest are kept", reserved: []int{1, 2}, gpus: static, devs: staticDevs,
			inUse: use(mig0), want: []string{"gpu-1", mig4}},
		{name: "static: claims elsewhere change nothing", reserved: []int{0, 1}, gpus: static, devs: staticDevs, inUse: use("gpu-3", mig0), wantReady: true},
		{name: "static: a MIG mode change pending is not whole", reserved: []int{0, 1}, gpus: []mig.GPU{static[0], pending, static[2], static[3]}, devs: staticDevs,
			want: []string{"gpu-0", "gpu-1"}},
		{name: "static: a GPU the node lacks never frees: the others stay kept", reserved: []int{0, 7}, gpus: static, devs: staticDevs, want: []string{"gpu-0"}},
		{name: "dynamic: two whole free GPUs: offered together", reserved: []int{0, 3}, gpus: dynamic, devs: dynamicDevs, wantReady: true},
		{name: "dynamic: a claim allocated the whole GPU 3: GPU 0 is kept", reserved: []int{0, 3}, gpus: dynamic, devs: dynamicDevs,
			inUse: use("gpu-3"), want: []string{"gpu-0"}},
		{name: "dynamic: a MIG GPU never serves whole: every placement and its whole device kept", reserved: []int{0, 1}, gpus: dynamic, devs: dynamicDevs,
			want: append([]string{"gpu-0"}, of(1)...)},
		{name: "dynamic: beside a claim's instance, every other placement kept", reserved: []int{2, 3}, gpus: dynamic, devs: dynamicDevs,
			inUse: use(placed0), want: append(of(2, placed0), "gpu-3")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := Held(tt.reserved, tt.gpus, tt.devs, tt.inUse)
			want := slices.Sorted(slices.Values(tt.want))
			if diff := cmp.Diff(want, h.Devices); diff != "" {
				t.Errorf("devices kept (-want +got):\n%s", diff)
			}
			if h.Ready != tt.wantReady {
				t.Errorf("ready %v, want %v (%s)", h.Ready, tt.wantReady, h.Why)
			}
			for _, name := range h.Devices {
				if tt.inUse[name] {
					t.Errorf("%s is kept, but a claim holds it", name)
				}
			}
		})
	}
}

// TestTaintDevices: the reserved taint goes on the named devices beside
// the health taints, and replaces an older reserved taint (another pod's).
func TestTaintDevices(t *testing.T) {
	xid := resourceapi.DeviceTaint{Key: TaintXid, Value: "79", Effect: resourceapi.DeviceTaintEffectNoSchedule}
	res := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{"n": {Slices: []resourceslice.Slice{
		{Devices: []resourceapi.Device{{Name: "gpu-0"}, {Name: "gpu-1", Taints: []resourceapi.DeviceTaint{xid}}}},
		{Devices: []resourceapi.Device{{Name: "gpu-2", Taints: []resourceapi.DeviceTaint{ReservedTaint("old")}}}},
	}}}}
	TaintDevices(&res, []string{"gpu-1", "gpu-2"}, ReservedTaint("uid-1"))
	got := map[string][]resourceapi.DeviceTaint{}
	for _, s := range res.Pools["n"].Slices {
		for _, d := range s.Devices {
			got[d.Name] = d.Taints
		}
	}
	want := map[string][]resourceapi.DeviceTaint{
		"gpu-0": nil,
		"gpu-1": {xid, {Key: TaintReserved, Value: "uid-1", Effect: resourceapi.DeviceTaintEffectNoSchedule}},
		"gpu-2": {{Key: TaintReserved, Value: "uid-1", Effect: resourceapi.DeviceTaintEffectNoSchedule}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("taints (-want +got):\n%s", diff)
	}
}
