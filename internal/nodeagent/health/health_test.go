package health

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/migflex/migflex/internal/nvml/nvmlcall/nvmlcalltest"
	"github.com/migflex/migflex/internal/testsupport/testutil"
)

// fakeLib is an NVML stand-in with one event set. Like NVML it delivers an
// event only if the GPU's Xid events were registered on the set.
type fakeLib struct {
	mu      sync.Mutex
	devices map[string]*fakeDevice
	set     *fakeSet
	created chan struct{}
	inits   int
	// handleFailures is how many more handle lookups of a GPU fail.
	handleFailures map[string]int
	// hangHandle holds a GPU's handle lookups until its channel is
	// closed; handleEntered gets the GPU as such a lookup enters.
	hangHandle    map[string]chan struct{}
	handleEntered chan string
}

type fakeDevice struct {
	nvml.Device // methods the watcher must not call panic through the nil interface
	uuid        string
	registered  chan struct{}
	once        sync.Once
	noXid       bool
	// registerFailures is how many more RegisterEvents calls fail.
	registerFailures int
}

func (d *fakeDevice) GetUUID() (string, nvml.Return) { return d.uuid, nvml.SUCCESS }

func (d *fakeDevice) GetSupportedEventTypes() (uint64, nvml.Return) {
	if d.noXid {
		return nvml.EventTypeSingleBitEccError, nvml.SUCCESS
	}
	return nvml.EventTypeXidCriticalError | nvml.EventTypeSingleBitEccError, nvml.SUCCESS
}

func (d *fakeDevice) RegisterEvents(types uint64, _ nvml.EventSet) nvml.Return {
	if types&nvml.EventTypeXidCriticalError == 0 {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	if d.registerFailures > 0 {
		d.registerFailures--
		return nvml.ERROR_UNKNOWN
	}
	d.once.Do(func() { close(d.registered) })
	return nvml.SUCCESS
}

type fakeSet struct {
	events chan nvml.EventData
	freed  chan struct{}
	// hang, when set, holds every Wait until it is closed; waiting gets
	// a value as a Wait enters. Set it before Run, or with hangWaits.
	mu      sync.Mutex
	hang    chan struct{}
	waiting chan struct{}
}

// hangWaits makes the Waits from now on hang until the returned channel
// is closed.
func (s *fakeSet) hangWaits() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hang = make(chan struct{})
	return s.hang
}

func (s *fakeSet) Wait(timeoutMs uint32) (nvml.EventData, nvml.Return) {
	s.mu.Lock()
	hang := s.hang
	s.mu.Unlock()
	if hang != nil {
		s.waiting <- struct{}{}
		<-hang
	}
	t := time.NewTimer(time.Duration(timeoutMs) * time.Millisecond)
	defer t.Stop()
	select {
	case ev := <-s.events:
		if ev.Device == nil {
			// A nil device here stands for "the GPU fell off the bus".
			return nvml.EventData{}, nvml.ERROR_GPU_IS_LOST
		}
		return ev, nvml.SUCCESS
	case <-t.C:
		return nvml.EventData{}, nvml.ERROR_TIMEOUT
	}
}

func (s *fakeSet) Free() nvml.Return { close(s.freed); return nvml.SUCCESS }

func newFakeLib(gpus ...string) *fakeLib {
	l := &fakeLib{
		devices: map[string]*fakeDevice{},
		set:     &fakeSet{events: make(chan nvml.EventData, 16), freed: make(chan struct{})},
		created: make(chan struct{}),

		handleFailures: map[string]int{},
	}
	for _, g := range gpus {
		l.devices[g] = &fakeDevice{uuid: g, registered: make(chan struct{})}
	}
	return l
}

func (l *fakeLib) Init() nvml.Return {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inits++
	return nvml.SUCCESS
}

func (l *fakeLib) Shutdown() nvml.Return {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inits == 0 {
		return nvml.ERROR_UNINITIALIZED
	}
	l.inits--
	return nvml.SUCCESS
}

func (l *fakeLib) EventSetCreate() (nvml.EventSet, nvml.Return) {
	close(l.created)
	return l.set, nvml.SUCCESS
}

func (l *fakeLib) DeviceGetHandleByUUID(uuid string) (nvml.Device, nvml.Return) {
	if ch := l.hangHandle[uuid]; ch != nil {
		l.handleEntered <- uuid
		<-ch
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	d, ok := l.devices[uuid]
	if !ok {
		return nil, nvml.ERROR_NOT_FOUND
	}
	if l.handleFailures[uuid] > 0 {
		l.handleFailures[uuid]--
		return nil, nvml.ERROR_UNKNOWN
	}
	return d, nvml.SUCCESS
}

func (l *fakeLib) waitRegistered(t *testing.T, gpu string) {
	t.Helper()
	select {
	case <-l.devices[gpu].registered:
	case <-time.After(10 * time.Second):
		t.Fatalf("Xid events of %s never registered", gpu)
	}
}

func (l *fakeLib) xid(gpu string, gi, ci uint32, xid uint64) {
	l.set.events <- nvml.EventData{Device: l.devices[gpu], EventType: nvml.EventTypeXidCriticalError, EventData: xid, GpuInstanceId: gi, ComputeInstanceId: ci}
}

var testTargets = []Target{
	{ID: "MIG-a1", GPU: "GPU-a", MIG: true, GI: 1, CI: 0},
	{ID: "MIG-a2", GPU: "GPU-a", MIG: true, GI: 2, CI: 0},
	{ID: "MIG-a5", GPU: "GPU-a", MIG: true, GI: 5, CI: 0},
	{ID: "GPU-b", GPU: "GPU-b"},
}

// start runs a watcher over lib and stops it at the end of the test,
// checking that Run returns nil and frees the event set.
func start(t *testing.T, lib *fakeLib, opts Options, targets []Target) *Watcher {
	t.Helper()
	w := newWatcher(t, lib, opts)
	run(t, lib, w, targets)
	return w
}

// newWatcher is New with a short poll interval unless opts has one.
func newWatcher(t *testing.T, lib *fakeLib, opts Options) *Watcher {
	t.Helper()
	if opts.PollInterval == 0 {
		opts.PollInterval = 10 * time.Millisecond
	}
	w, err := New(lib, opts)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// run is the second half of start, for a test that sets up w before it runs.
func run(t *testing.T, lib *fakeLib, w *Watcher, targets []Target) {
	t.Helper()
	w.SetTargets(targets)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after cancel")
		}
		select {
		case <-lib.set.freed:
		default:
			t.Error("event set not freed")
		}
		lib.mu.Lock()
		defer lib.mu.Unlock()
		if lib.inits != 0 {
			t.Errorf("NVML left initialized %d times", lib.inits)
		}
	})
}

// waitFor waits on Changes until cond holds for Unhealthy().
func waitFor(t *testing.T, w *Watcher, what string, cond func(map[string]Fault) bool) map[string]Fault {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		u := w.Unhealthy()
		if cond(u) {
			return u
		}
		select {
		case <-w.Changes():
		case <-deadline:
			t.Fatalf("timed out waiting for %s; unhealthy: %v", what, u)
		}
	}
}

func ids(u map[string]Fault) map[string]uint64 {
	out := map[string]uint64{}
	for id, f := range u {
		out[id] = f.Xid
	}
	return out
}

func TestXidScoping(t *testing.T) {
	for name, tc := range map[string]struct {
		gpu    string
		gi, ci uint32
		want   map[string]uint64
	}{
		"one MIG device": {gpu: "GPU-a", gi: 2, ci: 0, want: map[string]uint64{"MIG-a2": 79}},
		"whole GPU instance": {gpu: "GPU-a", gi: 5, ci: AllInstances,
			want: map[string]uint64{"MIG-a5": 79}},
		"whole MIG GPU": {gpu: "GPU-a", gi: AllInstances, ci: AllInstances,
			want: map[string]uint64{"MIG-a1": 79, "MIG-a2": 79, "MIG-a5": 79}},
		"non-MIG GPU": {gpu: "GPU-b", gi: AllInstances, ci: AllInstances, want: map[string]uint64{"GPU-b": 79}},
	} {
		t.Run(name, func(t *testing.T) {
			lib := newFakeLib("GPU-a", "GPU-b")
			w := start(t, lib, Options{QuietPeriod: -1}, testTargets)
			lib.waitRegistered(t, tc.gpu)
			lib.xid(tc.gpu, tc.gi, tc.ci, 79)
			got := waitFor(t, w, "unhealthy devices", func(u map[string]Fault) bool { return len(u) > 0 })
			if diff := cmp.Diff(tc.want, ids(got)); diff != "" {
				t.Errorf("unhealthy (-want +got):\n%s", diff)
			}
			for id, f := range got {
				if f.Reason != "Xid 79" {
					t.Errorf("%s: reason %q, want \"Xid 79\"", id, f.Reason)
				}
			}
		})
	}
}

func TestAffects(t *testing.T) {
	mig := Target{ID: "m", GPU: "g", MIG: true, GI: 3, CI: 1}
	whole := Target{ID: "w", GPU: "g"}
	for name, tc := range map[string]struct {
		t      Target
		gpu    string
		gi, ci uint32
		want   bool
	}{
		"other GPU":              {t: mig, gpu: "h", gi: AllInstances, ci: AllInstances},
		"exact instance":         {t: mig, gpu: "g", gi: 3, ci: 1, want: true},
		"other compute instance": {t: mig, gpu: "g", gi: 3, ci: 0},
		"other GPU instance":     {t: mig, gpu: "g", gi: 4, ci: 1},
		"all CIs of its GI":      {t: mig, gpu: "g", gi: 3, ci: AllInstances, want: true},
		"whole GPU event":        {t: mig, gpu: "g", gi: AllInstances, ci: AllInstances, want: true},
		"whole GPU target":       {t: whole, gpu: "g", gi: 7, ci: 0, want: true},
	} {
		if got := Affects(tc.t, tc.gpu, tc.gi, tc.ci); got != tc.want {
			t.Errorf("%s: Affects = %v, want %v", name, got, tc.want)
		}
	}
}

// epoch is where fake clocks start.
var epoch = time.Date(2025, time.June, 1, 12, 0, 0, 0, time.UTC)

func TestRecoversAfterQuietPeriod(t *testing.T) {
	const quiet = 5 * time.Minute
	clk := testingclock.NewFakeClock(epoch)
	lib := newFakeLib("GPU-a", "GPU-b")
	w := start(t, lib, Options{QuietPeriod: quiet, Clock: clk}, testTargets)
	lib.waitRegistered(t, "GPU-a")
	lib.xid("GPU-a", 1, 0, 48)
	u := waitFor(t, w, "MIG-a1 unhealthy", func(u map[string]Fault) bool { return len(u) == 1 })
	if diff := cmp.Diff(Fault{Xid: 48, Reason: "Xid 48", At: epoch, Until: epoch.Add(quiet)}, u["MIG-a1"]); diff != "" {
		t.Errorf("fault (-want +got):\n%s", diff)
	}

	// A fake clock fires timers only inside Step: short of the quiet period
	// the recovery timer is still pending and the device still unhealthy.
	clk.Step(quiet - time.Nanosecond)
	if n := clk.Waiters(); n != 1 {
		t.Errorf("%d timers pending before the quiet period ends, want the recovery timer", n)
	}
	if diff := cmp.Diff(map[string]uint64{"MIG-a1": 48}, ids(w.Unhealthy())); diff != "" {
		t.Errorf("unhealthy before the quiet period ends (-want +got):\n%s", diff)
	}
	clk.Step(time.Nanosecond)
	waitFor(t, w, "recovery", func(u map[string]Fault) bool { return len(u) == 0 })
}

func TestNewXidRearmsRecovery(t *testing.T) {
	const quiet = time.Hour
	clk := testingclock.NewFakeClock(epoch)
	lib := newFakeLib("GPU-a", "GPU-b")
	w := start(t, lib, Options{QuietPeriod: quiet, Clock: clk}, testTargets)
	lib.waitRegistered(t, "GPU-a")
	lib.xid("GPU-a", 1, 0, 48)
	waitFor(t, w, "first Xid", func(u map[string]Fault) bool { return u["MIG-a1"].Xid == 48 })

	clk.Step(quiet / 2)
	lib.xid("GPU-a", 1, 0, 63)
	second := waitFor(t, w, "second Xid", func(u map[string]Fault) bool { return u["MIG-a1"].Xid == 63 })["MIG-a1"]
	secondAt := epoch.Add(quiet / 2)
	if diff := cmp.Diff(Fault{Xid: 63, Reason: "Xid 63", At: secondAt, Until: secondAt.Add(quiet)}, second); diff != "" {
		t.Errorf("second fault does not restart the quiet period (-want +got):\n%s", diff)
	}
	// The first timer was cancelled, not left to fire.
	if n := clk.Waiters(); n != 1 {
		t.Errorf("%d recovery timers pending, want 1", n)
	}

	// When the first quiet period would have ended the device is still out.
	clk.Step(quiet / 2)
	if diff := cmp.Diff(map[string]uint64{"MIG-a1": 63}, ids(w.Unhealthy())); diff != "" {
		t.Errorf("unhealthy an hour after the first Xid (-want +got):\n%s", diff)
	}
	clk.Step(quiet / 2)
	waitFor(t, w, "recovery an hour after the second Xid", func(u map[string]Fault) bool { return len(u) == 0 })
}

// TestStaleRecoveryKeepsNewerFault: a recovery timer that already fired
// (so it can no longer be stopped) but runs only after a newer Xid was
// recorded must not clear the newer fault.
func TestStaleRecoveryKeepsNewerFault(t *testing.T) {
	const quiet = time.Hour
	clk := testingclock.NewFakeClock(epoch)
	lib := newFakeLib("GPU-a", "GPU-b")
	w := newWatcher(t, lib, Options{QuietPeriod: quiet, Clock: clk})
	recovered := make(chan struct{}, 2)
	w.recovered = func() { recovered <- struct{}{} }
	run(t, lib, w, testTargets)
	waitRecover := func(what string) {
		t.Helper()
		select {
		case <-recovered:
		case <-time.After(10 * time.Second):
			t.Fatalf("the recovery timer %s never ran", what)
		}
	}
	lib.waitRegistered(t, "GPU-a")
	lib.xid("GPU-a", 1, 0, 48)
	waitFor(t, w, "first Xid", func(u map[string]Fault) bool { return u["MIG-a1"].Xid == 48 })

	// Holding the watcher's lock: the first timer fires and its recovery
	// waits for the lock while a second Xid on the device is recorded.
	w.mu.Lock()
	clk.Step(quiet)
	w.markLocked("MIG-a1", 63, "Xid 63", clk.Now())
	w.mu.Unlock()
	waitRecover("of the first Xid")
	if diff := cmp.Diff(map[string]uint64{"MIG-a1": 63}, ids(w.Unhealthy())); diff != "" {
		t.Errorf("after the stale recovery (-want +got):\n%s", diff)
	}

	clk.Step(quiet)
	waitRecover("of the second Xid")
	if u := w.Unhealthy(); len(u) != 0 {
		t.Errorf("unhealthy %v after the second quiet period, want none", u)
	}
}

func TestIgnoredXids(t *testing.T) {
	for name, tc := range map[string]struct {
		opts    Options
		xid     uint64
		ignored bool
	}{
		"default list ignores 43":       {xid: 43, ignored: true},
		"default list keeps 79":         {xid: 79},
		"custom list":                   {opts: Options{IgnoredXids: []uint64{79}}, xid: 79, ignored: true},
		"empty list ignores nothing":    {opts: Options{IgnoredXids: []uint64{}}, xid: 13},
		"custom list replaces defaults": {opts: Options{IgnoredXids: []uint64{79}}, xid: 13},
	} {
		t.Run(name, func(t *testing.T) {
			lib := newFakeLib("GPU-a", "GPU-b")
			tc.opts.QuietPeriod = -1
			w := start(t, lib, tc.opts, testTargets)
			lib.waitRegistered(t, "GPU-a")
			lib.waitRegistered(t, "GPU-b")
			lib.xid("GPU-a", 1, 0, tc.xid)
			// Events are handled in order, so once this marker is seen the
			// Xid above has been handled too.
			lib.xid("GPU-b", AllInstances, AllInstances, 94)
			u := waitFor(t, w, "marker", func(u map[string]Fault) bool { return u["GPU-b"].Xid == 94 })
			if _, got := u["MIG-a1"]; got == tc.ignored {
				t.Errorf("Xid %d: MIG-a1 unhealthy = %v, want %v", tc.xid, got, !tc.ignored)
			}
		})
	}
}

func TestSetTargets(t *testing.T) {
	lib := newFakeLib("GPU-a", "GPU-b", "GPU-c")
	w := start(t, lib, Options{QuietPeriod: -1}, testTargets)
	lib.waitRegistered(t, "GPU-a")
	lib.xid("GPU-a", AllInstances, AllInstances, 79)
	waitFor(t, w, "GPU-a devices unhealthy", func(u map[string]Fault) bool { return len(u) == 3 })

	// A new layout on GPU-a keeps MIG-a1, re-creates MIG-a2's instance
	// with another profile under the same ID, replaces MIG-a5, and adds a GPU.
	w.SetTargets([]Target{
		{ID: "MIG-a1", GPU: "GPU-a", MIG: true, GI: 1},
		{ID: "MIG-a2", GPU: "GPU-a", MIG: true, GI: 2, Profile: "1g.10gb"},
		{ID: "MIG-a9", GPU: "GPU-a", MIG: true, GI: 9},
		{ID: "GPU-c", GPU: "GPU-c"},
	})
	if diff := cmp.Diff(map[string]uint64{"MIG-a1": 79}, ids(w.Unhealthy())); diff != "" {
		t.Errorf("after SetTargets (-want +got):\n%s", diff)
	}
	lib.waitRegistered(t, "GPU-c")
	lib.xid("GPU-c", AllInstances, AllInstances, 31) // ignored
	lib.xid("GPU-c", AllInstances, AllInstances, 62)
	waitFor(t, w, "GPU-c unhealthy", func(u map[string]Fault) bool { return u["GPU-c"].Xid == 62 })
}

func TestGPULostMarksEverything(t *testing.T) {
	clk := testingclock.NewFakeClock(epoch)
	lib := newFakeLib("GPU-a", "GPU-b")
	w := start(t, lib, Options{QuietPeriod: -1, Clock: clk}, testTargets)
	lib.set.events <- nvml.EventData{}
	u := waitFor(t, w, "all unhealthy", func(u map[string]Fault) bool { return len(u) == len(testTargets) })
	// No Xid: the reason says what happened, and Until is zero with
	// recovery off.
	for _, tg := range testTargets {
		if diff := cmp.Diff(Fault{Reason: ReasonGPULost, At: epoch}, u[tg.ID]); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tg.ID, diff)
		}
	}
}

// TestRegistrationRetried: a GPU whose handle or registration fails once
// is watched from a later poll on, without a change of targets.
func TestRegistrationRetried(t *testing.T) {
	for name, fail := range map[string]func(*fakeLib){
		"handle":       func(l *fakeLib) { l.handleFailures["GPU-a"] = 2 },
		"registration": func(l *fakeLib) { l.devices["GPU-a"].registerFailures = 2 },
	} {
		t.Run(name, func(t *testing.T) {
			lib := newFakeLib("GPU-a", "GPU-b")
			fail(lib)
			w := start(t, lib, Options{QuietPeriod: -1}, testTargets)
			lib.waitRegistered(t, "GPU-a")
			lib.xid("GPU-a", 1, 0, 79)
			u := waitFor(t, w, "MIG-a1 unhealthy", func(u map[string]Fault) bool { return len(u) > 0 })
			if diff := cmp.Diff(map[string]uint64{"MIG-a1": 79}, ids(u)); diff != "" {
				t.Errorf("unhealthy (-want +got):\n%s", diff)
			}
			// Registration finished before the event was handled.
			if diff := cmp.Diff([]string{"GPU-a", "GPU-b"}, w.Watching()); diff != "" {
				t.Errorf("Watching (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUnregisteredGPU(t *testing.T) {
	// GPU-x has no handle and GPU-n no Xid events: their devices are not
	// watched, the others are.
	lib := newFakeLib("GPU-a", "GPU-n")
	lib.devices["GPU-n"].noXid = true
	w := start(t, lib, Options{QuietPeriod: -1}, []Target{{ID: "GPU-x", GPU: "GPU-x"}, {ID: "GPU-a", GPU: "GPU-a"}, {ID: "GPU-n", GPU: "GPU-n"}})
	lib.waitRegistered(t, "GPU-a")
	lib.xid("GPU-a", AllInstances, AllInstances, 79)
	u := waitFor(t, w, "GPU-a unhealthy", func(u map[string]Fault) bool { return len(u) > 0 })
	// The event was handled after registration finished.
	if diff := cmp.Diff([]string{"GPU-a"}, w.Watching()); diff != "" {
		t.Errorf("Watching (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]uint64{"GPU-a": 79}, ids(u)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestRunTwice(t *testing.T) {
	lib := newFakeLib()
	w := start(t, lib, Options{}, nil)
	select {
	case <-lib.created:
	case <-time.After(10 * time.Second):
		t.Fatal("first Run never created its event set")
	}
	if err := w.Run(context.Background()); err == nil {
		t.Error("second Run returned nil, want an error")
	}
}

func TestNewRejects(t *testing.T) {
	if _, err := New(nil, Options{}); err == nil {
		t.Error("New(nil) succeeded")
	}
	if _, err := New(newFakeLib(), Options{PollInterval: time.Microsecond}); err == nil {
		t.Error("New with a sub-millisecond poll interval succeeded")
	}
}

func TestParseDisable(t *testing.T) {
	for in, tc := range map[string]struct {
		disabled bool
		extra    []uint64
		wantErr  bool
	}{
		"":           {},
		"all":        {disabled: true},
		"XIDs":       {disabled: true},
		"48, 79,":    {extra: []uint64{48, 79}},
		"48,bogus":   {wantErr: true},
		"-1":         {wantErr: true},
		" all ":      {disabled: true},
		"109":        {extra: []uint64{109}},
		"yes":        {wantErr: true},
		"13,,31":     {extra: []uint64{13, 31}},
		"all,xids":   {wantErr: true},
		"0x30":       {wantErr: true},
		"  ":         {},
		"4294967296": {extra: []uint64{4294967296}},
	} {
		disabled, extra, err := ParseDisable(in)
		if (err != nil) != tc.wantErr {
			t.Errorf("ParseDisable(%q) error = %v, want error %v", in, err, tc.wantErr)
			continue
		}
		if disabled != tc.disabled || !cmp.Equal(tc.extra, extra) {
			t.Errorf("ParseDisable(%q) = %v, %v; want %v, %v", in, disabled, extra, tc.disabled, tc.extra)
		}
	}
}

func TestDefaultIgnoredXidsIsACopy(t *testing.T) {
	first := DefaultIgnoredXids()
	want := slices.Clone(first)
	first[0] = 79
	if diff := cmp.Diff(want, DefaultIgnoredXids()); diff != "" {
		t.Errorf("changing one result changed the next (-want +got):\n%s", diff)
	}
}

// passUntilTimedOut passes the deadlines set until a call times out, and
// checks it is want. Deadlines of calls that returned pass harmlessly; the
// caller makes sure want's is the only one of a call under way.
func passUntilTimedOut(t *testing.T, deadlines *nvmlcalltest.Deadlines, timeouts <-chan string, want string) {
	t.Helper()
	testutil.Eventually(t, want+" timed out", func() bool {
		deadlines.Pass()
		select {
		case call := <-timeouts:
			if call != want {
				t.Fatalf("timed out call %q, want %q", call, want)
			}
			return true
		default:
			return false
		}
	})
}

// TestHungWait: a Wait that does not return within the call deadline is
// counted and not called again until it returns; Unhealthy answers
// meanwhile, a stop does not wait for it (nor frees the set under it),
// and the event it returns with is handled.
func TestHungWait(t *testing.T) {
	lib := newFakeLib("GPU-a", "GPU-b")
	lib.set.hang, lib.set.waiting = make(chan struct{}), make(chan struct{}, 100)
	deadlines := &nvmlcalltest.Deadlines{}
	timeouts := make(chan string, 10)
	w := newWatcher(t, lib, Options{QuietPeriod: -1, OnTimeout: func(call string) { timeouts <- call }})
	w.callAfter, w.stopGrace = deadlines.After, 0
	w.SetTargets(testTargets)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

	lib.waitRegistered(t, "GPU-a")
	lib.waitRegistered(t, "GPU-b")
	<-lib.set.waiting
	// Every call before the Wait has returned: the one deadline left
	// to pass is the Wait's, once it is set.
	passUntilTimedOut(t, deadlines, timeouts, "EventSet.Wait")
	// Run goes on without calling Wait again: no second Wait enters.
	lib.xid("GPU-a", 1, 0, 79)
	if u := w.Unhealthy(); len(u) != 0 {
		t.Errorf("unhealthy before the Wait returned: %v", u)
	}
	select {
	case <-lib.set.waiting:
		t.Fatal("a second Wait while the first has not returned")
	default:
	}

	// A stop does not wait for the hung Wait, and does not free the set
	// under it.
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	select {
	case <-lib.set.freed:
		t.Error("the event set was freed under a Wait")
	default:
	}

	// The Wait returns with the Xid: it is handled all the same, and
	// then the set freed and NVML shut down.
	close(lib.set.hang)
	waitFor(t, w, "MIG-a1 unhealthy", func(u map[string]Fault) bool { return len(u) > 0 })
	if diff := cmp.Diff(map[string]uint64{"MIG-a1": 79}, ids(w.Unhealthy())); diff != "" {
		t.Errorf("unhealthy (-want +got):\n%s", diff)
	}
	select {
	case <-lib.set.freed:
	case <-time.After(10 * time.Second):
		t.Fatal("the event set was never freed")
	}
	testutil.Eventually(t, "NVML shut down", func() bool {
		lib.mu.Lock()
		defer lib.mu.Unlock()
		return lib.inits == 0
	})
}

// TestHungRegistration: a GPU whose handle lookup hangs is counted and
// not watched; the other GPUs are, and their Xids reported. When the
// lookup returns, the registration it finishes counts.
func TestHungRegistration(t *testing.T) {
	lib := newFakeLib("GPU-a", "GPU-b")
	hang := make(chan struct{})
	lib.hangHandle = map[string]chan struct{}{"GPU-a": hang}
	lib.handleEntered = make(chan string, 10)
	deadlines := &nvmlcalltest.Deadlines{}
	timeouts := make(chan string, 10)
	w := newWatcher(t, lib, Options{QuietPeriod: -1, OnTimeout: func(call string) { timeouts <- call }})
	w.callAfter = deadlines.After
	run(t, lib, w, testTargets)
	<-lib.handleEntered
	// Registration runs before the first Wait: the one deadline left to
	// pass is the lookup's, once it is set.
	passUntilTimedOut(t, deadlines, timeouts, "DeviceGetHandleByUUID/RegisterEvents")
	lib.waitRegistered(t, "GPU-b")
	lib.xid("GPU-b", AllInstances, AllInstances, 48)
	u := waitFor(t, w, "GPU-b unhealthy", func(u map[string]Fault) bool { return len(u) > 0 })
	if diff := cmp.Diff(map[string]uint64{"GPU-b": 48}, ids(u)); diff != "" {
		t.Errorf("unhealthy (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"GPU-b"}, w.Watching()); diff != "" {
		t.Errorf("Watching (-want +got):\n%s", diff)
	}

	close(hang)
	lib.waitRegistered(t, "GPU-a")
	testutil.Eventually(t, "GPU-a watched", func() bool { return cmp.Equal([]string{"GPU-a", "GPU-b"}, w.Watching()) })
	lib.xid("GPU-a", 2, 0, 79)
	waitFor(t, w, "MIG-a2 unhealthy", func(u map[string]Fault) bool { _, ok := u["MIG-a2"]; return ok })
}

// hangRecorder records what OnHang was told, and counts the turns of
// Run's loop.
type hangRecorder struct {
	mu    sync.Mutex
	hangs []Hang
	polls int
}

func (r *hangRecorder) onHang(h Hang) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hangs = append(r.hangs, h)
}

func (r *hangRecorder) polled() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.polls++
}

func (r *hangRecorder) get() (hangs []Hang, polls int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.hangs), r.polls
}

// waitPolls waits until Run's loop went round n more times: a report a
// turn would make has been made.
func (r *hangRecorder) waitPolls(t *testing.T, n int) {
	t.Helper()
	_, start := r.get()
	testutil.Eventually(t, "the watcher's loop to go round", func() bool {
		_, polls := r.get()
		return polls >= start+n
	})
}

// TestHangsReported: each health call that does not return within the
// deadline is reported once while it has not returned, however long it
// hangs and however often the loop goes round and tries again (a
// persisting hang writes once); one that returned and hangs again is
// reported again. The message names the call and the GPUs.
func TestHangsReported(t *testing.T) {
	const (
		wait     = "EventSet.Wait"
		register = "DeviceGetHandleByUUID/RegisterEvents"
	)
	waitHang := Hang{Key: keyWait, Call: wait, GPUs: []string{"GPU-a", "GPU-b"}}
	regHang := Hang{Key: keyGPU + "GPU-a", Call: register, GPUs: []string{"GPU-a"}}
	for _, tc := range []struct {
		name string
		// hang makes a call hang before Run and returns its release and
		// the name of the call.
		hang func(lib *fakeLib) (release chan struct{}, call string)
		// again makes the call hang once more after its first release.
		again bool
		want  []Hang
		// contains are in every Message.
		contains []string
	}{{
		name:     "a Wait that persists",
		hang:     func(lib *fakeLib) (chan struct{}, string) { return lib.set.hangWaits(), wait },
		want:     []Hang{waitHang},
		contains: []string{"GPUs GPU-a, GPU-b: ", wait, "has not returned for"},
	}, {
		name:     "a Wait that returns and hangs again",
		hang:     func(lib *fakeLib) (chan struct{}, string) { return lib.set.hangWaits(), wait },
		again:    true,
		want:     []Hang{waitHang, waitHang},
		contains: []string{"GPUs GPU-a, GPU-b: ", wait},
	}, {
		name: "a GPU's registration that persists",
		hang: func(lib *fakeLib) (chan struct{}, string) {
			ch := make(chan struct{})
			lib.hangHandle = map[string]chan struct{}{"GPU-a": ch}
			lib.handleEntered = make(chan string, 100)
			return ch, register
		},
		want:     []Hang{regHang},
		contains: []string{"GPU GPU-a: ", register, "not health checked"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			lib := newFakeLib("GPU-a", "GPU-b")
			lib.set.waiting = make(chan struct{}, 100)
			release, call := tc.hang(lib)
			deadlines := &nvmlcalltest.Deadlines{}
			timeouts := make(chan string, 10)
			rec := &hangRecorder{}
			w := newWatcher(t, lib, Options{QuietPeriod: -1, OnTimeout: func(call string) { timeouts <- call }, OnHang: rec.onHang})
			w.callAfter, w.polled = deadlines.After, rec.polled
			run(t, lib, w, testTargets)
			// The deadlines set until the call hangs: the start's, each
			// GPU's registration before it, its own. Those of the calls
			// that returned pass harmlessly; no other call is under way.
			deadlinesSet := 2 // the start, GPU-a's registration
			if call == wait {
				lib.waitRegistered(t, "GPU-a")
				lib.waitRegistered(t, "GPU-b")
				<-lib.set.waiting
				deadlinesSet = 4 // and GPU-b's registration, the Wait
			} else {
				<-lib.handleEntered
			}
			passOnce(t, deadlines, deadlinesSet, timeouts, call)
			// The loop goes round and tries again many times: nothing
			// more is reported. (No deadline is passed meanwhile: that
			// would make a call under way, a Wait of the other cases, a
			// hang.)
			rec.waitPolls(t, 10)
			if got, _ := rec.get(); len(got) != 1 {
				t.Fatalf("reported %d hangs while one call hung, want 1: %+v", len(got), got)
			}
			if tc.again {
				next := lib.set.hangWaits()
				close(release)
				release = next
				<-lib.set.waiting // the next Wait: the first returned
				passOnce(t, deadlines, 1, timeouts, call)
				rec.waitPolls(t, 10)
			}

			got, _ := rec.get()
			for _, h := range got {
				if !containsAll(h.Message, tc.contains...) {
					t.Errorf("message %q, want it to contain %q", h.Message, tc.contains)
				}
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(Hang{}, "Message")); diff != "" {
				t.Errorf("hangs (-want +got):\n%s", diff)
			}

			// Released, the call returns before Run stops, which then
			// frees the set (run's cleanup checks it).
			close(release)
			if call == wait {
				<-lib.set.waiting
			} else {
				testutil.Eventually(t, "GPU-a watched", func() bool { return slices.Contains(w.Watching(), "GPU-a") })
			}
			rec.waitPolls(t, 2)
		})
	}
}

// passOnce waits until n deadlines are set, passes them, and checks that
// the one call under way, want, timed out. Unlike passUntilTimedOut it
// passes no deadline of a call made after: the loop goes on, calling
// other things, once the call timed out.
func passOnce(t *testing.T, deadlines *nvmlcalltest.Deadlines, n int, timeouts <-chan string, want string) {
	t.Helper()
	testutil.Eventually(t, fmt.Sprintf("%d call deadlines set", n), func() bool { return deadlines.Waiting() == n })
	deadlines.Pass()
	select {
	case call := <-timeouts:
		if call != want {
			t.Fatalf("timed out call %q, want %q", call, want)
		}
	case <-time.After(testutil.HangTimeout):
		t.Fatalf("%s never timed out", want)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
