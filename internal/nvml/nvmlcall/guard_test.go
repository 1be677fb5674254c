package nvmlcall

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/nvml/nvmlcall/nvmlcalltest"
	"github.com/migflex/migflex/internal/testsupport/testutil"
)

// blocker is a fake NVML call per key: the call on a blocked key waits
// until the test releases it.
type blocker struct {
	mu      sync.Mutex
	calls   map[string]int
	block   map[string]chan struct{}
	entered chan string
}

func newBlocker(blocked ...string) *blocker {
	b := &blocker{calls: map[string]int{}, block: map[string]chan struct{}{}, entered: make(chan string, 100)}
	for _, k := range blocked {
		b.block[k] = make(chan struct{})
	}
	return b
}

func (b *blocker) call(key string) func() error {
	return func() error {
		b.mu.Lock()
		b.calls[key]++
		ch := b.block[key]
		b.mu.Unlock()
		b.entered <- key
		if ch != nil {
			<-ch
		}
		return nil
	}
}

func (b *blocker) release(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	close(b.block[key])
	delete(b.block, key)
}

func (b *blocker) count(key string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls[key]
}

// A call past its deadline is reported and counted; its key is refused at
// once until it returns, other keys are served, and its return is
// signalled.
func TestGuard(t *testing.T) {
	b := newBlocker("set")
	deadlines := &nvmlcalltest.Deadlines{}
	var timeouts []string
	g := New(Options[string]{Timeout: time.Minute, Grace: 1 << 40, After: deadlines.After, OnTimeout: func(call string) { timeouts = append(timeouts, call) }})

	errc := make(chan error, 1)
	go func() { errc <- g.Do("set", "EventSet.Wait", "waiting for Xid events", b.call("set")) }()
	<-b.entered
	testutil.Eventually(t, "the call's deadline", func() bool { return deadlines.Waiting() == 1 })
	deadlines.Pass()
	err := <-errc
	const want = "NVML EventSet.Wait (waiting for Xid events) has not returned for 1m0s"
	var nre *NoReturnError[string]
	if !errors.Is(err, mig.ErrNoReturn) || !errors.As(err, &nre) || err.Error() != want || nre.Key != "set" {
		t.Fatalf("err = %v, want %q matching mig.ErrNoReturn", err, want)
	}
	if len(timeouts) != 1 || timeouts[0] != "EventSet.Wait" {
		t.Errorf("timeouts counted: %v, want one of EventSet.Wait", timeouts)
	}
	if got := g.Outstanding(); len(got) != 1 || got["set"] == nil || got["set"].Error() != want {
		t.Errorf("Outstanding = %v, want the set's call", got)
	}
	for range 50 {
		if err := g.Do("set", "EventSet.Wait", "waiting for Xid events", b.call("set")); !errors.Is(err, mig.ErrNoReturn) {
			t.Fatalf("a call on the stuck key: %v, want it refused", err)
		}
	}
	if n := b.count("set"); n != 1 {
		t.Errorf("%d calls reached the stuck key, want 1", n)
	}
	if err := g.Do("gpu", "DeviceGetHandleByUUID", "GPU-1", b.call("gpu")); err != nil {
		t.Errorf("another key: %v", err)
	}

	b.release("set")
	<-g.Returned()
	if got := g.Outstanding(); len(got) != 0 {
		t.Errorf("Outstanding after the return: %v", got)
	}
	if err := g.Do("set", "EventSet.Wait", "waiting for Xid events", b.call("set")); err != nil {
		t.Errorf("after the return: %v", err)
	}
	if n := b.count("set"); n != 2 {
		t.Errorf("%d calls reached the key, want 2", n)
	}
}

// A call that returns is never reported, even when its deadline passes as
// it returns; Describe words the error.
func TestGuardReturnsInTime(t *testing.T) {
	b := newBlocker()
	timedOut := false
	g := New(Options[int]{Timeout: 1 << 40, OnTimeout: func(string) { timedOut = true }})
	if err := g.Do(0, "SetMigMode", "MIG on", b.call("0")); err != nil {
		t.Fatal(err)
	}
	if timedOut || len(g.Outstanding()) != 0 || len(g.Returned()) != 0 {
		t.Errorf("a call that returned was reported: timed out %v, outstanding %v", timedOut, g.Outstanding())
	}
}

// Once stopped, a hung call is waited for no longer than the grace, and
// not counted as a timeout.
func TestGuardStop(t *testing.T) {
	b := newBlocker("0")
	defer b.release("0")
	timedOut := false
	g := New(Options[int]{
		Timeout: 1 << 40, After: (&nvmlcalltest.Deadlines{}).After, OnTimeout: func(string) { timedOut = true },
		Describe: func(key int, call, _ string, _ time.Duration) string { return fmt.Sprintf("GPU %d: %s", key, call) },
	})
	errc := make(chan error, 1)
	go func() { errc <- g.Do(0, "SetMigMode", "MIG off", b.call("0")) }()
	<-b.entered
	g.Stop()
	if err := <-errc; !errors.Is(err, mig.ErrNoReturn) || err.Error() != "GPU 0: SetMigMode" {
		t.Errorf("err = %v, want mig.ErrNoReturn worded by Describe", err)
	}
	if timedOut {
		t.Error("a stop counted as a timeout")
	}
}
