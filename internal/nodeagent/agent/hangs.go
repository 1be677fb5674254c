package agent

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// hangEventInterval is the least time between two NVMLCallHung Events of
// one call. The API server keeps Events an hour by default (--event-ttl),
// so a call that hangs again and again keeps one in sight of `kubectl
// describe node` without writing one an hour more; each hang is counted
// (migflex_agent_nvml_call_timeouts_total) and logged all the same.
const hangEventInterval = time.Hour

// hangs are the hung NVML calls reported from outside the loop
// (ReportNVMLHang), for the loop to record.
type hangs struct {
	mu sync.Mutex
	// pending is the message of each call reported and not yet handled
	// by the loop, by key.
	pending map[string]string
	// signal tells the loop there are some; values coalesce.
	signal chan struct{}

	// recorded is when the loop last recorded an Event for each key.
	// Owned by the loop.
	recorded hangLimiter
}

func newHangs() *hangs {
	return &hangs{pending: map[string]string{}, signal: make(chan struct{}, 1), recorded: hangLimiter{}}
}

// ReportNVMLHang records a Warning NVMLCallHung Event on the Node with
// message, for an NVML call outside the agent's loop (the health checks')
// that has not returned within --nvml-call-timeout; key names the call
// and what it was made on. Whoever reports says each hang once, however
// long it lasts (health.Options.OnHang); the agent writes one Event a key
// per hangEventInterval at most, so that a call that hangs again and
// again does not write at every hang either. It is safe for concurrent
// use and does not block: the loop records the Event.
func (a *Agent) ReportNVMLHang(key, message string) {
	a.hangs.mu.Lock()
	a.hangs.pending[key] = message
	a.hangs.mu.Unlock()
	select {
	case a.hangs.signal <- struct{}{}:
	default:
	}
}

// recordHangs records the Events of the hangs reported, those the limiter
// allows; it runs in the loop. Without the Node they wait for the next
// call (the loop calls it after each reconcile too).
func (a *Agent) recordHangs(ctx context.Context, now time.Time) {
	a.hangs.mu.Lock()
	if len(a.hangs.pending) == 0 {
		a.hangs.mu.Unlock()
		return
	}
	node := a.node()
	if node == nil {
		a.hangs.mu.Unlock()
		return
	}
	pending := a.hangs.pending
	a.hangs.pending = map[string]string{}
	a.hangs.mu.Unlock()
	for _, key := range slices.Sorted(maps.Keys(pending)) {
		if !a.hangs.recorded.allow(key, now) {
			a.log.V(2).Info("Not recording an Event for a hung NVML call: one was recorded for it within the interval", "key", key, "interval", hangEventInterval)
			continue
		}
		a.recordEvent(ctx, node, event{Type: corev1.EventTypeWarning, Reason: ReasonNVMLCallHung, Message: pending[key]})
	}
}

// hangLimiter is when an Event was last allowed for each key.
type hangLimiter map[string]time.Time

// allow reports whether an Event for key may be recorded at now: none was
// within hangEventInterval. It notes the Event it allows, and forgets the
// keys whose interval is over, so the map holds the calls of the last
// interval only.
func (l hangLimiter) allow(key string, now time.Time) bool {
	for k, at := range l {
		if now.Sub(at) >= hangEventInterval {
			delete(l, k)
		}
	}
	if _, ok := l[key]; ok {
		return false
	}
	l[key] = now
	return true
}
