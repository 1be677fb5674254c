package solver_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/planner/solver"
)

// outcome is "reshape node/gpu", "existing node/gpu" or "none: <words the
// reason must contain>"; several devices list every node/gpu, comma-separated.
func outcome(p solver.PodPlan) string {
	if p.Action == solver.ActionNone {
		return "none: " + p.Reason
	}
	var where []string
	for _, d := range p.Devices {
		where = append(where, fmt.Sprintf("%s/%d", p.Node, d.GPU))
	}
	return string(p.Action) + " " + strings.Join(where, ",")
}

func layoutOf(gc solver.GPUChange) []string {
	if !gc.MigEnabled {
		return []string{"MIG disabled"}
	}
	var out []string
	for _, in := range gc.Layout {
		s := fmt.Sprintf("%s@%d", in.Profile, in.Start)
		if in.InUse {
			s += "*"
		}
		out = append(out, s)
	}
	return out
}

type ruleCase struct {
	nodes []solver.Node
	pods  []*corev1.Pod
	mix   []solver.Demand
	pol   func(*solver.Policy)
	// want maps a pod name to its outcome; a "none: " outcome matches when
	// the reason contains the rest.
	want map[string]string
	// changed lists node/gpu of every GPU the round changes, with layouts
	// when given (nil: any layout).
	changed map[string][]string
}

func runRule(t *testing.T, tc ruleCase) solver.Result {
	t.Helper()
	pol := solver.DefaultPolicy()
	// Most cases lay out idle MIG GPUs to see where a pod goes; reclaiming
	// them would add changes beside the rule under test. TestReclaim turns
	// it on.
	pol.ReclaimIdle = false
	if tc.pol != nil {
		tc.pol(&pol)
	}
	pl, err := solver.New(pol)
	if err != nil {
		t.Fatal(err)
	}
	snap := snapshot(tc.nodes, tc.pods...)
	snap.Mix = tc.mix
	res, err := pl.Plan(snap)
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	checkInvariants(t, snap, pol, res)
	for _, p := range res.Pods {
		name := strings.TrimPrefix(p.Pod, "ns/")
		want, ok := tc.want[name]
		if !ok {
			continue
		}
		got := outcome(p)
		if rest, isNone := strings.CutPrefix(want, "none: "); isNone {
			if p.Action != solver.ActionNone || !strings.Contains(p.Reason, rest) {
				t.Errorf("pod %s: got %q, want none with a reason containing %q", name, got, rest)
			}
			continue
		}
		if got != want {
			t.Errorf("pod %s: got %q, want %q", name, got, want)
		}
	}
	gotChanged := map[string][]string{}
	for _, nc := range res.Nodes {
		for _, gc := range nc.GPUs {
			gotChanged[fmt.Sprintf("%s/%d", nc.Node, gc.Index)] = layoutOf(gc)
		}
	}
	for k, want := range tc.changed {
		got, ok := gotChanged[k]
		if !ok {
			t.Errorf("GPU %s not changed, want it changed", k)
			continue
		}
		if want != nil {
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("GPU %s layout (-want +got):\n%s", k, diff)
			}
		}
	}
	for k, layout := range gotChanged {
		if _, ok := tc.changed[k]; !ok {
			t.Errorf("GPU %s changed to %v, want it left alone", k, layout)
		}
	}
	if t.Failed() {
		for _, nc := range res.Nodes {
			t.Logf("node %s:\n%s", nc.Node, nc.Config)
		}
		for _, p := range res.Pods {
			t.Logf("%s: %s", p.Pod, outcome(p))
		}
	}
	return res
}

// TestBusyInstancesKept: an instance in use stays where it is, the new
// layout is built around it, and a pod that only a busy GPU could serve
// waits.
func TestBusyInstancesKept(t *testing.T) {
	for name, tc := range map[string]ruleCase{
		"3g next to a busy 1g goes to the other half": {
			nodes: []solver.Node{node("n0", optedIn, gpus(migGPU(0, "1g.10gb@3*", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6")))},
			pods:  []*corev1.Pod{pod("p", mig3g, "1")},
			want:  map[string]string{"p": "reshape n0/0"},
			// The busy 1g stays; the three free 1g on the upper half go.
			changed: map[string][]string{"n0/0": {"1g.10gb@3*", "3g.40gb@4"}},
		},
		"busy 4g leaves room for 3g at 4 only": {
			nodes:   []solver.Node{node("n0", optedIn, gpus(migGPU(0, "4g.40gb@0*")))},
			pods:    []*corev1.Pod{pod("p", mig3g, "1")},
			want:    map[string]string{"p": "reshape n0/0"},
			changed: map[string][]string{"n0/0": {"4g.40gb@0*", "3g.40gb@4"}},
		},
		"every GPU busy where it matters: the pod waits": {
			nodes: []solver.Node{node("n0", optedIn, gpus(
				migGPU(0, "1g.10gb@0*", "1g.10gb@5*"),
				migGPU(1, "2g.20gb@2*", "2g.20gb@4*"),
				wholeGPUOf(2, inUse),
			))},
			pods: []*corev1.Pod{pod("p", mig3g, "1")},
			want: map[string]string{"p": "none: 3 have no room for it next to instances in use"},
		},
		"a whole GPU is never taken from under its pod": {
			nodes: []solver.Node{node("n0", optedIn, gpus(wholeGPUOf(0, inUse), migGPU(1, "7g.80gb@0*")))},
			pods:  []*corev1.Pod{pod("p", mig1g, "1"), pod("q", wholeGPU, "1")},
			want: map[string]string{
				"p": "none: no room for it next to instances in use",
				"q": "none: no room for it next to instances in use",
			},
		},
		"MIG is not disabled under a busy instance": {
			nodes: []solver.Node{node("n0", optedIn, gpus(migGPU(0, "1g.10gb@6*")))},
			pods:  []*corev1.Pod{pod("p", wholeGPU, "1")},
			want:  map[string]string{"p": "none: 1 has no room"},
		},
	} {
		t.Run(name, func(t *testing.T) { runRule(t, tc) })
	}
}

// TestPlacementsValid: the layouts follow the model's placement table, and
// what cannot be placed is not proposed.
func TestPlacementsValid(t *testing.T) {
	for name, tc := range map[string]ruleCase{
		// 2g.20gb starts only at 0, 2 or 4: with a busy 1g at 1, slot 0-1
		// is out and the 2g goes to 2 (lowest usable).
		"2g avoids the odd slot": {
			nodes:   []solver.Node{node("n0", optedIn, gpus(migGPU(0, "1g.10gb@1*")))},
			pods:    []*corev1.Pod{pod("p", mig2g, "1")},
			mix:     []solver.Demand{{Resource: mig2g, Count: 1, Weight: 1}},
			want:    map[string]string{"p": "reshape n0/0"},
			changed: map[string][]string{"n0/0": {"1g.10gb@1*", "2g.20gb@2", "2g.20gb@4"}},
		},
		// Seven memory slices free (0-6) but 4g.40gb only starts at 0.
		"4g cannot start after a busy instance at 0": {
			nodes: []solver.Node{node("n0", optedIn, gpus(migGPU(0, "1g.10gb@0*")))},
			pods:  []*corev1.Pod{pod("p", mig4g, "1")},
			want:  map[string]string{"p": "none: no room"},
		},
		// Compute slices: 4g + 2g + 1g use all 7; nothing more fits even
		// though a 1g placement at 6... is taken; and a second 4g never.
		"7 compute slices": {
			nodes: []solver.Node{node("n0", optedIn, gpus(migGPU(0, "4g.40gb@0*", "2g.20gb@4*")))},
			pods:  []*corev1.Pod{pod("p", mig1g, "1"), pod("q", mig1g, "1")},
			want: map[string]string{
				"p": "reshape n0/0",
				"q": "none: no room",
			},
			changed: map[string][]string{"n0/0": {"4g.40gb@0*", "2g.20gb@4*", "1g.10gb@6"}},
		},
		"profile of another model": {
			nodes: []solver.Node{node("n0", optedIn, gpus(migGPU(0)))},
			pods:  []*corev1.Pod{pod("p", mig1g5, "1")},
			want:  map[string]string{"p": "none: 1 is of a model without it"},
		},
	} {
		t.Run(name, func(t *testing.T) { runRule(t, tc) })
	}
}

// TestOptOutNeverTouched: nodes not opted in, and frozen ones, are never
// changed; their free instances still count.
func TestOptOutNeverTouched(t *testing.T) {
	for name, tc := range map[string]ruleCase{
		"opted out, empty": {
			nodes: []solver.Node{node("n0", optedOut, gpus(migGPU(0)))},
			pods:  []*corev1.Pod{pod("p", mig1g, "1")},
			want:  map[string]string{"p": "none: 1 is on a node not opted in"},
		},
		"opted out node's free instance serves as it is": {
			nodes: []solver.Node{
				node("n0", optedOut, gpus(migGPU(0, "1g.10gb@0"))),
				node("n1", optedIn, gpus(migGPU(0))),
			},
			pods: []*corev1.Pod{pod("p", mig1g, "1")},
			want: map[string]string{"p": "existing n0/0"},
		},
		"opted out node skipped for an opted-in one": {
			nodes: []solver.Node{
				node("a", optedOut, gpus(migGPU(0))),
				node("b", optedIn, gpus(migGPU(0, "7g.80gb@0*"), migGPU(1))),
			},
			pods:    []*corev1.Pod{pod("p", mig3g, "1")},
			want:    map[string]string{"p": "reshape b/1"},
			changed: map[string][]string{"b/1": nil},
		},
		"frozen node": {
			nodes: []solver.Node{node("n0", optedIn, gpus(migGPU(0)), frozen("agent state pending"))},
			pods:  []*corev1.Pod{pod("p", mig1g, "1")},
			want:  map[string]string{"p": "none: 1 is on a node whose layout must not change now (n0: agent state pending)"},
		},
		"unknown model left alone": {
			nodes: []solver.Node{node("n0", optedIn, gpus(modelGPU("Mystery-GPU", 0)))},
			pods:  []*corev1.Pod{pod("p", mig1g, "1")},
			want:  map[string]string{"p": "none: no GPU can take"},
		},
	} {
		t.Run(name, func(t *testing.T) { runRule(t, tc) })
	}
}

// TestPriorityOrder: higher priority first, then older, whatever the input
// order.
func TestPriorityOrder(t *testing.T) {
	oneSlot := []solver.Node{node("n0", optedIn, gpus(migGPU(0, "4g.40gb@0*")))}
	for name, tc := range map[string]ruleCase{
		"priority beats age": {
			nodes: oneSlot,
			pods: []*corev1.Pod{
				with(pod("old-low", mig3g, "1"), priority(0), age(time.Hour)),
				with(pod("new-high", mig3g, "1"), priority(1000), age(time.Second)),
			},
			want:    map[string]string{"new-high": "reshape n0/0", "old-low": "none: no room"},
			changed: map[string][]string{"n0/0": {"4g.40gb@0*", "3g.40gb@4"}},
		},
		"same priority: older first": {
			nodes: oneSlot,
			pods: []*corev1.Pod{
				with(pod("young", mig3g, "1"), age(time.Second)),
				with(pod("old", mig3g, "1"), age(time.Hour)),
			},
			want:    map[string]string{"old": "reshape n0/0", "young": "none: no room"},
			changed: map[string][]string{"n0/0": {"4g.40gb@0*", "3g.40gb@4"}},
		},
		"a small high-priority pod first, then what still fits": {
			nodes: oneSlot,
			pods: []*corev1.Pod{
				with(pod("big", mig3g, "1"), priority(0), age(time.Hour)),
				with(pod("small", mig1g, "1"), priority(10)),
			},
			want:    map[string]string{"small": "reshape n0/0", "big": "none: no room"},
			changed: map[string][]string{"n0/0": nil},
		},
	} {
		t.Run(name, func(t *testing.T) { runRule(t, tc) })
	}
}

// TestCooldownAndCap: a GPU changed recently is left alone until its
// cooldown ends, and a round changes at most MaxGPUsPerRound GPUs.
func TestCooldownAndCap(t *testing.T) {
	recent := migGPU(0)
	recent.LastChanged = t0.Add(-30 * time.Second)
	old := migGPU(0)
	old.LastChanged = t0.Add(-10 * time.Minute)
	cap2 := func(p *solver.Policy) { p.MaxGPUsPerRound = 2 }
	for name, tc := range map[string]ruleCase{
		"inside the cooldown": {
			nodes: []solver.Node{node("n0", optedIn, gpus(recent))},
			pods:  []*corev1.Pod{pod("p", mig1g, "1")},
			want:  map[string]string{"p": "none: 1 is cooling down after a change (cooldown 2m0s; the first ends at 2025-01-01T12:01:30Z)"},
		},
		"the first cooldown to end is named": {
			nodes: []solver.Node{node("n0", optedIn, gpus(recent)), node("n1", optedIn, gpus(func() solver.GPU {
				g := migGPU(0)
				g.LastChanged = t0.Add(-90 * time.Second)
				return g
			}()))},
			pods: []*corev1.Pod{pod("p", mig1g, "1")},
			want: map[string]string{"p": "none: 2 are cooling down after a change (cooldown 2m0s; the first ends at 2025-01-01T12:00:30Z)"},
		},
		"cooldown over": {
			nodes:   []solver.Node{node("n0", optedIn, gpus(old))},
			pods:    []*corev1.Pod{pod("p", mig1g, "1")},
			want:    map[string]string{"p": "reshape n0/0"},
			changed: map[string][]string{"n0/0": nil},
		},
		"a cooling GPU's free instance still serves": {
			nodes: []solver.Node{node("n0", optedIn, gpus(func() solver.GPU {
				g := migGPU(0, "1g.10gb@0")
				g.LastChanged = t0.Add(-time.Second)
				return g
			}()))},
			pods: []*corev1.Pod{pod("p", mig1g, "1")},
			want: map[string]string{"p": "existing n0/0"},
		},
		"zero cooldown": {
			nodes:   []solver.Node{node("n0", optedIn, gpus(recent))},
			pods:    []*corev1.Pod{pod("p", mig1g, "1")},
			pol:     func(p *solver.Policy) { p.Cooldown = 0 },
			want:    map[string]string{"p": "reshape n0/0"},
			changed: map[string][]string{"n0/0": nil},
		},
		"cap: the third GPU waits for the next round": {
			nodes: []solver.Node{node("n0", optedIn, gpus(migGPU(0), migGPU(1), migGPU(2)))},
			pods: []*corev1.Pod{
				with(pod("a", mig7g, "1"), age(3*time.Minute)),
				with(pod("b", mig7g, "1"), age(2*time.Minute)),
				with(pod("c", mig7g, "1"), age(time.Minute)),
			},
			pol: cap2,
			want: map[string]string{
				"a": "reshape n0/0", "b": "reshape n0/1",
				"c": "none: 1 waits for the round's limit of GPUs repartitioned (2)",
			},
			changed: map[string][]string{"n0/0": {"7g.80gb@0"}, "n0/1": {"7g.80gb@0"}},
		},
		"cap: GPUs already changed this round take more": {
			nodes: []solver.Node{node("n0", optedIn, gpus(migGPU(0), migGPU(1)))},
			pods:  []*corev1.Pod{pod("a", mig1g, "1"), pod("b", mig1g, "1"), pod("c", mig1g, "1")},
			pol:   func(p *solver.Policy) { p.MaxGPUsPerRound = 1 },
			want:  map[string]string{"a": "reshape n0/0", "b": "reshape n0/0", "c": "reshape n0/0"},
			changed: map[string][]string{"n0/0": {
				"1g.10gb@0", "1g.10gb@1", "1g.10gb@2", "1g.10gb@3", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6",
			}},
		},
	} {
		t.Run(name, func(t *testing.T) { runRule(t, tc) })
	}
}

// TestObjectiveOrder: existing free devices before any change; GPUs already
// changed this round before new ones; then the capacity left most usable
// for the demand mix; fewest free instances destroyed only between
// placements equal on all of that.
func TestObjectiveOrder(t *testing.T) {
	for name, tc := range map[string]ruleCase{
		"a free instance before a reshape": {
			nodes: []solver.Node{node("n0", optedIn, gpus(migGPU(0), migGPU(1, "2g.20gb@0*", "1g.10gb@4")))},
			pods:  []*corev1.Pod{pod("p", mig1g, "1")},
			want:  map[string]string{"p": "existing n0/1"},
		},
		"fewest GPUs touched": {
			nodes:   []solver.Node{node("n0", optedIn, gpus(migGPU(0), migGPU(1)))},
			pods:    []*corev1.Pod{pod("a", mig3g, "1"), pod("b", mig3g, "1")},
			want:    map[string]string{"a": "reshape n0/0", "b": "reshape n0/0"},
			changed: map[string][]string{"n0/0": {"3g.40gb@0", "3g.40gb@4"}},
		},
		"fewest instances destroyed, all else equal": {
			// Both GPUs are idle on one node: a 3g leaves the same room on
			// either. GPU 0 loses three free 1g for a 3g at 4, GPU 1 only
			// its 2g at 4.
			nodes: []solver.Node{node("n0", optedIn, gpus(
				migGPU(0, "1g.10gb@0", "1g.10gb@1", "1g.10gb@2", "1g.10gb@3", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6"),
				migGPU(1, "2g.20gb@0", "2g.20gb@2", "2g.20gb@4"),
			))},
			pods:    []*corev1.Pod{pod("p", mig3g, "1")},
			want:    map[string]string{"p": "reshape n0/1"},
			changed: map[string][]string{"n0/1": {"2g.20gb@0", "2g.20gb@2", "3g.40gb@4"}},
		},
		"usable capacity before free instances destroyed": {
			// Node a's idle MIG GPU sits next to a busy whole GPU; node b
			// has two idle whole GPUs. The mix asks for pairs of whole
			// GPUs: reshaping a's GPU destroys its four free instances
			// but keeps b's pair together.
			nodes: []solver.Node{
				node("a", optedIn, gpus(migGPU(0, "1g.10gb@0", "1g.10gb@1", "2g.20gb@2", "3g.40gb@4"), wholeGPUOf(1, inUse))),
				node("b", optedIn, gpus(wholeGPUOf(0, notInUse), wholeGPUOf(1, notInUse))),
			},
			pods:    []*corev1.Pod{pod("p", mig7g, "1")},
			mix:     []solver.Demand{{Resource: mig7g, Count: 1, Weight: 1}, {Resource: wholeGPU, Count: 2, Weight: 1}},
			want:    map[string]string{"p": "reshape a/0"},
			changed: map[string][]string{"a/0": {"7g.80gb@0"}},
		},
		"busy GPU first when it saves whole GPUs": {
			nodes: []solver.Node{node("n0", optedIn, gpus(
				migGPU(0, "1g.10gb@0", "1g.10gb@1", "1g.10gb@2", "1g.10gb@3", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6"),
				migGPU(1, "1g.10gb@0*", "1g.10gb@1", "1g.10gb@2", "2g.20gb@4"),
			))},
			pods: []*corev1.Pod{pod("p", mig3g, "1")},
			// GPU 1 already holds an instance in use: the 3g at 4 there
			// (losing only its free 2g) keeps GPU 0 able to become whole.
			want:    map[string]string{"p": "reshape n0/1"},
			changed: map[string][]string{"n0/1": {"1g.10gb@0*", "1g.10gb@1", "1g.10gb@2", "3g.40gb@4"}},
		},
		"the capacity left stays usable for the mix": {
			// A 1g can go on an empty GPU or next to a busy 3g. The recent
			// mix asks for 7g too: the empty GPU is kept whole for it.
			nodes:   []solver.Node{node("n0", optedIn, gpus(migGPU(0), migGPU(1, "3g.40gb@0*")))},
			pods:    []*corev1.Pod{pod("p", mig1g, "1")},
			mix:     []solver.Demand{{Resource: mig1g, Count: 1, Weight: 1}, {Resource: mig7g, Count: 1, Weight: 1}},
			want:    map[string]string{"p": "reshape n0/1"},
			changed: map[string][]string{"n0/1": {"3g.40gb@0*", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6"}},
		},
		"MIG goes where whole GPUs are fewest": {
			// Both idle GPUs need MIG enabled. Node a's busy whole GPUs
			// will be idle again when their pods end: with its idle one,
			// a four-GPU pod could run there; node b has no such future.
			nodes: []solver.Node{
				node("a", optedIn, gpus(wholeGPUOf(0, inUse), wholeGPUOf(1, inUse), wholeGPUOf(2, inUse), wholeGPUOf(3, notInUse))),
				node("b", optedIn, gpus(migGPU(0, "7g.80gb@0*"), wholeGPUOf(1, notInUse))),
			},
			pods:    []*corev1.Pod{pod("p", mig1g, "1")},
			mix:     []solver.Demand{{Resource: mig1g, Count: 1, Weight: 1}, {Resource: wholeGPU, Count: 4, Weight: 1}},
			want:    map[string]string{"p": "reshape b/1"},
			changed: map[string][]string{"b/1": nil},
		},
		"a one-GPU pod keeps the node with all GPUs idle for an eight-GPU mix": {
			nodes: []solver.Node{
				node("a", optedIn, gpus(wholeGPUOf(0, notInUse), wholeGPUOf(1, notInUse), wholeGPUOf(2, notInUse), wholeGPUOf(3, notInUse))),
				node("b", optedIn, gpus(wholeGPUOf(0, inUse), wholeGPUOf(1, notInUse), wholeGPUOf(2, inUse), wholeGPUOf(3, inUse))),
			},
			pods: []*corev1.Pod{pod("p", wholeGPU, "1")},
			mix:  []solver.Demand{{Resource: wholeGPU, Count: 1, Weight: 1}, {Resource: wholeGPU, Count: 4, Weight: 1}},
			want: map[string]string{"p": "existing b/1"},
		},
	} {
		t.Run(name, func(t *testing.T) { runRule(t, tc) })
	}
}

// TestReclaim: after the pods, MIG GPUs with nothing in use go back to
// whole, within the cooldown, the cap and the nodes the planner may change,
// but for the free instances the mix's MIG share of the free capacity keeps.
func TestReclaim(t *testing.T) {
	reclaim := func(p *solver.Policy) { p.ReclaimIdle = true }
	wholeAndMIG := []solver.Demand{{Resource: mig1g, Count: 1, Weight: 1}, {Resource: wholeGPU, Count: 1, Weight: 1}}
	mostlyWhole := []solver.Demand{{Resource: mig1g, Count: 1, Weight: 1}, {Resource: wholeGPU, Count: 1, Weight: 10}}
	recent := migGPU(1, "1g.10gb@0", "1g.10gb@1")
	recent.LastChanged = t0.Add(-30 * time.Second)
	for name, tc := range map[string]ruleCase{
		"an idle MIG GPU goes back to whole": {
			nodes:   []solver.Node{node("n0", optedIn, gpus(migGPU(0, "3g.40gb@4"), migGPU(1)))},
			mix:     wholeAndMIG,
			pol:     reclaim,
			changed: map[string][]string{"n0/0": {"MIG disabled"}, "n0/1": {"MIG disabled"}},
		},
		// The mix asks mostly for whole GPUs: one free 1g.10gb is more
		// than its MIG share of the free capacity, two are too many.
		"free instances beyond the mix's MIG share go whole": {
			nodes:   []solver.Node{node("n0", optedIn, gpus(migGPU(0, "1g.10gb@0"), migGPU(1, "1g.10gb@0"), migGPU(2, "1g.10gb@0"), migGPU(3, "1g.10gb@0*")))},
			mix:     mostlyWhole,
			pol:     reclaim,
			changed: map[string][]string{"n0/0": {"MIG disabled"}, "n0/1": {"MIG disabled"}},
		},
		"a MIG-heavy mix keeps the free instances it asks for, not the others": {
			nodes: []solver.Node{node("n0", optedIn, gpus(migGPU(0, "1g.10gb@0"), migGPU(1, "1g.10gb@0", "1g.10gb@1"), migGPU(2, "3g.40gb@4"), migGPU(3), migGPU(4, "1g.10gb@0*")))},
			mix:   []solver.Demand{{Resource: mig1g, Count: 1, Weight: 10}, {Resource: wholeGPU, Count: 1, Weight: 1}},
			pol:   reclaim,
			// 3g.40gb is not asked for; an empty layout serves nobody.
			changed: map[string][]string{"n0/2": {"MIG disabled"}, "n0/3": {"MIG disabled"}},
		},
		"the spare instance kept is on the node with fewer whole GPUs": {
			nodes: []solver.Node{
				node("a", optedIn, gpus(migGPU(0, "1g.10gb@0"), migGPU(1, "1g.10gb@0*"))),
				node("b", optedIn, gpus(migGPU(0, "1g.10gb@0"), wholeGPUOf(1, notInUse), wholeGPUOf(2, notInUse), migGPU(3, "1g.10gb@0*"))),
			},
			mix:     mostlyWhole,
			pol:     reclaim,
			changed: map[string][]string{"b/0": {"MIG disabled"}},
		},
		"a node that would be all whole goes whole, whatever the mix keeps": {
			nodes: []solver.Node{
				node("a", optedIn, gpus(migGPU(0, "1g.10gb@0"), migGPU(1, "1g.10gb@0"))),
				node("b", optedIn, gpus(migGPU(0, "1g.10gb@0"), wholeGPUOf(1, inUse))),
			},
			mix:     []solver.Demand{{Resource: mig1g, Count: 1, Weight: 10}, {Resource: wholeGPU, Count: 1, Weight: 1}},
			pol:     reclaim,
			changed: map[string][]string{"a/0": {"MIG disabled"}, "a/1": {"MIG disabled"}, "b/0": {"MIG disabled"}},
		},
		"no whole-GPU demand: free instances stay for MIG pods": {
			nodes: []solver.Node{node("n0", optedIn, gpus(migGPU(0, "1g.10gb@0", "3g.40gb@4")))},
			mix:   []solver.Demand{{Resource: mig1g, Count: 1, Weight: 1}},
			pol:   reclaim,
		},
		"a GPU with an instance in use keeps its layout": {
			nodes: []solver.Node{node("n0", optedIn, gpus(migGPU(0, "1g.10gb@0*", "1g.10gb@1", "3g.40gb@4")))},
			mix:   wholeAndMIG,
			pol:   reclaim,
		},
		"a free instance a pending pod takes stays": {
			nodes: []solver.Node{node("n0", optedIn, gpus(migGPU(0, "1g.10gb@0", "3g.40gb@4")))},
			pods:  []*corev1.Pod{pod("p", mig1g, "1")},
			mix:   wholeAndMIG,
			pol:   reclaim,
			want:  map[string]string{"p": "existing n0/0"},
		},
		"cooling down, frozen or opted out: left alone": {
			nodes: []solver.Node{
				node("a", optedIn, gpus(recent)),
				node("b", optedIn, gpus(migGPU(0, "1g.10gb@0")), frozen("agent applying")),
				node("c", optedOut, gpus(migGPU(0, "1g.10gb@0"))),
			},
			mix: wholeAndMIG,
			pol: reclaim,
		},
		"pods first under the cap": {
			nodes: []solver.Node{node("n0", optedIn, gpus(migGPU(0, "1g.10gb@0*"), migGPU(1, "1g.10gb@0")))},
			pods:  []*corev1.Pod{pod("p", mig3g, "1")},
			mix:   wholeAndMIG,
			pol:   func(p *solver.Policy) { p.ReclaimIdle, p.MaxGPUsPerRound = true, 1 },
			want:  map[string]string{"p": "reshape n0/0"},
			// GPU 0 takes the 3g next to its busy 1g (touching the idle
			// GPU 1 would cost its whole-GPU future); the cap then leaves
			// GPU 1 as it is.
			changed: map[string][]string{"n0/0": nil},
		},
		"off": {
			nodes: []solver.Node{node("n0", optedIn, gpus(migGPU(0, "1g.10gb@0")))},
			mix:   wholeAndMIG,
		},
	} {
		t.Run(name, func(t *testing.T) {
			res := runRule(t, tc)
			for _, nc := range res.Nodes {
				for _, gc := range nc.GPUs {
					if gc.Reclaimed != (len(gc.Pods) == 0) {
						t.Errorf("%s/%d: reclaimed %v with pods %v", nc.Node, gc.Index, gc.Reclaimed, gc.Pods)
					}
				}
			}
		})
	}
}

// TestWholeAndMultiGPU covers whole GPUs (MIG disabled) and pods that need
// several devices on one node.
func TestWholeAndMultiGPU(t *testing.T) {
	for name, tc := range map[string]ruleCase{
		"MIG disabled and idle: served as it is": {
			nodes: []solver.Node{node("n0", optedIn, gpus(wholeGPUOf(0, notInUse)))},
			pods:  []*corev1.Pod{pod("p", wholeGPU, "1")},
			want:  map[string]string{"p": "existing n0/0"},
		},
		"idle MIG GPU becomes whole": {
			nodes:   []solver.Node{node("n0", optedIn, gpus(migGPU(0, "3g.40gb@0", "3g.40gb@4")))},
			pods:    []*corev1.Pod{pod("p", wholeGPU, "1")},
			want:    map[string]string{"p": "reshape n0/0"},
			changed: map[string][]string{"n0/0": {"MIG disabled"}},
		},
		"whole GPU becomes MIG": {
			nodes:   []solver.Node{node("n0", optedIn, gpus(wholeGPUOf(0, notInUse)))},
			pods:    []*corev1.Pod{pod("p", mig2g, "1")},
			mix:     []solver.Demand{{Resource: mig2g, Count: 1, Weight: 1}},
			want:    map[string]string{"p": "reshape n0/0"},
			changed: map[string][]string{"n0/0": {"2g.20gb@0", "2g.20gb@2", "2g.20gb@4"}},
		},
		"four whole GPUs on one node": {
			nodes: []solver.Node{
				node("a", optedIn, gpus(wholeGPUOf(0, notInUse), wholeGPUOf(1, notInUse), wholeGPUOf(2, inUse), wholeGPUOf(3, notInUse))),
				node("b", optedIn, gpus(wholeGPUOf(0, notInUse), migGPU(1), wholeGPUOf(2, notInUse), migGPU(3, "1g.10gb@0"))),
			},
			pods:    []*corev1.Pod{pod("p", wholeGPU, "4")},
			want:    map[string]string{"p": "reshape b/0,b/2,b/1,b/3"},
			changed: map[string][]string{"b/1": {"MIG disabled"}, "b/3": {"MIG disabled"}},
		},
		"two 1g on one node": {
			nodes: []solver.Node{
				node("a", optedIn, gpus(migGPU(0, "1g.10gb@0"))),
				node("b", optedIn, gpus(migGPU(0, "1g.10gb@0", "1g.10gb@1"))),
			},
			pods: []*corev1.Pod{pod("p", mig1g, "2")},
			want: map[string]string{"p": "existing b/0,b/0"},
		},
		"no node holds all": {
			nodes: []solver.Node{
				node("a", optedIn, gpus(wholeGPUOf(0, notInUse), wholeGPUOf(1, inUse))),
				node("b", optedIn, gpus(wholeGPUOf(0, notInUse), wholeGPUOf(1, inUse))),
			},
			pods: []*corev1.Pod{pod("p", wholeGPU, "2")},
			want: map[string]string{"p": "none: no node it may be scheduled to can hold 2 x nvidia.com/gpu on one node"},
		},
	} {
		t.Run(name, func(t *testing.T) { runRule(t, tc) })
	}
}

// TestWhereItMayLand: the fallback package's node filters decide where a
// pod may land.
func TestWhereItMayLand(t *testing.T) {
	for name, tc := range map[string]ruleCase{
		"node selector": {
			nodes: []solver.Node{
				node("a", optedIn, gpus(migGPU(0)), labeled("pool", "x")),
				node("b", optedIn, gpus(migGPU(0)), labeled("pool", "y")),
			},
			pods:    []*corev1.Pod{with(pod("p", mig1g, "1"), selector("pool", "y"))},
			want:    map[string]string{"p": "reshape b/0"},
			changed: map[string][]string{"b/0": nil},
		},
		"taint": {
			nodes: []solver.Node{
				node("a", optedIn, gpus(migGPU(0)), tainted("dedicated")),
				node("b", optedIn, gpus(migGPU(0, "7g.80gb@0*"))),
			},
			pods: []*corev1.Pod{pod("p", mig1g, "1")},
			want: map[string]string{"p": "none: of the 1 GPU on the 1 node"},
		},
		"nowhere": {
			nodes: []solver.Node{node("a", optedIn, gpus(migGPU(0)), labeled("pool", "x"))},
			pods:  []*corev1.Pod{with(pod("p", mig1g, "1"), selector("pool", "z"))},
			want:  map[string]string{"p": "none: no node it may be scheduled to"},
		},
		"hostname selector": {
			nodes:   []solver.Node{node("a", optedIn, gpus(migGPU(0))), node("b", optedIn, gpus(migGPU(0)))},
			pods:    []*corev1.Pod{with(pod("p", mig1g, "1"), selector(corev1.LabelHostname, "b"))},
			want:    map[string]string{"p": "reshape b/0"},
			changed: map[string][]string{"b/0": nil},
		},
		"no GPU asked": {
			nodes: []solver.Node{node("a", optedIn, gpus(migGPU(0)))},
			pods:  []*corev1.Pod{pod("p", "cpu", "1")},
			want:  map[string]string{"p": "none: the pod asks for no GPU"},
		},
	} {
		t.Run(name, func(t *testing.T) { runRule(t, tc) })
	}
}

// TestBadInput: a malformed snapshot or policy is an error that says what;
// a GPU the planner does not understand is left alone with a warning.
func TestBadInput(t *testing.T) {
	pl, err := solver.New(solver.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		snap solver.Snapshot
		want string
	}{
		"duplicate node": {
			snap: snapshot([]solver.Node{node("a", optedIn, nil), node("a", optedIn, nil)}),
			want: `node "a" given twice`,
		},
		"duplicate GPU": {
			snap: snapshot([]solver.Node{node("a", optedIn, gpus(migGPU(0), migGPU(0)))}),
			want: `node "a": GPU 0 given twice`,
		},
		"nil pod": {
			snap: snapshot([]solver.Node{node("a", optedIn, nil)}, nil),
			want: "pending pod 0 is nil",
		},
		"unnamed node": {
			snap: snapshot([]solver.Node{node("", optedIn, nil)}),
			want: "has no name",
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := pl.Plan(tc.snap)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Plan error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
	for name, pol := range map[string]solver.Policy{
		"negative cap":      {MaxGPUsPerRound: -1},
		"negative cooldown": {Cooldown: -time.Second},
		"negative weight":   {Weights: solver.Weights{Touch: -1}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := solver.New(pol); err == nil {
				t.Error("New accepted an invalid policy")
			}
		})
	}

	for name, tc := range map[string]struct {
		gpu  solver.GPU
		warn string
	}{
		"instance at an invalid start": {migGPU(0, "3g.40gb@2"), "is not a placement of"},
		"overlapping instances":        {migGPU(0, "2g.20gb@0", "1g.10gb@1"), "not valid"},
		"instances with MIG disabled": {
			solver.GPU{Index: 0, Model: h100Name, Instances: []solver.Instance{inst("1g.10gb@0")}}, "MIG disabled",
		},
		"unknown model": {modelGPU("Mystery-GPU", 0), `no MIG profile table for model "Mystery-GPU"`},
	} {
		t.Run(name, func(t *testing.T) {
			snap := snapshot([]solver.Node{node("a", optedIn, gpus(tc.gpu))}, pod("p", mig1g, "1"))
			res, err := pl.Plan(snap)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Nodes) != 0 {
				t.Errorf("changed %v, want the GPU left alone", res.Nodes)
			}
			if !slices.ContainsFunc(res.Warnings, func(w string) bool { return strings.Contains(w, tc.warn) }) {
				t.Errorf("warnings %q, want one containing %q", res.Warnings, tc.warn)
			}
		})
	}
}

// TestHostileProfileTable: a node publishing a profile table with more
// layouts than the planner enumerates (63 one-slice placements) has its GPUs
// left alone with a warning; the round still serves the pod elsewhere.
func TestHostileProfileTable(t *testing.T) {
	pl, err := solver.New(solver.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	starts := make([]int, 63)
	for i := range starts {
		starts[i] = i
	}
	hostile := solver.Model{Name: "Hostile-GPU", Profiles: []mig.Profile{
		{Name: "1g.1gb", Slices: 1, MemorySlices: 1, MaxCount: 63, Placements: starts},
		{Name: "3g.40gb", Slices: 3, MemorySlices: 4, MaxCount: 1, Placements: []int{0}},
	}}
	snap := snapshot([]solver.Node{
		node("a", optedIn, gpus(modelGPU(hostile.Name, 0))),
		node("b", optedIn, gpus(migGPU(0))),
	}, pod("p", mig3g, "1"))
	snap.Models = append(snap.Models, hostile)
	res, err := pl.Plan(snap)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Nodes) != 1 || res.Nodes[0].Node != "b" {
		t.Errorf("changes %+v, want one, on node b", res.Nodes)
	}
	if !slices.ContainsFunc(res.Warnings, func(w string) bool {
		return strings.Contains(w, "Hostile-GPU") && strings.Contains(w, "more layouts than the planner enumerates")
	}) {
		t.Errorf("warnings %q, want one naming the hostile model's table", res.Warnings)
	}
}

// TestDeterministic: the same snapshot, nodes in any order, plans the same.
func TestDeterministic(t *testing.T) {
	pl, err := solver.New(solver.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	snap := bigScenario(7, 200, 300)
	first, err := pl.Plan(snap)
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, snap, pl.Policy(), first)
	slices.Reverse(snap.Nodes)
	second, err := pl.Plan(snap)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(first, second); diff != "" {
		t.Errorf("plans differ with the nodes reversed (-first +second):\n%s", diff)
	}
}

// TestRandomFleets checks the invariants on seeded random fleets with tight
// policies.
func TestRandomFleets(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			pol := solver.DefaultPolicy()
			pol.MaxGPUsPerRound = int(seed % 7)
			pl, err := solver.New(pol)
			if err != nil {
				t.Fatal(err)
			}
			snap := bigScenario(seed, 40, 120)
			// Odd seeds reserve every fifth node's first four GPUs for
			// some pod (internal/planner/reserve).
			for i := range snap.Nodes {
				if seed%2 == 1 && i%5 == 0 {
					for g := range snap.Nodes[i].GPUs[:4] {
						snap.Nodes[i].GPUs[g].Reserved = true
					}
				}
			}
			res, err := pl.Plan(snap)
			if err != nil {
				t.Fatal(err)
			}
			checkInvariants(t, snap, pol, res)
			if len(res.Warnings) != 0 {
				t.Errorf("warnings on a well-formed fleet: %q", res.Warnings)
			}
		})
	}
}

// TestHoldForMultiGPU: a pod that needs eight whole GPUs finds no node;
// node a could hold it once the pods on its whole GPUs end. Pods after it
// in the round's order get no new MIG instance on a (they wait, and say
// why), pods before it do, a free instance that exists still serves, and
// with the hold off a MIG GPU goes on a.
func TestHoldForMultiGPU(t *testing.T) {
	a := make([]solver.GPU, 8)
	for i := range a {
		a[i] = wholeGPUOf(i, i < 6) // six in use, two idle
	}
	b := gpus(migGPU(0, "3g.40gb@0*", "2g.20gb@4*", "1g.10gb@6"), wholeGPUOf(1, true))
	eight := with(pod("eight", wholeGPU, "8"), age(time.Hour))
	for _, tc := range []struct {
		name    string
		hold    bool
		pending []*corev1.Pod
		want    map[string]string // pod: node, or "" for none
	}{{
		name:    "younger MIG pod waits",
		hold:    true,
		pending: []*corev1.Pod{eight, with(pod("young", mig3g, "1"), age(time.Minute))},
		want:    map[string]string{"ns/eight": "", "ns/young": ""},
	}, {
		name:    "an older one goes first",
		hold:    true,
		pending: []*corev1.Pod{eight, with(pod("old", mig3g, "1"), age(2*time.Hour))},
		want:    map[string]string{"ns/eight": "", "ns/old": "a"},
	}, {
		name:    "a free instance still serves",
		hold:    true,
		pending: []*corev1.Pod{eight, with(pod("small", mig1g, "1"), age(time.Minute))},
		want:    map[string]string{"ns/eight": "", "ns/small": "b"},
	}, {
		name:    "hold off",
		pending: []*corev1.Pod{eight, with(pod("young", mig3g, "1"), age(time.Minute))},
		want:    map[string]string{"ns/eight": "", "ns/young": "a"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			pol := solver.DefaultPolicy()
			pol.HoldForMultiGPU = tc.hold
			snap := snapshot([]solver.Node{node("a", optedIn, slices.Clone(a)), node("b", optedIn, b)}, tc.pending...)
			pl, err := solver.New(pol)
			if err != nil {
				t.Fatal(err)
			}
			res, err := pl.Plan(snap)
			if err != nil {
				t.Fatal(err)
			}
			checkInvariants(t, snap, pol, res)
			for _, p := range res.Pods {
				if want, ok := tc.want[p.Pod]; !ok || p.Node != want {
					t.Errorf("%s on %q (%s), want %q", p.Pod, p.Node, p.Reason, want)
				}
				if p.Pod == "ns/young" && tc.hold && !strings.Contains(p.Reason, "kept whole for a pod waiting for several GPUs") {
					t.Errorf("young's reason %q does not say why", p.Reason)
				}
			}
		})
	}
}

// TestReservedGPUs: a GPU a reservation holds (internal/planner/reserve)
// serves no pod in the round, not even with a free instance that fits or
// idle and whole: the scheduler binds the reserved pod there. Once
// nothing uses its instances it goes back to whole, with or without
// ReclaimIdle and whatever the mix, but not inside its cooldown.
func TestReservedGPUs(t *testing.T) {
	reserved := func(g solver.GPU) solver.GPU {
		g.Reserved = true
		return g
	}
	recent := reserved(migGPU(1, "1g.10gb@0"))
	recent.LastChanged = t0.Add(-30 * time.Second)
	onlyMIG := []solver.Demand{{Resource: mig1g, Count: 1, Weight: 1}}
	for name, tc := range map[string]ruleCase{
		"a free instance on a reserved GPU serves no one": {
			nodes: []solver.Node{
				node("a", optedIn, gpus(reserved(migGPU(0, "1g.10gb@0*", "1g.10gb@1")))),
				node("b", optedIn, gpus(migGPU(0, "3g.40gb@0*", "3g.40gb@4*"))),
			},
			pods: []*corev1.Pod{pod("p", mig1g, "1")},
			want: map[string]string{"p": "none: 1 is reserved for a pod waiting for several GPUs on one node"},
		},
		"an idle whole reserved GPU serves no one, and is left whole": {
			nodes:   []solver.Node{node("a", optedIn, gpus(reserved(wholeGPUOf(0, notInUse)), wholeGPUOf(1, notInUse)))},
			pods:    []*corev1.Pod{pod("p", mig3g, "1"), pod("q", wholeGPU, "1")},
			want:    map[string]string{"p": "reshape a/1", "q": "none: reserved"},
			changed: map[string][]string{"a/1": nil},
		},
		"an idle reserved MIG GPU goes whole, reclaim off, no whole-GPU demand": {
			nodes:   []solver.Node{node("a", optedIn, gpus(reserved(migGPU(0, "1g.10gb@0", "3g.40gb@4")), migGPU(1, "1g.10gb@0")))},
			mix:     onlyMIG,
			changed: map[string][]string{"a/0": {"MIG disabled"}},
		},
		"not with an instance in use, nor inside its cooldown, nor frozen": {
			nodes: []solver.Node{
				node("a", optedIn, gpus(reserved(migGPU(0, "1g.10gb@0*", "3g.40gb@4")), recent)),
				node("b", optedIn, gpus(reserved(migGPU(0, "1g.10gb@0"))), frozen("agent applying")),
			},
			mix: onlyMIG,
		},
	} {
		t.Run(name, func(t *testing.T) { runRule(t, tc) })
	}
}
