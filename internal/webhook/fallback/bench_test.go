package fallback

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/schedview"
)

// benchCluster is 5,000 GPU nodes in 10 pools x 3 zones with three MIG
// layouts, a few tainted and cordoned, as a large mixed fleet looks.
func benchCluster(tb testing.TB) *schedview.Snapshot {
	tb.Helper()
	layouts := []alloc{{mig1g10: 7}, {mig2g20: 3, mig1g10: 1}, {mig3g40: 2}}
	b := schedview.NewBuilder(nil)
	for i := range 5000 {
		opts := []nodeOpt{
			labeled("pool", fmt.Sprintf("pool-%d", i%10)),
			labeled("topology.kubernetes.io/zone", fmt.Sprintf("z%d", i%3)),
			labeled("node.kubernetes.io/instance-type", "p5.48xlarge"),
		}
		if i%97 == 0 {
			opts = append(opts, cordoned)
		}
		if i%89 == 0 {
			opts = append(opts, tainted("maintenance", corev1.TaintEffectNoSchedule))
		}
		b.SetNode(schedview.NodeFromAPI(node(fmt.Sprintf("gpu-%04d", i), layouts[i%len(layouts)], opts...)))
	}
	return b.Snapshot()
}

func BenchmarkDecide(b *testing.B) {
	snap := benchCluster(b)
	d, err := NewDecider(Options{Policy: DefaultPolicy()})
	if err != nil {
		b.Fatal(err)
	}
	pods := map[string]*corev1.Pod{
		"no-gpu":            newPod(withContainer("a", both("cpu", "1"))),
		"present":           gpuPod(mig2g20, "1"),
		"rewrite":           gpuPod(mig4g40, "1"),
		"nodeSelector":      gpuPod(mig2g20, "1", withNodeSelector("pool", "pool-3")),
		"hostname selector": gpuPod(mig2g20, "1", withNodeSelector(corev1.LabelHostname, "gpu-4999")),
	}
	b.Logf("%d nodes in %d groups", snap.Nodes(), snap.Groups())
	for name, pod := range pods {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				d.Decide(pod, snap)
			}
		})
	}
}

func BenchmarkBuilderNodeUpdate(b *testing.B) {
	bl := schedview.NewBuilder(nil)
	for i := range 5000 {
		bl.SetNode(schedview.NodeFromAPI(node(fmt.Sprintf("gpu-%04d", i), alloc{mig1g10: 7}, labeled("pool", "p"))))
	}
	bl.Snapshot()
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		// One pod bound per iteration: the capacity-mode hot path.
		n++
		bl.SetPod(fmt.Sprintf("ns/p%d", n), fmt.Sprintf("gpu-%04d", n%5000), alloc{mig1g10: 1})
		bl.Snapshot()
	}
}
