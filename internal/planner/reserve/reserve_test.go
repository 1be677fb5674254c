package reserve_test

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/planner/reserve"
	"github.com/migflex/migflex/internal/planner/solver"
)

var t0 = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

const model = "H100-SXM5-80GB"

// idle is a whole GPU no pod holds.
func idle(i int) solver.GPU { return solver.GPU{Index: i, Model: model} }

// busyFor is a whole GPU whose pod ends d from t0.
func busyFor(i int, d time.Duration) solver.GPU {
	return solver.GPU{Index: i, Model: model, InUse: true, Run: &solver.Run{Until: t0.Add(d)}}
}

// migBusyFor is a MIG GPU with a free instance and instances in use
// ending d from t0 each.
func migBusyFor(i int, ds ...time.Duration) solver.GPU {
	g := solver.GPU{Index: i, Model: model, MigEnabled: true, Instances: []solver.Instance{{Profile: "1g.10gb", Start: 6}}}
	for j, d := range ds {
		g.Instances = append(g.Instances, solver.Instance{Profile: "1g.10gb", Start: j, InUse: true, Run: &solver.Run{Until: t0.Add(d)}})
	}
	return g
}

// eightOf is a node of eight GPUs: the given ones, then idle ones.
func eightOf(name string, gs ...solver.GPU) solver.Node {
	for i := len(gs); i < 8; i++ {
		gs = append(gs, idle(i))
	}
	return solver.Node{Node: schedview.Node{Name: name, Labels: map[string]string{corev1.LabelHostname: name}}, OptedIn: true, GPUs: gs}
}

// allBusy is eight GPUs whose pods end d from t0.
func allBusy(d time.Duration) []solver.GPU {
	var out []solver.GPU
	for i := range 8 {
		out = append(out, busyFor(i, d))
	}
	return out
}

// busyThen is eight GPUs, the i-th ending ds[i] from t0.
func busyThen(ds ...time.Duration) []solver.GPU {
	var out []solver.GPU
	for i, d := range ds {
		out = append(out, busyFor(i, d))
	}
	return out
}

func gpusPod(name string, n int, waited time.Duration, opts ...func(*corev1.Pod)) *corev1.Pod {
	q := resource.MustParse(fmt.Sprint(n))
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", CreationTimestamp: metav1.NewTime(t0.Add(-waited))},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{"nvidia.com/gpu": q}, Limits: corev1.ResourceList{"nvidia.com/gpu": q}}}}}}
	for _, o := range opts {
		o(p)
	}
	return p
}

func prio(v int32) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Spec.Priority = &v } }

func onNode(name string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: name}
	}
}

func mins(m int) time.Duration { return time.Duration(m) * time.Minute }

// got renders reservations as "pod@node[gpus] ready+R deadline+D", times
// in minutes from t0.
func got(rs []reserve.Reservation) []string {
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%s@%s%v ready+%v deadline+%v", strings.TrimPrefix(r.Pod, "ns/"), r.Node, r.GPUs,
			r.Ready.Sub(t0).Minutes(), r.Deadline.Sub(t0).Minutes()))
	}
	return out
}

// TestDecide: new reservations from a snapshot (default policy: after 5
// minutes' wait, at most 4, GPUs expected free within 10 minutes, lapsing
// 2 minutes after).
func TestDecide(t *testing.T) {
	cooling := migBusyFor(0)
	cooling.LastChanged = t0.Add(-time.Minute)
	lindy := solver.GPU{Index: 0, Model: model, InUse: true, Run: &solver.Run{Since: t0.Add(-mins(3))}}
	unknown := solver.GPU{Index: 0, Model: model, InUse: true}
	for _, tc := range []struct {
		name  string
		nodes []solver.Node
		pods  []*corev1.Pod
		pol   func(*reserve.Policy)
		want  []string
	}{{
		name:  "waited less than After: none",
		nodes: []solver.Node{eightOf("a", busyFor(0, mins(1)))},
		pods:  []*corev1.Pod{gpusPod("p", 8, mins(4))},
	}, {
		name:  "the node whose eighth GPU frees soonest",
		nodes: []solver.Node{eightOf("a", busyFor(0, mins(6))), eightOf("b", allBusy(mins(3))...), eightOf("c", busyFor(3, mins(4)))},
		pods:  []*corev1.Pod{gpusPod("p", 8, mins(5))},
		want:  []string{"p@b[0 1 2 3 4 5 6 7] ready+3 deadline+5"},
	}, {
		name:  "equally soon: the one whose other GPUs sit idle least",
		nodes: []solver.Node{eightOf("a", busyFor(0, mins(3))), eightOf("b", allBusy(mins(3))...)},
		pods:  []*corev1.Pod{gpusPod("p", 8, mins(5))},
		want:  []string{"p@b[0 1 2 3 4 5 6 7] ready+3 deadline+5"},
	}, {
		name:  "no node within Lead: none",
		nodes: []solver.Node{eightOf("a", busyFor(0, mins(11)))},
		pods:  []*corev1.Pod{gpusPod("p", 8, mins(10))},
	}, {
		name:  "a longer Lead",
		nodes: []solver.Node{eightOf("a", busyFor(0, mins(11)))},
		pods:  []*corev1.Pod{gpusPod("p", 8, mins(10))},
		pol:   func(p *reserve.Policy) { p.Lead = mins(20) },
		want:  []string{"p@a[0 1 2 3 4 5 6 7] ready+11 deadline+13"},
	}, {
		name:  "waited longer than Lead: a lead as long as the wait",
		nodes: []solver.Node{eightOf("a", busyFor(0, mins(50)))},
		pods:  []*corev1.Pod{gpusPod("p", 8, time.Hour)},
		want:  []string{"p@a[0 1 2 3 4 5 6 7] ready+50 deadline+52"},
	}, {
		name:  "... not while another pod waits: it could use what the reservation withholds",
		nodes: []solver.Node{eightOf("a", busyFor(0, mins(50)))},
		pods:  []*corev1.Pod{gpusPod("p", 8, time.Hour), gpusPod("one", 1, mins(1))},
	}, {
		name:  "... a pod asking for several whole GPUs is no such pod",
		nodes: []solver.Node{eightOf("a", busyFor(0, mins(50)))},
		pods:  []*corev1.Pod{gpusPod("p", 8, time.Hour), gpusPod("four", 4, mins(1))},
		want:  []string{"p@a[0 1 2 3 4 5 6 7] ready+50 deadline+52"},
	}, {
		name:  "... not longer than the wait",
		nodes: []solver.Node{eightOf("a", busyFor(0, mins(61)))},
		pods:  []*corev1.Pod{gpusPod("p", 8, time.Hour)},
	}, {
		name:  "... nor than MaxLead",
		nodes: []solver.Node{eightOf("a", busyFor(0, mins(150)))},
		pods:  []*corev1.Pod{gpusPod("p", 8, 5*time.Hour)},
	}, {
		name:  "... a longer MaxLead",
		nodes: []solver.Node{eightOf("a", busyFor(0, mins(150)))},
		pods:  []*corev1.Pod{gpusPod("p", 8, 5*time.Hour)},
		pol:   func(p *reserve.Policy) { p.MaxLead = 3 * time.Hour },
		want:  []string{"p@a[0 1 2 3 4 5 6 7] ready+150 deadline+152"},
	}, {
		name:  "MaxLead under Lead: Lead alone",
		nodes: []solver.Node{eightOf("a", busyFor(0, mins(11)))},
		pods:  []*corev1.Pod{gpusPod("p", 8, time.Hour)},
		pol:   func(p *reserve.Policy) { p.MaxLead = 0 },
	}, {
		name:  "a pod of shorter lead that finds no node does not bar one of longer lead",
		nodes: []solver.Node{eightOf("a", busyFor(0, mins(30)))},
		pods:  []*corev1.Pod{gpusPod("old", 8, time.Hour), gpusPod("high", 8, mins(6), prio(1000))},
		want:  []string{"old@a[0 1 2 3 4 5 6 7] ready+30 deadline+32"},
	}, {
		name:  "four GPUs: the four that free soonest",
		nodes: []solver.Node{eightOf("a", busyThen(mins(9), mins(1), mins(8), mins(2), mins(7), mins(30), mins(30), mins(30))...)},
		pods:  []*corev1.Pod{gpusPod("p", 4, time.Hour)},
		want:  []string{"p@a[1 2 3 4] ready+8 deadline+10"},
	}, {
		name:  "a MIG GPU frees when its last instance ends",
		nodes: []solver.Node{eightOf("a", migBusyFor(0, mins(2), mins(6)))},
		pods:  []*corev1.Pod{gpusPod("p", 8, time.Hour)},
		want:  []string{"p@a[0 1 2 3 4 5 6 7] ready+6 deadline+8"},
	}, {
		name:  "... and its cooldown ends",
		nodes: []solver.Node{eightOf("a", cooling)},
		pods:  []*corev1.Pod{gpusPod("p", 8, time.Hour)},
		want:  []string{"p@a[0 1 2 3 4 5 6 7] ready+1 deadline+3"},
	}, {
		name:  "no expected end: as long again as it ran",
		nodes: []solver.Node{eightOf("a", lindy)},
		pods:  []*corev1.Pod{gpusPod("p", 8, time.Hour)},
		want:  []string{"p@a[0 1 2 3 4 5 6 7] ready+3 deadline+5"},
	}, {
		name:  "neither start nor end known: never expected free",
		nodes: []solver.Node{eightOf("a", unknown)},
		pods:  []*corev1.Pod{gpusPod("p", 8, time.Hour)},
	}, {
		name:  "... unless the pod needs fewer GPUs than the others",
		nodes: []solver.Node{eightOf("a", unknown)},
		pods:  []*corev1.Pod{gpusPod("p", 7, time.Hour)},
		want:  []string{"p@a[1 2 3 4 5 6 7] ready+0 deadline+2"},
	}, {
		name: "priority then age claim first, at most Max",
		nodes: []solver.Node{eightOf("a", busyFor(0, mins(1))), eightOf("b", busyFor(0, mins(2))), eightOf("c", busyFor(0, mins(3))),
			eightOf("d", busyFor(0, mins(4)))},
		pods: []*corev1.Pod{gpusPod("young", 8, mins(10)), gpusPod("old", 8, mins(20)), gpusPod("high", 8, mins(6), prio(1000))},
		pol:  func(p *reserve.Policy) { p.Max = 2 },
		want: []string{"high@a[0 1 2 3 4 5 6 7] ready+1 deadline+3", "old@b[0 1 2 3 4 5 6 7] ready+2 deadline+4"},
	}, {
		name:  "only where the pod may land",
		nodes: []solver.Node{eightOf("a", busyFor(0, mins(1))), eightOf("b", busyFor(0, mins(2)))},
		pods:  []*corev1.Pod{gpusPod("p", 8, time.Hour, onNode("b"))},
		want:  []string{"p@b[0 1 2 3 4 5 6 7] ready+2 deadline+4"},
	}, {
		name: "not opted in, frozen, or too small: none",
		nodes: func() []solver.Node {
			out, frozen, small := eightOf("a"), eightOf("b"), eightOf("c")
			out.OptedIn, frozen.Frozen, small.GPUs = false, "agent applying", small.GPUs[:4]
			return []solver.Node{out, frozen, small}
		}(),
		pods: []*corev1.Pod{gpusPod("p", 8, time.Hour)},
	}, {
		name:  "pods asking for one GPU, MIG, or GPUs and MIG: none",
		nodes: []solver.Node{eightOf("a")},
		pods: []*corev1.Pod{gpusPod("one", 1, time.Hour), func() *corev1.Pod {
			p := gpusPod("mixed", 2, time.Hour)
			p.Spec.Containers[0].Resources.Requests["nvidia.com/mig-1g.10gb"] = resource.MustParse("1")
			p.Spec.Containers[0].Resources.Limits["nvidia.com/mig-1g.10gb"] = resource.MustParse("1")
			return p
		}()},
	}, {
		name: "a dynamic DRA node's MIG GPU never frees whole: nothing there turns MIG off",
		nodes: func() []solver.Node {
			dyn := eightOf("a", migBusyFor(0))
			dyn.Dynamic = true
			return []solver.Node{dyn}
		}(),
		pods: []*corev1.Pod{gpusPod("p", 8, time.Hour)},
	}, {
		name: "... its whole GPUs do: reserved when k of them free",
		nodes: func() []solver.Node {
			dyn := eightOf("a", migBusyFor(0), busyFor(1, mins(2)))
			dyn.Dynamic = true
			return []solver.Node{dyn}
		}(),
		pods: []*corev1.Pod{gpusPod("p", 7, time.Hour)},
		want: []string{"p@a[1 2 3 4 5 6 7] ready+2 deadline+4"},
	}, {
		name:  "Max 0: none",
		nodes: []solver.Node{eightOf("a")},
		pods:  []*corev1.Pod{gpusPod("p", 8, time.Hour)},
		pol:   func(p *reserve.Policy) { p.Max = 0 },
	}} {
		t.Run(tc.name, func(t *testing.T) {
			pol := reserve.DefaultPolicy()
			if tc.pol != nil {
				tc.pol(&pol)
			}
			before := cloneNodes(tc.nodes)
			d := reserve.Decide(pol, reserve.Input{Now: t0, Nodes: tc.nodes, Pending: tc.pods, Cooldown: 2 * time.Minute})
			if diff := cmp.Diff(tc.want, got(d.Held)); diff != "" {
				t.Errorf("reservations (-want +got):\n%s", diff)
			}
			for _, r := range d.Held {
				if !r.Since.Equal(t0) {
					t.Errorf("%s made at %s, want now", r.Pod, r.Since)
				}
			}
			// A reservation takes nothing: the snapshot is as it was.
			if !reflect.DeepEqual(before, tc.nodes) {
				t.Error("Decide changed its input")
			}
		})
	}
}

func cloneNodes(ns []solver.Node) []solver.Node {
	out := slices.Clone(ns)
	for i := range out {
		out[i].GPUs = slices.Clone(out[i].GPUs)
		for j := range out[i].GPUs {
			out[i].GPUs[j].Instances = slices.Clone(out[i].GPUs[j].Instances)
		}
	}
	return out
}

// TestHeld: reservations held last time are kept while their pod waits,
// their node qualifies and their deadline is ahead, even when another node
// would now be better; they end when the pod is no longer pending, at
// their deadline, or when the node no longer qualifies. A node whose
// reservation lapsed is not reserved again for After.
func TestHeld(t *testing.T) {
	p := gpusPod("p", 8, time.Hour)
	q := gpusPod("q", 8, time.Hour)
	held := reserve.Reservation{Node: "a", GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}, Pod: "ns/p", Since: t0.Add(-mins(5)),
		Ready: t0.Add(mins(3)), Deadline: t0.Add(mins(5))}
	lapsed := held
	lapsed.Deadline = t0
	old := held
	old.Deadline = t0.Add(-mins(6))
	// a is now worse than b, which frees at once.
	nodes := []solver.Node{eightOf("a", busyFor(0, mins(8))), eightOf("b")}
	for _, tc := range []struct {
		name         string
		nodes        []solver.Node
		pods         []*corev1.Pod
		held, lapsed []reserve.Reservation
		want         []string
		ended        []string
		wantLapsed   []string
	}{{
		name:  "kept where it is",
		nodes: nodes, pods: []*corev1.Pod{p}, held: []reserve.Reservation{held},
		want: []string{"p@a[0 1 2 3 4 5 6 7] ready+3 deadline+5"},
	}, {
		name:  "the pod bound or went: ended, and another pod may take the node",
		nodes: nodes, pods: []*corev1.Pod{q}, held: []reserve.Reservation{held},
		want:  []string{"q@b[0 1 2 3 4 5 6 7] ready+0 deadline+2"},
		ended: []string{"ns/p: " + reserve.EndedNotPending},
	}, {
		name:  "at its deadline: lapsed; the pod may get another node, not this one",
		nodes: []solver.Node{eightOf("a"), eightOf("b", busyFor(0, mins(1)))}, pods: []*corev1.Pod{p}, held: []reserve.Reservation{lapsed},
		want:       []string{"p@b[0 1 2 3 4 5 6 7] ready+1 deadline+3"},
		ended:      []string{"ns/p: " + reserve.EndedLapsed},
		wantLapsed: []string{"a"},
	}, {
		name:  "a node that lapsed less than After ago stays barred",
		nodes: []solver.Node{eightOf("a")}, pods: []*corev1.Pod{p}, lapsed: []reserve.Reservation{lapsed},
		wantLapsed: []string{"a"},
	}, {
		name:  "... and is forgotten After its deadline",
		nodes: []solver.Node{eightOf("a")}, pods: []*corev1.Pod{p}, lapsed: []reserve.Reservation{old},
		want: []string{"p@a[0 1 2 3 4 5 6 7] ready+0 deadline+2"},
	}, {
		name:  "its node gone: ended",
		nodes: []solver.Node{eightOf("b", busyFor(0, mins(90)))}, pods: []*corev1.Pod{p}, held: []reserve.Reservation{held},
		ended: []string{"ns/p: " + reserve.EndedNode},
	}, {
		name: "its node now out of reach of the pod: ended",
		nodes: []solver.Node{func() solver.Node {
			n := eightOf("a")
			n.Unschedulable = true
			return n
		}()},
		pods: []*corev1.Pod{p}, held: []reserve.Reservation{held},
		ended: []string{"ns/p: " + reserve.EndedNode},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			d := reserve.Decide(reserve.DefaultPolicy(), reserve.Input{Now: t0, Nodes: tc.nodes, Pending: tc.pods, Cooldown: 2 * time.Minute,
				Held: tc.held, Lapsed: tc.lapsed})
			if diff := cmp.Diff(tc.want, got(d.Held)); diff != "" {
				t.Errorf("reservations (-want +got):\n%s", diff)
			}
			var ended, lapsedNodes []string
			for _, e := range d.Ended {
				ended = append(ended, e.Pod+": "+e.Why)
			}
			for _, r := range d.Lapsed {
				lapsedNodes = append(lapsedNodes, r.Node)
			}
			if diff := cmp.Diff(tc.ended, ended); diff != "" {
				t.Errorf("ended (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantLapsed, lapsedNodes); diff != "" {
				t.Errorf("lapsed (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPolicyValidate(t *testing.T) {
	if err := reserve.DefaultPolicy().Validate(); err != nil {
		t.Errorf("default policy: %v", err)
	}
	bad := reserve.Policy{After: -1, Max: -1, Lead: -1, MaxLead: -1, Grace: -1}
	err := bad.Validate()
	if err == nil {
		t.Fatal("a policy of negative values validated")
	}
	for _, w := range []string{"after", "max", "lead", "max lead", "grace"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%v does not name %s", err, w)
		}
	}
}
