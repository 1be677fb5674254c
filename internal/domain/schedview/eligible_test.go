package schedview

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

// TestEligibleGroups checks that EligibleGroups applies the same node
// filters as Decide, ignoring what the nodes offer.
func TestEligibleGroups(t *testing.T) {
	snap := snapshotOf(
		node("a0", alloc{mig1g10: 7}, labeled("pool", "a")),
		node("a1", nil, labeled("pool", "a")), // no GPU now: still a place to land
		node("b0", alloc{mig1g10: 7}, labeled("pool", "b")),
		node("c0", alloc{mig1g10: 7}, labeled("pool", "a"), cordoned),
		node("d0", alloc{gpu: 8}, labeled("pool", "a"), tainted("dedicated", corev1.TaintEffectNoSchedule)),
		node("e0", alloc{gpu: 8}, labeled("pool", "a"), tainted("soft", corev1.TaintEffectPreferNoSchedule)),
	)
	tolerateDedicated := corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpExists}
	tests := map[string]struct {
		pod  *corev1.Pod
		want []string
	}{
		"no constraints: every schedulable, untainted node": {
			pod:  newPod(),
			want: []string{"a0", "a1", "b0", "e0"},
		},
		"node selector": {
			pod:  newPod(withNodeSelector("pool", "b")),
			want: []string{"b0"},
		},
		"toleration opens the tainted node": {
			pod:  newPod(withToleration(tolerateDedicated)),
			want: []string{"a0", "a1", "b0", "d0", "e0"},
		},
		"required affinity": {
			pod: newPod(withRequiredAffinity(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: "pool", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}},
			}})),
			want: []string{"a0", "a1", "e0"},
		},
		"hostname selector names one member": {
			pod:  newPod(withNodeSelector(corev1.LabelHostname, "a1")),
			want: []string{"a1"},
		},
		"spec.nodeName ignores the cordon and NoSchedule taints": {
			pod:  newPod(onNode("c0")),
			want: []string{"c0"},
		},
		"selector nothing matches": {
			pod:  newPod(withNodeSelector("pool", "z")),
			want: nil,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var got []string
			seen := map[int]bool{}
			snap.EligibleGroups(tc.pod, func(group int, members []string) {
				if seen[group] {
					t.Errorf("group %d visited twice", group)
				}
				seen[group] = true
				if members == nil {
					members = snap.GroupNodes(group)
				}
				got = append(got, members...)
			})
			slices.Sort(got)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("eligible nodes (-want +got):\n%s", diff)
			}
		})
	}
}

// Eligible visits whole groups for a pod whose constraints do not name
// nodes and members otherwise; EligibleNodes and Find agree with it.
func TestEligible(t *testing.T) {
	snap := snapshotOf(
		node("a0", alloc{mig1g10: 7}, labeled("pool", "a")),
		node("a1", alloc{mig1g10: 7}, labeled("pool", "a")),
		node("c0", nil, labeled("pool", "a")), // no GPU
		node("t0", alloc{gpu: 8}, tainted("dedicated", corev1.TaintEffectNoSchedule)),
	)
	visit := func(pod *corev1.Pod, gpuOnly bool) (whole, each []string) {
		snap.Eligible(NewFilter(pod, snap), gpuOnly, func(g *Group) {
			for _, m := range g.Members() {
				whole = append(whole, m.Name())
			}
		}, func(_ *Group, m *Member) { each = append(each, m.Name()) })
		return whole, each
	}
	tests := map[string]struct {
		pod         *corev1.Pod
		gpuOnly     bool
		whole, each []string
		count       int
	}{
		"by group":                 {pod: newPod(), whole: []string{"a0", "a1", "c0"}, count: 3},
		"by group, GPU nodes only": {pod: newPod(), gpuOnly: true, whole: []string{"a0", "a1"}, count: 3},
		"by member":                {pod: newPod(withNodeSelector(corev1.LabelHostname, "a1")), each: []string{"a1"}, count: 1},
		"pinned to a tainted node": {pod: newPod(onNode("t0")), each: []string{"t0"}, count: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			whole, each := visit(tc.pod, tc.gpuOnly)
			slices.Sort(whole)
			if diff := cmp.Diff(tc.whole, whole); diff != "" {
				t.Errorf("whole groups (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.each, each); diff != "" {
				t.Errorf("members (-want +got):\n%s", diff)
			}
			if got := snap.EligibleNodes(NewFilter(tc.pod, snap)); got != tc.count {
				t.Errorf("EligibleNodes() = %d, want %d", got, tc.count)
			}
		})
	}
	g, m := snap.Find("t0")
	if m == nil || m.Name() != "t0" || !slices.Equal(g.Types(), []corev1.ResourceName{gpu}) || m.Allocatable()[gpu] != 8 {
		t.Errorf("Find(t0) = %v, %v", g, m)
	}
	if g, m := snap.Find("nope"); g != nil || m != nil {
		t.Errorf("Find(nope) = %v, %v", g, m)
	}
}

// NewAdmissionFilter lets a pod onto a node with the node lifecycle
// controller's not-ready or unreachable taints, which NewFilter (the
// scheduler's view, the planner's) keeps it off; every other filter is
// the same. The pod's tolerations are not written to.
func TestAdmissionFilter(t *testing.T) {
	snap := snapshotOf(
		node("ready", alloc{mig1g10: 7}),
		node("nr-ns", alloc{mig1g10: 7}, tainted(corev1.TaintNodeNotReady, corev1.TaintEffectNoSchedule)),
		node("nr-ne", alloc{mig1g10: 7}, tainted(corev1.TaintNodeNotReady, corev1.TaintEffectNoExecute)),
		node("ur", alloc{mig1g10: 7}, tainted(corev1.TaintNodeUnreachable, corev1.TaintEffectNoSchedule), tainted(corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute)),
		node("nr-dedicated", alloc{mig1g10: 7}, tainted(corev1.TaintNodeNotReady, corev1.TaintEffectNoSchedule), tainted("dedicated", corev1.TaintEffectNoSchedule)),
		node("pressure", alloc{mig1g10: 7}, tainted(corev1.TaintNodeDiskPressure, corev1.TaintEffectNoSchedule)),
		node("nr-cordoned", alloc{mig1g10: 7}, tainted(corev1.TaintNodeNotReady, corev1.TaintEffectNoSchedule), cordoned),
	)
	tests := map[string]struct {
		pod             *corev1.Pod
		sched, admitted []string
	}{
		"unpinned": {
			pod:      newPod(),
			sched:    []string{"ready"},
			admitted: []string{"nr-ne", "nr-ns", "ready", "ur"},
		},
		"pinned by hostname to a not-ready node": {
			pod:      newPod(withNodeSelector(corev1.LabelHostname, "nr-ns")),
			sched:    nil,
			admitted: []string{"nr-ns"},
		},
		"pinned by hostname to an unreachable node": {
			pod:      newPod(withNodeSelector(corev1.LabelHostname, "ur")),
			sched:    nil,
			admitted: []string{"ur"},
		},
		"spec.nodeName on a not-ready node (NoExecute)": {
			pod:      newPod(onNode("nr-ne")),
			sched:    nil,
			admitted: []string{"nr-ne"},
		},
		"another taint still filters": {
			pod:      newPod(withNodeSelector(corev1.LabelHostname, "nr-dedicated")),
			sched:    nil,
			admitted: nil,
		},
		"a pressure taint still filters": {
			pod:      newPod(withNodeSelector(corev1.LabelHostname, "pressure")),
			sched:    nil,
			admitted: nil,
		},
		"the cordon still filters": {
			pod:      newPod(withNodeSelector(corev1.LabelHostname, "nr-cordoned")),
			sched:    nil,
			admitted: nil,
		},
		"the pod's own tolerations still count": {
			pod:      newPod(withToleration(corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpExists})),
			sched:    []string{"ready"},
			admitted: []string{"nr-dedicated", "nr-ne", "nr-ns", "ready", "ur"},
		},
	}
	eligible := func(f *Filter) []string { return eligibleNames(snap, f) }
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			before := tc.pod.DeepCopy()
			if diff := cmp.Diff(tc.sched, eligible(NewFilter(tc.pod, snap))); diff != "" {
				t.Errorf("NewFilter: eligible nodes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.admitted, eligible(NewAdmissionFilter(tc.pod, snap))); diff != "" {
				t.Errorf("NewAdmissionFilter: eligible nodes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, tc.pod); diff != "" {
				t.Errorf("the pod changed (-before +after):\n%s", diff)
			}
		})
	}
}
