package replay

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/migflex/migflex/internal/planner"
)

// replayOf runs tiny hand-made traces on one H100 node with the full fleet
// (no load scaling).
func replayOf(t *testing.T, tasks []Task, nodes []TraceNode, policies ...string) map[string]Result {
	t.Helper()
	o := Options{Tasks: tasks, Columns: Columns{Times: true}, Nodes: nodes, Speedup: 1, Loads: []float64{0},
		Drain: time.Hour, Latency: 5 * time.Second, Planner: planner.DefaultPolicy(), MixHalfLife: time.Hour,
		Policies: policies, Parallel: 1}
	o.Loads = nil
	r, err := Run(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Loads) != 1 {
		t.Fatalf("%d loads", len(r.Loads))
	}
	out := map[string]Result{}
	for _, res := range r.Loads[0].Results {
		out[res.Policy] = res
	}
	return out
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestReplayOneGPU: one GPU, a 1g and a 3g task at once, each for 1000 s.
// Every answer below is worked out by hand.
func TestReplayOneGPU(t *testing.T) {
	tasks := []Task{
		{Name: "small", NumGPU: 1, GPUMilli: 100, QoS: "LS", Created: 0, Duration: 1000},
		{Name: "half", NumGPU: 1, GPUMilli: 400, QoS: "LS", Created: 0, Duration: 1000},
	}
	nodes := []TraceNode{{Name: "n0", GPUs: 1, Model: "G2"}}
	got := replayOf(t, tasks, nodes, AllPolicies...)
	for name, want := range map[string]struct {
		served      float64
		waitMax     float64
		never       int
		downgraded  int
		repartition int
	}{
		// Both fit in the pool at once.
		PolicyFluid: {served: 1},
		// No whole-GPU demand: the GPU is 7 x 1g.10gb; the 3g.40gb waits
		// for ever. Served: 0.125*1000 of 0.125*1000 + 0.5*1000.
		PolicyStatic1g: {served: 0.2, waitMax: 3600, never: 1},
		// The webhook rewrites 3g.40gb to 1g.10gb: both run at once, the
		// second on an eighth of the GPU where it asked for a half.
		PolicyFallback1g: {served: 0.4, downgraded: 1},
		// mig-parted's all-balanced has a 1g.10gb and a 3g.40gb.
		PolicyStaticBalanced:   {served: 1},
		PolicyFallbackBalanced: {served: 1},
		PolicyMigflex:          {served: 1},
		PolicyNos:              {served: 1},
		// Each instance is created when its pod is scheduled (5 s), and
		// destroyed when it ends: four changes.
		PolicyFirstFit: {served: 1, waitMax: 5, repartition: 4},
	} {
		r := got[name]
		if !near(r.ServedShare, want.served) || r.NeverServed != want.never || r.Downgraded != want.downgraded ||
			r.Repartitions != want.repartition || !near(r.WaitP99, want.waitMax) {
			t.Errorf("%s: served %v never %d downgraded %d repartitions %d wait p99 %v; want %+v",
				name, r.ServedShare, r.NeverServed, r.Downgraded, r.Repartitions, r.WaitP99, want)
		}
	}
}

// TestReplayReshapeTimes: a 7g.80gb task on one GPU laid out all-balanced.
// migflex plans after its 2 s idle window and the change takes 5 s: 7 s.
// nos plans after its 10 s idle window: 15 s. First fit carves it on the
// empty GPU: 5 s.
func TestReplayReshapeTimes(t *testing.T) {
	tasks := []Task{{Name: "big", NumGPU: 1, GPUMilli: 900, Created: 0, Duration: 100}}
	nodes := []TraceNode{{Name: "n0", GPUs: 1, Model: "G2"}}
	got := replayOf(t, tasks, nodes, PolicyMigflex, PolicyNos, PolicyFirstFit, PolicyStaticBalanced)
	for name, want := range map[string]float64{PolicyMigflex: 7, PolicyNos: 15, PolicyFirstFit: 5, PolicyStaticBalanced: 3600} {
		if r := got[name]; !near(r.WaitP50, want) {
			t.Errorf("%s: wait %v s, want %v", name, r.WaitP50, want)
		}
	}
	if r := got[PolicyMigflex]; r.Repartitions != 1 || r.Rounds != 1 {
		t.Errorf("migflex: %d repartitions in %d rounds, want 1 in 1", r.Repartitions, r.Rounds)
	}
}

// TestReplaySpecConstraint: a task whose gpu_spec names a model the fleet
// lacks is never served; one naming a present model lands there only.
func TestReplaySpecConstraint(t *testing.T) {
	tasks := []Task{
		{Name: "t4only", NumGPU: 1, GPUMilli: 1000, Spec: []string{"T4"}, Created: 0, Duration: 100},
		{Name: "v100", NumGPU: 1, GPUMilli: 1000, Spec: []string{"V100M16", "V100M32"}, Created: 0, Duration: 100},
	}
	nodes := []TraceNode{{Name: "n0", GPUs: 1, Model: "V100M32"}}
	got := replayOf(t, tasks, nodes, PolicyFirstFit, PolicyMigflex)
	for _, name := range []string{PolicyFirstFit, PolicyMigflex} {
		if r := got[name]; r.NeverServed != 1 {
			t.Errorf("%s: %d never served, want the T4 task only", name, r.NeverServed)
		}
	}
}

// TestFill: three 3g.40gb tasks on one GPU, nothing leaving: two fit and
// fill it, the third fails.
func TestFill(t *testing.T) {
	o := Options{Tasks: []Task{{Name: "h", NumGPU: 1, GPUMilli: 400}}, Nodes: []TraceNode{{Name: "n0", GPUs: 1, Model: "G2"}},
		Speedup: 1, Planner: planner.DefaultPolicy(), FGD: true, FGDOffered: 1.5, Parallel: 1,
		Policies: []string{PolicyFluid, PolicyFirstFit, PolicyMigflex, PolicyStatic1g}}
	r, err := Run(o)
	if err != nil {
		t.Fatal(err)
	}
	if r.NoTimes == "" || len(r.Loads) != 0 {
		t.Errorf("a list without times ran the timed replay (%q)", r.NoTimes)
	}
	for _, res := range r.FGD.Results {
		want := FGDResult{Tasks: 3, Failed: 1, AllocatedAtFirstFailure: 1, AllocatedAtEnd: 1}
		if res.Policy == PolicyStatic1g {
			// Seven 1g.10gb: no 3g.40gb ever.
			want = FGDResult{Tasks: 3, Failed: 3, AllocatedAtFirstFailure: 0, AllocatedAtEnd: 0, FragmentationAtEnd: 1}
		}
		if res.Tasks != want.Tasks || res.Failed != want.Failed || !near(res.AllocatedAtFirstFailure, want.AllocatedAtFirstFailure) ||
			!near(res.AllocatedAtEnd, want.AllocatedAtEnd) || !near(res.FragmentationAtEnd, want.FragmentationAtEnd) {
			t.Errorf("%s: %+v, want %+v", res.Policy, res, want)
		}
	}
}

// TestTimesFrom: a list without times borrows gaps and durations, the same
// for the same seed.
func TestTimesFrom(t *testing.T) {
	donor := []Task{
		{NumGPU: 1, Created: 0, Duration: 10}, {NumGPU: 1, Created: 30, Duration: 20}, {NumGPU: 1, Created: 40, Duration: 30},
	}
	o := Options{Tasks: make([]Task, 5), TimesFrom: donor, Speedup: 2, Seed: 3}
	a, err := o.times()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := o.times()
	if !slicesEqual(a, b) {
		t.Error("same seed, other times")
	}
	for i, x := range a {
		if i > 0 && x.arrival-a[i-1].arrival != 15 && x.arrival-a[i-1].arrival != 5 {
			t.Errorf("gap %v is not a donor gap (30 or 10) over the speedup", x.arrival-a[i-1].arrival)
		}
		if x.duration != 10 && x.duration != 20 && x.duration != 30 {
			t.Errorf("duration %v is not a donor's", x.duration)
		}
	}
	o.TimesFrom = nil
	if _, err := o.times(); err == nil || !strings.Contains(err.Error(), "-times-from") {
		t.Errorf("no times and no donor: %v", err)
	}
}

func slicesEqual(a, b []timing) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestDeterministic: the same seed gives the same report (but for the wall
// times), on a sample of the real trace format.
func TestDeterministic(t *testing.T) {
	tasks, cols := readFile(t, "testdata/openb_pod_list_default.head.csv")
	nodes := []TraceNode{{Name: "a", GPUs: 8, Model: "G2"}, {Name: "b", GPUs: 2, Model: "T4"}}
	run := func() string {
		o := Options{Tasks: tasks, Columns: cols, Nodes: nodes, Speedup: 1000, Loads: []float64{0.5, 2},
			Drain: time.Hour, Latency: 5 * time.Second, Planner: planner.DefaultPolicy(), MixHalfLife: time.Hour, Seed: 1, FGD: true}
		r, err := Run(o)
		if err != nil {
			t.Fatal(err)
		}
		for i := range r.Loads {
			for j := range r.Loads[i].Results {
				res := &r.Loads[i].Results[j]
				res.Seconds, res.RoundP50, res.RoundP99 = 0, 0, 0
			}
		}
		for i := range r.FGD.Results {
			r.FGD.Results[i].Seconds = 0
		}
		r.Machine, r.Seconds = Report{}.Machine, 0
		b, _ := json.Marshal(r)
		return string(b)
	}
	if a, b := run(), run(); a != b {
		t.Errorf("two runs differ:\n%s\n%s", a, b)
	}
}
