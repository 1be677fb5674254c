package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/migflex/migflex/internal/platform/atomicfile"
)

// Where a fault comes from, in FaultStatus.Source.
const (
	SourceConfig  = "config"
	SourceCommand = "command"
)

// FaultStatus is an armed fault and what it did, for tests to assert that
// it fired (Lib.Faults, ReadFaults; `device-plugin sim faults`).
type FaultStatus struct {
	// Fault is the spec, its name filled in.
	Fault  Fault  `json:"fault"`
	Source string `json:"source"`
	// Calls counts the calls at its site (on its GPU) from when it was
	// armed until it was spent.
	Calls int `json:"calls"`
	// Fired counts the calls it failed or held up, or 1 once a storm
	// started or the GPU was lost.
	Fired int `json:"fired"`
	// Hanging is how many calls wait in it now.
	Hanging int `json:"hanging,omitempty"`
	// XidsSent counts the Xids a storm raised so far.
	XidsSent int `json:"xidsSent,omitempty"`
	// HeldMiB is the memory an OOM fault allocated and holds (the process
	// lived through it).
	HeldMiB int `json:"heldMiB,omitempty"`
	// Done: it fires no more (a storm may still be raising Xids).
	Done bool `json:"done"`
}

// armedFault is one fault of a running simulator.
type armedFault struct {
	faultPlan
	source  string
	calls   int
	fired   int
	hanging int
	sent    int
	done    bool
	// held is an OOM fault's memory, kept referenced until the fault is
	// cleared.
	held [][]byte
	// cleared is closed when the fault is cleared: hangs end, storms stop.
	cleared chan struct{}
}

func (a *armedFault) status() FaultStatus {
	return FaultStatus{Fault: a.Fault, Source: a.source, Calls: a.calls, Fired: a.fired, Hanging: a.hanging, XidsSent: a.sent, HeldMiB: len(a.held), Done: a.done}
}

// faultSet is a simulator's armed faults. Its lock is its own and never
// held with the simulator's: faults run before a call takes the
// simulator's lock, so a hang holds up its caller only.
type faultSet struct {
	mu   sync.Mutex
	list []*armedFault
	seq  int
	// file is the status file in the state directory; "" in memory.
	file    string
	closing chan struct{} // closed by Lib.Close
	once    sync.Once
	storms  sync.WaitGroup
}

func newFaultSet(stateDir string) *faultSet {
	fs := &faultSet{closing: make(chan struct{})}
	if stateDir != "" {
		fs.file = filepath.Join(stateDir, faultsFileName)
	}
	return fs
}

// close ends every hang and storm and waits for the storms.
func (fs *faultSet) close() {
	fs.once.Do(func() { close(fs.closing) })
	fs.storms.Wait()
}

// faultsFile is the status file's form.
type faultsFile struct {
	Faults []FaultStatus `json:"faults"`
}

// saveLocked writes the status file; call with fs.mu held. A failure is
// logged: the faults work without their listing.
func (fs *faultSet) saveLocked() {
	if fs.file == "" {
		return
	}
	f := faultsFile{Faults: []FaultStatus{}}
	for _, a := range fs.list {
		f.Faults = append(f.Faults, a.status())
	}
	data, err := json.MarshalIndent(f, "", "  ")
	if err == nil {
		err = atomicfile.Write(fs.file, append(data, '\n'), 0o644)
	}
	if err != nil {
		logger().Error(err, "Writing the simulator's fault listing", "file", fs.file)
	}
}

// ReadFaults returns the faults the simulator on stateDir last listed:
// those of the running one, or of the last one to run. A state directory
// no simulator with faults ran on has none.
func ReadFaults(stateDir string) ([]FaultStatus, error) {
	data, err := os.ReadFile(filepath.Join(stateDir, faultsFileName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the simulator's faults: %w", err)
	}
	var f faultsFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("simulator fault listing %s is corrupt: %w", filepath.Join(stateDir, faultsFileName), err)
	}
	return f.Faults, nil
}

// ArmFault arms f on a running simulator and returns its name. A storm or
// a loss without a call site happens at once. A read-only simulator takes
// no faults.
func (l *Lib) ArmFault(f Fault) (string, error) {
	return l.arm(f, SourceCommand)
}

func (l *Lib) arm(f Fault, source string) (string, error) {
	if err := l.writable(); err != nil {
		return "", fmt.Errorf("arm fault: %w", err)
	}
	p, err := f.check(len(l.gpus), source == SourceConfig)
	if err != nil {
		return "", fmt.Errorf("fault %s: %w", f.Name, err)
	}
	if p.Kind == FaultXidStorm && p.Call == "" {
		l.mu.Lock()
		err := l.checkXidTarget(*p.GPU, orAll(p.GI), orAll(p.CI))
		l.mu.Unlock()
		if err != nil {
			return "", fmt.Errorf("fault %s: %w", f.Name, err)
		}
	}
	fs := l.faults
	fs.mu.Lock()
	fs.seq++
	if p.Name == "" {
		p.Name = fmt.Sprintf("%s-%d", p.Kind, fs.seq)
	}
	if slices.ContainsFunc(fs.list, func(a *armedFault) bool { return a.Name == p.Name }) {
		fs.mu.Unlock()
		return "", fmt.Errorf("fault %s: a fault of that name is armed already; clear it first", p.Name)
	}
	a := &armedFault{faultPlan: p, source: source, cleared: make(chan struct{})}
	fs.list = append(fs.list, a)
	now := a.Call == ""
	if now {
		a.fired, a.done = 1, true
	}
	fs.saveLocked()
	fs.mu.Unlock()
	logger().Info("Armed simulator fault", "fault", a.Name, "what", a.Fault.String(), "source", source)
	if now {
		l.fire(a)
	}
	return a.Name, nil
}

// writable is checkWritable for callers without the lock.
func (l *Lib) writable() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.checkWritable()
}

func orAll(id *uint32) uint32 {
	if id == nil {
		return NoInstance
	}
	return *id
}

// ClearFaults disarms the fault named name, or every fault for "": hangs
// in progress end, storms stop, and a GPU a cleared fault lost (every lost
// GPU, for "") comes back as after a reboot, without instances, its MIG
// mode kept. It returns how many faults and lost GPUs it cleared.
func (l *Lib) ClearFaults(name string) (int, error) {
	if err := l.writable(); err != nil {
		return 0, fmt.Errorf("clear faults: %w", err)
	}
	fs := l.faults
	fs.mu.Lock()
	n := 0
	var names []string
	fs.list = slices.DeleteFunc(fs.list, func(a *armedFault) bool {
		names = append(names, a.Name)
		if name != "" && a.Name != name {
			return false
		}
		close(a.cleared)
		a.held = nil // an OOM fault's memory goes back
		n++
		return true
	})
	fs.saveLocked()
	fs.mu.Unlock()

	l.mu.Lock()
	next := l.st.clone()
	var back []int
	for i := range next.GPUs {
		g := &next.GPUs[i]
		if g.Lost && (name == "" || g.LostBy == name) {
			g.rebooted()
			back = append(back, i)
		}
	}
	var err error
	if len(back) > 0 {
		err = l.commitErr(next, "clear faults")
	}
	l.mu.Unlock()
	if err != nil {
		return n, err
	}
	if len(back) > 0 {
		logger().Info("Simulated GPUs back on the bus", "gpus", back, "fault", name)
	}
	if n+len(back) == 0 && name != "" {
		return 0, fmt.Errorf("no fault named %q (armed: %v) and no GPU it lost", name, names)
	}
	if n > 0 {
		logger().Info("Cleared simulator faults", "count", n, "name", name)
	}
	return n + len(back), nil
}

// Faults lists the armed faults in the order they were armed.
func (l *Lib) Faults() []FaultStatus {
	fs := l.faults
	fs.mu.Lock()
	defer fs.mu.Unlock()
	out := make([]FaultStatus, len(fs.list))
	for i, a := range fs.list {
		out[i] = a.status()
	}
	return out
}

// callFault runs the faults armed at site for a call on GPU gpu, before the
// call does anything else: it counts the call, waits out the hangs that
// fire, sets off the storms and losses, and returns the return of the
// first error that fires (SUCCESS when none). Every call at the site
// counts, whatever it then answers.
func (l *Lib) callFault(site CallSite, gpu int) nvml.Return {
	fs := l.faults
	if fs == nil {
		return nvml.SUCCESS
	}
	fs.mu.Lock()
	ret := nvml.SUCCESS
	var hangs, hogs, fire []*armedFault
	counted := false
	for _, a := range fs.list {
		if a.done || a.Call != site || !a.gpuMatches(gpu) {
			continue
		}
		counted = true
		a.calls++
		if a.calls < a.Nth || (!a.Always && a.calls >= a.Nth+a.Times) {
			continue
		}
		a.fired++
		if !a.Always && a.calls == a.Nth+a.Times-1 {
			a.done = true
		}
		logger().Info("Simulator fault fired", "fault", a.Name, "what", a.Fault.String(), "call", site, "gpu", gpu, "callNumber", a.calls)
		switch a.Kind {
		case FaultError:
			if ret == nvml.SUCCESS {
				ret = a.ret
			}
		case FaultHang:
			a.hanging++
			hangs = append(hangs, a)
		case FaultOOM:
			hogs = append(hogs, a)
		default:
			fire = append(fire, a)
		}
	}
	if counted {
		fs.saveLocked()
	}
	fs.mu.Unlock()
	for _, a := range hangs {
		fs.hang(a)
	}
	for _, a := range hogs {
		fs.hog(a)
	}
	for _, a := range fire {
		l.fire(a)
	}
	return ret
}

// hang waits out a's duration, or until a is cleared or the simulator
// closed.
func (fs *faultSet) hang(a *armedFault) {
	t := time.NewTimer(time.Duration(a.Duration))
	defer t.Stop()
	select {
	case <-t.C:
	case <-a.cleared:
	case <-fs.closing:
	}
	fs.mu.Lock()
	a.hanging--
	fs.saveLocked()
	fs.mu.Unlock()
}

// hog allocates a's MiB a MiB at a time, touching every page so that it
// is resident (charged to the process's memory cgroup), not only
// reserved, and keeps it referenced until a is cleared. The Go runtime
// cannot hand back memory that is referenced, so a limit below it binds:
// the OOM killer ends the process here. A process that lives through it
// lists the memory held.
func (fs *faultSet) hog(a *armedFault) {
	page := os.Getpagesize()
	held := make([][]byte, 0, a.MiB)
	for range a.MiB {
		b := make([]byte, 1<<20)
		for i := 0; i < len(b); i += page {
			b[i] = 1
		}
		held = append(held, b)
	}
	fs.mu.Lock()
	select {
	case <-a.cleared: // cleared meanwhile: nothing to hold
	default:
		a.held = held
	}
	fs.saveLocked()
	fs.mu.Unlock()
	logger().Info("Simulator fault holds memory", "fault", a.Name, "mib", len(held))
}

// fire starts a storm, loses a GPU or reboots the node.
func (l *Lib) fire(a *armedFault) {
	switch a.Kind {
	case FaultLost:
		if err := l.loseGPU(*a.GPU, a.Name, a.Permanent); err != nil {
			logger().Error(err, "Simulator fault could not lose the GPU", "fault", a.Name, "gpu", *a.GPU)
		}
	case FaultXidStorm:
		l.faults.storms.Add(1)
		go l.storm(a)
	case FaultReboot:
		if err := l.Reboot(); err != nil {
			logger().Error(err, "Simulator fault could not reboot the node", "fault", a.Name)
			return
		}
		logger().Info("Simulated node rebooted", "fault", a.Name)
	}
}

// storm raises a's Xids until they are all sent, a is cleared or the
// simulator closed, or the instance they concern is gone.
func (l *Lib) storm(a *armedFault) {
	fs := l.faults
	defer fs.storms.Done()
	defer func() {
		fs.mu.Lock()
		fs.saveLocked()
		fs.mu.Unlock()
	}()
	gi, ci := orAll(a.GI), orAll(a.CI)
	interval := time.Duration(a.Interval)
	for i := range a.Events {
		if i > 0 && interval > 0 {
			t := time.NewTimer(interval)
			select {
			case <-t.C:
			case <-a.cleared:
				t.Stop()
				return
			case <-fs.closing:
				t.Stop()
				return
			}
		}
		select {
		case <-a.cleared:
			return
		case <-fs.closing:
			return
		default:
		}
		if err := l.InjectXid(*a.GPU, gi, ci, a.Xid); err != nil {
			logger().Error(err, "Xid storm stopped", "fault", a.Name, "sent", i)
			return
		}
		fs.mu.Lock()
		a.sent++
		fs.mu.Unlock()
	}
	logger().Info("Xid storm over", "fault", a.Name, "gpu", *a.GPU, "xid", a.Xid, "events", a.Events)
}

// loseGPU makes GPU gpu fall off the bus: Xid 79 reaches the event sets
// watching it, then every call on it answers ERROR_GPU_IS_LOST.
func (l *Lib) loseGPU(gpu int, by string, permanent bool) error {
	l.mu.Lock()
	if err := l.checkWritable(); err != nil {
		l.mu.Unlock()
		return err
	}
	if l.st.GPUs[gpu].Lost {
		l.mu.Unlock()
		return nil
	}
	next := l.st.clone()
	g := &next.GPUs[gpu]
	g.Lost, g.LostPermanent, g.LostBy = true, permanent, by
	if err := l.commitErr(next, fmt.Sprintf("GPU %d: fall off the bus", gpu)); err != nil {
		l.mu.Unlock()
		return err
	}
	sets := l.eventSetsLocked()
	dev := l.gpus[gpu]
	l.mu.Unlock()
	logger().Info("Simulated GPU fell off the bus", "gpu", gpu, "fault", by, "permanent", permanent)
	e := nvml.EventData{Device: dev, EventType: nvml.EventTypeXidCriticalError, EventData: XidFallenOffTheBus, GpuInstanceId: NoInstance, ComputeInstanceId: NoInstance}
	for _, s := range sets {
		s.push(gpu, e)
	}
	return nil
}

// XidFallenOffTheBus is the Xid a GPU that falls off the bus raises.
const XidFallenOffTheBus = 79

// rebooted is g after a reboot: no instances or processes, the pending
// MIG mode in effect, back on the bus unless lost for good.
func (g *gpuState) rebooted() {
	g.Instances = nil
	g.Busy = false
	g.MigEnabled = g.MigPending
	g.Lost, g.LostPermanent, g.LostBy = false, false, ""
}

// lostErr is ERROR_GPU_IS_LOST for a GPU off the bus in st.
func lostErr(st *state, gpu int) nvml.Return {
	if st.GPUs[gpu].Lost {
		return nvml.ERROR_GPU_IS_LOST
	}
	return nvml.SUCCESS
}
