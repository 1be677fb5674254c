package sim

import (
	"fmt"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// The methods in this file are not NVML: they stand in for what happens to
// real hardware outside the driver's API (processes, faults, resets and
// reboots). They work whether or not NVML is initialized, and their errors
// wrap the nvml.Return a real operation would fail with, so
// errors.Is(err, nvml.ERROR_IN_USE) works.

// InjectXid raises Xid error xid on GPU gpu, delivered to every event set
// the GPU registered EventTypeXidCriticalError with. gi and ci attribute it
// to a GPU instance and a compute instance in it; NoInstance for either
// means the whole GPU (or the whole GPU instance), as in real NVML events.
func (l *Lib) InjectXid(gpu int, gi, ci uint32, xid uint64) error {
	l.mu.Lock()
	if err := l.checkXidTarget(gpu, gi, ci); err != nil {
		l.mu.Unlock()
		return err
	}
	sets := l.eventSetsLocked()
	dev := l.gpus[gpu]
	l.mu.Unlock()

	e := nvml.EventData{
		Device:            dev,
		EventType:         nvml.EventTypeXidCriticalError,
		EventData:         xid,
		GpuInstanceId:     gi,
		ComputeInstanceId: ci,
	}
	for _, s := range sets {
		s.push(gpu, e)
	}
	return nil
}

// eventSetsLocked lists the live event sets; call with l.mu held.
func (l *Lib) eventSetsLocked() []*eventSet {
	sets := make([]*eventSet, 0, len(l.eventSets))
	for s := range l.eventSets {
		sets = append(sets, s)
	}
	return sets
}

func (l *Lib) checkXidTarget(gpu int, gi, ci uint32) error {
	if err := l.checkGPU(gpu); err != nil {
		return fmt.Errorf("inject Xid: %w", err)
	}
	if gi == NoInstance {
		if ci != NoInstance {
			return fmt.Errorf("GPU %d: compute instance %d needs its GPU instance: %w", gpu, ci, nvml.ERROR_INVALID_ARGUMENT)
		}
		return nil
	}
	g := &l.st.GPUs[gpu]
	inst, ok := g.instance(gi)
	if !ok {
		return fmt.Errorf("GPU %d has no GPU instance %d: %w", gpu, gi, nvml.ERROR_NOT_FOUND)
	}
	if _, ok := inst.ci(ci); ci != NoInstance && !ok {
		return fmt.Errorf("GPU %d GPU instance %d has no compute instance %d: %w", gpu, gi, ci, nvml.ERROR_NOT_FOUND)
	}
	return nil
}

func (l *Lib) checkBusyTarget(gpu int, gi uint32) error {
	if err := l.checkGPU(gpu); err != nil {
		return fmt.Errorf("set busy: %w", err)
	}
	if _, ok := l.st.GPUs[gpu].instance(gi); gi != 0 && !ok {
		return fmt.Errorf("GPU %d has no GPU instance %d: %w", gpu, gi, nvml.ERROR_NOT_FOUND)
	}
	return nil
}

func (l *Lib) checkGPU(gpu int) error {
	if gpu < 0 || gpu >= len(l.gpus) {
		return fmt.Errorf("no GPU %d (the simulator has %d): %w", gpu, len(l.gpus), nvml.ERROR_INVALID_ARGUMENT)
	}
	return nil
}

// SetBusy marks processes running on GPU instance gi of GPU gpu, or on the
// whole GPU for gi 0. While busy, destroying the instance or its compute
// instance fails with ERROR_IN_USE; a busy GPU refuses MIG mode changes and
// resets. A reboot clears it.
func (l *Lib) SetBusy(gpu int, gi uint32, busy bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.checkWritable(); err != nil {
		return err
	}
	if err := l.checkBusyTarget(gpu, gi); err != nil {
		return err
	}
	next := l.st.clone()
	g := &next.GPUs[gpu]
	if gi == 0 {
		g.Busy = busy
	} else {
		inst, _ := g.instance(gi)
		inst.Busy = busy
	}
	return l.commitErr(next, "set busy")
}

// ResetGPU resets GPU gpu like `nvidia-smi -r`: a pending MIG mode takes
// effect. It needs an idle GPU: no GPU instances and no processes, else
// ERROR_IN_USE. A GPU off the bus cannot be reached to reset
// (ERROR_GPU_IS_LOST): only a reboot brings it back.
func (l *Lib) ResetGPU(gpu int) error {
	if err := l.checkGPU(gpu); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	if r := l.callFault(CallResetGpu, gpu); r != nvml.SUCCESS {
		return fmt.Errorf("GPU %d: reset: simulator fault: %w", gpu, r)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.checkWritable(); err != nil {
		return err
	}
	g := &l.st.GPUs[gpu]
	if g.Lost {
		return fmt.Errorf("GPU %d: reset: the GPU has fallen off the bus: %w", gpu, nvml.ERROR_GPU_IS_LOST)
	}
	if n := len(g.Instances); n > 0 {
		return fmt.Errorf("GPU %d: reset: %d GPU instances exist: %w", gpu, n, nvml.ERROR_IN_USE)
	}
	if g.Busy {
		return fmt.Errorf("GPU %d: reset: processes are running: %w", gpu, nvml.ERROR_IN_USE)
	}
	next := l.st.clone()
	next.GPUs[gpu].MigEnabled = next.GPUs[gpu].MigPending
	return l.commitErr(next, fmt.Sprintf("GPU %d: reset", gpu))
}

// Reboot simulates a node reboot: every GPU instance and process is gone,
// pending MIG modes take effect and MIG modes stay; a GPU that fell off
// the bus is back, unless it is lost for good (FaultLost's Permanent).
// Handles to instances go stale; GPU handles and event sets stay usable
// (the simulator's process survives what a real one would not).
func (l *Lib) Reboot() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.checkWritable(); err != nil {
		return err
	}
	next := l.st.clone()
	for i := range next.GPUs {
		g := &next.GPUs[i]
		dead, by := g.Lost && g.LostPermanent, g.LostBy
		g.rebooted()
		if dead {
			g.Lost, g.LostPermanent, g.LostBy = true, true, by
		}
	}
	return l.commitErr(next, "reboot")
}

func (l *Lib) checkWritable() error {
	if l.readOnly {
		return fmt.Errorf("simulator opened read-only: %w", nvml.ERROR_NO_PERMISSION)
	}
	return nil
}

func (l *Lib) commitErr(next state, what string) error {
	if r := l.commit(next); r != nvml.SUCCESS {
		return fmt.Errorf("%s: persisting simulator state: %w", what, r)
	}
	return nil
}

// GPUSnapshot is a simulated GPU as the simulator sees it, including what
// NVML cannot tell (which instances are busy).
type GPUSnapshot struct {
	Index      int
	Model      string
	UUID       string
	MigEnabled bool
	MigPending bool
	Busy       bool
	// Lost: fallen off the bus (FaultLost); LostPermanent: a reboot does
	// not bring it back.
	Lost          bool
	LostPermanent bool
	Instances     []InstanceSnapshot
}

// InstanceSnapshot is one GPU instance and its compute instance, if any.
type InstanceSnapshot struct {
	GI      uint32
	Profile string
	Start   int
	Size    int
	Busy    bool
	HasCI   bool
	CI      uint32
	// UUID is the MIG device UUID, empty without a compute instance.
	UUID string
}

// Snapshot returns the current state of every GPU, instances ordered by
// placement.
func (l *Lib) Snapshot() []GPUSnapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]GPUSnapshot, len(l.st.GPUs))
	for i, g := range l.st.GPUs {
		s := GPUSnapshot{Index: i, Model: g.Model, UUID: g.UUID, MigEnabled: g.MigEnabled, MigPending: g.MigPending, Busy: g.Busy, Lost: g.Lost, LostPermanent: g.LostPermanent}
		for _, gi := range g.Instances {
			p, _ := l.models[i].ProfileByID(gi.ProfileID)
			is := InstanceSnapshot{GI: gi.ID, Profile: p.Name, Start: gi.Start, Size: p.MemorySlices, Busy: gi.Busy}
			if len(gi.CIs) > 0 {
				is.HasCI, is.CI, is.UUID = true, gi.CIs[0].ID, gi.CIs[0].UUID
			}
			s.Instances = append(s.Instances, is)
		}
		slices.SortFunc(s.Instances, func(a, b InstanceSnapshot) int { return a.Start - b.Start })
		out[i] = s
	}
	return out
}
