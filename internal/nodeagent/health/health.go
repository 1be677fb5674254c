// Package health turns NVML Xid critical-error events into per-device health
// for the device plugin. Events are registered on parent GPUs and scoped to
// MIG devices by the GPU-instance and compute-instance ids NVML reports with
// each event. A device that saw an Xid turns healthy again after a quiet
// period without new errors, so one transient fault does not take a device
// out of service until the next restart. Each NVML call is waited for at
// most Options.CallTimeout (nvmlcall.Guard), so a call hung in the driver
// holds neither the watch of the other GPUs, nor Unhealthy, nor a stop;
// each such hang is told to Options.OnHang once while it lasts.
package health

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/migflex/migflex/internal/nvml/nvmlcall"
)

// AllInstances is the GPU-instance or compute-instance id NVML reports when
// an event is not attributable to one instance: it affects the whole GPU
// (or the whole GPU instance).
const AllInstances = 0xFFFFFFFF

const (
	// DefaultQuietPeriod is how long a device must go without a new Xid
	// before it is reported healthy again.
	DefaultQuietPeriod = 5 * time.Minute
	// DefaultPollInterval bounds how long one EventSet.Wait blocks, and so
	// how quickly Run notices cancellation and new GPUs to watch.
	DefaultPollInterval = time.Second
	// DefaultCallTimeout is how long Run waits for one NVML call, the
	// agent's --nvml-call-timeout default.
	DefaultCallTimeout = 2 * time.Minute
	// defaultStopGrace is Watcher.stopGrace's default.
	defaultStopGrace = 10 * time.Second
)

// DefaultIgnoredXids returns the Xids caused by applications (illegal memory
// access, MMU faults from user code, ...) rather than by the device; they say
// nothing about the device's health. The slice is the caller's to change.
func DefaultIgnoredXids() []uint64 { return []uint64{13, 31, 43, 45, 68, 109} }

// Lib is the part of nvml.Interface the watcher needs.
type Lib interface {
	Init() nvml.Return
	Shutdown() nvml.Return
	EventSetCreate() (nvml.EventSet, nvml.Return)
	DeviceGetHandleByUUID(uuid string) (nvml.Device, nvml.Return)
}

var _ Lib = nvml.Interface(nil)

// Options configure a Watcher. The zero value is usable.
type Options struct {
	// IgnoredXids are never treated as device faults. Nil means
	// DefaultIgnoredXids(); an empty, non-nil slice ignores nothing.
	IgnoredXids []uint64
	// QuietPeriod is how long after its last Xid a device recovers. Zero
	// means DefaultQuietPeriod; a negative value means devices never recover.
	QuietPeriod time.Duration
	// PollInterval is the timeout of one EventSet.Wait. Zero means
	// DefaultPollInterval.
	PollInterval time.Duration
	// Clock stamps faults and runs the quiet-period timers. Nil means the
	// real clock; tests pass a fake one and step it past the quiet period.
	// NVML's Wait timeout and the pause after a Wait error are real time
	// whatever the clock, as they pace calls into the driver.
	Clock clock.WithDelayedExecution
	// CallTimeout is how long Run waits for one NVML call (registering a
	// GPU, a Wait, ...); zero means DefaultCallTimeout. A call that has
	// not returned by then is logged and left running (NVML calls cannot
	// be cancelled): the rest goes on, and what it was called on is not
	// called again until it returns (nvmlcall.Guard).
	CallTimeout time.Duration
	// OnTimeout, if set, is called with the NVML call's name each time
	// one did not return within CallTimeout (the agent counts them).
	OnTimeout func(call string)
	// OnHang, if set, is told of each call that has not returned within
	// CallTimeout, once while it has not returned: a hang that persists
	// is reported once, one that returns and hangs again twice (the
	// agent records a Warning Event on the Node, rate-limited). It is
	// called from Run's goroutine and must not block.
	OnHang func(Hang)
}

// Hang is an NVML call of the health checks that has not returned within
// Options.CallTimeout. Devices keep the health they had meanwhile: a call
// that does not return says nothing of the devices' faults, and a hung
// Wait is every GPU's, so marking devices unhealthy for it would take the
// node's devices away from pods for a stall of the driver.
type Hang struct {
	// Key identifies what the call was made on, the same while it runs
	// and for its next hang: "wait" (the event set's Wait), "gpu <UUID>"
	// (a GPU's registration), "init" (the start).
	Key string
	// Call names the NVML calls: "EventSet.Wait",
	// "DeviceGetHandleByUUID/RegisterEvents" or "Init/EventSetCreate".
	Call string
	// GPUs are the UUIDs of the GPUs whose health checks wait for the
	// call, sorted: the GPU being registered; for a Wait, every GPU
	// watched; none for the start.
	GPUs []string
	// Message says which call on which GPUs has not returned, for how
	// long, and what is left alone until it does.
	Message string
}

// Target is one device whose health is tracked.
type Target struct {
	// ID is the device ID reported to the kubelet.
	ID string
	// GPU is the UUID of the physical GPU the device lives on.
	GPU string
	// MIG is true for a MIG device; then GI and CI scope the events that
	// affect it. A whole GPU is affected by every event on it.
	MIG bool
	GI  uint32
	CI  uint32
	// Profile is the MIG profile. A device ID that comes back in a new
	// layout with another profile or place is another device, and does not
	// inherit the old one's fault: every instance should have a UUID of its
	// own, but nothing here relies on a backend never reusing one.
	Profile string
}

// ReasonGPULost is the Reason of the faults NVML's ERROR_GPU_IS_LOST causes:
// it names no Xid and no GPU, so every device is suspect.
const ReasonGPULost = "GPU lost (NVML ERROR_GPU_IS_LOST)"

// Fault is why a device is unhealthy: its most recent error and when it was
// seen. Until is when the device recovers if no new error arrives; it is
// zero when devices never recover.
type Fault struct {
	// Xid is the Xid of the error, 0 for an error that is not an Xid event
	// (ReasonGPULost).
	Xid uint64
	// Reason says what the error was in words, for messages: "Xid 79", or
	// ReasonGPULost.
	Reason string
	At     time.Time
	Until  time.Time
}

// Watcher tracks device health from NVML events. Create it with New, give it
// targets with SetTargets (any time, also before Run), run it with Run, and
// read the state with Unhealthy after a signal on Changes.
type Watcher struct {
	lib          Lib
	ignored      map[uint64]bool
	quiet        time.Duration
	pollInterval time.Duration
	clock        clock.WithDelayedExecution
	callTimeout  time.Duration
	onTimeout    func(call string)
	onHang       func(Hang)
	// callAfter is time.After when nil; tests set deadlines they end.
	callAfter func(time.Duration) <-chan time.Time
	// stopGrace is how long, beyond the poll interval, a stop waits for
	// a call under way: defaultStopGrace, 0 in tests of a hung call.
	stopGrace time.Duration
	// recovered, when set by a test, is called after every run of recover
	// (whatever it decided), so the test knows a fired timer was handled.
	recovered func()
	// polled, when set by a test, is called at the top of every turn of
	// Run's loop, after the hangs were reported, so the test knows the
	// loop went round.
	polled func()

	mu        sync.Mutex
	log       klog.Logger
	running   bool
	stopped   bool
	targets   []Target
	targetGen uint64
	watching  []string
	// registered are the GPUs whose Xid events are registered on Run's
	// event set, also by a call Run stopped waiting for that returned
	// later.
	registered map[string]bool
	faults     map[string]*fault
	changes    chan struct{}
}

type fault struct {
	Fault
	// seq identifies the latest error; a recovery timer only clears the
	// fault if no newer error arrived after it was armed.
	seq   uint64
	timer clock.Timer
}

// New returns a Watcher over lib.
func New(lib Lib, opts Options) (*Watcher, error) {
	if lib == nil {
		return nil, errors.New("health: nil NVML library")
	}
	ignored := opts.IgnoredXids
	if ignored == nil {
		ignored = DefaultIgnoredXids()
	}
	w := &Watcher{
		lib:          lib,
		ignored:      make(map[uint64]bool, len(ignored)),
		quiet:        opts.QuietPeriod,
		pollInterval: opts.PollInterval,
		clock:        opts.Clock,
		callTimeout:  opts.CallTimeout,
		stopGrace:    defaultStopGrace,
		onTimeout:    opts.OnTimeout,
		onHang:       opts.OnHang,
		registered:   map[string]bool{},
		faults:       map[string]*fault{},
		changes:      make(chan struct{}, 1),
	}
	for _, x := range ignored {
		w.ignored[x] = true
	}
	if w.quiet == 0 {
		w.quiet = DefaultQuietPeriod
	}
	if w.pollInterval == 0 {
		w.pollInterval = DefaultPollInterval
	}
	if w.clock == nil {
		w.clock = clock.RealClock{}
	}
	if w.callTimeout == 0 {
		w.callTimeout = DefaultCallTimeout
	}
	if w.callTimeout < 0 {
		return nil, fmt.Errorf("health: call timeout %s is negative", w.callTimeout)
	}
	if w.pollInterval < time.Millisecond {
		return nil, fmt.Errorf("health: poll interval %s is shorter than NVML's 1ms resolution", w.pollInterval)
	}
	return w, nil
}

// SetTargets replaces the set of watched devices, for example after a MIG
// layout change. Faults of devices that are no longer targets, or whose
// target changed, are dropped; devices that remain as they were keep theirs.
func (w *Watcher) SetTargets(targets []Target) {
	w.mu.Lock()
	defer w.mu.Unlock()
	old := make(map[string]Target, len(w.targets))
	for _, t := range w.targets {
		old[t.ID] = t
	}
	keep := make(map[string]bool, len(targets))
	for _, t := range targets {
		keep[t.ID] = old[t.ID] == t
	}
	w.targets = slices.Clone(targets)
	w.targetGen++
	changed := false
	for id, f := range w.faults {
		if !keep[id] {
			if f.timer != nil {
				f.timer.Stop()
			}
			delete(w.faults, id)
			changed = true
		}
	}
	if changed {
		w.notifyLocked()
	}
}

// Unhealthy returns the devices that are currently unhealthy, by device ID.
func (w *Watcher) Unhealthy() map[string]Fault {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]Fault, len(w.faults))
	for id, f := range w.faults {
		out[id] = f.Fault
	}
	return out
}

// Changes signals (coalesced) whenever the result of Unhealthy may have
// changed.
func (w *Watcher) Changes() <-chan struct{} { return w.changes }

func (w *Watcher) notifyLocked() {
	select {
	case w.changes <- struct{}{}:
	default:
	}
}

// Run waits for NVML events until ctx is cancelled. It registers Xid events
// on the parent GPU of every target, and on newly appearing GPUs after
// SetTargets. It returns nil on cancellation; a Watcher runs once.
//
// Each NVML call is waited for at most Options.CallTimeout: a Wait or a
// GPU's registration that hangs in the driver is logged and counted, and
// devices keep the health they had while the rest goes on (other GPUs'
// registrations, Unhealthy, a stop). A hung Wait is not called again
// until it returns; what it returns then is still handled.
func (w *Watcher) Run(ctx context.Context) error {
	log := klog.FromContext(ctx).WithName("health")
	w.mu.Lock()
	if w.running {
		w.mu.Unlock()
		return errors.New("health: watcher already ran")
	}
	w.running = true
	w.log = log
	w.mu.Unlock()
	defer w.stop()

	// A Wait under way returns within the poll interval; a stop waits
	// that long and a little more for it, not for a hung call.
	g := nvmlcall.New(nvmlcall.Options[string]{
		Timeout: w.callTimeout, Grace: w.pollInterval + w.stopGrace, After: w.callAfter, OnTimeout: w.onTimeout, Describe: describeNoReturn,
	})
	g.SetLogger(log)
	defer context.AfterFunc(ctx, g.Stop)()

	// NVML counts Init calls, so the watcher holds its own for as long as
	// it waits on events, whatever its caller does.
	var set nvml.EventSet
	err := g.Do(keyInit, "Init/EventSetCreate", "starting the health checks", func() error {
		if ret := w.lib.Init(); ret != nvml.SUCCESS {
			return fmt.Errorf("initializing NVML: %w", ret)
		}
		var ret nvml.Return
		if set, ret = w.lib.EventSetCreate(); ret != nvml.SUCCESS {
			if sret := w.lib.Shutdown(); sret != nvml.SUCCESS {
				log.Error(sret, "Shutting NVML down")
			}
			return fmt.Errorf("creating NVML event set: %w", ret)
		}
		return nil
	})
	// hung are the keys of the calls reported to OnHang that have not
	// returned.
	hung := map[string]bool{}
	if err != nil {
		if ctx.Err() == nil {
			w.reportHangs(g, hung)
		}
		return fmt.Errorf("health: %w", err)
	}
	defer func() {
		release := func() {
			if ret := set.Free(); ret != nvml.SUCCESS {
				log.Error(ret, "Freeing NVML event set")
			}
			if ret := w.lib.Shutdown(); ret != nvml.SUCCESS {
				log.Error(ret, "Shutting NVML down")
			}
		}
		if len(g.Outstanding()) == 0 {
			release()
			return
		}
		// A call still in the driver may use the set: it is freed, and
		// NVML shut down, once the calls have returned, not under them.
		log.Info("NVML calls have not returned; the event set is freed once they do", "calls", len(g.Outstanding()))
		go func() {
			for len(g.Outstanding()) > 0 {
				<-g.Returned()
			}
			release()
		}()
	}()

	regs := registrations{failed: map[string]string{}}
	var seenGen uint64
	var retryAt time.Time
	timeoutMs := uint32(w.pollInterval / time.Millisecond)
	for {
		if ctx.Err() != nil {
			return nil
		}
		// A call abandoned by a stop is no hang: reported only while
		// the watcher runs.
		w.reportHangs(g, hung)
		if w.polled != nil {
			w.polled()
		}
		// GPUs new in SetTargets are registered at once. Getting a handle
		// or registering can fail transiently, so GPUs NVML refused are
		// tried again every poll interval rather than at the next layout.
		gen, gpus := w.gpus()
		if now := time.Now(); gen != seenGen || (w.missing(gpus) && !now.Before(retryAt)) {
			seenGen, retryAt = gen, now.Add(w.pollInterval)
			w.register(log, g, set, gpus, &regs)
		}
		err := g.Do(keyWait, "EventSet.Wait", "waiting for Xid events", func() error { return w.wait(log, set, timeoutMs) })
		if err != nil {
			if !errors.Is(err, errWaitFailed) {
				log.V(4).Info("Not waiting for events", "err", err)
			}
			w.pause(ctx)
		}
	}
}

// The keys of Run's calls: the start, the Wait, and each GPU's
// registration ("gpu " and its UUID).
const (
	keyInit = "init"
	keyWait = "wait"
	keyGPU  = "gpu "
)

// describeNoReturn is the text of a call of Run's that has not returned.
func describeNoReturn(key, call, _ string, after time.Duration) string {
	switch {
	case key == keyWait:
		return fmt.Sprintf("NVML %s has not returned for %v (--nvml-call-timeout); no Xid event is read until it does, and devices keep their health", call, after)
	case strings.HasPrefix(key, keyGPU):
		return fmt.Sprintf("GPU %s: NVML %s has not returned for %v (--nvml-call-timeout); its devices are not health checked until it does", strings.TrimPrefix(key, keyGPU), call, after)
	}
	return fmt.Sprintf("NVML %s has not returned for %v (--nvml-call-timeout)", call, after)
}

// reportHangs tells OnHang of every call g stopped waiting for that
// has not returned and was not reported yet, and forgets those that
// returned, so that their next hang is reported again. hung are the keys
// reported.
func (w *Watcher) reportHangs(g *nvmlcall.Guard[string], hung map[string]bool) {
	out := g.Outstanding()
	for key := range hung {
		if _, ok := out[key]; !ok {
			delete(hung, key)
		}
	}
	for _, key := range slices.Sorted(maps.Keys(out)) {
		if hung[key] {
			continue
		}
		hung[key] = true
		if w.onHang != nil {
			w.onHang(w.hangOf(key, out[key]))
		}
	}
}

// hangOf is the Hang of the call with key that has not returned.
func (w *Watcher) hangOf(key string, err *nvmlcall.NoReturnError[string]) Hang {
	h := Hang{Key: key, Call: err.Call, Message: err.Error()}
	switch {
	case key == keyWait:
		h.GPUs = w.Watching()
		if len(h.GPUs) > 0 {
			h.Message = fmt.Sprintf("GPUs %s: %s", strings.Join(h.GPUs, ", "), h.Message)
		}
	case strings.HasPrefix(key, keyGPU):
		h.GPUs = []string{strings.TrimPrefix(key, keyGPU)}
	}
	return h
}

// errWaitFailed is a Wait's error, logged where it happened.
var errWaitFailed = errors.New("waiting for NVML events failed")

// wait waits for one event on set and handles it. It runs in the guard's
// goroutine: an event a Wait Run stopped waiting for returns is handled
// all the same.
func (w *Watcher) wait(log klog.Logger, set nvml.EventSet, timeoutMs uint32) error {
	ev, ret := set.Wait(timeoutMs)
	switch ret {
	case nvml.SUCCESS:
		w.handle(log, ev)
	case nvml.ERROR_TIMEOUT:
	case nvml.ERROR_GPU_IS_LOST:
		// NVML does not say which GPU fell off the bus; every device
		// is suspect until the quiet period passes without this error.
		log.Error(ret, "GPU lost while waiting for events; marking all devices unhealthy")
		w.markAll(w.clock.Now())
		return errWaitFailed
	default:
		log.Error(ret, "Waiting for NVML events")
		return errWaitFailed
	}
	return nil
}

// pause keeps a persistent Wait error from turning Run into a busy loop.
func (w *Watcher) pause(ctx context.Context) {
	t := time.NewTimer(w.pollInterval)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (w *Watcher) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	for _, f := range w.faults {
		if f.timer != nil {
			f.timer.Stop()
		}
	}
}

func (w *Watcher) gpus() (uint64, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var gpus []string
	for _, t := range w.targets {
		if !slices.Contains(gpus, t.GPU) {
			gpus = append(gpus, t.GPU)
		}
	}
	return w.targetGen, gpus
}

// registrations are the last error of each GPU Run could not register, so
// a failure that repeats every retry is logged once.
type registrations struct {
	failed map[string]string
}

// missing reports whether some of gpus are not registered.
func (w *Watcher) missing(gpus []string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.ContainsFunc(gpus, func(uuid string) bool { return !w.registered[uuid] })
}

func (w *Watcher) isRegistered(uuid string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.registered[uuid]
}

// register adds Xid events of every GPU not yet in the set. NVML cannot
// unregister, so GPUs that lost all their targets stay registered; their
// events then match no target and are only logged.
func (w *Watcher) register(log klog.Logger, g *nvmlcall.Guard[string], set nvml.EventSet, gpus []string, regs *registrations) {
	for _, uuid := range gpus {
		if w.isRegistered(uuid) {
			continue
		}
		err := g.Do(keyGPU+uuid, "DeviceGetHandleByUUID/RegisterEvents", "registering Xid events", func() error { return w.registerGPU(uuid, set) })
		if err != nil {
			if msg := err.Error(); regs.failed[uuid] != msg {
				regs.failed[uuid] = msg
				log.Error(err, "GPU's devices are not health checked; retrying every poll interval", "gpu", uuid, "pollInterval", w.pollInterval)
			}
			continue
		}
		if _, retried := regs.failed[uuid]; retried {
			delete(regs.failed, uuid)
			log.Info("Watching Xid events after an earlier failure", "gpu", uuid)
		} else {
			log.V(2).Info("Watching Xid events", "gpu", uuid)
		}
	}
	// A GPU that is no longer a target is logged again if it comes back.
	for uuid := range regs.failed {
		if !slices.Contains(gpus, uuid) {
			delete(regs.failed, uuid)
		}
	}
}

// registerGPU registers the Xid events of GPU uuid on set, and records
// that it did, also when Run stopped waiting for it.
func (w *Watcher) registerGPU(uuid string, set nvml.EventSet) error {
	dev, ret := w.lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("getting GPU handle: %w", ret)
	}
	// Registering a type the GPU cannot report fails the whole call.
	if types, ret := dev.GetSupportedEventTypes(); ret == nvml.SUCCESS && types&nvml.EventTypeXidCriticalError == 0 {
		return errors.New("GPU does not report Xid events")
	}
	if ret := dev.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.SUCCESS {
		return fmt.Errorf("registering Xid events: %w", ret)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.registered[uuid] = true
	w.watching = append(w.watching, uuid)
	slices.Sort(w.watching)
	return nil
}

// Watching returns the UUIDs of the GPUs whose Xid events are registered,
// sorted. A GPU of a target is missing while NVML refuses it (see the log);
// Run tries it again every poll interval.
func (w *Watcher) Watching() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.watching)
}

func (w *Watcher) handle(log klog.Logger, ev nvml.EventData) {
	if ev.EventType != nvml.EventTypeXidCriticalError {
		log.V(4).Info("Ignoring NVML event", "type", ev.EventType)
		return
	}
	xid := ev.EventData
	if ev.Device == nil {
		log.Error(nil, "Xid event without a device", "xid", xid)
		return
	}
	gpu, ret := ev.Device.GetUUID()
	if ret != nvml.SUCCESS {
		log.Error(ret, "Getting the UUID of the GPU an Xid event came from", "xid", xid)
		return
	}
	kv := []any{"xid", xid, "gpu", gpu, "gi", ev.GpuInstanceId, "ci", ev.ComputeInstanceId}
	if w.ignored[xid] {
		log.V(2).Info("Ignoring application Xid", kv...)
		return
	}
	ids := w.markMatching(gpu, ev.GpuInstanceId, ev.ComputeInstanceId, xid, w.clock.Now())
	if len(ids) == 0 {
		log.Info("Xid on a GPU or instance with no served device", kv...)
		return
	}
	log.Info("Xid critical error; devices unhealthy", append(kv, "devices", ids)...)
}

// Affects reports whether an event on GPU gpu, scoped to GPU instance gi and
// compute instance ci, concerns target t.
func Affects(t Target, gpu string, gi, ci uint32) bool {
	if t.GPU != gpu {
		return false
	}
	if !t.MIG || gi == AllInstances {
		return true
	}
	return t.GI == gi && (ci == AllInstances || t.CI == ci)
}

func (w *Watcher) markMatching(gpu string, gi, ci uint32, xid uint64, now time.Time) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ids []string
	for _, t := range w.targets {
		if Affects(t, gpu, gi, ci) {
			w.markLocked(t.ID, xid, fmt.Sprintf("Xid %d", xid), now)
			ids = append(ids, t.ID)
		}
	}
	if len(ids) > 0 {
		w.notifyLocked()
	}
	return ids
}

func (w *Watcher) markAll(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range w.targets {
		w.markLocked(t.ID, 0, ReasonGPULost, now)
	}
	if len(w.targets) > 0 {
		w.notifyLocked()
	}
}

// markLocked records an error on id and (re)arms its recovery timer.
func (w *Watcher) markLocked(id string, xid uint64, reason string, now time.Time) {
	f := w.faults[id]
	if f == nil {
		f = &fault{}
		w.faults[id] = f
	}
	f.seq++
	f.Xid, f.Reason, f.At, f.Until = xid, reason, now, time.Time{}
	if w.quiet < 0 || w.stopped {
		return
	}
	f.Until = now.Add(w.quiet)
	if f.timer != nil {
		f.timer.Stop()
	}
	seq := f.seq
	// recover runs in a goroutine of its own, not in the callback: a fake
	// clock calls the callback inside Step with its own lock held, while
	// markLocked calls the clock with w.mu held.
	f.timer = w.clock.AfterFunc(w.quiet, func() { go w.recover(id, seq) })
}

func (w *Watcher) recover(id string, seq uint64) {
	if w.recovered != nil {
		defer w.recovered()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	f := w.faults[id]
	if f == nil || f.seq != seq {
		return // a newer error re-armed the timer, or the device is gone
	}
	delete(w.faults, id)
	w.log.Info("Device recovered after quiet period", "device", id, "lastError", f.Reason, "quietPeriod", w.quiet)
	w.notifyLocked()
}
