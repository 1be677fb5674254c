package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/fsnotify/fsnotify"
	"k8s.io/klog/v2"
)

func logger() klog.Logger { return klog.Background().WithName("nvml-sim") }

// Op is a command another process sends a running simulator.
type Op string

const (
	OpXid    Op = "xid"    // InjectXid(GPU, GI, CI, Xid)
	OpBusy   Op = "busy"   // SetBusy(GPU, GI, Busy)
	OpReset  Op = "reset"  // ResetGPU(GPU)
	OpReboot Op = "reboot" // Reboot()
	// OpFault arms Fault (ArmFault); OpClearFaults clears the fault
	// named Name, or all (ClearFaults). Both need a running simulator.
	OpFault       Op = "fault"
	OpClearFaults Op = "clear-faults"
)

// Command is one line of the inbox.
type Command struct {
	Op    Op     `json:"op"`
	GPU   int    `json:"gpu"`
	GI    uint32 `json:"gi"`
	CI    uint32 `json:"ci"`
	Xid   uint64 `json:"xid,omitempty"`
	Busy  bool   `json:"busy,omitempty"`
	Fault *Fault `json:"fault,omitempty"`
	Name  string `json:"name,omitempty"`
}

func (c Command) validate() error {
	switch c.Op {
	case OpXid, OpBusy, OpReset, OpReboot, OpClearFaults:
		return nil
	case OpFault:
		if c.Fault == nil {
			return errors.New("simulator command fault: no fault given")
		}
		return nil
	}
	return fmt.Errorf("unknown simulator command %q", c.Op)
}

// needsRunning: the command acts on a running simulator's memory, which a
// simulator started to apply it would lose at once.
func (c Command) needsRunning() bool {
	return c.Op == OpXid || c.Op == OpFault || c.Op == OpClearFaults
}

// Apply runs the command on l.
func (l *Lib) Apply(c Command) error {
	if err := c.validate(); err != nil {
		return err
	}
	switch c.Op {
	case OpXid:
		return l.InjectXid(c.GPU, c.GI, c.CI, c.Xid)
	case OpBusy:
		return l.SetBusy(c.GPU, c.GI, c.Busy)
	case OpReset:
		return l.ResetGPU(c.GPU)
	case OpFault:
		_, err := l.ArmFault(*c.Fault)
		return err
	case OpClearFaults:
		_, err := l.ClearFaults(c.Name)
		return err
	default:
		return l.Reboot()
	}
}

// Send delivers c to the simulator that owns cfg.StateDir. When a simulator
// is running (it holds the directory's lock), c is appended to its inbox and
// Send returns queued; the simulator applies it within moments. When none
// runs, Send applies c to the persisted state itself, except an Xid, which
// only a running simulator's event sets could receive, and faults, which
// live in a running simulator. cfg's own faults are not armed by Send.
func Send(cfg Config, c Command) (queued bool, err error) {
	if err := c.validate(); err != nil {
		return false, err
	}
	if cfg.StateDir == "" {
		return false, errors.New("the simulator config has no stateDir: an in-memory simulator cannot be reached from another process")
	}
	cfg.ReadOnly = false
	cfg.Faults = nil
	l, err := New(cfg)
	if errors.Is(err, ErrStateLocked) {
		// Check the target against the persisted state first, so a typo
		// gets an error here rather than a line in the agent's log.
		if err := checkCommand(cfg, c); err != nil {
			return false, err
		}
		return true, appendInbox(cfg.StateDir, c)
	}
	if err != nil {
		return false, err
	}
	defer l.Close()
	switch {
	case c.Op == OpXid:
		return false, fmt.Errorf("no simulator is running on %s: an Xid would reach no event set", cfg.StateDir)
	case c.needsRunning():
		return false, fmt.Errorf("no simulator is running on %s: faults live in a running simulator (list those it should start with under faults: in its config)", cfg.StateDir)
	}
	return false, l.Apply(c)
}

// checkCommand validates c's target against a read-only view of the state.
func checkCommand(cfg Config, c Command) error {
	cfg.ReadOnly = true
	l, err := New(cfg)
	if err != nil {
		return err
	}
	defer l.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	switch c.Op {
	case OpXid:
		return l.checkXidTarget(c.GPU, c.GI, c.CI)
	case OpBusy:
		return l.checkBusyTarget(c.GPU, c.GI)
	case OpReset:
		if err := l.checkGPU(c.GPU); err != nil {
			return fmt.Errorf("reset: %w", err)
		}
	case OpFault:
		p, err := c.Fault.check(len(l.gpus), false)
		if err != nil {
			return fmt.Errorf("fault %s: %w", c.Fault.Name, err)
		}
		if p.Kind == FaultXidStorm && p.Call == "" {
			return l.checkXidTarget(*p.GPU, orAll(p.GI), orAll(p.CI))
		}
	}
	return nil
}

// appendInbox appends one command line under an exclusive flock, which the
// simulator also takes to read and truncate the inbox, so no line is lost or
// read twice.
func appendInbox(dir string, c Command) error {
	line, err := json.Marshal(c)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, inboxFileName), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("opening simulator inbox: %w", err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("locking simulator inbox: %w", err)
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("writing simulator inbox: %w", err)
	}
	return f.Sync()
}

// takeInbox returns the inbox's lines and empties it.
func takeInbox(dir string) ([]byte, error) {
	f, err := os.OpenFile(filepath.Join(dir, inboxFileName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening simulator inbox: %w", err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return nil, fmt.Errorf("locking simulator inbox: %w", err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("reading simulator inbox: %w", err)
	}
	if len(data) == 0 {
		return nil, nil
	}
	if err := f.Truncate(0); err != nil {
		return nil, fmt.Errorf("emptying simulator inbox: %w", err)
	}
	return data, nil
}

// inboxWatcher applies commands appended to the inbox, woken by fsnotify.
type inboxWatcher struct {
	watcher *fsnotify.Watcher
	done    chan struct{}
	once    sync.Once
}

func startInbox(l *Lib, dir string) (*inboxWatcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watching simulator inbox: %w", err)
	}
	// Watch the directory, not the file: the file may not exist yet.
	if err := w.Add(dir); err != nil {
		w.Close()
		return nil, fmt.Errorf("watching simulator inbox: %w", err)
	}
	iw := &inboxWatcher{watcher: w, done: make(chan struct{})}
	inbox := filepath.Join(dir, inboxFileName)
	// Commands queued while no simulator ran (or raced with the previous
	// one's exit) are applied now; the watch is already set, so nothing
	// appended from here on is missed.
	l.drainInbox(dir)
	go func() {
		defer close(iw.done)
		for {
			select {
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if ev.Name == inbox && ev.Op&(fsnotify.Write|fsnotify.Create) != 0 {
					l.drainInbox(dir)
				}
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				logger().Error(err, "Watching simulator inbox", "dir", dir)
			}
		}
	}()
	return iw, nil
}

func (iw *inboxWatcher) stop() error {
	var err error
	iw.once.Do(func() {
		err = iw.watcher.Close()
		<-iw.done
	})
	return err
}

// drainInbox applies every queued command; a bad line is logged and skipped.
func (l *Lib) drainInbox(dir string) {
	data, err := takeInbox(dir)
	if err != nil {
		logger().Error(err, "Reading simulator inbox", "dir", dir)
		return
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var c Command
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			logger().Error(err, "Ignoring malformed simulator command", "line", string(line))
			continue
		}
		if err := l.Apply(c); err != nil {
			logger().Error(err, "Simulator command failed", "op", c.Op, "gpu", c.GPU, "gi", c.GI, "ci", c.CI)
			continue
		}
		logger().V(2).Info("Applied simulator command", "op", c.Op, "gpu", c.GPU, "gi", c.GI, "ci", c.CI, "name", c.Name)
	}
}
