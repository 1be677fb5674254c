package deviceplugin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/nodeagent/deviceplugin/kubeletstub"
	"github.com/migflex/migflex/internal/nodeagent/devnodes"
)

// drainStatus maps every device the Manager serves to "healthy",
// "unhealthy", "draining" or "unhealthy+draining".
func drainStatus(m *Manager) map[string]string {
	out := map[string]string{}
	for _, r := range m.Resources() {
		for _, d := range r.Devices {
			s := "healthy"
			if !d.Healthy {
				s = "unhealthy"
			}
			if d.Draining {
				if d.Healthy {
					s = "draining"
				} else {
					s += "+draining"
				}
			}
			out[d.ID] = s
		}
	}
	return out
}

// waitStatus waits until cond holds for drainStatus: the Manager signals
// Changes whenever Resources may have changed.
func (e *env) waitStatus(what string, cond func(map[string]string) bool) {
	e.t.Helper()
	deadline := time.After(hangTimeout)
	for {
		st := drainStatus(e.m)
		if cond(st) {
			return
		}
		select {
		case <-e.m.Changes():
		case <-deadline:
			e.t.Fatalf("waiting for %s: devices %v", what, st)
		}
	}
}

// allocateErr checks that Allocate of ids on resource fails with code and a
// message containing msg, or succeeds for codes.OK.
func (e *env) allocateErr(resource string, ids []string, code codes.Code, msg string) {
	e.t.Helper()
	_, err := e.kubelet.Allocate(e.ctx, resource, ids...)
	if code == codes.OK {
		if err != nil {
			e.t.Errorf("Allocate(%s, %v): %v", resource, ids, err)
		}
		return
	}
	if s, _ := status.FromError(err); err == nil || s.Code() != code || !strings.Contains(s.Message(), msg) {
		e.t.Errorf("Allocate(%s, %v) error = %v, want %s containing %q", resource, ids, err, code, msg)
	}
}

// TestDrain walks draining through its life: drained devices go unhealthy
// in ListAndWatch and Allocate refuses them, independently of faults;
// Undrain, or an Update that no longer has the device, ends it.
func TestDrain(t *testing.T) {
	h := newFakeHealth()
	e := start(t, Options{PostAllocator: envPost{}, Health: h}, mixedLayout())
	e.m.settle = 10 * time.Millisecond
	e.wait("layout", serving(mixedWant))
	const r1g, r3g = "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb"

	// MIG-1-8 is faulty before it drains.
	h.set("MIG-1-8", 79)
	e.wait("MIG-1-8 unhealthy", func(st kubeletstub.State) bool {
		return cmp.Equal([]string{"MIG-0-13", "MIG-1-8!"}, deviceList(st.Plugins[r1g].Devices))
	})

	// GPU 0's devices and whole GPU 2 drain (a layout change of both),
	// and the faulty MIG-1-8.
	if err := e.m.Drain(e.ctx, []string{"MIG-0-2", "MIG-0-3", "MIG-0-13", "GPU-2", "MIG-1-8"}); err != nil {
		t.Fatal(err)
	}
	e.wait("drained devices unhealthy", serving(map[string][]string{
		"nvidia.com/mig-3g.40gb":    {"MIG-0-2!"},
		"nvidia.com/mig-2g.20gb":    {"MIG-0-3!"},
		"nvidia.com/mig-1g.10gb":    {"MIG-0-13!", "MIG-1-8!"},
		"nvidia.com/mig-1g.10gb.me": {"MIG-1-7"},
		"nvidia.com/gpu":            {"GPU-2!"},
	}))
	if diff := cmp.Diff(map[string]string{
		"MIG-0-2": "draining", "MIG-0-3": "draining", "MIG-0-13": "draining", "GPU-2": "draining",
		"MIG-1-8": "unhealthy+draining", "MIG-1-7": "healthy",
	}, drainStatus(e.m)); diff != "" {
		t.Errorf("Resources (-want +got):\n%s", diff)
	}
	for name, tc := range map[string]struct {
		resource string
		ids      []string
		code     codes.Code
		msg      string
	}{
		"draining MIG device": {resource: r3g, ids: []string{"MIG-0-2"}, code: codes.FailedPrecondition,
			msg: `resource nvidia.com/mig-3g.40gb: device "MIG-0-2" is being repartitioned`},
		"draining whole GPU": {resource: resourceGPU, ids: []string{"GPU-2"}, code: codes.FailedPrecondition,
			msg: `device "GPU-2" is being repartitioned`},
		"draining beside a device that is not": {resource: r1g, ids: []string{"MIG-0-13"}, code: codes.FailedPrecondition,
			msg: `device "MIG-0-13" is being repartitioned`},
		"not draining": {resource: "nvidia.com/mig-1g.10gb.me", ids: []string{"MIG-1-7"}, code: codes.OK},
	} {
		t.Run(name, func(t *testing.T) { e.allocateErr(tc.resource, tc.ids, tc.code, tc.msg) })
	}

	// Undrain: MIG-0-13 is served again; MIG-1-8 stays unhealthy for its
	// fault until that clears too.
	e.m.Undrain([]string{"MIG-0-13", "MIG-1-8"})
	e.wait("MIG-0-13 back", func(st kubeletstub.State) bool {
		return cmp.Equal([]string{"MIG-0-13", "MIG-1-8!"}, deviceList(st.Plugins[r1g].Devices))
	})
	e.allocateErr(r1g, []string{"MIG-0-13"}, codes.OK, "")
	e.allocateErr(r1g, []string{"MIG-1-8"}, codes.FailedPrecondition, "is unhealthy")
	h.set("MIG-1-8", 0)
	e.wait("MIG-1-8 healthy", func(st kubeletstub.State) bool {
		return cmp.Equal([]string{"MIG-0-13", "MIG-1-8"}, deviceList(st.Plugins[r1g].Devices))
	})
	// ... and the other way round: a fault that clears while draining
	// leaves the device unhealthy.
	h.set("MIG-1-7", 79)
	if err := e.m.Drain(e.ctx, []string{"MIG-1-7"}); err != nil {
		t.Fatal(err)
	}
	h.set("MIG-1-7", 0)
	e.waitStatus("MIG-1-7 healthy but draining", func(st map[string]string) bool { return st["MIG-1-7"] == "draining" })
	// The kubelet learns of it through ListAndWatch, a stream of its own:
	// wait for it rather than read its state at once (a loaded machine
	// showed the previous list here).
	e.wait("the kubelet to see MIG-1-7 unhealthy while it drains", func(st kubeletstub.State) bool {
		return cmp.Equal([]string{"MIG-1-7!"}, deviceList(st.Plugins["nvidia.com/mig-1g.10gb.me"].Devices))
	})
	e.m.Undrain([]string{"MIG-1-7"})
	e.wait("MIG-1-7 back", func(st kubeletstub.State) bool {
		return cmp.Equal([]string{"MIG-1-7"}, deviceList(st.Plugins["nvidia.com/mig-1g.10gb.me"].Devices))
	})

	// GPU 0 is repartitioned: its new layout keeps MIG-0-2 and replaces
	// the rest; GPU 2 is gone. Draining ends for the devices the layout no
	// longer has and goes on for MIG-0-2.
	next := []mig.GPU{migGPU(0, inst("3g.40gb", 0, 4, 2), inst("3g.40gb", 4, 4, 1)), migGPU(1, inst("1g.10gb+me", 0, 1, 7), inst("1g.10gb", 1, 1, 8))}
	if err := e.m.Serve(e.ctx, next); err != nil {
		t.Fatal(err)
	}
	e.wait("new layout", serving(map[string][]string{
		"nvidia.com/mig-3g.40gb":    {"MIG-0-2!", "MIG-0-1"},
		"nvidia.com/mig-2g.20gb":    {},
		"nvidia.com/mig-1g.10gb":    {"MIG-1-8"},
		"nvidia.com/mig-1g.10gb.me": {"MIG-1-7"},
		"nvidia.com/gpu":            {},
	}))
	e.allocateErr(r3g, []string{"MIG-0-1"}, codes.OK, "")
	e.allocateErr(r3g, []string{"MIG-0-2"}, codes.FailedPrecondition, "is being repartitioned")
	e.m.Undrain([]string{"MIG-0-2"})
	// GPU 2 comes back (a GPU reset, say) with the ID it drained under:
	// that drain ended with the layout that lacked it.
	if err := e.m.Serve(e.ctx, append(next, plainGPU(2))); err != nil {
		t.Fatal(err)
	}
	e.wait("GPU 2 back, healthy", serving(map[string][]string{
		"nvidia.com/mig-3g.40gb":    {"MIG-0-2", "MIG-0-1"},
		"nvidia.com/mig-2g.20gb":    {},
		"nvidia.com/mig-1g.10gb":    {"MIG-1-8"},
		"nvidia.com/mig-1g.10gb.me": {"MIG-1-7"},
		"nvidia.com/gpu":            {"GPU-2"},
	}))
	e.allocateErr(resourceGPU, []string{"GPU-2"}, codes.OK, "")
	for id, s := range drainStatus(e.m) {
		if s != "healthy" {
			t.Errorf("device %s is %s at the end", id, s)
		}
	}
}

// TestDrainWaitsForAllocate holds an Allocate between its acceptance of a
// device and its answer (its read of the MIG capability table blocks on a
// FIFO) and drains that device: Drain must not return before the Allocate
// has answered, and then not before the settle time; a Drain whose context
// ends meanwhile undrains.
func TestDrainWaitsForAllocate(t *testing.T) {
	host := fakeHostRoot(t, map[string]string{"dev/nvidia-uvm": ""})
	minors := filepath.Join(host, devnodes.MigMinorsPath)
	if err := os.MkdirAll(filepath.Dir(minors), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(minors, 0o600); err != nil {
		t.Fatal(err)
	}
	gpus := []mig.GPU{migGPU(0, inst("3g.40gb", 0, 4, 2), inst("3g.40gb", 4, 4, 3))}
	const r = "nvidia.com/mig-3g.40gb"
	e := start(t, Options{HostRoot: host}, gpus)
	e.m.settle = 200 * time.Millisecond
	e.wait("layout", serving(map[string][]string{r: {"MIG-0-2", "MIG-0-3"}}))

	type result struct {
		resp *pluginapi.ContainerAllocateResponse
		err  error
	}
	allocated := make(chan result, 1)
	go func() {
		resp, err := e.kubelet.Allocate(e.ctx, r, "MIG-0-2")
		allocated <- result{resp, err}
	}()
	// The Allocate has accepted MIG-0-2 once it opens the table; opening
	// the FIFO for writing without blocking succeeds only then.
	var w *os.File
	deadline := time.Now().Add(hangTimeout)
	for {
		f, err := os.OpenFile(minors, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			w = f
			break
		}
		if !errors.Is(err, syscall.ENXIO) || time.Now().After(deadline) {
			t.Fatalf("waiting for Allocate to read the capability table: %v", err)
		}
		select {
		case res := <-allocated:
			t.Fatalf("Allocate answered without reading the capability table: %v", res.err)
		case <-time.After(time.Millisecond):
		}
	}

	drain := func(ctx context.Context) <-chan error {
		done := make(chan error, 1)
		go func() { done <- e.m.Drain(ctx, []string{"MIG-0-2"}) }()
		return done
	}
	drained := func(st kubeletstub.State) bool {
		return cmp.Equal([]string{"MIG-0-2!", "MIG-0-3"}, deviceList(st.Plugins[r].Devices))
	}

	// A Drain given up on while the Allocate is held undrains.
	ctx, cancel := context.WithCancel(e.ctx)
	gaveUp := drain(ctx)
	e.wait("MIG-0-2 draining", drained)
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("Drain with a cancelled context = %v, want context.Canceled", err)
	}
	e.wait("MIG-0-2 served again", serving(map[string][]string{r: {"MIG-0-2", "MIG-0-3"}}))

	done := drain(e.ctx)
	e.wait("MIG-0-2 draining", drained)
	// The kubelet already sees the device draining, so a Drain that does
	// not wait for the Allocate has returned by now; the grace below only
	// gives such a Drain more time to show itself, and a Drain that waits
	// passes whatever it is.
	select {
	case err := <-done:
		t.Fatalf("Drain returned (%v) while an Allocate that accepted the device had not answered", err)
	case res := <-allocated:
		t.Fatalf("Allocate answered (%v) before it could read the capability table", res.err)
	case <-time.After(100 * time.Millisecond):
	}

	// Let the Allocate finish: it answers with the device, which it
	// accepted before the drain.
	released := time.Now()
	if _, err := w.WriteString(testMigMinors); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := <-done; err != nil {
		t.Fatalf("Drain: %v", err)
	}
	// The Allocate answered after released, and Drain settles after it.
	if waited := time.Since(released); waited < e.m.settle {
		t.Errorf("Drain returned %v after the held Allocate was released, want at least the settle time %v", waited, e.m.settle)
	}
	select {
	case res := <-allocated:
		if res.err != nil || res.resp.Envs["NVIDIA_VISIBLE_DEVICES"] != "MIG-0-2" {
			t.Errorf("the Allocate accepted before the drain = %v, %v; want MIG-0-2", res.resp, res.err)
		}
	case <-time.After(hangTimeout):
		t.Fatal("the held Allocate did not answer")
	}
	// Once Drain returned, the device is refused.
	e.allocateErr(r, []string{"MIG-0-2"}, codes.FailedPrecondition, "is being repartitioned")
}

// TestWithhold: withheld devices go unhealthy and Allocate refuses them,
// as draining ones, but the end of a drain does not offer them, nor does a
// new layout that still has them; only Withhold without them does.
func TestWithhold(t *testing.T) {
	e := start(t, Options{PostAllocator: envPost{}}, mixedLayout())
	e.m.settle = 10 * time.Millisecond
	e.wait("layout", serving(mixedWant))

	e.m.Withhold([]string{"GPU-2", "MIG-0-13"})
	withheld := serving(map[string][]string{
		"nvidia.com/mig-3g.40gb":    {"MIG-0-2"},
		"nvidia.com/mig-2g.20gb":    {"MIG-0-3"},
		"nvidia.com/mig-1g.10gb":    {"MIG-0-13!", "MIG-1-8"},
		"nvidia.com/mig-1g.10gb.me": {"MIG-1-7"},
		"nvidia.com/gpu":            {"GPU-2!"},
	})
	e.wait("withheld devices unhealthy", withheld)
	e.allocateErr(resourceGPU, []string{"GPU-2"}, codes.FailedPrecondition, `device "GPU-2"`)

	// A repartition's drain of the same devices ends: they stay withheld.
	if err := e.m.Drain(e.ctx, []string{"GPU-2", "MIG-0-13"}); err != nil {
		t.Fatal(err)
	}
	e.m.Undrain([]string{"GPU-2", "MIG-0-13"})
	if err := e.m.Serve(e.ctx, mixedLayout()); err != nil {
		t.Fatal(err)
	}
	e.wait("still withheld after the drain and a new Serve", withheld)
	if st := drainStatus(e.m); st["GPU-2"] != "draining" || st["MIG-0-13"] != "draining" {
		t.Errorf("Resources: GPU-2 %s, MIG-0-13 %s; want both draining (withheld)", st["GPU-2"], st["MIG-0-13"])
	}

	e.m.Withhold(nil)
	e.wait("offered again", serving(mixedWant))
	e.allocateErr(resourceGPU, []string{"GPU-2"}, codes.OK, "")
}
