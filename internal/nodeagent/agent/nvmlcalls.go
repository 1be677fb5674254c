package agent

import (
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/nvml/nvmlmig"
)

// callGuard is the partitioner the agent calls: it runs each call that
// changes a GPU, and each reading of the GPUs (discover), in a goroutine of
// its own and waits for it at most timeout. A hung driver call would
// otherwise hold the agent's loop: no reconcile, no health or in-use
// report, and a stop that waits for the driver.
//
// NVML calls cannot be cancelled, so a call that does not return in time
// is left running, and until it returns the guard refuses every other call
// on its GPU (with mig.ErrNoReturn, at once): a GPU is never changed by two
// calls at once, and at most one goroutine per GPU waits in the driver,
// however often the agent tries again. When such a call returns, returned
// says so, and the loop reconciles from what NVML reports then.
type callGuard struct {
	part    partitioner
	timeout time.Duration
	// after is time.After; tests pass one whose deadlines they end.
	after func(time.Duration) <-chan time.Time
	// grace is how long a call is waited for once the agent stops, so
	// that a rollback under way finishes but a hung call does not hold
	// the process.
	grace     time.Duration
	onTimeout func(call string)
	log       klog.Logger

	mu      sync.Mutex
	pending map[int]*pendingCall
	// stopping is closed grace after the agent began to stop.
	stopping chan struct{}
	stopOnce sync.Once

	// returned gets a value when a call the guard stopped waiting for
	// returns; requests coalesce.
	returned chan struct{}
}

// pendingCall is a call under way on one GPU, or a reading of them all
// (gpu allGPUs).
type pendingCall struct {
	gpu int
	// call names the NVML calls ("CreateGpuInstance/CreateComputeInstance"),
	// op the step ("create 1g.10gb at 1").
	call, op string
	// abandoned: the guard stopped waiting for it.
	abandoned bool
	since     time.Time
}

// allGPUs is the key of the reading of the GPUs among the pending calls.
const allGPUs = -1

// noReturnError is a call on a GPU, or a reading of the GPUs, that has not
// returned within the deadline.
type noReturnError struct {
	call  *pendingCall
	after time.Duration
}

func (e *noReturnError) Error() string {
	if e.call.gpu == allGPUs {
		return fmt.Sprintf("NVML has not returned from reading the GPUs for %v (--nvml-call-timeout); they are not read again until it does", e.after)
	}
	return fmt.Sprintf("GPU %d: NVML %s (%s) has not returned for %v (--nvml-call-timeout); the GPU is not touched until it does",
		e.call.gpu, e.call.call, e.call.op, e.after)
}

func (e *noReturnError) Unwrap() error { return mig.ErrNoReturn }

// Default of Options.shutdownGrace.
const defaultShutdownGrace = 10 * time.Second

func newCallGuard(part partitioner, timeout, grace time.Duration, after func(time.Duration) <-chan time.Time, onTimeout func(string)) *callGuard {
	if after == nil {
		after = time.After
	}
	return &callGuard{
		part: part, timeout: timeout, grace: grace, after: after, onTimeout: onTimeout,
		log:      klog.Background(),
		pending:  map[int]*pendingCall{},
		stopping: make(chan struct{}),
		returned: make(chan struct{}, 1),
	}
}

// stop makes every wait end grace from now at the latest.
func (g *callGuard) stop() {
	g.stopOnce.Do(func() {
		time.AfterFunc(g.grace, func() { close(g.stopping) })
	})
}

// outstanding returns, by GPU, why the GPUs whose call has not returned
// are left alone. The text does not change while the call runs, so a
// report that repeats it writes nothing.
func (g *callGuard) outstanding() map[int]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[int]string{}
	for gpu, p := range g.pending {
		if p.abandoned && gpu != allGPUs {
			out[gpu] = (&noReturnError{call: p, after: g.timeout}).Error()
		}
	}
	return out
}

// do runs f, the call named call doing op on gpu, and waits for it until
// it returns, the deadline passes, or the agent has stopped.
func (g *callGuard) do(gpu int, call, op string, f func() error) error {
	g.mu.Lock()
	if p := g.pending[gpu]; p != nil {
		g.mu.Unlock()
		return &noReturnError{call: p, after: g.timeout}
	}
	p := &pendingCall{gpu: gpu, call: call, op: op, since: time.Now()}
	g.pending[gpu] = p
	g.mu.Unlock()

	done := make(chan error, 1)
	go func() {
		err := f()
		g.mu.Lock()
		delete(g.pending, gpu)
		abandoned := p.abandoned
		done <- err // under the lock: the waiter sees the result or abandons the call, never neither
		g.mu.Unlock()
		if abandoned {
			g.log.Info("A GPU call the agent stopped waiting for returned", "gpu", gpu, "call", call, "op", op, "after", time.Since(p.since), "err", err)
			select {
			case g.returned <- struct{}{}:
			default:
			}
		}
	}()

	timedOut := false
	select {
	case err := <-done:
		return err
	case <-g.after(g.timeout):
		timedOut = true
	case <-g.stopping:
	}
	g.mu.Lock()
	select {
	case err := <-done:
		g.mu.Unlock()
		return err
	default:
	}
	p.abandoned = true
	g.mu.Unlock()
	if timedOut {
		g.log.Error(mig.ErrNoReturn, "A GPU call did not return in time; the GPU is left alone until it does", "gpu", gpu, "call", call, "op", op, "timeout", g.timeout)
		if g.onTimeout != nil {
			g.onTimeout(call)
		}
	}
	return &noReturnError{call: p, after: g.timeout}
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
	err := g.do(allGPUs, callDiscover, "reading the GPUs", func() error {
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
	return g.do(gpu, callSetMigMode, fmt.Sprintf("MIG %s", onOff(enabled)), func() error { return g.part.SetMigMode(gpu, enabled) })
}

func (g *callGuard) CreateInstance(gpu int, profile string, start int) (mig.Instance, error) {
	var in mig.Instance
	err := g.do(gpu, callCreate, fmt.Sprintf("create %s at %d", profile, start), func() error {
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
	return g.do(gpu, callDestroy, fmt.Sprintf("destroy GPU instance %d", gi), func() error { return g.part.DestroyInstance(gpu, gi) })
}

func (g *callGuard) ResetGPU(gpu int) error {
	return g.do(gpu, callReset, "reset", func() error { return g.part.ResetGPU(gpu) })
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
