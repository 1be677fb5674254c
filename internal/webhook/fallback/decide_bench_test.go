package fallback

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/schedview"
)

// Capacity mode at the benchmark issue's scale: 5,000 8-GPU nodes and
// 50,000 pods bound to them. bench_test.go covers existence mode.

const (
	capacityNodes = 5000
	capacityPods  = 50000
)

// capacityLayouts are per node (8 GPUs): 7x1g.10gb each, 3x2g.20gb +
// 1g.10gb each, 2x3g.40gb each.
var capacityLayouts = []map[corev1.ResourceName]int64{
	{mig1g10: 56},
	{mig2g20: 24, mig1g10: 8},
	{mig3g40: 16},
}

func capacityNodeList() []schedview.Node {
	nodes := make([]schedview.Node, capacityNodes)
	for i := range nodes {
		nodes[i] = schedview.NodeFromAPI(node(fmt.Sprintf("gpu-%04d", i), capacityLayouts[i%len(capacityLayouts)],
			labeled("pool", fmt.Sprintf("pool-%d", i%10)),
			labeled("topology.kubernetes.io/zone", fmt.Sprintf("z%d", i%3))))
	}
	return nodes
}

// capacityPodsOf binds one-device pods: every 3g.40gb first (so that type
// is exhausted), then 1g.10gb round-robin.
func capacityPodsOf(nodes []schedview.Node) []podBinding {
	var out []podBinding
	for _, n := range nodes {
		for range n.Allocatable[mig3g40] {
			out = append(out, podBinding{node: n.Name, r: mig3g40})
		}
	}
	for i := 0; len(out) < capacityPods; i++ {
		n := nodes[i%len(nodes)]
		if n.Allocatable[mig1g10] > 0 {
			out = append(out, podBinding{node: n.Name, r: mig1g10})
		}
	}
	return out[:capacityPods]
}

type podBinding struct {
	node string
	r    corev1.ResourceName
}

func capacityBuilder(nodes []schedview.Node, pods []podBinding) *schedview.Builder {
	b := schedview.NewBuilder(nil)
	for _, n := range nodes {
		b.SetNode(n)
	}
	for i, p := range pods {
		b.SetPod(fmt.Sprintf("ns/p%d", i), p.node, map[corev1.ResourceName]int64{p.r: 1})
	}
	return b
}

func BenchmarkDecideCapacity(b *testing.B) {
	nodes := capacityNodeList()
	snap := capacityBuilder(nodes, capacityPodsOf(nodes)).Snapshot()
	d, err := NewDecider(Options{Policy: DefaultPolicy(), Mode: ModeCapacity})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("%d nodes in %d groups, %d pods", snap.Nodes(), snap.Groups(), capacityPods)
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		want Outcome
	}{
		"free":         {gpuPod(mig2g20, "1"), OutcomeUnchanged},
		"exhausted":    {gpuPod(mig3g40, "1"), OutcomeRewritten},
		"absent":       {gpuPod(mig4g40, "1"), OutcomeRewritten},
		"nodeSelector": {gpuPod(mig3g40, "1", withNodeSelector("pool", "pool-3")), OutcomeRewritten},
		"denied":       {gpuPod(mig7g80, "1", withAnnotation(AnnotationPolicy, string(PodPolicyNone))), OutcomeDenied},
	} {
		// A benchmark of the wrong path measures nothing.
		if got := d.Decide(tc.pod, snap).Outcome; got != tc.want {
			b.Fatalf("%s: outcome %s, want %s", name, got, tc.want)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				d.Decide(tc.pod, snap)
			}
		})
	}
}

// BenchmarkSnapshotFromList is what a list per admission pays on top of the
// list itself: grouping every node (and counting every pod) again.
func BenchmarkSnapshotFromList(b *testing.B) {
	nodes := capacityNodeList()
	pods := capacityPodsOf(nodes)
	b.Run("5000 nodes", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			schedview.NewSnapshot(nodes)
		}
	})
	b.Run("5000 nodes + 50000 pods", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			capacityBuilder(nodes, pods).Snapshot()
		}
	})
}
