package agent

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/nodeagent/health"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim/simtest"
	"github.com/migflex/migflex/internal/testsupport/testutil"
)

func TestHangLimiter(t *testing.T) {
	type report struct {
		key  string
		at   time.Duration // after the first
		want bool
	}
	for _, tc := range []struct {
		name    string
		reports []report
	}{
		{"a call's first hang", []report{{"wait", 0, true}}},
		{"a persisting or repeated hang writes once", []report{
			{"wait", 0, true}, {"wait", time.Second, false}, {"wait", time.Minute, false}, {"wait", hangEventInterval - time.Nanosecond, false},
		}},
		{"again once the interval is over", []report{
			{"wait", 0, true}, {"wait", hangEventInterval, true}, {"wait", hangEventInterval + time.Minute, false},
		}},
		{"each call its own", []report{
			{"wait", 0, true}, {"gpu GPU-a", time.Minute, true}, {"wait", 2 * time.Minute, false}, {"gpu GPU-a", 3 * time.Minute, false}, {"gpu GPU-b", 4 * time.Minute, true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := hangLimiter{}
			for i, r := range tc.reports {
				if got := l.allow(r.key, epoch.Add(r.at)); got != r.want {
					t.Errorf("report %d (%s at +%v): allow = %v, want %v", i, r.key, r.at, got, r.want)
				}
			}
			// Only the calls of the last interval are remembered.
			last := tc.reports[len(tc.reports)-1].at
			for key, at := range l {
				if epoch.Add(last).Sub(at) >= hangEventInterval {
					t.Errorf("%s remembered from %v, past the interval", key, at)
				}
			}
		})
	}
}

// epoch is where the limiter's test times start.
var epoch = time.Date(2026, time.December, 2, 12, 0, 0, 0, time.UTC)

// testHealthCallHangs: the simulator's hang fault holds the health
// checks' registration of GPU 0 (its handle lookup). Past the call
// deadline the Node gets a Warning NVMLCallHung Event naming the GPU and
// the call, one however long the call hangs, however often the checks
// try GPU 0 again and the hang is reported again; another call's hang
// gets its own. GPU 1 is watched meanwhile, no device is marked
// unhealthy, and once the call returns GPU 0 is watched too.
func testHealthCallHangs(t *testing.T, api *apiServer) {
	n := newNode(t, api)
	r := n.start()
	n.waitNode("the layout reported", func(o *corev1.Node) bool { return o.Annotations[nodeinfo.AnnotationLayout] != "" })
	gpus := n.discover()
	gpu0, gpu1 := gpus[0].UUID, gpus[1].UUID
	// After the agent read the GPUs: its own readings are not held (no
	// trigger reads them again until the resync, minutes away).
	release := simtest.Hang(t, n.lib, "slow", sim.CallGetHandle, 0)

	// The process's wiring (internal/nodeagent). A second of deadline
	// leaves no Wait of the 10 ms polls to time out on a loaded machine;
	// one that did would have an Event of its own, which this test tells
	// apart by its message.
	w, err := health.New(n.lib, health.Options{QuietPeriod: -1, PollInterval: 10 * time.Millisecond, CallTimeout: time.Second,
		OnHang: func(h health.Hang) { r.agent.ReportNVMLHang("health "+h.Key, "health checks: "+h.Message) }})
	if err != nil {
		t.Fatal(err)
	}
	w.SetTargets([]health.Target{{ID: gpu0, GPU: gpu0}, {ID: gpu1, GPU: gpu1}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	ofGPU0 := []string{"health checks: GPU " + gpu0, "DeviceGetHandleByUUID/RegisterEvents", "has not returned for 1s"}
	n.waitEvent(corev1.EventTypeWarning, ReasonNVMLCallHung, ofGPU0...)
	testutil.Eventually(t, "GPU 1 watched", func() bool { return slices.Equal(w.Watching(), []string{gpu1}) })
	// Reported again while it hangs (a reporter that said it twice),
	// then another call's hang: the loop handles them in order, so once
	// the other's Event is there, the repeats were handled.
	for range 3 {
		r.agent.ReportNVMLHang("health gpu "+gpu0, "health checks: GPU "+gpu0+": again")
	}
	r.agent.ReportNVMLHang("health other", "health checks: another call")
	n.waitEvent(corev1.EventTypeWarning, ReasonNVMLCallHung, "another call")
	if got := countHangEvents(n.events(), gpu0); got != 1 {
		t.Errorf("%d NVMLCallHung Events of GPU 0's registration, want 1: %s", got, describeEvents(n.events()))
	}
	if u := w.Unhealthy(); len(u) != 0 {
		t.Errorf("devices unhealthy while a health call hangs: %v, want none (they keep their health)", u)
	}

	release()
	testutil.Eventually(t, "GPU 0 watched once the call returned", func() bool {
		return slices.Equal(w.Watching(), slices.Sorted(slices.Values([]string{gpu0, gpu1})))
	})
}

// countHangEvents counts the NVMLCallHung Events about gpu.
func countHangEvents(evs []corev1.Event, gpu string) int {
	n := 0
	for _, e := range evs {
		if e.Reason == ReasonNVMLCallHung && strings.Contains(e.Message, gpu) {
			n++
		}
	}
	return n
}
