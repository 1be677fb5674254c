package nvmlcall

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/nvml/nvmlcall/nvmlcalltest"
	"github.com/migflex/migflex/internal/testsupport/testutil"
)

// A call past its deadline is reported and counted; its key is refused at
// once until it returns, other keys are served, and its return is
// signalled.
func TestGuard(t *testing.T) {
	b := nvmlcalltest.NewBlocker("set")
	deadlines := &nvmlcalltest.Deadlines{}
	var timeouts []string
	g := New(Options[string]{Timeout: time.Minute, Grace: 1 << 40, After: deadlines.After, OnTimeout: func(call string) { timeouts = append(timeouts, call) }})

	errc := make(chan error, 1)
	go func() {
		errc <- g.Do("set", "EventSet.Wait", "waiting for Xid events", func() error { return b.Call("set") })
	}()
	<-b.Entered()
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
		if err := g.Do("set", "EventSet.Wait", "waiting for Xid events", func() error { return b.Call("set") }); !errors.Is(err, mig.ErrNoReturn) {
			t.Fatalf("a call on the stuck key: %v, want it refused", err)
		}
	}
	if n := b.Count("set"); n != 1 {
		t.Errorf("%d calls reached the stuck key, want 1", n)
	}
	if err := g.Do("gpu", "DeviceGetHandleByUUID", "GPU-1", func() error { return b.Call("gpu") }); err != nil {
		t.Errorf("another key: %v", err)
	}

	b.Release("set")
	<-g.Returned()
	if got := g.Outstanding(); len(got) != 0 {
		t.Errorf("Outstanding after the return: %v", got)
	}
	if err := g.Do("set", "EventSet.Wait", "waiting for Xid events", func() error { return b.Call("set") }); err != nil {
		t.Errorf("after the return: %v", err)
	}
	if n := b.Count("set"); n != 2 {
		t.Errorf("%d calls reached the key, want 2", n)
	}
}

// A call that returns is never reported, even when its deadline passes as
// it returns; Describe words the error.
func TestGuardReturnsInTime(t *testing.T) {
	b := nvmlcalltest.NewBlocker[string]()
	timedOut := false
	g := New(Options[int]{Timeout: 1 << 40, OnTimeout: func(string) { timedOut = true }})
	if err := g.Do(0, "SetMigMode", "MIG on", func() error { return b.Call("0") }); err != nil {
		t.Fatal(err)
	}
	if timedOut || len(g.Outstanding()) != 0 || len(g.Returned()) != 0 {
		t.Errorf("a call that returned was reported: timed out %v, outstanding %v", timedOut, g.Outstanding())
	}
}

// Once stopped, a hung call is waited for no longer than the grace, and
// not counted as a timeout.
func TestGuardStop(t *testing.T) {
	b := nvmlcalltest.NewBlocker("0")
	defer b.Release("0")
	timedOut := false
	g := New(Options[int]{
		Timeout: 1 << 40, After: (&nvmlcalltest.Deadlines{}).After, OnTimeout: func(string) { timedOut = true },
		Describe: func(key int, call, _ string, _ time.Duration) string { return fmt.Sprintf("GPU %d: %s", key, call) },
	})
	errc := make(chan error, 1)
	go func() { errc <- g.Do(0, "SetMigMode", "MIG off", func() error { return b.Call("0") }) }()
	<-b.Entered()
	g.Stop()
	if err := <-errc; !errors.Is(err, mig.ErrNoReturn) || err.Error() != "GPU 0: SetMigMode" {
		t.Errorf("err = %v, want mig.ErrNoReturn worded by Describe", err)
	}
	if timedOut {
		t.Error("a stop counted as a timeout")
	}
}
