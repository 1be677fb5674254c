package sim_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"

	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
	"github.com/migflex/migflex/internal/testsupport/testutil"
)

// hangGuard bounds a Wait that must return an event: a generous timeout so a
// broken simulator fails the test instead of hanging it. Nothing depends on
// how fast the event comes.
const hangGuard = 60_000 // ms

type event struct {
	GPU     string // UUID of EventData.Device
	Type    uint64
	Xid     uint64
	GI, CI  uint32
	Outcome nvml.Return
}

func wait(t *testing.T, set nvml.EventSet, timeoutMs uint32) event {
	t.Helper()
	e, ret := set.Wait(timeoutMs)
	ev := event{Outcome: ret}
	if ret == nvml.SUCCESS {
		ev.GPU, _ = e.Device.GetUUID()
		ev.Type, ev.Xid, ev.GI, ev.CI = e.EventType, e.EventData, e.GpuInstanceId, e.ComputeInstanceId
	}
	return ev
}

func newEventSet(t *testing.T, l *sim.Lib, gpus ...nvml.Device) nvml.EventSet {
	t.Helper()
	set, ret := l.EventSetCreate()
	if ret != nvml.SUCCESS {
		t.Fatalf("EventSetCreate() = %v", ret)
	}
	for _, d := range gpus {
		types, ret := d.GetSupportedEventTypes()
		if ret != nvml.SUCCESS || types&nvml.EventTypeXidCriticalError == 0 {
			t.Fatalf("GetSupportedEventTypes() = %#x, %v", types, ret)
		}
		if ret := d.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.SUCCESS {
			t.Fatalf("RegisterEvents() = %v", ret)
		}
	}
	return set
}

func TestXidEvents(t *testing.T) {
	l := newLib(t, gpu("H100-SXM5-80GB"), gpu("H100-SXM5-80GB"))
	d0 := enableMIG(t, l, 0)
	gi, _ := createInstance(t, d0, byKind["3g"], 4)
	giid := giID(t, gi)
	u0, _ := d0.GetUUID()

	if err := l.InjectXid(0, sim.NoInstance, sim.NoInstance, 48); err != nil {
		t.Fatal(err)
	}
	set := newEventSet(t, l, d0) // events before registration are not recorded
	other := newEventSet(t, l, device(t, l, 1))

	tests := []struct {
		name   string
		gpu    int
		gi, ci uint32
		xid    uint64
		want   event
	}{
		{"whole GPU", 0, sim.NoInstance, sim.NoInstance, 79,
			event{GPU: u0, Type: nvml.EventTypeXidCriticalError, Xid: 79, GI: 0xFFFFFFFF, CI: 0xFFFFFFFF}},
		{"MIG device", 0, giid, 0, 43,
			event{GPU: u0, Type: nvml.EventTypeXidCriticalError, Xid: 43, GI: giid, CI: 0}},
		{"GPU instance", 0, giid, sim.NoInstance, 94,
			event{GPU: u0, Type: nvml.EventTypeXidCriticalError, Xid: 94, GI: giid, CI: 0xFFFFFFFF}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := l.InjectXid(tc.gpu, tc.gi, tc.ci, tc.xid); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, wait(t, set, hangGuard)); diff != "" {
				t.Errorf("event (-want +got):\n%s", diff)
			}
			// Nothing else queued, and GPU 1's set saw nothing.
			if got := wait(t, set, 0).Outcome; got != nvml.ERROR_TIMEOUT {
				t.Errorf("second Wait() = %v, want ERROR_TIMEOUT", got)
			}
			if got := wait(t, other, 0).Outcome; got != nvml.ERROR_TIMEOUT {
				t.Errorf("other GPU's set Wait() = %v, want ERROR_TIMEOUT", got)
			}
		})
	}
}

func TestEventSetErrors(t *testing.T) {
	l := newLib(t, gpu("A100-SXM4-40GB"))
	d := enableMIG(t, l, 0)
	createInstance(t, d, byKind["7g"], 0)
	set := newEventSet(t, l)

	if got := wait(t, set, 10).Outcome; got != nvml.ERROR_TIMEOUT {
		t.Errorf("Wait() with nothing registered = %v, want ERROR_TIMEOUT", got)
	}
	if ret := d.RegisterEvents(nvml.EventTypeSingleBitEccError, set); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("RegisterEvents(ECC) = %v, want ERROR_NOT_SUPPORTED", ret)
	}
	if ret := d.RegisterEvents(0, set); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("RegisterEvents(0) = %v, want ERROR_INVALID_ARGUMENT", ret)
	}
	if ret := d.RegisterEvents(nvml.EventTypeXidCriticalError, nil); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("RegisterEvents(nil set) = %v, want ERROR_INVALID_ARGUMENT", ret)
	}
	m, _ := d.GetMigDeviceHandleByIndex(0)
	if ret := m.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("RegisterEvents on a MIG device = %v, want ERROR_NOT_SUPPORTED (NVML reports MIG events on the parent)", ret)
	}

	for _, tc := range []struct {
		gpu    int
		gi, ci uint32
		want   string
	}{
		{3, sim.NoInstance, sim.NoInstance, "no GPU 3"},
		{0, 5, sim.NoInstance, "GPU 0 has no GPU instance 5"},
		{0, 1, 4, "GPU 0 GPU instance 1 has no compute instance 4"},
		{0, sim.NoInstance, 0, "compute instance 0 needs its GPU instance"},
	} {
		if err := l.InjectXid(tc.gpu, tc.gi, tc.ci, 79); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("InjectXid(%d, %d, %d) = %v, want %q", tc.gpu, tc.gi, tc.ci, err, tc.want)
		}
	}

	if ret := set.Free(); ret != nvml.SUCCESS {
		t.Fatalf("Free() = %v", ret)
	}
	if ret := set.Free(); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("second Free() = %v, want ERROR_INVALID_ARGUMENT", ret)
	}
	if got := wait(t, set, 0).Outcome; got != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("Wait() on a freed set = %v, want ERROR_INVALID_ARGUMENT", got)
	}
	if ret := d.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("RegisterEvents on a freed set = %v, want ERROR_INVALID_ARGUMENT", ret)
	}
}

// TestWaitWakesOnEvent: a Wait already blocked returns the event injected
// after it started, and Free releases a blocked Wait.
func TestWaitWakesOnEvent(t *testing.T) {
	l := newLib(t, gpu("H100-SXM5-80GB"))
	d := device(t, l, 0)
	set := newEventSet(t, l, d)
	got := make(chan event)
	go func() { got <- wait(t, set, hangGuard) }()
	// The waiter may or may not be blocked yet; either way the event must
	// reach it.
	if err := l.InjectXid(0, sim.NoInstance, sim.NoInstance, 31); err != nil {
		t.Fatal(err)
	}
	if e := <-got; e.Outcome != nvml.SUCCESS || e.Xid != 31 {
		t.Errorf("Wait() = %+v, want Xid 31", e)
	}

	go func() { got <- wait(t, set, hangGuard) }()
	set.Free()
	if e := <-got; e.Outcome != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("Wait() across Free() = %v, want ERROR_INVALID_ARGUMENT", e.Outcome)
	}
}

// TestInbox: another process reaches a running simulator through the inbox
// in its state directory (Send appends, fsnotify wakes the simulator).
func TestInbox(t *testing.T) {
	dir := t.TempDir()
	cfg := persistentConfig(dir, gpu("H100-SXM5-80GB"))
	l := open(t, cfg)
	defer closeLib(t, l)
	d := enableMIG(t, l, 0)
	gi, _ := createInstance(t, d, byKind["2g"], 0)
	giid := giID(t, gi)
	set := newEventSet(t, l, d)

	// A stray line does not stop the ones after it.
	f, err := os.OpenFile(filepath.Join(dir, "inbox.jsonl"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("{\"op\":\"explode\"}\nnot json\n")
	f.Close()

	// A bad target is refused at once, not queued for the agent's log.
	for _, c := range []sim.Command{
		{Op: sim.OpXid, GPU: 0, GI: giid + 1, CI: sim.NoInstance, Xid: 79},
		{Op: sim.OpBusy, GPU: 2, GI: 0},
		{Op: sim.OpReset, GPU: -1},
	} {
		if queued, err := sim.Send(cfg, c); err == nil || queued {
			t.Errorf("Send(%+v) = %v, %v, want an error", c, queued, err)
		}
	}

	queued, err := sim.Send(cfg, sim.Command{Op: sim.OpXid, GPU: 0, GI: giid, CI: 0, Xid: 79})
	if err != nil || !queued {
		t.Fatalf("Send(xid) = %v, %v, want queued", queued, err)
	}
	u, _ := d.GetUUID()
	want := event{GPU: u, Type: nvml.EventTypeXidCriticalError, Xid: 79, GI: giid, CI: 0}
	if diff := cmp.Diff(want, wait(t, set, hangGuard)); diff != "" {
		t.Errorf("event from the inbox (-want +got):\n%s", diff)
	}

	if _, err := sim.Send(cfg, sim.Command{Op: sim.OpBusy, GPU: 0, GI: giid, Busy: true}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the busy mark", func() bool { return l.Snapshot()[0].Instances[0].Busy })
	if _, err := sim.Send(cfg, sim.Command{Op: sim.OpReboot}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the reboot", func() bool { return len(l.Snapshot()[0].Instances) == 0 })
}

// TestSendWithoutSimulator: with no simulator running, Send applies the
// change to the persisted state itself, and refuses an Xid nobody would see.
func TestSendWithoutSimulator(t *testing.T) {
	dir := t.TempDir()
	cfg := persistentConfig(dir, gpu("A100-SXM4-40GB"))
	l := open(t, cfg)
	d := device(t, l, 0)
	d.SetMigMode(nvml.DEVICE_MIG_ENABLE) // pending until reset
	closeLib(t, l)

	if queued, err := sim.Send(cfg, sim.Command{Op: sim.OpReset, GPU: 0}); err != nil || queued {
		t.Fatalf("Send(reset) = %v, %v, want applied directly", queued, err)
	}
	_, err := sim.Send(cfg, sim.Command{Op: sim.OpXid, GPU: 0, GI: sim.NoInstance, CI: sim.NoInstance, Xid: 79})
	if err == nil || !strings.Contains(err.Error(), "no simulator is running") {
		t.Errorf("Send(xid) with no simulator = %v", err)
	}
	if _, err := sim.Send(cfg, sim.Command{Op: "explode"}); err == nil {
		t.Error("Send(unknown op) succeeded")
	}
	if _, err := sim.Send(sim.Config{GPUs: cfg.GPUs}, sim.Command{Op: sim.OpReboot}); err == nil {
		t.Error("Send() to an in-memory simulator succeeded")
	}

	l = open(t, cfg)
	defer closeLib(t, l)
	if got := modes(t, device(t, l, 0)); got != (migModes{nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE}) {
		t.Errorf("modes after a reset sent while no simulator ran = %+v", got)
	}
}

// TestConcurrentUse is the agent's pattern: a health watcher blocked in
// Wait while reconcile creates and destroys instances and readers list
// them. Run with -race.
func TestConcurrentUse(t *testing.T) {
	l := newLib(t, gpu("H100-SXM5-80GB"), gpu("A100-SXM4-80GB"))
	d := enableMIG(t, l, 0)
	set := newEventSet(t, l, d)
	const rounds = 50
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { // watcher
		defer wg.Done()
		for range rounds {
			if e := wait(t, set, hangGuard); e.Outcome != nvml.SUCCESS {
				t.Errorf("Wait() = %v", e.Outcome)
				return
			}
		}
	}()
	go func() { // injector
		defer wg.Done()
		for range rounds {
			if err := l.InjectXid(0, sim.NoInstance, sim.NoInstance, 79); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	go func() { // reader
		defer wg.Done()
		for range rounds {
			n, _ := d.GetMaxMigDeviceCount()
			for i := range n {
				if m, ret := d.GetMigDeviceHandleByIndex(i); ret == nvml.SUCCESS {
					m.GetUUID() // may be stale by now: any answer but a crash is fine
				}
			}
			l.Snapshot()
		}
	}()
	info := profileInfo(t, d, byKind["1g"])
	for range rounds { // reconcile
		gi, ret := d.CreateGpuInstance(&info)
		if ret != nvml.SUCCESS {
			t.Fatalf("CreateGpuInstance() = %v", ret)
		}
		if ret := gi.Destroy(); ret != nvml.SUCCESS {
			t.Fatalf("Destroy() = %v", ret)
		}
	}
	wg.Wait()
}
