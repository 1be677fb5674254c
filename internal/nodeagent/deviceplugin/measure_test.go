package deviceplugin

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/nodeagent/deviceplugin/kubeletstub"
	"github.com/migflex/migflex/internal/testsupport/testutil"
)

// measureRuns is how many times each latency is measured.
const measureRuns = 25

// TestMeasureLatency measures, and only logs (it asserts no time):
//
//	(a) from Update with a new layout to the stand-in kubelet holding the
//	    new ListAndWatch message of every resource that changed;
//	(b) from kubelet.sock re-creation to every resource re-registered, and
//	    to every resource's first ListAndWatch message on the new kubelet.
//
// Run it alone for numbers:
//
//	go test -run TestMeasureLatency -count=1 -v ./internal/nodeagent/deviceplugin/
func TestMeasureLatency(t *testing.T) {
	if testing.Short() {
		t.Skip("measurement")
	}
	// Logging to the test would be part of what is measured.
	ctx := klog.NewContext(context.Background(), logr.Discard())
	dir := testutil.SocketDir(t)
	k, err := kubeletstub.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	m, err := New(Options{PluginDir: dir, PostAllocator: envPost{}})
	if err != nil {
		t.Fatal(err)
	}
	layoutA := mixedLayout()
	layoutB := []mig.GPU{
		migGPU(0, inst("4g.40gb", 0, 4, 1), inst("3g.40gb", 4, 4, 2)),
		migGPU(1, inst("4g.40gb", 0, 4, 1), inst("3g.40gb", 4, 4, 2)),
		plainGPU(2),
	}
	// Every resource of both layouts, as the kubelet sees it after each.
	wantA := map[string][]string{
		"nvidia.com/mig-3g.40gb": {"MIG-0-2"}, "nvidia.com/mig-2g.20gb": {"MIG-0-3"},
		"nvidia.com/mig-1g.10gb": {"MIG-0-13", "MIG-1-8"}, "nvidia.com/mig-1g.10gb.me": {"MIG-1-7"},
		"nvidia.com/mig-4g.40gb": {}, "nvidia.com/gpu": {"GPU-2"},
	}
	wantB := map[string][]string{
		"nvidia.com/mig-3g.40gb": {"MIG-0-2", "MIG-1-2"}, "nvidia.com/mig-2g.20gb": {},
		"nvidia.com/mig-1g.10gb": {}, "nvidia.com/mig-1g.10gb.me": {},
		"nvidia.com/mig-4g.40gb": {"MIG-0-1", "MIG-1-1"}, "nvidia.com/gpu": {"GPU-2"},
	}
	// Register every resource of both layouts first, so (a) measures
	// layout changes on registered resources (a new resource adds one
	// registration round trip, measured in (b)).
	if err := m.Serve(ctx, layoutB); err != nil {
		t.Fatal(err)
	}
	if err := m.Serve(ctx, layoutA); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	wait := func(cond func(kubeletstub.State) bool) kubeletstub.State {
		t.Helper()
		wctx, wcancel := context.WithTimeout(ctx, hangTimeout)
		defer wcancel()
		st, err := k.Wait(wctx, cond)
		if err != nil {
			t.Fatalf("waiting: %v%s", err, describe(st))
		}
		return st
	}
	wait(serving(wantA))

	var update []time.Duration
	current := wantA
	for i := range measureRuns {
		layout, want := layoutB, wantB
		if i%2 == 1 {
			layout, want = layoutA, wantA
		}
		current = want
		before := k.State()
		start := time.Now()
		if err := m.Serve(ctx, layout); err != nil {
			t.Fatal(err)
		}
		st := wait(serving(want))
		var last time.Time
		for r, p := range st.Plugins {
			if p.Messages > before.Plugins[r].Messages && p.LastMessage.After(last) {
				last = p.LastMessage
			}
		}
		update = append(update, last.Sub(start))
	}

	var register, serve []time.Duration
	for range measureRuns {
		if err := k.Restart(); err != nil {
			t.Fatal(err)
		}
		st := wait(func(st kubeletstub.State) bool {
			return serving(current)(st) && len(st.Plugins) == len(current)
		})
		since := st.ListeningSince
		var lastReg, lastMsg time.Time
		for _, r := range st.Registrations {
			if r.At.After(since) && r.At.After(lastReg) {
				lastReg = r.At
			}
		}
		for _, p := range st.Plugins {
			if p.LastMessage.After(lastMsg) {
				lastMsg = p.LastMessage
			}
		}
		register = append(register, lastReg.Sub(since))
		serve = append(serve, lastMsg.Sub(since))
	}

	t.Logf("(a) Update -> new ListAndWatch message at the kubelet, %d runs: %s", measureRuns, summary(update))
	t.Logf("(b) kubelet.sock re-created -> all %d resources re-registered, %d runs: %s", len(wantA), measureRuns, summary(register))
	t.Logf("(b') kubelet.sock re-created -> first ListAndWatch message of all %d resources, %d runs: %s", len(wantA), measureRuns, summary(serve))
}

func summary(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return "median " + med.Round(time.Microsecond).String() + ", worst " + s[len(s)-1].Round(time.Microsecond).String() + ", best " + s[0].Round(time.Microsecond).String()
}
