package schedview

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

func TestNodeFromAPI(t *testing.T) {
	n := node("n1", alloc{mig1g10: 7, mig2g20: 0, gpu: 1},
		labeled("pool", "a"),
		tainted("hard", corev1.TaintEffectNoSchedule),
		tainted("soft", corev1.TaintEffectPreferNoSchedule),
		tainted("evict", corev1.TaintEffectNoExecute),
		cordoned)
	want := Node{
		Name:          "n1",
		Labels:        map[string]string{corev1.LabelHostname: "n1", "pool": "a"},
		Unschedulable: true,
		Taints: []corev1.Taint{
			{Key: "hard", Value: "true", Effect: corev1.TaintEffectNoSchedule},
			{Key: "evict", Value: "true", Effect: corev1.TaintEffectNoExecute},
		},
		// cpu and memory are not GPU resources; a zero type is absent.
		Allocatable: alloc{mig1g10: 7, gpu: 1},
	}
	if diff := cmp.Diff(want, NodeFromAPI(n)); diff != "" {
		t.Errorf("NodeFromAPI (-want +got):\n%s", diff)
	}
}

func TestBuilderGroups(t *testing.T) {
	b := NewBuilder(nil)
	for i := range 100 {
		b.SetNode(NodeFromAPI(node(fmt.Sprintf("a%d", i), alloc{mig1g10: 7}, labeled("pool", "a"))))
	}
	b.SetNode(NodeFromAPI(node("b0", alloc{mig1g10: 7}, labeled("pool", "b"))))
	b.SetNode(NodeFromAPI(node("c0", alloc{mig2g20: 3}, labeled("pool", "a"))))
	b.SetNode(NodeFromAPI(node("d0", alloc{mig1g10: 7}, labeled("pool", "a"), cordoned)))
	b.SetNode(NodeFromAPI(node("e0", alloc{mig1g10: 7}, labeled("pool", "a"), tainted("x", corev1.TaintEffectNoSchedule))))
	s := b.Snapshot()
	if got, want := s.Nodes(), 104; got != want {
		t.Errorf("Nodes() = %d, want %d", got, want)
	}
	// Hostnames differ on every node and do not split groups.
	if got, want := s.Groups(), 5; got != want {
		t.Errorf("Groups() = %d, want %d", got, want)
	}

	if b.Snapshot() != s {
		t.Error("Snapshot() rebuilt without a change")
	}
	// The kubelet's status updates change nothing the decision reads.
	b.SetNode(NodeFromAPI(node("a7", alloc{mig1g10: 7}, labeled("pool", "a"))))
	if b.Snapshot() != s {
		t.Error("an update that changes nothing replaced the snapshot")
	}

	// Reconfigure a7 to 2g.20gb: it moves to c0's group.
	b.SetNode(NodeFromAPI(node("a7", alloc{mig2g20: 3}, labeled("pool", "a"))))
	s2 := b.Snapshot()
	if s2 == s {
		t.Fatal("an update did not replace the snapshot")
	}
	if got, want := s2.Groups(), 5; got != want {
		t.Errorf("Groups() after move = %d, want %d", got, want)
	}
	b.DeleteNode("b0")
	b.DeleteNode("b0") // deleting twice is harmless
	s3 := b.Snapshot()
	if got, want := s3.Groups(), 4; got != want {
		t.Errorf("Groups() after delete = %d, want %d", got, want)
	}
	if got, want := s3.Nodes(), 103; got != want {
		t.Errorf("Nodes() after delete = %d, want %d", got, want)
	}
	// Snapshots already handed out do not change.
	if got, want := s.Nodes(), 104; got != want || s.Groups() != 5 {
		t.Errorf("old snapshot changed: %d nodes, %d groups", s.Nodes(), s.Groups())
	}
}

func TestDevices(t *testing.T) {
	tests := map[string]struct {
		pod  *corev1.Pod
		want map[corev1.ResourceName]int64
	}{
		"none": {newPod(withContainer("a", both("cpu", "1"))), nil},
		"containers add up": {
			newPod(withContainer("a", both(string(mig1g10), "1", "cpu", "1")), withContainer("b", both(string(mig1g10), "2"))),
			alloc{mig1g10: 3},
		},
		"init max": {
			newPod(withInit("i", both(string(mig1g10), "4")), withContainer("a", both(string(mig1g10), "1"))),
			alloc{mig1g10: 4},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Devices(tc.pod)); diff != "" {
				t.Errorf("Devices (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHasGPURequest(t *testing.T) {
	tests := map[string]struct {
		pod  *corev1.Pod
		want bool
	}{
		"no containers":          {newPod(), false},
		"cpu only":               {newPod(withContainer("a", both("cpu", "1"))), false},
		"a MIG device":           {newPod(withContainer("a", both(string(mig1g10), "1"))), true},
		"a whole GPU in an init": {newPod(withInit("i", both(string(gpu), "1")), withContainer("a", both("cpu", "1"))), true},
		"zero of a GPU":          {newPod(withContainer("a", both(string(mig1g10), "0"))), false},
		"another vendor":         {newPod(withContainer("a", both("example.com/gpu", "1"))), false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := HasGPURequest(tc.pod); got != tc.want {
				t.Errorf("HasGPURequest() = %v, want %v", got, tc.want)
			}
			if got := len(Devices(tc.pod)) > 0; got != tc.want {
				t.Errorf("Devices() asks for GPUs: %v, want %v", got, tc.want)
			}
		})
	}
}

// A Node's API, when it names the same node with the same labels, is what
// the Builder matches pods' node affinity against, not a copy; any other
// is not used. Either way the affinity reads the node's own labels.
func TestBuilderKeepsTheAPINode(t *testing.T) {
	api := node("n1", alloc{mig1g10: 7}, labeled("pool", "a"))
	other := node("n1", alloc{mig1g10: 7}, labeled("pool", "b"))
	renamed := node("n2", alloc{mig1g10: 7}, labeled("pool", "a"))
	for _, tc := range []struct {
		name    string
		api     *corev1.Node
		kept    bool
		matches map[string]bool // pool value asked by the pod's affinity -> eligible
	}{
		{"none", nil, false, map[string]bool{"a": true, "b": false}},
		{"the same node", api, true, map[string]bool{"a": true, "b": false}},
		{"other labels", other, false, map[string]bool{"a": true, "b": false}},
		{"another name", renamed, false, map[string]bool{"a": true, "b": false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := NodeFromAPI(api)
			n.API = tc.api
			b := NewBuilder(nil)
			b.SetNode(n)
			s := b.Snapshot()
			_, m := s.Find("n1")
			if m == nil {
				t.Fatal("n1 not found")
			}
			if got := m.node == tc.api && tc.api != nil; got != tc.kept {
				t.Errorf("the member's Node is the API: %v, want %v", got, tc.kept)
			}
			for pool, want := range tc.matches {
				pod := &corev1.Pod{Spec: corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
						MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "pool", Operator: corev1.NodeSelectorOpIn, Values: []string{pool}}},
					}}}}}}}
				if got := s.EligibleNodes(NewFilter(pod, s)) == 1; got != want {
					t.Errorf("a pod for pool %s eligible: %v, want %v", pool, got, want)
				}
			}
		})
	}
}

// A node nothing uses shares its allocatable as its free devices; a use
// gives it a map of its own and leaves the allocatable as it was.
func TestMemberFreeSharesAnUnusedAllocatable(t *testing.T) {
	b := NewBuilder(nil)
	b.SetNode(NodeFromAPI(node("n1", alloc{mig1g10: 7, mig2g20: 3}, labeled("pool", "a"))))
	b.SetPod("ns/cpu", "n1", alloc{corev1.ResourceCPU: 4})
	same := func(m *Member) bool {
		return reflect.ValueOf(m.Free()).UnsafePointer() == reflect.ValueOf(m.Allocatable()).UnsafePointer()
	}
	_, m := b.Snapshot().Find("n1")
	if m == nil || !same(m) {
		t.Fatal("an unused node's free devices are a copy of its allocatable")
	}
	b.SetPod("ns/p", "n1", alloc{mig1g10: 2})
	_, m = b.Snapshot().Find("n1")
	if same(m) {
		t.Fatal("a used node's free devices are its allocatable")
	}
	if diff := cmp.Diff(alloc{mig1g10: 5, mig2g20: 3}, alloc(m.Free())); diff != "" {
		t.Errorf("free (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(alloc{mig1g10: 7, mig2g20: 3}, alloc(m.Allocatable())); diff != "" {
		t.Errorf("allocatable (-want +got):\n%s", diff)
	}
}
