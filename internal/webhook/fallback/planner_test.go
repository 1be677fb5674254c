package fallback

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/schedview"
)

// fakePlanner answers by the largest type the pod needs: served[t] when
// the need has t, else not now and not later. It records the needs it was
// asked about.
type fakePlanner struct {
	served map[corev1.ResourceName]Served
	asked  []map[corev1.ResourceName]int64
}

func (f *fakePlanner) Serve(_ *corev1.Pod, need map[corev1.ResourceName]int64) Served {
	f.asked = append(f.asked, need)
	for _, t := range []corev1.ResourceName{mig7g80, mig4g40, mig3g40, mig2g20, mig1g10} {
		if need[t] > 0 {
			if s, ok := f.served[t]; ok {
				return s
			}
			return Served{Reason: "no GPU can take " + string(t)}
		}
	}
	return Served{}
}

var (
	reshapeOnA = Served{Now: true, Node: "a", Reshape: true}
	cooling    = Served{Later: true, Reason: "1 GPU is cooling down after a change"}
)

// manyContainers is a pod of n containers, the first gpus of which ask
// for one r each.
func manyContainers(n, gpus int, r corev1.ResourceName) *corev1.Pod {
	var opts []podOpt
	for i := range n {
		res := both("cpu", "10m")
		if i < gpus {
			res = both(string(r), "1")
		}
		opts = append(opts, withContainer(fmt.Sprintf("c%d", i), res))
	}
	return newPod(opts...)
}

// The decision in reshape-first mode (a planner) and in existence mode
// from the agents' reports of held devices: a type is rewritten only to
// one that can run now (free on one node, or served by the planner in its
// next round), never to a busy one over a free one down the chain, and a
// pod the planner serves at its size is not cut. Node a is one node whose
// agent reports held devices.
func TestDecideCountsWhatRunsNow(t *testing.T) {
	tests := map[string]struct {
		alloc, held alloc
		pod         *corev1.Pod
		mode        Mode
		// planner nil: reshape-first off.
		planner *fakePlanner
		want    Outcome
		writes  []Rewrite
		planned bool
		// warning must contain these; no warning when empty.
		warning []string
	}{
		"a busy type in the planner's cooldown, a smaller one free: falls back at once": {
			alloc: alloc{mig3g40: 1, mig1g10: 4}, held: alloc{mig3g40: 1},
			pod:     gpuPod(mig3g40, "1"),
			planner: &fakePlanner{served: map[corev1.ResourceName]Served{mig3g40: cooling}},
			want:    OutcomeRewritten, writes: []Rewrite{{mig3g40, mig1g10, ReasonExhausted}},
		},
		"a busy type in the planner's cooldown, nothing free: left as asked and warned": {
			alloc: alloc{mig3g40: 1, mig1g10: 4}, held: alloc{mig3g40: 1, mig1g10: 4},
			pod:     gpuPod(mig3g40, "1"),
			planner: &fakePlanner{served: map[corev1.ResourceName]Served{mig3g40: cooling}},
			want:    OutcomeUnchanged,
			warning: []string{"nvidia.com/mig-3g.40gb was left as asked", "the planner cannot serve it now (1 GPU is cooling down after a change)"},
		},
		"a busy type the planner reshapes another GPU for: left as asked, for the planner": {
			alloc: alloc{mig3g40: 1, mig1g10: 4}, held: alloc{mig3g40: 1},
			pod:     gpuPod(mig3g40, "1"),
			planner: &fakePlanner{served: map[corev1.ResourceName]Served{mig3g40: reshapeOnA}},
			want:    OutcomeUnchanged, planned: true,
		},
		"a busy type without the planner: left as asked and warned": {
			alloc: alloc{mig3g40: 1, mig1g10: 4}, held: alloc{mig3g40: 1},
			pod:     gpuPod(mig3g40, "1"),
			want:    OutcomeUnchanged,
			warning: []string{"nvidia.com/mig-3g.40gb was left as asked", "every 3g.40gb device on the nodes this pod may land on is in use"},
		},
		"the planner serves the asked size: not cut to a free smaller type": {
			alloc:   alloc{mig3g40: 1, mig1g10: 4},
			pod:     gpuPod(mig4g40, "1"),
			planner: &fakePlanner{served: map[corev1.ResourceName]Served{mig4g40: reshapeOnA}},
			want:    OutcomeUnchanged, planned: true,
		},
		"every GPU busy but a 1g.10gb: rewritten to it, not to the busy 2g.20gb": {
			alloc: alloc{mig2g20: 2, mig1g10: 3}, held: alloc{mig2g20: 2, mig1g10: 2},
			pod:     gpuPod(mig3g40, "1"),
			planner: &fakePlanner{},
			want:    OutcomeRewritten, writes: []Rewrite{{mig3g40, mig1g10, ReasonAbsent}},
		},
		"the same without the planner": {
			alloc: alloc{mig2g20: 2, mig1g10: 3}, held: alloc{mig2g20: 2, mig1g10: 2},
			pod:  gpuPod(mig3g40, "1"),
			want: OutcomeRewritten, writes: []Rewrite{{mig3g40, mig1g10, ReasonAbsent}},
		},
		"the same in capacity mode": {
			alloc: alloc{mig2g20: 2, mig1g10: 3}, held: alloc{mig2g20: 2, mig1g10: 2},
			pod: gpuPod(mig3g40, "1"), mode: ModeCapacity,
			want: OutcomeRewritten, writes: []Rewrite{{mig3g40, mig1g10, ReasonAbsent}},
		},
		"the planner makes a nearer type than the free one: rewritten to it, for the planner": {
			alloc: alloc{mig3g40: 1, mig1g10: 4}, held: alloc{mig3g40: 1},
			pod:     gpuPod(mig4g40, "1"),
			planner: &fakePlanner{served: map[corev1.ResourceName]Served{mig3g40: reshapeOnA}},
			want:    OutcomeRewritten, writes: []Rewrite{{mig4g40, mig3g40, ReasonAbsent}}, planned: true,
		},
		"absent, nothing runs now, the planner can make it later: left as asked and warned": {
			alloc: alloc{mig3g40: 1}, held: alloc{mig3g40: 1},
			pod:     gpuPod(mig4g40, "1"),
			planner: &fakePlanner{served: map[corev1.ResourceName]Served{mig4g40: cooling}},
			want:    OutcomeUnchanged,
			warning: []string{"nvidia.com/mig-4g.40gb was left as asked: no node the pod may land on has it", "waits until the planner makes one"},
		},
		"absent, nothing runs now, the planner never could: the nearest type that exists, warned": {
			alloc: alloc{mig3g40: 1}, held: alloc{mig3g40: 1},
			pod:     gpuPod(mig4g40, "1"),
			planner: &fakePlanner{},
			want:    OutcomeRewritten, writes: []Rewrite{{mig4g40, mig3g40, ReasonAbsent}},
			warning: []string{"rewritten to nvidia.com/mig-3g.40gb, the nearest type that exists", "waits until a 3g.40gb device is free"},
		},
		"500 containers, two asking for a 4g.40gb: not cut to the one 3g.40gb a node has": {
			alloc: alloc{mig3g40: 1, mig1g10: 7},
			pod:   manyContainers(500, 2, mig4g40),
			want:  OutcomeRewritten, writes: []Rewrite{{mig4g40, mig1g10, ReasonAbsent}},
		},
		"the same, with the planner": {
			alloc:   alloc{mig3g40: 1, mig1g10: 7},
			pod:     manyContainers(500, 2, mig4g40),
			planner: &fakePlanner{},
			want:    OutcomeRewritten, writes: []Rewrite{{mig4g40, mig1g10, ReasonAbsent}},
		},
		"the same, everything held: the type that holds two, warned": {
			alloc: alloc{mig3g40: 1, mig1g10: 7}, held: alloc{mig3g40: 1, mig1g10: 7},
			pod:  manyContainers(500, 2, mig4g40),
			want: OutcomeRewritten, writes: []Rewrite{{mig4g40, mig1g10, ReasonAbsent}},
			warning: []string{"every 1g.10gb device on the nodes this pod may land on is in use"},
		},
		"500 containers, one asking for a 4g.40gb, the 3g.40gb busy: a free 1g.10gb": {
			alloc: alloc{mig3g40: 1, mig1g10: 7}, held: alloc{mig3g40: 1},
			pod:     manyContainers(500, 1, mig4g40),
			planner: &fakePlanner{},
			want:    OutcomeRewritten, writes: []Rewrite{{mig4g40, mig1g10, ReasonAbsent}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b := schedview.NewBuilder(nil)
			b.SetNode(schedview.NodeFromAPI(node("a", tc.alloc)))
			b.SetPod("agent-reported:a", "a", tc.held)
			mode := tc.mode
			if mode == ModeCapacity {
				b.SetPod("agent-reported:a", "a", nil)
				b.SetPod("default/holder", "a", tc.held)
			}
			d, err := NewDecider(Options{Policy: DefaultPolicy(), Mode: mode})
			if err != nil {
				t.Fatal(err)
			}
			var p Planner
			if tc.planner != nil {
				p = tc.planner
			}
			got := d.DecideWith(context.Background(), tc.pod, b.Snapshot(), p)
			if got.Outcome != tc.want {
				t.Fatalf("outcome = %s, want %s (rewrites %v, warnings %q)", got.Outcome, tc.want, got.Rewrites, got.Warnings)
			}
			if diff := cmp.Diff(tc.writes, got.Rewrites); diff != "" {
				t.Errorf("rewrites (-want +got):\n%s", diff)
			}
			if (got.Planned != nil) != tc.planned {
				t.Errorf("planned = %+v, want %v", got.Planned, tc.planned)
			}
			warnings := strings.Join(got.Warnings, "\n")
			for _, s := range tc.warning {
				if !strings.Contains(warnings, s) {
					t.Errorf("warnings %q do not contain %q", warnings, s)
				}
			}
			if len(tc.warning) == 0 && len(got.Warnings) > 0 {
				t.Errorf("unexpected warnings %q", got.Warnings)
			}
			if tc.planner != nil && len(tc.planner.asked) > maxPlannerAsks {
				t.Errorf("the planner was asked %d times, more than %d", len(tc.planner.asked), maxPlannerAsks)
			}
		})
	}
}

// onceNow serves the first question only, as when the bound on questions
// leaves a type decided later without the planner's word.
type onceNow struct{ n int }

func (o *onceNow) Serve(*corev1.Pod, map[corev1.ResourceName]int64) Served {
	o.n++
	return Served{Now: o.n == 1, Node: "a", Reshape: true}
}

// A choice that counts on the planner is asked about again with the pod's
// final need when a type decided after it changed that need; when the
// planner no longer serves it, the pod is decided without its word.
func TestDecideChecksThePlannedNeedAgain(t *testing.T) {
	b := schedview.NewBuilder(nil)
	b.SetNode(schedview.NodeFromAPI(node("a", alloc{mig3g40: 1, mig1g10: 4})))
	b.SetPod("agent-reported:a", "a", alloc{mig3g40: 1})
	d, err := NewDecider(Options{Policy: DefaultPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	pod := newPod(withContainer("x", both(string(mig4g40), "1")), withContainer("y", both(string(mig2g20), "1")))
	p := &onceNow{}
	got := d.DecideWith(context.Background(), pod, b.Snapshot(), p)
	if got.Planned != nil {
		t.Errorf("planned = %+v, want none: the final need was not served", got.Planned)
	}
	want := []Rewrite{{mig4g40, mig1g10, ReasonAbsent}, {mig2g20, mig1g10, ReasonAbsent}}
	if diff := cmp.Diff(want, got.Rewrites); diff != "" {
		t.Errorf("rewrites (-want +got):\n%s", diff)
	}
	if p.n != 3 {
		t.Errorf("the planner was asked %d times, want 3 (each type, then the final need)", p.n)
	}
}

// A pod's gpuShape needs what the pod needs, however its types are
// renamed: its containers summed, its init containers and sidecars kept.
func TestGPUShapeNeedsWhatThePodNeeds(t *testing.T) {
	pods := map[string]*corev1.Pod{
		"500 containers": manyContainers(500, 300, mig4g40),
		"two types in one container, a limit without a request": newPod(
			withContainer("a", both(string(mig2g20), "1", string(mig1g10), "2")),
			withContainer("b", corev1.ResourceRequirements{Limits: rl(string(mig1g10), "3")})),
		"init containers take the max": newPod(
			withInit("i1", both(string(mig2g20), "4")),
			withInit("i2", both(string(mig1g10), "5")),
			withContainer("main", both(string(mig2g20), "1", string(mig1g10), "1"))),
		"sidecars add up, before and after an init container": newPod(
			withSidecar("s1", both(string(mig1g10), "1")),
			withInit("i", both(string(mig1g10), "6", string(mig2g20), "1")),
			withSidecar("s2", both(string(mig2g20), "2")),
			withContainer("main", both(string(mig1g10), "2"))),
	}
	renames := []map[corev1.ResourceName]corev1.ResourceName{
		nil,
		{mig2g20: mig1g10},
		{mig1g10: mig2g20},
		{mig4g40: mig1g10},
		{mig2g20: gpu, mig1g10: gpu},
	}
	for name, pod := range pods {
		shape := gpuShape(pod)
		for _, to := range renames {
			if diff := cmp.Diff(podNeeds(pod, to), podNeeds(shape, to)); diff != "" {
				t.Errorf("%s renamed %v: needs (-pod +shape):\n%s", name, to, diff)
			}
		}
	}
}
