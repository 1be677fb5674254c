package solver

import (
	"errors"
	"fmt"
	"time"
)

// Cadence is when rounds run. Rounds are batched: pods that become pending
// close together are planned together, so that one layout serves them all
// rather than each pod's round changing another GPU. The planner reads no
// clock; whoever drives it (the controller, the trace replay) keeps a
// Batcher and tells it the time.
type Cadence struct {
	// Idle closes a batch once no new trigger came for this long.
	Idle time.Duration
	// Max closes a batch this long after it opened, however busy.
	Max time.Duration
	// Resync is how often a round runs again while pods still wait: pods
	// leaving free capacity and cooldowns end without a pod becoming
	// pending.
	Resync time.Duration
	// Leading runs a round at once for the first trigger after a quiet
	// spell (no round for Idle): a lone pod does not wait for company
	// that is not coming, and the pods of a burst after it are batched.
	// Off by default: the first pod of a burst then gets a round, and a
	// GPU change, of its own (docs/PLANNER.md measures what that costs).
	Leading bool
}

// DefaultCadence is what the controller and the replay run with: a round
// 1 s after the last pod became pending, at most 3 s after the first, and
// every 30 s while pods wait. The window is short because a burst's later
// pods need no change of their own: the controller shows a layout written
// but not in place yet as done (internal/planner/plansnap), so the next round
// plans them onto the instances coming with it. The window only has to
// gather the pods that arrive together (docs/PLANNER.md measures what
// shorter and longer windows cost).
func DefaultCadence() Cadence {
	return Cadence{Idle: time.Second, Max: 3 * time.Second, Resync: 30 * time.Second}
}

// Validate rejects a cadence a Batcher cannot run.
func (c Cadence) Validate() error {
	var errs []error
	if c.Idle <= 0 {
		errs = append(errs, fmt.Errorf("idle %s must be positive", c.Idle))
	}
	if c.Max < c.Idle {
		errs = append(errs, fmt.Errorf("max %s is shorter than idle %s", c.Max, c.Idle))
	}
	if c.Resync <= 0 {
		errs = append(errs, fmt.Errorf("resync %s must be positive", c.Resync))
	}
	return errors.Join(errs...)
}

// Batcher decides when rounds run, from the triggers and rounds it is told
// of. It is not safe for concurrent use.
type Batcher struct {
	c            Cadence
	open         bool
	leading      bool
	opened, last time.Time
	resyncAt     time.Time
	ran          time.Time // the last round; zero before the first
}

// NewBatcher returns a batcher with no batch open.
func NewBatcher(c Cadence) (*Batcher, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("invalid planner cadence: %w", err)
	}
	return &Batcher{c: c}, nil
}

// Trigger notes, at now, a reason to plan (a pod became pending): a batch
// opens, or stays open a little longer. It returns when the batch closes.
func (b *Batcher) Trigger(now time.Time) time.Time {
	if !b.open {
		b.open, b.opened = true, now
		b.leading = b.c.Leading && (b.ran.IsZero() || now.Sub(b.ran) >= b.c.Idle)
	}
	b.last = now
	return b.closes()
}

func (b *Batcher) closes() time.Time {
	if b.leading {
		return b.opened
	}
	byIdle, byMax := b.last.Add(b.c.Idle), b.opened.Add(b.c.Max)
	if byMax.Before(byIdle) {
		return byMax
	}
	return byIdle
}

// Due reports whether a round should run at now (a batch is open and has
// closed); the caller then runs it and calls Ran.
func (b *Batcher) Due(now time.Time) bool {
	return b.open && !now.Before(b.closes())
}

// Ran notes a round at now: the batch closes. When pods still wait, it
// returns the time of the next look (false when one is already planned, or
// nothing waits); at that time the caller triggers again if pods still
// wait.
func (b *Batcher) Ran(now time.Time, waiting bool) (time.Time, bool) {
	b.open, b.ran = false, now
	if !waiting || now.Before(b.resyncAt) {
		return time.Time{}, false
	}
	b.resyncAt = now.Add(b.c.Resync)
	return b.resyncAt, true
}
