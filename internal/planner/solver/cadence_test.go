package solver_test

import (
	"strings"
	"testing"
	"time"

	"github.com/migflex/migflex/internal/planner/solver"
)

// cadence2s10s is a cadence of 2 s idle, 10 s max and 30 s resync, which
// the tests below are worked out for (the default's are shorter).
var cadence2s10s = solver.Cadence{Idle: 2 * time.Second, Max: 10 * time.Second, Resync: 30 * time.Second}

// TestBatcher: when rounds run for a sequence of triggers (seconds after
// t0), with 2 s idle, 10 s max.
func TestBatcher(t *testing.T) {
	c := cadence2s10s
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	for name, tc := range map[string]struct {
		triggers []float64
		// closes is when the batch closes after the last trigger.
		closes float64
	}{
		"one pod":               {triggers: []float64{0}, closes: 2},
		"a burst":               {triggers: []float64{0, 0.5, 1, 2.5}, closes: 4.5},
		"a stream, capped":      {triggers: []float64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, closes: 10},
		"a gap opens no window": {triggers: []float64{0, 1.9}, closes: 3.9},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := solver.NewBatcher(c)
			if err != nil {
				t.Fatal(err)
			}
			var closes time.Time
			for _, s := range tc.triggers {
				if b.Due(at(s)) {
					t.Fatalf("a round is due at %v s, before the batch closes", s)
				}
				closes = b.Trigger(at(s))
			}
			if want := at(tc.closes); !closes.Equal(want) {
				t.Errorf("closes at %v, want %v", closes.Sub(t0), want.Sub(t0))
			}
			if b.Due(closes.Add(-time.Millisecond)) || !b.Due(closes) {
				t.Errorf("due: just before %v, at %v; want false, true", b.Due(closes.Add(-time.Millisecond)), b.Due(closes))
			}
		})
	}
}

// TestBatcherLeading: the first pod after a quiet spell gets a round at
// once; pods right after it are batched as usual; after Idle without a
// round the next pod gets one at once again.
func TestBatcherLeading(t *testing.T) {
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	c := cadence2s10s
	c.Leading = true
	b, err := solver.NewBatcher(c)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		trigger, closes float64
		run             bool // the round runs when the batch closes
	}{
		{0, 0, true},      // the first pod: at once
		{0.5, 2.5, false}, // within Idle of that round: a window
		{1, 3, true},
		{10, 10, true}, // quiet for more than Idle: at once again
	}
	for _, st := range steps {
		closes := b.Trigger(at(st.trigger))
		if !closes.Equal(at(st.closes)) {
			t.Errorf("trigger at %v s: closes at %v, want %v s", st.trigger, closes.Sub(t0), st.closes)
		}
		if st.run {
			if !b.Due(closes) {
				t.Fatalf("trigger at %v s: no round due at %v", st.trigger, closes.Sub(t0))
			}
			b.Ran(closes, false)
		}
	}
}

// TestBatcherResync: after a round with pods still waiting, one look is
// planned a resync period later, never two at once; nothing waits, none.
func TestBatcherResync(t *testing.T) {
	b, err := solver.NewBatcher(cadence2s10s)
	if err != nil {
		t.Fatal(err)
	}
	b.Trigger(t0)
	if _, ok := b.Ran(t0.Add(2*time.Second), false); ok {
		t.Error("nothing waits, a resync was planned")
	}
	if b.Due(t0.Add(time.Hour)) {
		t.Error("a round is due with no batch open")
	}
	b.Trigger(t0.Add(3 * time.Second))
	at, ok := b.Ran(t0.Add(5*time.Second), true)
	if want := t0.Add(35 * time.Second); !ok || !at.Equal(want) {
		t.Errorf("resync at %v (%v), want %v", at.Sub(t0), ok, want.Sub(t0))
	}
	b.Trigger(t0.Add(10 * time.Second))
	if _, ok := b.Ran(t0.Add(12*time.Second), true); ok {
		t.Error("a second resync was planned while one is")
	}
	b.Trigger(t0.Add(35 * time.Second))
	if at, ok := b.Ran(t0.Add(37*time.Second), true); !ok || !at.Equal(t0.Add(67*time.Second)) {
		t.Errorf("after the resync: next at %v (%v), want 67s", at.Sub(t0), ok)
	}
}

func TestCadenceValidate(t *testing.T) {
	for _, tc := range []struct {
		c    solver.Cadence
		want string
	}{
		{solver.Cadence{Idle: 0, Max: time.Second, Resync: time.Second}, "idle 0s must be positive"},
		{solver.Cadence{Idle: 2 * time.Second, Max: time.Second, Resync: time.Second}, "max 1s is shorter than idle 2s"},
		{solver.Cadence{Idle: time.Second, Max: time.Second}, "resync 0s must be positive"},
	} {
		_, err := solver.NewBatcher(tc.c)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error containing %q", tc.c, err, tc.want)
		}
	}
	if err := solver.DefaultCadence().Validate(); err != nil {
		t.Errorf("default cadence: %v", err)
	}
}
