package deviceplugin

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/nodeagent/health"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim/simtest"
	"github.com/migflex/migflex/internal/nvml/nvmlmig"
)

// simNode is two simulated H100s: GPU 0 split 3g+3g, GPU 1 whole.
type simNode struct {
	lib  *sim.Lib
	part *nvmlmig.Partitioner
	gpus []mig.GPU
	// mig0 and mig1 are GPU 0's instances (starts 0 and 4).
	mig0, mig1 mig.Instance
}

func newSimNode(t *testing.T) *simNode {
	t.Helper()
	return newSimNodeWith(t, simConfig(t, ""))
}

func simConfig(t *testing.T, stateDir string) sim.Config {
	return sim.Config{GPUs: []sim.GPUSpec{{Model: "H100-SXM5-80GB", Count: 2}}, UUIDSeed: t.Name(), StateDir: stateDir}
}

func newSimNodeWith(t *testing.T, cfg sim.Config) *simNode {
	t.Helper()
	lib := simtest.New(t, cfg)
	n := &simNode{lib: lib, part: nvmlmig.NewPartitioner(lib)}
	var err error
	if err = n.part.SetMigMode(0, true); err != nil {
		t.Fatal(err)
	}
	if n.mig0, err = n.part.CreateInstance(0, "3g.40gb", 0); err != nil {
		t.Fatal(err)
	}
	if n.mig1, err = n.part.CreateInstance(0, "3g.40gb", 4); err != nil {
		t.Fatal(err)
	}
	n.discover(t)
	return n
}

func (n *simNode) discover(t *testing.T) {
	t.Helper()
	gpus, err := nvmlmig.Discover(n.lib)
	if err != nil {
		t.Fatal(err)
	}
	n.gpus = gpus
}

// startWatcher returns a health watcher over the simulator; the Manager
// runs it. Devices never recover unless opts sets a quiet period.
func startWatcher(t *testing.T, lib *sim.Lib, opts health.Options) *health.Watcher {
	t.Helper()
	if opts.QuietPeriod == 0 {
		opts.QuietPeriod = -1
	}
	opts.PollInterval = 10 * time.Millisecond
	w, err := health.New(lib, opts)
	if err != nil {
		t.Fatal(err)
	}
	// The watcher is the node's, run by its owner; the Manager only reads it.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("health watcher: %v", err)
		}
	})
	return w
}

// waitWatching polls until the watcher registered Xid events of every GPU:
// an Xid raised before that is, as on real NVML, lost.
func waitWatching(t *testing.T, w *health.Watcher, gpus []mig.GPU) {
	t.Helper()
	var want []string
	for _, g := range gpus {
		want = append(want, g.UUID)
	}
	slices.Sort(want)
	deadline := time.Now().Add(hangTimeout)
	for !cmp.Equal(want, w.Watching()) {
		if time.Now().After(deadline) {
			t.Fatalf("watcher watches %v, want %v", w.Watching(), want)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition nothing signals
	}
}

func TestSimulatedXidMakesDeviceUnhealthyAndItRecovers(t *testing.T) {
	n := newSimNode(t)
	// On a fake clock the quiet period passes only when the test steps it,
	// so a device stays unhealthy for as long as the test looks at it.
	const quiet = 5 * time.Minute
	clk := testingclock.NewFakeClock(time.Now())
	w := startWatcher(t, n.lib, health.Options{QuietPeriod: quiet, Clock: clk})
	e := start(t, Options{PostAllocator: envPost{}, Health: w}, n.gpus)
	const r = "nvidia.com/mig-3g.40gb"
	a, b, whole := n.mig0.UUID, n.mig1.UUID, n.gpus[1].UUID
	e.wait("healthy layout", serving(map[string][]string{r: {a, b}, resourceGPU: {whole}}))
	waitWatching(t, w, n.gpus)

	// An Xid on instance b's GPU and compute instance hits b only.
	if err := n.lib.InjectXid(0, n.mig1.GIID, n.mig1.CIID, 79); err != nil {
		t.Fatal(err)
	}
	e.wait("b unhealthy", serving(map[string][]string{r: {a, b + "!"}, resourceGPU: {whole}}))
	_, err := e.kubelet.Allocate(e.ctx, r, b)
	if s, _ := status.FromError(err); s.Code() != codes.FailedPrecondition {
		t.Errorf("Allocate of the unhealthy device: %v, want FailedPrecondition", err)
	}
	if st := statusOf(e.m, r, b); st.Healthy || st.Fault == nil || st.Fault.Xid != 79 {
		t.Errorf("Resources() reports %+v for b, want unhealthy with Xid 79", st)
	}
	// After the quiet period without new errors it is healthy again.
	clk.Step(quiet)
	e.wait("b recovered", serving(map[string][]string{r: {a, b}, resourceGPU: {whole}}))
	if _, err := e.kubelet.Allocate(e.ctx, r, b); err != nil {
		t.Errorf("Allocate after recovery: %v", err)
	}

	// An Xid for the whole GPU hits every device on it, not the other GPU.
	if err := n.lib.InjectXid(0, sim.NoInstance, sim.NoInstance, 48); err != nil {
		t.Fatal(err)
	}
	e.wait("GPU 0 unhealthy", serving(map[string][]string{r: {a + "!", b + "!"}, resourceGPU: {whole}}))
	clk.Step(quiet)
	e.wait("GPU 0 recovered", serving(map[string][]string{r: {a, b}, resourceGPU: {whole}}))
}

func TestSimulatedIgnoredXid(t *testing.T) {
	n := newSimNode(t)
	w := startWatcher(t, n.lib, health.Options{})
	e := start(t, Options{PostAllocator: envPost{}, Health: w}, n.gpus)
	const r = "nvidia.com/mig-3g.40gb"
	a, b, whole := n.mig0.UUID, n.mig1.UUID, n.gpus[1].UUID
	e.wait("healthy layout", serving(map[string][]string{r: {a, b}, resourceGPU: {whole}}))
	waitWatching(t, w, n.gpus)

	for _, xid := range health.DefaultIgnoredXids() {
		if err := n.lib.InjectXid(0, n.mig0.GIID, n.mig0.CIID, xid); err != nil {
			t.Fatal(err)
		}
	}
	// A counted Xid on the same GPU after them: once it shows, the ignored
	// ones before it have been handled.
	if err := n.lib.InjectXid(0, n.mig1.GIID, n.mig1.CIID, 94); err != nil {
		t.Fatal(err)
	}
	e.wait("only b unhealthy", serving(map[string][]string{r: {a, b + "!"}, resourceGPU: {whole}}))
	if st := statusOf(e.m, r, a); !st.Healthy {
		t.Errorf("a is %+v after ignored Xids, want healthy", st)
	}
}

func TestSimulatedLayoutChangeMovesHealthChecks(t *testing.T) {
	n := newSimNode(t)
	w := startWatcher(t, n.lib, health.Options{})
	e := start(t, Options{PostAllocator: envPost{}, Health: w}, n.gpus)
	const r3, r1 = "nvidia.com/mig-3g.40gb", "nvidia.com/mig-1g.10gb"
	a, b, whole := n.mig0.UUID, n.mig1.UUID, n.gpus[1].UUID
	e.wait("first layout", serving(map[string][]string{r3: {a, b}, resourceGPU: {whole}}))
	waitWatching(t, w, n.gpus)
	if err := n.lib.InjectXid(0, n.mig1.GIID, n.mig1.CIID, 79); err != nil {
		t.Fatal(err)
	}
	e.wait("b unhealthy", serving(map[string][]string{r3: {a, b + "!"}, resourceGPU: {whole}}))

	// b is replaced by a 1g instance in its place, which the simulator gives
	// b's GPU instance id (the lowest free) but a UUID of its own: another
	// device, without b's fault. Its Xids are scoped to it.
	if err := n.part.DestroyInstance(0, n.mig1.GIID); err != nil {
		t.Fatal(err)
	}
	c, err := n.part.CreateInstance(0, "1g.10gb", 4)
	if err != nil {
		t.Fatal(err)
	}
	if c.UUID == b {
		t.Errorf("the 1g instance in b's place has b's UUID %s", b)
	}
	n.discover(t)
	if err := e.m.Serve(e.ctx, n.gpus); err != nil {
		t.Fatal(err)
	}
	e.wait("second layout", serving(map[string][]string{r3: {a}, r1: {c.UUID}, resourceGPU: {whole}}))

	if err := n.lib.InjectXid(0, c.GIID, c.CIID, 79); err != nil {
		t.Fatal(err)
	}
	e.wait("c unhealthy", serving(map[string][]string{r3: {a}, r1: {c.UUID + "!"}, resourceGPU: {whole}}))
}

// TestSimulatedXidFromAnotherProcess sends the Xid the way a CLI in
// another process would: through the running simulator's inbox.
func TestSimulatedXidFromAnotherProcess(t *testing.T) {
	cfg := simConfig(t, t.TempDir())
	n := newSimNodeWith(t, cfg)
	w := startWatcher(t, n.lib, health.Options{})
	e := start(t, Options{PostAllocator: envPost{}, Health: w}, n.gpus)
	const r = "nvidia.com/mig-3g.40gb"
	a, b, whole := n.mig0.UUID, n.mig1.UUID, n.gpus[1].UUID
	e.wait("healthy layout", serving(map[string][]string{r: {a, b}, resourceGPU: {whole}}))
	waitWatching(t, w, n.gpus)

	queued, err := sim.Send(cfg, sim.Command{Op: sim.OpXid, GPU: 0, GI: n.mig0.GIID, CI: n.mig0.CIID, Xid: 79})
	if err != nil || !queued {
		t.Fatalf("Send = %v, %v; want queued for the running simulator", queued, err)
	}
	e.wait("a unhealthy", serving(map[string][]string{r: {a + "!", b}, resourceGPU: {whole}}))
}

func statusOf(m *Manager, resource, id string) DeviceStatus {
	for _, r := range m.Resources() {
		if r.Name != resource {
			continue
		}
		for _, d := range r.Devices {
			if d.ID == id {
				return d
			}
		}
	}
	return DeviceStatus{}
}

// TestSimulatedHungHealthCallKeepsServing: the simulator's hang fault
// holds the health watcher's handle lookup of GPU 0 (10 minutes). Past the
// watcher's call deadline the hang is counted, GPU 1 is watched and its
// Xid reported, and the kubelet's ListAndWatch and Allocate are answered
// throughout; once the call returns, GPU 0 is watched too.
func TestSimulatedHungHealthCallKeepsServing(t *testing.T) {
	n := newSimNode(t)
	release := simtest.Hang(t, n.lib, "slow", sim.CallGetHandle, 0)
	timeouts := make(chan string, 10)
	// The deadline is short so that the test goes on: nothing here fails
	// on time, it waits for the outcome.
	w := startWatcher(t, n.lib, health.Options{CallTimeout: 20 * time.Millisecond, OnTimeout: func(call string) { timeouts <- call }})
	e := start(t, Options{PostAllocator: envPost{}, Health: w}, n.gpus)
	const r = "nvidia.com/mig-3g.40gb"
	a, b, whole := n.mig0.UUID, n.mig1.UUID, n.gpus[1].UUID

	// A Wait slower than the deadline on a loaded machine is reported
	// too, and harmless: wait for the lookup's.
	for reported := false; !reported; {
		select {
		case call := <-timeouts:
			reported = call == "DeviceGetHandleByUUID/RegisterEvents"
		case <-time.After(hangTimeout):
			t.Fatal("the hung handle lookup was never reported")
		}
	}
	waitWatching(t, w, n.gpus[1:])
	e.wait("healthy layout while GPU 0's call hangs", serving(map[string][]string{r: {a, b}, resourceGPU: {whole}}))
	if _, err := e.kubelet.Allocate(e.ctx, r, a); err != nil {
		t.Errorf("Allocate while a health call hangs: %v", err)
	}
	if err := n.lib.InjectXid(1, sim.NoInstance, sim.NoInstance, 48); err != nil {
		t.Fatal(err)
	}
	e.wait("GPU 1 unhealthy", serving(map[string][]string{r: {a, b}, resourceGPU: {whole + "!"}}))

	// The call returns: GPU 0's Xid events are registered, by it or by
	// the retry after it.
	release()
	waitWatching(t, w, n.gpus)
	if err := n.lib.InjectXid(0, n.mig0.GIID, n.mig0.CIID, 79); err != nil {
		t.Fatal(err)
	}
	e.wait("a unhealthy", serving(map[string][]string{r: {a + "!", b}, resourceGPU: {whole + "!"}}))
}
