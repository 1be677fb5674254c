package agent

import (
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/nvml/nvmlcall"
	"github.com/migflex/migflex/internal/nvml/nvmlmig"
)

// callGuard is the partitioner the agent calls: it runs each call that
// changes a GPU, and each reading of the GPUs (discover), through an
// nvmlcall.Guard keyed by GPU, waiting for it at most timeout. A hung
// driver call would otherwise hold the agent's loop: no reconcile, no
// health or in-use report, and a stop that waits for the driver.
//
// Until a call the guard stopped waiting for returns, every other call on
// its GPU is refused at once (mig.ErrNoReturn): a GPU is never changed by
// two calls at once. When it returns, Returned says so, and the loop
// reconciles from what NVML reports then.
type callGuard struct {
	part partitioner
	*nvmlcall.Guard[int]
}

// allGPUs is the key of the reading of the GPUs among the pending calls.
const allGPUs = -1

// describeNoReturn is the agent's text for a call that has not returned.
func describeNoReturn(gpu int, call, op string, after time.Duration) string {
	if gpu == allGPUs {
		return fmt.Sprintf("NVML has not returned from reading the GPUs for %v (--nvml-call-timeout); they are not read again until it does", after)
	}
	return fmt.Sprintf("GPU %d: NVML %s (%s) has not returned for %v (--nvml-call-timeout); the GPU is not touched until it does",
		gpu, call, op, after)
}

// Default of Options.shutdownGrace.
const defaultShutdownGrace = 10 * time.Second

func newCallGuard(part partitioner, timeout, grace time.Duration, after func(time.Duration) <-chan time.Time, onTimeout func(string)) *callGuard {
	return &callGuard{part: part, Guard: nvmlcall.New(nvmlcall.Options[int]{
		Timeout: timeout, Grace: grace, After: after, OnTimeout: onTimeout, Describe: describeNoReturn,
	})}
}

// outstanding returns, by GPU, why the GPUs whose call has not returned
// are left alone. The text does not change while the call runs, so a
// report that repeats it writes nothing.
func (g *callGuard) outstanding() map[int]string {
	out := map[int]string{}
	for gpu, err := range g.Outstanding() {
		if gpu != allGPUs {
			out[gpu] = err.Error()
		}
	}
	return out
}

// The NVML calls each partitioner step makes that may block in the driver,
// and those reading the GPUs.
const (
	callSetMigMode = "SetMigMode"
	callCreate     = "CreateGpuInstance/CreateComputeInstance"
	callDestroy    = "DestroyComputeInstance/DestroyGpuInstance"
	callReset      = "GPU reset"
	callDiscover   = "discover"
)

// discover reads the GPUs through lib (nvmlmig.Discover). While a reading
// has not returned, the next ones fail at once: its result would be stale
// anyway, and no second goroutine waits in the driver.
func (g *callGuard) discover(lib nvml.Interface) ([]mig.GPU, error) {
	var gpus []mig.GPU
	err := g.Do(allGPUs, callDiscover, "reading the GPUs", func() error {
		var err error
		gpus, err = nvmlmig.Discover(lib)
		return err
	})
	if err != nil {
		return nil, err
	}
	return gpus, nil
}

func (g *callGuard) SetMigMode(gpu int, enabled bool) error {
	return g.Do(gpu, callSetMigMode, fmt.Sprintf("MIG %s", onOff(enabled)), func() error { return g.part.SetMigMode(gpu, enabled) })
}

func (g *callGuard) CreateInstance(gpu int, profile string, start int) (mig.Instance, error) {
	var in mig.Instance
	err := g.Do(gpu, callCreate, fmt.Sprintf("create %s at %d", profile, start), func() error {
		var err error
		in, err = g.part.CreateInstance(gpu, profile, start)
		return err
	})
	if err != nil {
		return mig.Instance{}, err
	}
	return in, nil
}

func (g *callGuard) DestroyInstance(gpu int, gi uint32) error {
	return g.Do(gpu, callDestroy, fmt.Sprintf("destroy GPU instance %d", gi), func() error { return g.part.DestroyInstance(gpu, gi) })
}

func (g *callGuard) ResetGPU(gpu int) error {
	return g.Do(gpu, callReset, "reset", func() error { return g.part.ResetGPU(gpu) })
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// Instances makes and unmakes instances, and reads the GPUs, through a
// callGuard of its own: for DRA dynamic mode's Prepare, which holds its
// driver's lock while it calls, so that a hung create would otherwise hold
// every Prepare and Unprepare of the node and the kubelet's calls with
// them. Past timeout the call fails naming itself (the claim's Prepare
// fails, the kubelet retries it and shows the error on the pod), is
// counted by onTimeout, and its GPU is refused at once until it returns;
// Returned says when it has.
type Instances struct {
	guard *callGuard
	lib   nvml.Interface
}

// NewInstances returns Instances over lib, whose calls are guarded with
// opts (Timeout, OnTimeout; After in tests); the texts are the agent's.
func NewInstances(lib nvml.Interface, opts nvmlcall.Options[int]) *Instances {
	return &Instances{guard: newCallGuard(nvmlmig.NewPartitioner(lib), opts.Timeout, opts.Grace, opts.After, opts.OnTimeout), lib: lib}
}

// Discover reads the GPUs (nvmlmig.Discover).
func (i *Instances) Discover() ([]mig.GPU, error) { return i.guard.discover(i.lib) }

// CreateInstance creates profile at start on GPU gpu.
func (i *Instances) CreateInstance(gpu int, profile string, start int) (mig.Instance, error) {
	return i.guard.CreateInstance(gpu, profile, start)
}

// Returned gets a value when a call that timed out returns; values
// coalesce. What it did is then on the GPUs, asked for or not.
func (i *Instances) Returned() <-chan struct{} { return i.guard.Returned() }

// DestroyInstance destroys GPU instance gi of GPU gpu.
func (i *Instances) DestroyInstance(gpu int, gi uint32) error {
	return i.guard.DestroyInstance(gpu, gi)
}
