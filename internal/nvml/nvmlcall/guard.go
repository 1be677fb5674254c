// Package nvmlcall bounds how long a caller waits for an NVML call. A hung
// driver call would otherwise hold whatever made it for good: the agent's
// loop, the health watcher, a kubelet's Prepare.
//
// NVML calls cannot be cancelled, so a call that does not return in time
// is left running, and until it returns the Guard refuses every other
// call with its key (with mig.ErrNoReturn, at once): the thing the key
// names (a GPU, an event set) is never called into twice at once, and at
// most one goroutine per key waits in the driver, however often the
// caller tries again. When such a call returns, Returned says so.
package nvmlcall

import (
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/migflex/migflex/internal/domain/mig"
)

// Options configure a Guard.
type Options[K comparable] struct {
	// Timeout is how long a call is waited for. Required (above 0).
	Timeout time.Duration
	// Grace is how long a call is waited for once Stop was called, so
	// that a call under way (a rollback) finishes but a hung one does not
	// hold the process.
	Grace time.Duration
	// After is time.After when nil; tests pass one whose deadlines they
	// end.
	After func(time.Duration) <-chan time.Time
	// OnTimeout, if set, is called with the call's name each time a call
	// did not return within Timeout (not when Stop ended the wait).
	OnTimeout func(call string)
	// Describe says, for the errors, which call on what has not returned
	// and what is left alone meanwhile. Nil: "NVML <call> (<op>) has not
	// returned for <timeout>".
	Describe func(key K, call, op string, after time.Duration) string
}

// Guard runs calls in goroutines of their own and waits for each at most
// Options.Timeout. It is safe for concurrent use.
type Guard[K comparable] struct {
	opts Options[K]

	mu      sync.Mutex
	log     klog.Logger
	pending map[K]*pending[K]
	// stopping is closed Grace after Stop.
	stopping chan struct{}
	stopOnce sync.Once
	// returned gets a value when a call the guard stopped waiting for
	// returns; values coalesce.
	returned chan struct{}
}

// pending is a call under way.
type pending[K comparable] struct {
	key K
	// call names the NVML calls ("CreateGpuInstance/CreateComputeInstance"),
	// op the step ("create 1g.10gb at 1").
	call, op string
	// abandoned: the guard stopped waiting for it.
	abandoned bool
	since     time.Time
}

// New returns a Guard.
func New[K comparable](opts Options[K]) *Guard[K] {
	if opts.After == nil {
		opts.After = time.After
	}
	return &Guard[K]{
		opts:     opts,
		log:      klog.Background(),
		pending:  map[K]*pending[K]{},
		stopping: make(chan struct{}),
		returned: make(chan struct{}, 1),
	}
}

// SetLogger sets the logger of the guard's messages (a call that timed
// out, a call it stopped waiting for that returned).
func (g *Guard[K]) SetLogger(log klog.Logger) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.log = log
}

// Stop makes every wait end Grace from now at the latest.
func (g *Guard[K]) Stop() {
	g.stopOnce.Do(func() {
		time.AfterFunc(g.opts.Grace, func() { close(g.stopping) })
	})
}

// Returned gets a value when a call the guard stopped waiting for
// returns; several coalesce into one.
func (g *Guard[K]) Returned() <-chan struct{} { return g.returned }

// NoReturnError is a call that has not returned within the deadline. It
// matches mig.ErrNoReturn.
type NoReturnError[K comparable] struct {
	Key      K
	Call, Op string
	After    time.Duration
	describe func(key K, call, op string, after time.Duration) string
}

func (e *NoReturnError[K]) Error() string {
	if e.describe != nil {
		return e.describe(e.Key, e.Call, e.Op, e.After)
	}
	return fmt.Sprintf("NVML %s (%s) has not returned for %v", e.Call, e.Op, e.After)
}

func (e *NoReturnError[K]) Unwrap() error { return mig.ErrNoReturn }

func (g *Guard[K]) errorOf(p *pending[K]) *NoReturnError[K] {
	return &NoReturnError[K]{Key: p.key, Call: p.call, Op: p.op, After: g.opts.Timeout, describe: g.opts.Describe}
}

// Outstanding returns, by key, the calls the guard stopped waiting for
// and that have not returned. The text of each does not change while the
// call runs, so a report that repeats it writes nothing.
func (g *Guard[K]) Outstanding() map[K]*NoReturnError[K] {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[K]*NoReturnError[K]{}
	for k, p := range g.pending {
		if p.abandoned {
			out[k] = g.errorOf(p)
		}
	}
	return out
}

// Do runs f, the NVML call named call doing op on key, and waits for it
// until it returns, the deadline passes, or Grace after Stop. While a
// call with key has not returned, Do refuses at once with a
// *NoReturnError and does not run f. Callers make their calls with one key
// one at a time (a loop, a lock): a call made while another with its key
// is still waited for is refused the same way.
func (g *Guard[K]) Do(key K, call, op string, f func() error) error {
	g.mu.Lock()
	if p := g.pending[key]; p != nil {
		g.mu.Unlock()
		return g.errorOf(p)
	}
	p := &pending[K]{key: key, call: call, op: op, since: time.Now()}
	g.pending[key] = p
	g.mu.Unlock()

	done := make(chan error, 1)
	go func() {
		err := f()
		g.mu.Lock()
		delete(g.pending, key)
		abandoned := p.abandoned
		log := g.log
		done <- err // under the lock: the waiter sees the result or abandons the call, never neither
		g.mu.Unlock()
		if abandoned {
			log.Info("An NVML call the caller stopped waiting for returned", "key", key, "call", call, "op", op, "after", time.Since(p.since), "err", err)
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
	case <-g.opts.After(g.opts.Timeout):
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
	log := g.log
	g.mu.Unlock()
	err := g.errorOf(p)
	if timedOut {
		log.Error(err, "An NVML call did not return in time; what it was called on is left alone until it does", "key", key, "call", call, "op", op, "timeout", g.opts.Timeout)
		if g.opts.OnTimeout != nil {
			g.opts.OnTimeout(call)
		}
	}
	return err
}
