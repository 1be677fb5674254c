package sim

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/migflex/migflex/internal/domain/gpumodel"
)

// Versions the simulated driver reports. They name a real R550 driver so
// version parsing above NVML sees a familiar shape.
const (
	DriverVersion     = "550.127.05"
	CudaDriverVersion = 12040 // CUDA 12.4, as NVML encodes it
)

// noInstance is the GPU/compute instance id real NVML puts in events that no
// instance is attributable to.
const noInstance = 0xFFFFFFFF

// NoInstance, passed as InjectXid's gi and ci, makes the Xid concern the
// whole GPU, as real NVML reports it when no instance is attributable.
const NoInstance uint32 = noInstance

// Lib is a simulated NVML library. It is safe for concurrent use.
type Lib struct {
	unsupportedInterface

	models []*gpumodel.Model // by GPU index
	gpus   []*gpuHandle
	store  *store // nil in memory
	// opDelay is Config.OperationDelay, spent with sleep (time.Sleep but in
	// tests).
	opDelay time.Duration
	sleep   func(time.Duration)
	hold    *hold // nil unless Config.HoldFile
	// faults are the armed faults (Config.Faults, ArmFault); never nil.
	faults *faultSet

	mu sync.Mutex
	// readOnly refuses changes: set by Config.ReadOnly, and by Close so a
	// closed simulator never writes a directory it no longer holds.
	readOnly   bool
	refcount   int
	st         state
	nextSerial uint64
	eventSets  map[*eventSet]struct{}

	inbox *inboxWatcher // nil unless a writable store
}

var _ nvml.Interface = (*Lib)(nil)

// New builds a simulator from cfg. With cfg.StateDir set it loads the state
// left there by an earlier process with the same GPUs (it is an error if the
// GPUs differ) or starts fresh, holds the directory's lock until Close, and
// watches the inbox for commands from other processes. Like go-nvml's New,
// the library must be initialized with Init before use.
func New(cfg Config) (*Lib, error) {
	models, initial, err := cfg.resolveGPUs()
	if err != nil {
		return nil, fmt.Errorf("simulator config: %w", err)
	}
	l := &Lib{readOnly: cfg.ReadOnly, opDelay: cfg.OperationDelay, sleep: time.Sleep, models: models, eventSets: map[*eventSet]struct{}{}, faults: newFaultSet("")}
	for i := range models {
		l.gpus = append(l.gpus, &gpuHandle{lib: l, index: i})
	}
	if cfg.HoldFile != "" {
		l.hold = newHold(cfg.HoldFile, cfg.HoldAfter)
	}
	seed := cfg.UUIDSeed
	if seed == "" {
		if seed, err = os.Hostname(); err != nil {
			seed = "localhost"
		}
	}
	fresh := state{Version: stateVersion, GPUs: initial}
	for i := range fresh.GPUs {
		if fresh.GPUs[i].UUID == "" {
			fresh.GPUs[i].UUID = gpuUUID(seed, i)
		}
	}
	// The config's instances are created anew at each fresh start, as an
	// administrator's would be after a reboot: new UUIDs.
	fresh.fillMIGUUIDs(func(string, *giState, uint32) string { return newMIGUUID() })
	l.st = fresh
	l.assignSerials()
	if cfg.StateDir == "" {
		if err := l.armConfigFaults(cfg); err != nil {
			return nil, err
		}
		return l, nil
	}

	if l.store, err = openStore(cfg.StateDir, cfg.ReadOnly); err != nil {
		return nil, err
	}
	loaded, ok, err := l.store.load()
	filled := false
	if err == nil && ok {
		filled = loaded.fillMIGUUIDs(legacyMIGUUID)
		if err = loaded.check(models); err != nil {
			err = fmt.Errorf("simulator state %s: %w", l.store.path(), err)
		}
	}
	if err != nil {
		l.store.close()
		return nil, err
	}
	if ok {
		l.st = loaded
		l.assignSerials()
	}
	if (!ok || filled) && !cfg.ReadOnly {
		if err := l.store.save(&l.st); err != nil {
			l.store.close()
			return nil, err
		}
	}
	if !cfg.ReadOnly {
		// Before the inbox: commands queued meanwhile come after the
		// config's faults.
		l.faults = newFaultSet(cfg.StateDir)
		if err := l.armConfigFaults(cfg); err != nil {
			l.store.close()
			return nil, err
		}
		if l.inbox, err = startInbox(l, cfg.StateDir); err != nil {
			l.faults.close()
			l.store.close()
			return nil, err
		}
	}
	return l, nil
}

// armConfigFaults arms Config.Faults, and lists them (none, too) for
// ReadFaults, so the listing is this simulator's and not the last one's.
// A read-only simulator, there only to be looked at, arms none.
func (l *Lib) armConfigFaults(cfg Config) error {
	if cfg.ReadOnly {
		return nil
	}
	for i, f := range cfg.Faults {
		if _, err := l.arm(f, SourceConfig); err != nil {
			l.faults.close()
			return fmt.Errorf("simulator config: faults[%d]: %w", i, err)
		}
	}
	l.faults.mu.Lock()
	l.faults.saveLocked()
	l.faults.mu.Unlock()
	return nil
}

// assignSerials gives every instance of a state not made by this process
// (loaded, or initial) the serial its handles check.
func (l *Lib) assignSerials() {
	for i := range l.st.GPUs {
		for j := range l.st.GPUs[i].Instances {
			gi := &l.st.GPUs[i].Instances[j]
			gi.serial = l.serial()
			for k := range gi.CIs {
				gi.CIs[k].serial = l.serial()
			}
		}
	}
}

// Close stops watching the inbox and releases the state directory. The
// state stays on disk for the next simulator. A closed simulator still
// answers queries from its last state but refuses changes
// (ERROR_NO_PERMISSION), those waiting for Config.HoldFile or in a hang
// fault included; storms stop.
func (l *Lib) Close() error {
	var errs []error
	if l.inbox != nil { // first, so a command being applied still lands
		errs = append(errs, l.inbox.stop())
		l.inbox = nil
	}
	l.mu.Lock()
	l.readOnly = true
	l.mu.Unlock()
	if l.hold != nil { // after readOnly: a released change is refused
		l.hold.close()
	}
	l.faults.close() // likewise for a call released from a hang

	if l.store != nil {
		errs = append(errs, l.store.close())
	}
	return errors.Join(errs...)
}

func (l *Lib) serial() uint64 {
	l.nextSerial++
	return l.nextSerial
}

// commit makes next the current state after persisting it; on a write
// failure the old state stays and the caller's change is lost, as it would
// be had the driver call failed. Call with l.mu held.
func (l *Lib) commit(next state) nvml.Return {
	if l.store != nil {
		if err := l.store.save(&next); err != nil {
			logger().Error(err, "Persisting simulator state failed; change not applied")
			return nvml.ERROR_UNKNOWN
		}
	}
	l.st = next
	return nvml.SUCCESS
}

// begin locks l and checks that NVML is initialized. Every modelled call
// starts with it; callers must unlock when it returns SUCCESS.
func (l *Lib) begin() nvml.Return {
	l.mu.Lock()
	if l.refcount == 0 {
		l.mu.Unlock()
		return nvml.ERROR_UNINITIALIZED
	}
	return nvml.SUCCESS
}

// beginWrite is begin for calls that change state. The configured
// operation delay is spent before taking the lock, so readers (the health
// watcher, discovery) are not held up, as with a real driver.
func (l *Lib) beginWrite() nvml.Return {
	if l.hold != nil {
		l.hold.wait()
	}
	if l.opDelay > 0 {
		l.sleep(l.opDelay)
	}
	if r := l.begin(); r != nvml.SUCCESS {
		return r
	}
	if l.readOnly {
		l.mu.Unlock()
		return nvml.ERROR_NO_PERMISSION
	}
	return nvml.SUCCESS
}

// Init initializes the library; calls are counted like the real library's
// and each needs a matching Shutdown.
func (l *Lib) Init() nvml.Return {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refcount++
	return nvml.SUCCESS
}

// InitWithFlags is Init; the flags change nothing in the simulator.
func (l *Lib) InitWithFlags(uint32) nvml.Return { return l.Init() }

// Shutdown undoes one Init. After the last one every modelled call answers
// ERROR_UNINITIALIZED.
func (l *Lib) Shutdown() nvml.Return {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refcount == 0 {
		return nvml.ERROR_UNINITIALIZED
	}
	l.refcount--
	return nvml.SUCCESS
}

// ErrorString is nvml.ErrorString.
func (l *Lib) ErrorString(r nvml.Return) string { return r.Error() }

// Extensions returns the go-nvml extensions; the simulator has no symbols to
// look up.
func (l *Lib) Extensions() nvml.ExtendedInterface { return extensions{} }

type extensions struct{}

func (extensions) LookupSymbol(name string) error {
	return fmt.Errorf("simulated NVML has no symbol %s: %w", name, nvml.ERROR_NOT_SUPPORTED)
}

func (l *Lib) SystemGetDriverVersion() (string, nvml.Return) {
	if r := l.begin(); r != nvml.SUCCESS {
		return "", r
	}
	defer l.mu.Unlock()
	return DriverVersion, nvml.SUCCESS
}

func (l *Lib) SystemGetNVMLVersion() (string, nvml.Return) {
	if r := l.begin(); r != nvml.SUCCESS {
		return "", r
	}
	defer l.mu.Unlock()
	return "12." + DriverVersion, nvml.SUCCESS
}

func (l *Lib) SystemGetCudaDriverVersion() (int, nvml.Return) {
	if r := l.begin(); r != nvml.SUCCESS {
		return 0, r
	}
	defer l.mu.Unlock()
	return CudaDriverVersion, nvml.SUCCESS
}

func (l *Lib) SystemGetCudaDriverVersion_v2() (int, nvml.Return) {
	return l.SystemGetCudaDriverVersion()
}

func (l *Lib) DeviceGetCount() (int, nvml.Return) {
	if r := l.begin(); r != nvml.SUCCESS {
		return 0, r
	}
	defer l.mu.Unlock()
	return len(l.gpus), nvml.SUCCESS
}

// DeviceGetHandleByIndex answers ERROR_GPU_IS_LOST for a GPU off the bus,
// as nvml.h documents.
func (l *Lib) DeviceGetHandleByIndex(index int) (nvml.Device, nvml.Return) {
	return l.gpuHandle(func() (int, nvml.Return) {
		if index < 0 || index >= len(l.gpus) {
			return -1, nvml.ERROR_INVALID_ARGUMENT
		}
		return index, lostErr(&l.st, index)
	})
}

// gpuHandle returns the GPU find picks (under the lock; -1 for none), after
// the faults of CallGetHandle for it.
func (l *Lib) gpuHandle(find func() (int, nvml.Return)) (nvml.Device, nvml.Return) {
	if r := l.begin(); r != nvml.SUCCESS {
		return nil, r
	}
	i, r := find()
	l.mu.Unlock()
	if f := l.callFault(CallGetHandle, i); f != nvml.SUCCESS {
		return nil, f
	}
	if r != nvml.SUCCESS {
		return nil, r
	}
	return l.gpus[i], nvml.SUCCESS
}

// DeviceGetHandleByUUID accepts GPU and MIG device UUIDs, like NVML since
// R470. It looks through the GPUs in index order, and like NVML, which
// initializes the GPUs it passes, answers ERROR_GPU_IS_LOST when it meets a
// GPU off the bus before it finds the UUID.
func (l *Lib) DeviceGetHandleByUUID(uuid string) (nvml.Device, nvml.Return) {
	switch {
	case strings.HasPrefix(uuid, "GPU-"):
		return l.gpuHandle(func() (int, nvml.Return) {
			for i, g := range l.st.GPUs {
				if g.Lost {
					return i, nvml.ERROR_GPU_IS_LOST
				}
				if g.UUID == uuid {
					return i, nvml.SUCCESS
				}
			}
			return -1, nvml.ERROR_NOT_FOUND
		})
	case strings.HasPrefix(uuid, "MIG-"):
		if r := l.begin(); r != nvml.SUCCESS {
			return nil, r
		}
		defer l.mu.Unlock()
		for i := range l.st.GPUs {
			g := &l.st.GPUs[i]
			if g.Lost {
				return nil, nvml.ERROR_GPU_IS_LOST
			}
			for _, m := range l.migDevices(i) {
				gi, _ := g.instance(m.gi)
				if ci, _ := gi.ci(m.ci); ci.UUID == uuid {
					return m, nvml.SUCCESS
				}
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	if r := l.begin(); r != nvml.SUCCESS {
		return nil, r
	}
	l.mu.Unlock()
	return nil, nvml.ERROR_INVALID_ARGUMENT
}

func (l *Lib) DeviceGetHandleByPciBusId(busID string) (nvml.Device, nvml.Return) {
	return l.gpuHandle(func() (int, nvml.Return) {
		for i := range l.gpus {
			if strings.EqualFold(pciBusID(i), busID) {
				return i, lostErr(&l.st, i)
			}
		}
		return -1, nvml.ERROR_NOT_FOUND
	})
}

// pciBusID gives GPU i a stable bus id, spaced like an 8-GPU HGX board.
func pciBusID(i int) string { return fmt.Sprintf("00000000:%02X:00.0", 0x18+i*0x10) }

// Handle validity for the generated delegations: only live handles of some
// simulator reach their methods, never a real go-nvml handle (which would call
// into C) or a nil one.
func validDevice(d nvml.Device) bool {
	switch h := d.(type) {
	case *gpuHandle:
		return h != nil
	case *migHandle:
		return h != nil
	}
	return false
}

func validGpuInstance(gi nvml.GpuInstance) bool {
	h, ok := gi.(*giHandle)
	return ok && h != nil
}

func validComputeInstance(ci nvml.ComputeInstance) bool {
	h, ok := ci.(*ciHandle)
	return ok && h != nil
}

func validEventSet(s nvml.EventSet) bool {
	h, ok := s.(*eventSet)
	return ok && h != nil
}
