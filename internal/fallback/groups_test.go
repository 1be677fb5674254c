package fallback

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
