package draserver

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/nodeagent/health"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim/simtest"
	"github.com/migflex/migflex/internal/nvml/nvmlmig"
)

// fakeDriver records publications.
type fakeDriver struct {
	mu        sync.Mutex
	devices   []dra.Device
	unhealthy []map[string]dra.Fault
	drained   []string
	visible   bool
	slices    chan struct{}
	fatal     chan error
	stopped   bool
	dynamic   bool
}

func (f *fakeDriver) Publish(gpus []mig.GPU, unhealthy map[string]dra.Fault) error {
	devs, err := dra.Devices(gpus)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.devices = devs
	f.unhealthy = append(f.unhealthy, unhealthy)
	return nil
}
func (f *fakeDriver) Drain(_ context.Context, ids []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.drained = append(f.drained, ids...)
	return nil
}
func (f *fakeDriver) Undrain([]string) {}
func (f *fakeDriver) Published() ([]dra.Device, resourceslice.DriverResources) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.devices, resourceslice.DriverResources{}
}
func (f *fakeDriver) Prepared() []dra.PreparedClaim { return nil }
func (f *fakeDriver) Visible(context.Context) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.visible, nil
}
func (f *fakeDriver) SliceChanges() <-chan struct{} { return f.slices }
func (f *fakeDriver) Fatal() <-chan error           { return f.fatal }
func (f *fakeDriver) Dynamic() bool                 { return f.dynamic }
func (f *fakeDriver) Reserve(*nodeinfo.Reservation) {}
func (f *fakeDriver) Stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = true
}
func (f *fakeDriver) publications() []map[string]dra.Fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]map[string]dra.Fault(nil), f.unhealthy...)
}

// fakeHealth is a health source the test sets.
type fakeHealth struct {
	mu      sync.Mutex
	targets []health.Target
	faults  map[string]health.Fault
	changes chan struct{}
}

func (h *fakeHealth) SetTargets(t []health.Target) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.targets = t
}
func (h *fakeHealth) Unhealthy() map[string]health.Fault {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.faults
}
func (h *fakeHealth) Changes() <-chan struct{} { return h.changes }
func (h *fakeHealth) set(f map[string]health.Fault) {
	h.mu.Lock()
	h.faults = f
	h.mu.Unlock()
	h.changes <- struct{}{}
}

func layoutGPUs(t *testing.T) []mig.GPU {
	t.Helper()
	lib := simtest.New(t, sim.Config{GPUs: []sim.GPUSpec{{Model: "H100-SXM5-80GB", Count: 2}}, UUIDSeed: t.Name()})
	part := nvmlmig.NewPartitioner(lib)
	if err := part.SetMigMode(0, true); err != nil {
		t.Fatal(err)
	}
	for _, start := range []int{0, 4} {
		if _, err := part.CreateInstance(0, "3g.40gb", start); err != nil {
			t.Fatal(err)
		}
	}
	gpus, err := nvmlmig.Discover(lib)
	if err != nil {
		t.Fatal(err)
	}
	return gpus
}

// TestServer: the agent's Server port over the kubelet plugin publishes
// each layout in place, with the health watcher's faults, republishes on
// a health change, reports the devices by the resource their DeviceClass
// serves, and is visible only once the driver's slices are, signalling
// when they change.
func TestServer(t *testing.T) {
	gpus := layoutGPUs(t)
	d := &fakeDriver{fatal: make(chan error, 1), slices: make(chan struct{}, 1)}
	h := &fakeHealth{changes: make(chan struct{})}
	s := New(Options{Driver: d, Health: h, DriverName: dra.DriverName, NodeName: node,
		Labels: func([]mig.GPU) map[string]string { return map[string]string{nodeinfo.LabelGPUCount: "2"} }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	if err := s.Serve(ctx, gpus); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	<-s.Changes()
	mig0, mig4, whole := gpus[0].Instances[0].UUID, gpus[0].Instances[1].UUID, gpus[1].UUID
	want := map[string]map[string]bool{
		"nvidia.com/mig-3g.40gb": {mig0: true, mig4: true},
		"nvidia.com/gpu":         {whole: true},
	}
	if diff := cmp.Diff(want, s.Served()); diff != "" {
		t.Errorf("Served (-want +got):\n%s", diff)
	}
	if len(h.targets) != 3 {
		t.Errorf("health targets %v, want the 3 devices", h.targets)
	}

	h.set(map[string]health.Fault{mig4: {Xid: 79, Reason: "Xid 79"}})
	<-s.Changes()
	pubs := d.publications()
	if diff := cmp.Diff(map[string]dra.Fault{mig4: {Xid: 79, Reason: "Xid 79"}}, pubs[len(pubs)-1]); diff != "" {
		t.Errorf("republished faults (-want +got):\n%s", diff)
	}
	if s.Served()["nvidia.com/mig-3g.40gb"][mig4] {
		t.Error("Served calls the device with an Xid healthy")
	}

	layout, missing, err := s.Visible(ctx, nil)
	if err != nil || len(missing) != 1 || !strings.Contains(missing[0], node) {
		t.Errorf("Visible before the slices show it = %v, %v; want one missing naming the pool", missing, err)
	}
	d.mu.Lock()
	d.visible = true
	d.mu.Unlock()
	if again, missing, err := s.Visible(ctx, nil); err != nil || missing != nil || again != layout || !strings.Contains(layout, "gpu-0-mig-3g40gb-9-4 "+mig4) {
		t.Errorf("Visible once shown = %q, %v, %v", again, missing, err)
	}
	// A node just switched from the device plugin: until the kubelet's
	// next status update its allocatable still offers the old supply,
	// which the scheduler would use (and the kubelet refuse).
	stale := &corev1.Node{Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
		"nvidia.com/mig-3g.40gb": resource.MustParse("2"), "nvidia.com/gpu": resource.MustParse("0"), corev1.ResourceCPU: resource.MustParse("2"),
	}}}
	if _, missing, err := s.Visible(ctx, stale); err != nil || !slices.Equal(missing, []string{"nvidia.com/mig-3g.40gb 2 still in the Node's allocatable from a device plugin"}) {
		t.Errorf("Visible with device-plugin supply in allocatable: missing %q, %v", missing, err)
	}
	stale.Status.Allocatable["nvidia.com/mig-3g.40gb"] = resource.MustParse("0")
	if _, missing, err := s.Visible(ctx, stale); err != nil || missing != nil {
		t.Errorf("Visible with the device plugin's supply at 0: missing %q, %v", missing, err)
	}

	// A change of the driver's slices in the API server is the agent's
	// sign to ask Visible again.
	d.slices <- struct{}{}
	if _, ok := <-s.Visibility(); !ok {
		t.Error("Visibility closed")
	}

	if got := s.Labels(gpus); got[nodeinfo.LabelServing] != nodeinfo.ServingDRA || got[nodeinfo.LabelGPUCount] != "2" {
		t.Errorf("Labels = %v, want the hardware labels and serving=dra", got)
	}
	if err := s.Servable([]mig.GPU{{Index: 0, UUID: "GPU-x", MigEnabled: true, Instances: []mig.Instance{{Profile: "1g.10gb", HasCI: true}}}}); err == nil {
		t.Error("Servable accepted a layout whose device has no UUID")
	}

	d.fatal <- errors.New("gRPC server failed")
	if err := <-done; err == nil || !strings.Contains(err.Error(), "gRPC server failed") {
		t.Errorf("Run after a fatal driver error = %v", err)
	}
	cancel()
	if !d.stopped {
		t.Error("Run returned without stopping the driver")
	}
}

// In dynamic mode the server takes no layout, and the Node's label says
// which mode is served.
func TestServerDynamicMode(t *testing.T) {
	gpus := []mig.GPU{{Index: 0, UUID: "GPU-0", MigEnabled: true}}
	for _, dynamic := range []bool{false, true} {
		s := New(Options{Driver: &fakeDriver{dynamic: dynamic}, DriverName: dra.DriverName, NodeName: "n"})
		err := s.Servable(gpus)
		mode := s.Labels(gpus)[nodeinfo.LabelDRAMode]
		switch {
		case dynamic && (!errors.Is(err, ErrDynamicMode) || mode != nodeinfo.DRAModeDynamic):
			t.Errorf("dynamic: Servable = %v, label %q; want ErrDynamicMode and dynamic", err, mode)
		case !dynamic && (err != nil || mode != nodeinfo.DRAModeStatic):
			t.Errorf("static: Servable = %v, label %q; want nil and static", err, mode)
		}
	}
}

// In dynamic mode an Xid of the whole GPU reaches the driver under the
// GPU's UUID, which dra.DynamicResources taints every placement of the
// GPU by, whether or not Prepare made an instance there; an Xid of one
// instance stays that instance's. In static mode a GPU with MIG on is no
// device, and its instances are what is faulted. The real health watcher
// on a simulated H100 with MIG on and, on GPU 0, a 3g.40gb at 4 (as a
// Prepare makes it).
func TestServerDynamicGPUFaults(t *testing.T) {
	for _, tc := range []struct {
		name    string
		dynamic bool
		// instanceXid scopes the Xid to the 3g.40gb; else the whole GPU.
		instanceXid bool
		// gpu0, gpu1 and inst say which of GPU 0's UUID, GPU 1's and the
		// instance's are faulted.
		gpu0, gpu1, inst bool
	}{
		{name: "dynamic: Xid 79 of GPU 0", dynamic: true, gpu0: true, inst: true},
		{name: "dynamic: Xid 48 of the instance", dynamic: true, instanceXid: true, inst: true},
		{name: "static: Xid 79 of GPU 0", inst: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lib := simtest.New(t, sim.Config{GPUs: []sim.GPUSpec{{Model: "H100-SXM5-80GB", Count: 2, Initial: &sim.InitialState{MigEnabled: true}}}, UUIDSeed: t.Name()})
			if _, err := nvmlmig.NewPartitioner(lib).CreateInstance(0, "3g.40gb", 4); err != nil {
				t.Fatal(err)
			}
			gpus, err := nvmlmig.Discover(lib)
			if err != nil {
				t.Fatal(err)
			}
			w, err := health.New(lib, health.Options{QuietPeriod: -1, PollInterval: 10 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { _ = w.Run(ctx) }()
			d := &fakeDriver{dynamic: tc.dynamic, fatal: make(chan error, 1)}
			s := New(Options{Driver: d, Health: w, DriverName: dra.DriverName, NodeName: node})
			go func() { _ = s.Run(ctx) }()
			if err := s.Serve(ctx, gpus); err != nil {
				t.Fatal(err)
			}
			watched := 1 // static: only GPU 0 has a device
			if tc.dynamic {
				watched = 2
			}
			waitUntil(t, "the watcher watches the GPUs", func() bool { return len(w.Watching()) == watched })
			in := gpus[0].Instances[0]
			gi, ci, xid := sim.NoInstance, sim.NoInstance, uint64(79)
			if tc.instanceXid {
				gi, ci, xid = in.GIID, in.CIID, 48
			}
			if err := lib.InjectXid(0, gi, ci, xid); err != nil {
				t.Fatal(err)
			}
			var got map[string]dra.Fault
			waitUntil(t, "a publication with the fault", func() bool {
				pubs := d.publications()
				got = pubs[len(pubs)-1]
				return len(got) > 0
			})
			want := map[string]bool{gpus[0].UUID: tc.gpu0, gpus[1].UUID: tc.gpu1, in.UUID: tc.inst}
			for id, bad := range want {
				if _, faulted := got[id]; faulted != bad {
					t.Errorf("%s faulted: %v, want %v (faults %v)", id, faulted, bad, got)
				}
			}
			if len(got) != 1 && !tc.gpu0 {
				t.Errorf("faults %v, want the instance's alone", got)
			}
		})
	}
}

// waitUntil polls cond, which nothing signals, for up to 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
