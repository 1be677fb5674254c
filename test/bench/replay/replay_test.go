package replay

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/planner/reserve"
	"github.com/migflex/migflex/internal/planner/solver"
)

// replayOf runs tiny hand-made traces on one H100 node with the full fleet
// (no load scaling).
func replayOf(t *testing.T, tasks []Task, nodes []TraceNode, policies ...string) map[string]Result {
	t.Helper()
	o := Options{Tasks: tasks, Columns: Columns{Times: true}, Nodes: nodes, Speedup: 1, Loads: []float64{0},
		Drain: time.Hour, Latency: 5 * time.Second, Planner: solver.DefaultPolicy(), MixHalfLife: time.Hour,
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
		// migflex starts whole: one round after its idle window lays the
		// GPU out for both (one change), which takes 5 s.
		PolicyMigflex: {served: 1, waitMax: solver.DefaultCadence().Idle.Seconds() + 5, repartition: 1},
		PolicyNos:     {served: 1},
		// Each instance is created when its pod is scheduled (5 s), and
		// destroyed when it ends: four changes.
		PolicyFirstFit: {served: 1, waitMax: 5, repartition: 4},
		PolicyHAMi:     {served: 1, waitMax: 5, repartition: 4},
		// The same with the agent's steered order.
		PolicyMigflexDynamic: {served: 1, waitMax: 5, repartition: 4},
	} {
		r := got[name]
		if !near(r.ServedShare, want.served) || r.NeverServed != want.never || r.Downgraded != want.downgraded ||
			r.Repartitions != want.repartition || !near(r.WaitP99, want.waitMax) {
			t.Errorf("%s: served %v never %d downgraded %d repartitions %d wait p99 %v; want %+v",
				name, r.ServedShare, r.NeverServed, r.Downgraded, r.Repartitions, r.WaitP99, want)
		}
	}
}

// TestReplayMigflexStart: a 1g.10gb task on one GPU. From the preset
// (all-balanced, no whole-GPU demand) it takes a free 1g.10gb at once;
// from a whole GPU it waits for a round (the idle window, 1 s) and the
// change (5 s).
func TestReplayMigflexStart(t *testing.T) {
	tasks := []Task{{Name: "small", NumGPU: 1, GPUMilli: 100, Created: 0, Duration: 100}}
	for preset, want := range map[bool]struct {
		wait         float64
		repartitions int
	}{true: {0, 0}, false: {solver.DefaultCadence().Idle.Seconds() + 5, 1}} {
		o := Options{Tasks: tasks, Columns: Columns{Times: true}, Nodes: []TraceNode{{Name: "n0", GPUs: 1, Model: "G2"}}, Speedup: 1,
			Drain: time.Hour, Latency: 5 * time.Second, Planner: solver.DefaultPolicy(), MixHalfLife: time.Hour,
			Policies: []string{PolicyMigflex}, Parallel: 1, MigflexPreset: preset}
		r, err := Run(o)
		if err != nil {
			t.Fatal(err)
		}
		if res := r.Loads[0].Results[0]; !near(res.WaitP50, want.wait) || res.Repartitions != want.repartitions || r.Settings.MigflexPreset != preset {
			t.Errorf("starting from the preset %v: wait %v s, %d repartitions; want %+v", preset, res.WaitP50, res.Repartitions, want)
		}
	}
}

// TestReplayReshapeTimes: a 7g.80gb task on one GPU, whole for migflex,
// laid out all-balanced for nos and the static layouts. migflex plans
// after its idle window (1 s) and the change takes 5 s: 6 s; with a
// leading round for a lone pod, 5 s. nos plans after its 10 s idle window:
// 15 s. First fit carves it on the empty GPU: 5 s.
func TestReplayReshapeTimes(t *testing.T) {
	tasks := []Task{{Name: "big", NumGPU: 1, GPUMilli: 900, Created: 0, Duration: 100}}
	nodes := []TraceNode{{Name: "n0", GPUs: 1, Model: "G2"}}
	got := replayOf(t, tasks, nodes, PolicyMigflex, PolicyNos, PolicyFirstFit, PolicyStaticBalanced)
	for name, want := range map[string]float64{PolicyMigflex: solver.DefaultCadence().Idle.Seconds() + 5, PolicyNos: 15, PolicyFirstFit: 5, PolicyStaticBalanced: 3600} {
		if r := got[name]; !near(r.WaitP50, want) {
			t.Errorf("%s: wait %v s, want %v", name, r.WaitP50, want)
		}
	}
	// One round for the pod, one when it leaves (which changes nothing:
	// the GPU is whole).
	if r := got[PolicyMigflex]; r.Repartitions != 1 || r.Rounds != 2 {
		t.Errorf("migflex: %d repartitions in %d rounds, want 1 in 2", r.Repartitions, r.Rounds)
	}
	o := Options{Tasks: tasks, Columns: Columns{Times: true}, Nodes: nodes, Speedup: 1, Drain: time.Hour, Latency: 5 * time.Second,
		Planner: solver.DefaultPolicy(), MixHalfLife: time.Hour, Policies: []string{PolicyMigflex}, Parallel: 1}
	o.Cadence = solver.DefaultCadence()
	o.Cadence.Leading = true
	r, err := Run(o)
	if err != nil {
		t.Fatal(err)
	}
	if w := r.Loads[0].Results[0].WaitP50; !near(w, 5) {
		t.Errorf("migflex with a leading round: wait %v s, want 5", w)
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
		Speedup: 1, Planner: solver.DefaultPolicy(), FGD: true, FGDOffered: 1.5, Parallel: 1,
		Policies: []string{PolicyFluid, PolicyFirstFit, PolicyHAMi, PolicyMigflex, PolicyStatic1g}}
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

// TestFillHasNoCooldown: the fill has no clock, so the planner's cooldown
// would keep every GPU it changed once at that layout to the end; the fill
// runs without it, and its result does not depend on it.
func TestFillHasNoCooldown(t *testing.T) {
	// Sizes in an order that changes what the free space should be
	// shaped for, several times per GPU.
	var tasks []Task
	for i, milli := range []int{100, 400, 200, 100, 1000, 200, 100, 400, 100, 200, 200, 100, 400, 1000, 100, 200} {
		tasks = append(tasks, Task{Name: fmt.Sprint("t", i), NumGPU: 1, GPUMilli: milli})
	}
	fill := func(cooldown time.Duration) FGDResult {
		pol := solver.DefaultPolicy()
		pol.Cooldown = cooldown
		o := Options{Tasks: tasks, Nodes: []TraceNode{{Name: "a", GPUs: 4, Model: "G2"}},
			Speedup: 1, Planner: pol, MixHalfLife: time.Hour, Seed: 1, FGD: true, FGDFraction: 1, FGDOffered: 1.3,
			Parallel: 1, Policies: []string{PolicyMigflex}}
		r, err := Run(o)
		if err != nil {
			t.Fatal(err)
		}
		res := r.FGD.Results[0]
		res.Seconds = 0
		return res
	}
	without, with := fill(0), fill(time.Hour)
	if !reflect.DeepEqual(with, without) {
		t.Errorf("fill with a 1 h cooldown %+v, without %+v: want the same", with, without)
	}
	if without.Repartitions == 0 || without.Failed == 0 {
		t.Errorf("%+v: the fill should reshape GPUs and end full", without)
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
			Drain: time.Hour, Latency: 5 * time.Second, Planner: solver.DefaultPolicy(), MixHalfLife: time.Hour, Seed: 1, FGD: true}
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

// TestBoundBeatsGreedyPool: one GPU, a short 1g.10gb task of high priority
// and a whole-GPU task of low priority that outlasts the replay, both at
// time 0; the replay ends at 3600 s. Requested: 1000/8 + 3600 = 3725.
// Static gives the GPU whole (the whole-GPU share rounds to it) and serves
// the big task from 0: 3600. The greedy pool starts the small task first
// (priority) and the big one only at 1000: 125 + 2600 = 2725. The bound is
// the GPU for the whole replay: 3600.
func TestBoundBeatsGreedyPool(t *testing.T) {
	tasks := []Task{
		{Name: "small", NumGPU: 1, GPUMilli: 100, QoS: "LS", Created: 0, Duration: 1000},
		{Name: "big", NumGPU: 1, GPUMilli: 1000, QoS: "BE", Created: 0, Duration: 10000},
	}
	o := Options{Tasks: tasks, Columns: Columns{Times: true}, Nodes: []TraceNode{{Name: "n0", GPUs: 1, Model: "G2"}}, Speedup: 1,
		Drain: time.Hour, Latency: 5 * time.Second, Planner: solver.DefaultPolicy(), MixHalfLife: time.Hour,
		Policies: []string{PolicyStaticBalanced, PolicyFluid}, Parallel: 1}
	r, err := Run(o)
	if err != nil {
		t.Fatal(err)
	}
	l := r.Loads[0]
	got := map[string]float64{}
	for _, res := range l.Results {
		got[res.Policy] = res.ServedShare
	}
	if want := 3600.0 / 3725; !near(got[PolicyStaticBalanced], want) || !near(l.Bound, want) {
		t.Errorf("static served %v, bound %v; want both %v", got[PolicyStaticBalanced], l.Bound, want)
	}
	if want := 2725.0 / 3725; !near(got[PolicyFluid], want) {
		t.Errorf("greedy pool served %v, want %v", got[PolicyFluid], want)
	}
}

// TestUpperBound checks the bound on traces whose best schedule is worked
// out by hand (capacity in GPUs, horizon 3600 s after the last arrival).
func TestUpperBound(t *testing.T) {
	whole := request{res: resourcename.GPU, count: 1, size: 1}
	half := request{res: resourcename.GPU, count: 1, size: 0.5}
	for name, tc := range map[string]struct {
		pods     []podTemplate
		capacity float64
		want     float64
	}{
		// Everything fits at once.
		"room for all": {pods: []podTemplate{{req: whole, duration: 100}, {req: half, duration: 50}}, capacity: 2, want: 1},
		// Two whole GPUs' worth of work, 2 x 3000 s, one GPU, 3600 s: at
		// most 3600 of 6000.
		"one GPU, two long tasks": {pods: []podTemplate{{req: whole, duration: 3000}, {req: whole, duration: 3000}}, capacity: 1, want: 0.6},
		// A task arriving late can only run until the horizon, at its
		// size: the first holds the GPU from 0 to 1000, the second (at
		// 1000, 3600 s to run before the horizon at 4600) needs all of it
		// and gets it: nothing is lost.
		"late arrival": {pods: []podTemplate{{req: whole, duration: 1000}, {req: whole, arrival: 1000, duration: 5000}}, capacity: 1, want: 1},
		// Two halves and a whole on one GPU, all at 0 for 3600 s: any
		// schedule is capped by the GPU: 3600 of 7200.
		"capped by capacity": {pods: []podTemplate{{req: half, duration: 3600}, {req: half, duration: 3600}, {req: whole, duration: 3600}}, capacity: 1, want: 0.5},
		// A half-GPU task alone on two GPUs runs at its size: served
		// fully, capacity is not what limits it.
		"rate capped": {pods: []podTemplate{{req: half, duration: 7200}}, capacity: 2, want: 1},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := &runConfig{start: 0}
			for _, p := range tc.pods {
				cfg.horizon = max(cfg.horizon, p.arrival)
			}
			cfg.horizon += 3600
			if got := upperBound(tc.pods, tc.capacity, cfg); math.Abs(got-tc.want) > 1e-3 {
				t.Errorf("bound %v, want %v", got, tc.want)
			}
		})
	}
}

// TestBoundHoldsOnRandomTraces: on small random traces no policy serves
// more than the bound, and the bound is at most everything requested.
func TestBoundHoldsOnRandomTraces(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for trial := range 12 {
		var tasks []Task
		for i := range 30 {
			tk := Task{Name: fmt.Sprintf("t%d", i), NumGPU: 1, GPUMilli: []int{100, 200, 400, 900, 1000}[rng.IntN(5)],
				QoS: []string{"LS", "BE", "Burstable"}[rng.IntN(3)], Created: float64(rng.IntN(4000)), Duration: float64(100 + rng.IntN(6000))}
			if rng.IntN(6) == 0 {
				tk.NumGPU, tk.GPUMilli = []int{2, 4}[rng.IntN(2)], 1000
			}
			tasks = append(tasks, tk)
		}
		nodes := []TraceNode{{Name: "a", GPUs: 4, Model: "G2"}, {Name: "b", GPUs: 2, Model: "G2"}}
		o := Options{Tasks: tasks, Columns: Columns{Times: true}, Nodes: nodes, Speedup: 1, Drain: time.Hour, Latency: 5 * time.Second,
			Planner: solver.DefaultPolicy(), MixHalfLife: time.Hour, Parallel: 2}
		r, err := Run(o)
		if err != nil {
			t.Fatal(err)
		}
		l := r.Loads[0]
		if l.Bound > 1+1e-9 {
			t.Errorf("trial %d: bound %v above everything requested", trial, l.Bound)
		}
		for _, res := range l.Results {
			if res.ServedShare > l.Bound+1e-9 {
				t.Errorf("trial %d: %s served %v, above the bound %v", trial, res.Policy, res.ServedShare, l.Bound)
			}
		}
	}
}

// TestNosKeepsChangesPodsCanUse: nos keeps a node's new layout only if a
// lacking pod may land there. The 7g.80gb task may run on the T4 node only
// (gpu_spec); the G2 node comes first by name and is left alone: one
// change, on the T4 node, and the task runs after nos's 10 s window and
// the 5 s change.
func TestNosKeepsChangesPodsCanUse(t *testing.T) {
	tasks := []Task{{Name: "big", NumGPU: 1, GPUMilli: 900, Spec: []string{"T4"}, Created: 0, Duration: 100}}
	nodes := []TraceNode{{Name: "a", GPUs: 1, Model: "G2"}, {Name: "b", GPUs: 1, Model: "T4"}}
	r := replayOf(t, tasks, nodes, PolicyNos)[PolicyNos]
	if r.NeverServed != 0 || r.Repartitions != 1 || !near(r.WaitP50, 15) {
		t.Errorf("nos: never served %d, repartitions %d, wait %v s; want 0, 1, 15", r.NeverServed, r.Repartitions, r.WaitP50)
	}
}

// TestReplayFractionalTimes: rounds run when their batch closes whatever
// the arrival times (the event queue keeps seconds, the batcher times):
// 7g.80gb tasks at fractional times, one at a time, on GPUs laid out
// all-balanced, each served by a reshape within the batch window and the
// change.
func TestReplayFractionalTimes(t *testing.T) {
	// The first task sets the replay's second zero.
	tasks := []Task{{Name: "first", NumGPU: 1, GPUMilli: 100, Created: 0, Duration: 10}}
	for i := range 40 {
		// Days into the trace, where a float64 second has about a
		// nanosecond of resolution.
		tasks = append(tasks, Task{Name: fmt.Sprintf("t%d", i), NumGPU: 1, GPUMilli: 900, Created: 4.41329944e6 + 100*float64(i) + float64(i)/7, Duration: 50})
	}
	nodes := []TraceNode{{Name: "n0", GPUs: 2, Model: "G2"}}
	r := replayOf(t, tasks, nodes, PolicyMigflex)[PolicyMigflex]
	if r.NeverServed != 0 || r.WaitP99 > 10 {
		t.Errorf("migflex: %d never served, wait p99 %v s; want 0 and at most the window and the change", r.NeverServed, r.WaitP99)
	}
}

// TestStranded: on one GPU laid out as seven 1g.10gb, seven 1g tasks run
// for 1000 s while a 3g.40gb task waits for ever. For those 1000 s the
// waiting demand (half a GPU) is more than the idle eighth: saturated,
// with an eighth stranded. Then the GPU is idle and the 3g alone asks for
// less than that: not saturated. The replay lasts 3600 s.
func TestStranded(t *testing.T) {
	var tasks []Task
	for i := range 7 {
		tasks = append(tasks, Task{Name: fmt.Sprintf("small%d", i), NumGPU: 1, GPUMilli: 100, Created: 0, Duration: 1000})
	}
	tasks = append(tasks, Task{Name: "half", NumGPU: 1, GPUMilli: 400, Created: 0, Duration: 1000})
	r := replayOf(t, tasks, []TraceNode{{Name: "n0", GPUs: 1, Model: "G2"}}, PolicyStatic1g)[PolicyStatic1g]
	if !near(r.Stranded, 0.125) || !near(r.SaturatedShare, 1000.0/3600) || r.NeverServed != 1 {
		t.Errorf("stranded %v over %v of the replay, %d never served; want 0.125 over %v, 1", r.Stranded, r.SaturatedShare, r.NeverServed, 1000.0/3600)
	}
}

// TestReplaySeesChangesInFlight: as the controller does (internal/planner/plansnap),
// the replay shows the planner a layout being applied as if it were in
// place, its node frozen. A 3g.40gb pod arriving while the change for the
// first one is applied is planned onto the instance coming with it (the
// change fills the GPU for the mix), not given the other node's GPU.
func TestReplaySeesChangesInFlight(t *testing.T) {
	idle := solver.DefaultCadence().Idle.Seconds()
	tasks := []Task{
		{Name: "first", NumGPU: 1, GPUMilli: 400, Created: 0, Duration: 1000},
		{Name: "second", NumGPU: 1, GPUMilli: 400, Created: idle + 1, Duration: 1000},
	}
	r := replayOf(t, tasks, []TraceNode{{Name: "n0", GPUs: 1, Model: "G2"}, {Name: "n1", GPUs: 1, Model: "G2"}}, PolicyMigflex)[PolicyMigflex]
	if r.Repartitions != 1 || r.NeverServed != 0 {
		t.Errorf("%d repartitions, %d never served; want one change serving both", r.Repartitions, r.NeverServed)
	}
}

// TestReplayRoundsOnDepartures: as in the controller (the agent's layout
// annotation names the pods holding each device, and a Node's annotations
// changing starts a batch), a pod leaving starts a round a batch window
// later. A whole-GPU pod waits for the one GPU, a MIG pod's for 1000 s;
// when that pod leaves (at 1006: a round at 1 s, a 5 s change), a round
// at 1007 gives the GPU whole to the waiting pod, whose change lands at
// 1012. Without the departure's round it waits for the next resync.
func TestReplayRoundsOnDepartures(t *testing.T) {
	idle := solver.DefaultCadence().Idle.Seconds()
	tasks := []Task{
		{Name: "small", NumGPU: 1, GPUMilli: 100, Created: 0, Duration: 1000},
		{Name: "whole", NumGPU: 1, GPUMilli: 1000, Created: 10, Duration: 100},
	}
	for _, ignore := range []bool{false, true} {
		o := Options{Tasks: tasks, Columns: Columns{Times: true}, Nodes: []TraceNode{{Name: "n0", GPUs: 1, Model: "G2"}}, Speedup: 1,
			Drain: time.Hour, Latency: 5 * time.Second, Planner: solver.DefaultPolicy(), MixHalfLife: time.Hour,
			Policies: []string{PolicyMigflex}, Parallel: 1, MigflexIgnoresDepartures: ignore}
		r, err := Run(o)
		if err != nil {
			t.Fatal(err)
		}
		res := r.Loads[0].Results[0]
		want := idle + 5 + 1000 + idle + 5 - 10
		if ignore {
			if res.WaitP99 <= want || r.Settings.MigflexDepartureRounds {
				t.Errorf("without rounds on departures: wait %v s, departure rounds %v; want longer than %v s, false", res.WaitP99, r.Settings.MigflexDepartureRounds, want)
			}
			continue
		}
		if !near(res.WaitP99, want) || res.Repartitions != 2 || !r.Settings.MigflexDepartureRounds {
			t.Errorf("with rounds on departures: wait %v s, %d repartitions, departure rounds %v; want %v s, 2, true", res.WaitP99, res.Repartitions, r.Settings.MigflexDepartureRounds, want)
		}
	}
}

// TestReplayReservations: a pod asking for both GPUs of the one node
// arrives at 10 s, behind two whole-GPU pods ending at 1000 and 2000 s;
// one-GPU pods arriving at 900 and 1500 s would take each GPU as it
// frees. With reservations (after 5 minutes' wait, the node's GPUs due
// within the hour) the round after 310 s reserves the node: the GPU
// freed at 1000 s is withheld (1000 s of it) and the pod starts at 2000
// s. Without, the one-GPU pods take the GPUs as they free and it starts
// at 5000 s, when the second of them ends.
func TestReplayReservations(t *testing.T) {
	tasks := []Task{
		{Name: "a", NumGPU: 1, GPUMilli: 1000, Created: 0, Duration: 1000},
		{Name: "b", NumGPU: 1, GPUMilli: 1000, Created: 0, Duration: 2000},
		{Name: "two", NumGPU: 2, GPUMilli: 1000, Created: 10, Duration: 500},
		{Name: "c1", NumGPU: 1, GPUMilli: 1000, Created: 900, Duration: 3000},
		{Name: "c2", NumGPU: 1, GPUMilli: 1000, Created: 1500, Duration: 3000},
	}
	pol := reserve.DefaultPolicy()
	pol.Lead = time.Hour
	for _, tc := range []struct {
		name     string
		max      int
		wait     float64 // the two-GPU pod's
		resv     [3]int  // made, bound, lapsed
		withheld float64 // GPU-hours
	}{
		{name: "with", max: pol.Max, wait: 1990, resv: [3]int{1, 1, 0}, withheld: 1000.0 / 3600},
		{name: "without", wait: 4990},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pol
			p.Max = tc.max
			wait, res := replayReserving(t, tasks, p)
			if !near(wait, tc.wait) || [3]int{res.Reservations, res.ReservationsBound, res.ReservationsLapsed} != tc.resv || !near(res.WithheldGPUHours, tc.withheld) {
				t.Errorf("two-GPU pod's wait %v s; reservations made, bound, lapsed %v; withheld %v GPU-hours; want %v s, %v, %v",
					wait, [3]int{res.Reservations, res.ReservationsBound, res.ReservationsLapsed}, res.WithheldGPUHours, tc.wait, tc.resv, tc.withheld)
			}
		})
	}
}

// TestReplayReservationOnMIG: the node's GPUs are one whole, held by a
// pod until 1006 s, and one given to a 1g.10gb pod (a round at 1 s, the
// change at 6 s) until 1006 s. The reservation for the two-GPU pod waits
// for both; at 1006 s the departure's round makes the MIG GPU whole
// (reserved GPUs go whole whatever the mix) and the pod starts when that
// lands, at 1012 s. With no grace the reservation lapses at 1006 s, and
// the pod is served by the planner's own reshape, at the same time.
func TestReplayReservationOnMIG(t *testing.T) {
	tasks := []Task{
		{Name: "b", NumGPU: 1, GPUMilli: 1000, Created: 0, Duration: 1006},
		{Name: "small", NumGPU: 1, GPUMilli: 100, Created: 0, Duration: 1000},
		{Name: "two", NumGPU: 2, GPUMilli: 1000, Created: 10, Duration: 500},
	}
	for _, tc := range []struct {
		name  string
		grace time.Duration
		resv  [3]int // made, bound, lapsed
	}{
		{name: "bound", grace: 2 * time.Minute, resv: [3]int{1, 1, 0}},
		{name: "lapsed", grace: 0, resv: [3]int{1, 0, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol := reserve.DefaultPolicy()
			pol.Lead, pol.Grace = time.Hour, tc.grace
			wait, res := replayReserving(t, tasks, pol)
			if got := [3]int{res.Reservations, res.ReservationsBound, res.ReservationsLapsed}; !near(wait, 1002) || got != tc.resv {
				t.Errorf("two-GPU pod's wait %v s, reservations made, bound, lapsed %v; want 1002 s, %v", wait, got, tc.resv)
			}
		})
	}
}

// TestReplayReservedPodBehindHead: the scheduler tries every pod, not
// only the first of those asking for the same thing. Pod p1 (two GPUs)
// holds the reservation of node a, whose GPUs free at 1000 s; p2, of
// higher priority and asking for the same, arrives later and holds node
// b's, free at 1500 s. When a frees, p2 comes first and cannot use it,
// and p1, behind it, binds there all the same (wait 990 s); p2 binds on b
// (wait 1100 s).
func TestReplayReservedPodBehindHead(t *testing.T) {
	tasks := []Task{
		{Name: "a1", NumGPU: 1, GPUMilli: 1000, QoS: "LS", Created: 0, Duration: 1000},
		{Name: "a2", NumGPU: 1, GPUMilli: 1000, QoS: "LS", Created: 0, Duration: 1000},
		{Name: "b1", NumGPU: 1, GPUMilli: 1000, QoS: "LS", Created: 0, Duration: 1500},
		{Name: "b2", NumGPU: 1, GPUMilli: 1000, QoS: "LS", Created: 0, Duration: 1500},
		{Name: "p1", NumGPU: 2, GPUMilli: 1000, Created: 10, Duration: 600},
		{Name: "p2", NumGPU: 2, GPUMilli: 1000, QoS: "LS", Created: 400, Duration: 500},
	}
	pol := reserve.DefaultPolicy()
	pol.Lead = time.Hour
	o := Options{Tasks: tasks, Columns: Columns{Times: true}, Nodes: []TraceNode{{Name: "a", GPUs: 2, Model: "G2"}, {Name: "b", GPUs: 2, Model: "G2"}},
		Speedup: 1, Drain: time.Hour, Latency: 5 * time.Second, Planner: solver.DefaultPolicy(), Reserve: pol, MixHalfLife: time.Hour,
		Policies: []string{PolicyMigflex}, Parallel: 1}
	r, err := Run(o)
	if err != nil {
		t.Fatal(err)
	}
	res := r.Loads[0].Results[0]
	for _, k := range res.ByKind {
		if k.Kind == "gpu x2" && (!near(k.WaitP99, 1100) || !near(k.WaitMean, 1045) || res.ReservationsBound != 2) {
			t.Errorf("two-GPU pods' waits: longest %v s, mean %v s; %d reservations bound; want 1100 s, 1045 s (990 and 1100), 2", k.WaitP99, k.WaitMean, res.ReservationsBound)
		}
	}
}

// replayReserving replays tasks with migflex on one node of two G2 GPUs
// under reservation policy pol: the two-GPU pods' longest wait and the
// result.
func replayReserving(t *testing.T, tasks []Task, pol reserve.Policy) (float64, Result) {
	t.Helper()
	o := Options{Tasks: tasks, Columns: Columns{Times: true}, Nodes: []TraceNode{{Name: "n0", GPUs: 2, Model: "G2"}}, Speedup: 1,
		Drain: time.Hour, Latency: 5 * time.Second, Planner: solver.DefaultPolicy(), Reserve: pol, MixHalfLife: time.Hour,
		Policies: []string{PolicyMigflex}, Parallel: 1}
	r, err := Run(o)
	if err != nil {
		t.Fatal(err)
	}
	res := r.Loads[0].Results[0]
	var wait float64
	for _, k := range res.ByKind {
		if k.Kind == "gpu x2" {
			wait = k.WaitP99
		}
	}
	return wait, res
}
