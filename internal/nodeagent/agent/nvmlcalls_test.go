package agent

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/nvml/nvmlcall/nvmlcalltest"
	"github.com/migflex/migflex/internal/testsupport/testutil"
)

// blockingPartitioner is a partitioner whose calls on a blocked GPU wait
// until the test releases it.
type blockingPartitioner struct {
	*nvmlcalltest.Blocker[int]
}

func newBlockingPartitioner(blocked ...int) blockingPartitioner {
	return blockingPartitioner{nvmlcalltest.NewBlocker(blocked...)}
}

func (p blockingPartitioner) SetMigMode(gpu int, _ bool) error        { return p.Call(gpu) }
func (p blockingPartitioner) DestroyInstance(gpu int, _ uint32) error { return p.Call(gpu) }
func (p blockingPartitioner) ResetGPU(gpu int) error                  { return p.Call(gpu) }
func (p blockingPartitioner) CreateInstance(gpu int, profile string, start int) (mig.Instance, error) {
	return mig.Instance{Profile: profile, Start: start}, p.Call(gpu)
}

func TestCallGuard(t *testing.T) {
	tests := []struct {
		name string
		// call runs the guarded call on GPU 0.
		call func(g *callGuard) error
		want string
	}{
		{"set MIG mode", func(g *callGuard) error { return g.SetMigMode(0, true) }, "GPU 0: NVML SetMigMode (MIG on) has not returned for 2m0s"},
		{"create", func(g *callGuard) error { _, err := g.CreateInstance(0, "1g.10gb", 3); return err },
			"GPU 0: NVML CreateGpuInstance/CreateComputeInstance (create 1g.10gb at 3) has not returned for 2m0s"},
		{"destroy", func(g *callGuard) error { return g.DestroyInstance(0, 7) }, "GPU 0: NVML DestroyComputeInstance/DestroyGpuInstance (destroy GPU instance 7) has not returned for 2m0s"},
		{"reset", func(g *callGuard) error { return g.ResetGPU(0) }, "GPU 0: NVML GPU reset (reset) has not returned for 2m0s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			part := newBlockingPartitioner(0)
			deadlines := &nvmlcalltest.Deadlines{}
			var timeouts []string
			g := newCallGuard(part, 2*time.Minute, time.Hour, deadlines.After, func(call string) { timeouts = append(timeouts, call) })

			errc := make(chan error, 1)
			go func() { errc <- tc.call(g) }()
			<-part.Entered()
			testutil.Eventually(t, "the call's deadline", func() bool { return deadlines.Waiting() == 1 })
			deadlines.Pass()
			err := <-errc
			if !errors.Is(err, mig.ErrNoReturn) || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q matching mig.ErrNoReturn", err, tc.want)
			}
			if len(timeouts) != 1 {
				t.Errorf("timeouts counted: %v, want one", timeouts)
			}
			if got := g.outstanding(); len(got) != 1 || !strings.HasPrefix(got[0], tc.want) {
				t.Errorf("outstanding = %v, want GPU 0's call", got)
			}

			// Every call on GPU 0 is refused at once while it runs: no
			// second call into the driver, no goroutine per try.
			for range 50 {
				if err := tc.call(g); !errors.Is(err, mig.ErrNoReturn) || !strings.HasPrefix(err.Error(), tc.want) {
					t.Fatalf("call on the stuck GPU: %v, want it refused", err)
				}
			}
			if n := part.Count(0); n != 1 {
				t.Errorf("%d calls reached GPU 0, want 1", n)
			}
			// Another GPU is served.
			if err := g.SetMigMode(1, true); err != nil {
				t.Errorf("GPU 1: %v", err)
			}

			// The call returns: the loop is told, and GPU 0 answers again.
			part.Release(0)
			<-g.Returned()
			if got := g.outstanding(); len(got) != 0 {
				t.Errorf("outstanding after the return: %v", got)
			}
			if err := tc.call(g); err != nil {
				t.Errorf("call after the return: %v", err)
			}
			if n := part.Count(0); n != 2 {
				t.Errorf("%d calls reached GPU 0, want 2", n)
			}
		})
	}
}

// TestCallGuardReturnsInTime: a call that returns is never reported, even
// when its deadline passes as it returns.
func TestCallGuardReturnsInTime(t *testing.T) {
	part := newBlockingPartitioner()
	timedOut := false
	g := newCallGuard(part, time.Minute, time.Hour, nil, func(string) { timedOut = true })
	in, err := g.CreateInstance(0, "3g.40gb", 4)
	if err != nil || in.Profile != "3g.40gb" || in.Start != 4 {
		t.Fatalf("CreateInstance = %+v, %v", in, err)
	}
	if timedOut || len(g.outstanding()) != 0 || len(g.Returned()) != 0 {
		t.Errorf("a call that returned was reported: timed out %v, outstanding %v", timedOut, g.outstanding())
	}
}

// TestCallGuardStop: once the agent stops, a hung call is waited for no
// longer than the grace, and not counted as a timeout.
func TestCallGuardStop(t *testing.T) {
	part := newBlockingPartitioner(0)
	defer part.Release(0)
	timedOut := false
	g := newCallGuard(part, time.Hour, 0, (&nvmlcalltest.Deadlines{}).After, func(string) { timedOut = true })
	errc := make(chan error, 1)
	go func() { errc <- g.SetMigMode(0, false) }()
	<-part.Entered()
	g.Stop()
	if err := <-errc; !errors.Is(err, mig.ErrNoReturn) {
		t.Errorf("err = %v, want mig.ErrNoReturn", err)
	}
	if timedOut {
		t.Error("a stop counted as a timeout")
	}
}
