package solver_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/planner/solver"
)

// replicas gives a node a shared 1g.10gb's free replicas.
func replicas(gpu, start int, res corev1.ResourceName, free int64) nodeOpt {
	return func(n *solver.Node) {
		n.Replicas = append(n.Replicas, solver.Replicas{GPU: gpu, Profile: "1g.10gb", Start: start, Resource: res, Free: free})
	}
}

// TestReplicas: a shared instance that pods use serves pods from its free
// replicas, as the scheduler does, before any change is planned; the
// round takes the replicas it hands out; the GPU under a shared instance
// in use is never changed, whatever its replicas.
func TestReplicas(t *testing.T) {
	const mig1gShared = "nvidia.com/mig-1g.10gb.shared"
	// GPU 0 of node "s": one shared 1g.10gb in use, the rest of the GPU
	// empty, which the planner could carve a 1g.10gb from.
	shared := func(opts ...nodeOpt) solver.Node {
		return node("s", optedIn, gpus(migGPU(0, "1g.10gb@6*")), opts...)
	}
	// The same with the shared 1g.10gb idle.
	idle := func(opts ...nodeOpt) solver.Node {
		return node("s", optedIn, gpus(migGPU(0, "1g.10gb@6")), opts...)
	}
	for _, tc := range []struct {
		name    string
		nodes   []solver.Node
		pending []*corev1.Pod
		// want is each pod's outcome; changed the GPUs changed.
		want    []string
		changed []string
	}{
		{
			name:    "a free replica serves the pod, nothing changes",
			nodes:   []solver.Node{shared(replicas(0, 6, mig1g, 1))},
			pending: []*corev1.Pod{pod("p", mig1g, "1")},
			want:    []string{"existing s/0"},
		},
		{
			name:    "the round takes the replica: the next pod gets an instance made",
			nodes:   []solver.Node{shared(replicas(0, 6, mig1g, 1))},
			pending: []*corev1.Pod{with(pod("p", mig1g, "1"), age(2*time.Minute)), pod("q", mig1g, "1")},
			want:    []string{"existing s/0", "reshape s/0"},
			changed: []string{"s/0"},
		},
		{
			name:    "two replicas for a pod asking for two",
			nodes:   []solver.Node{shared(replicas(0, 6, mig1g, 3))},
			pending: []*corev1.Pod{pod("p", mig1g, "2")},
			want:    []string{"existing s/0,s/0"},
		},
		{
			name:    "fewer replicas than the pod asks for: planned as before",
			nodes:   []solver.Node{shared(replicas(0, 6, mig1g, 1))},
			pending: []*corev1.Pod{pod("p", mig1g, "2")},
			want:    []string{"reshape s/0,s/0"},
			changed: []string{"s/0"},
		},
		{
			name:    "a renamed resource no model offers, served by its replicas",
			nodes:   []solver.Node{shared(replicas(0, 6, mig1gShared, 1))},
			pending: []*corev1.Pod{pod("p", mig1gShared, "1")},
			want:    []string{"existing s/0"},
		},
		{
			name:    "replicas of a node the pod may not land on serve nothing",
			nodes:   []solver.Node{shared(replicas(0, 6, mig1g, 1)), node("t", optedIn, gpus(migGPU(0)), labeled("pool", "b"))},
			pending: []*corev1.Pod{with(pod("p", mig1g, "1"), selector("pool", "b"))},
			want:    []string{"reshape t/0"},
			changed: []string{"t/0"},
		},
		{
			name:    "an idle shared instance serves a pod asking for two",
			nodes:   []solver.Node{idle(replicas(0, 6, mig1g, 2))},
			pending: []*corev1.Pod{pod("p", mig1g, "2")},
			want:    []string{"existing s/0,s/0"},
		},
		{
			name:    "a replica handed out keeps the idle instance from a reshape",
			nodes:   []solver.Node{idle(replicas(0, 6, mig1g, 2))},
			pending: []*corev1.Pod{with(pod("p", mig1g, "1"), age(2*time.Minute)), pod("q", mig7g, "1")},
			want:    []string{"existing s/0", "none: "},
		},
		{
			name:  "the idle instance handed out as a device takes a replica",
			nodes: []solver.Node{idle(replicas(0, 6, mig1g, 2))},
			pending: []*corev1.Pod{
				with(pod("p", mig1g, "1", mig2g, "1"), age(3*time.Minute)),
				with(pod("q", mig1g, "1"), age(2*time.Minute)),
				pod("r", mig1g, "1"),
			},
			want:    []string{"reshape s/0,s/0", "existing s/0", "reshape s/0"},
			changed: []string{"s/0"},
		},
		{
			name:    "the GPU of a shared instance in use is never changed, replicas free",
			nodes:   []solver.Node{shared(replicas(0, 6, mig1g, 1))},
			pending: []*corev1.Pod{pod("p", mig7g, "1")},
			want:    []string{"none: "},
		},
		{
			name:    "nor with every replica in use",
			nodes:   []solver.Node{shared()},
			pending: []*corev1.Pod{pod("p", mig7g, "1")},
			want:    []string{"none: "},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl, err := solver.New(solver.DefaultPolicy())
			if err != nil {
				t.Fatal(err)
			}
			res, err := pl.Plan(snapshot(tc.nodes, tc.pending...))
			if err != nil {
				t.Fatal(err)
			}
			for i, pp := range res.Pods {
				got := outcome(pp)
				if strings.HasPrefix(tc.want[i], "none: ") && strings.HasPrefix(got, "none: ") {
					continue
				}
				if got != tc.want[i] {
					t.Errorf("pod %s: %q, want %q", pp.Pod, got, tc.want[i])
				}
			}
			var changed []string
			for _, nc := range res.Nodes {
				for _, g := range nc.GPUs {
					changed = append(changed, fmt.Sprintf("%s/%d", nc.Node, g.Index))
				}
			}
			if strings.Join(changed, " ") != strings.Join(tc.changed, " ") {
				t.Errorf("changed GPUs %v, want %v", changed, tc.changed)
			}

			// The webhook's question gets the round's first answer.
			sup, err := pl.NewSupplier(snapshot(tc.nodes))
			if err != nil {
				t.Fatal(err)
			}
			got := outcome(sup.CanSupply(tc.pending[0]))
			if strings.HasPrefix(tc.want[0], "none: ") {
				if !strings.HasPrefix(got, "none: ") {
					t.Errorf("CanSupply = %q, want none", got)
				}
			} else if got != tc.want[0] {
				t.Errorf("CanSupply = %q, want %q", got, tc.want[0])
			}
		})
	}
}
