package planner

import (
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/migflex/migflex/test/bench/scale"
)

// BenchmarkDecide5000 is one round's decision on the scale benchmark's
// fleet (test/bench/scale): 5,000 opted-in nodes of eight H100s and 1,000
// pending pods, as the informers hand them over.
func BenchmarkDecide5000(b *testing.B) {
	o := testOptions(func(o *Options) { o.MaxNodesPerRound = 1 << 20 })
	pl := mustPlanner(b, o)
	var nodes []*corev1.Node
	for i := range 5000 {
		n, err := scale.Node(i)
		if err != nil {
			b.Fatal(err)
		}
		n.UID = types.UID(n.Name)
		nodes = append(nodes, n)
	}
	var pods []*corev1.Pod
	for j := range 1000 {
		p := scale.Pod(j)
		p.UID = types.UID(p.Name)
		p.CreationTimestamp = metav1.NewTime(t0.Add(time.Duration(j) * time.Millisecond))
		p.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}}
		pods = append(pods, p)
	}
	m := newMemory(o.MixHalfLife)
	b.ResetTimer()
	for b.Loop() {
		if _, err := decide(o, pl, m, t0, nodes, pods); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHeap5000 says what the planner holds at 5,000 Nodes and 1,000
// pending pods and what one round throws away, the parts of its resident
// memory the scale benchmark (test/bench/scale) cannot tell apart: the
// Nodes as its informer keeps them (transformNode), the decoded
// annotations it keeps between rounds, and the garbage of a round after
// the first, which the Go collector lets the heap grow by before it
// collects (GOGC=100: up to the live heap again).
func BenchmarkHeap5000(b *testing.B) {
	live := func() float64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return float64(ms.HeapAlloc) / (1 << 20)
	}
	o := testOptions(func(o *Options) { o.MaxNodesPerRound = 1 << 20 })
	pl := mustPlanner(b, o)
	for b.Loop() {
		base := live()
		nodes := make([]*corev1.Node, 0, 5000)
		for i := range 5000 {
			n, err := scale.Node(i)
			if err != nil {
				b.Fatal(err)
			}
			n.UID = types.UID(n.Name)
			slim, err := transformNode(n)
			if err != nil {
				b.Fatal(err)
			}
			nodes = append(nodes, slim.(*corev1.Node))
		}
		withNodes := live()
		var pods []*corev1.Pod
		for j := range 1000 {
			p := scale.Pod(j)
			p.UID = types.UID(p.Name)
			p.CreationTimestamp = metav1.NewTime(t0.Add(time.Duration(j) * time.Millisecond))
			p.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
				Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}}
			pods = append(pods, p)
		}
		m := newMemory(o.MixHalfLife)
		if _, err := decide(o, pl, m, t0, nodes, pods); err != nil {
			b.Fatal(err)
		}
		withDecoded := live()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if _, err := decide(o, pl, m, t0, nodes, pods); err != nil {
			b.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		b.ReportMetric(withNodes-base, "nodes-MiB")
		b.ReportMetric(withDecoded-withNodes, "pods+decoded-MiB")
		b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/(1<<20), "round-alloc-MiB")
		runtime.KeepAlive(nodes)
		runtime.KeepAlive(m)
	}
}
