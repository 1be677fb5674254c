package webhook

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/testsupport/testutil"
	"github.com/migflex/migflex/internal/webhook/fallback"
)

func runSource(t *testing.T, s *InformerSource) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	testutil.Eventually(t, "caches to sync", func() bool { _, ok := s.Snapshot(); return ok })
}

// decision is the rewrites a fresh decider makes for pod against the source.
func decision(t *testing.T, s SnapshotSource, mode fallback.Mode, pod *corev1.Pod) []fallback.Rewrite {
	t.Helper()
	d, err := fallback.NewDecider(fallback.Options{Policy: fallback.DefaultPolicy(), Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	snap, ok := s.Snapshot()
	if !ok {
		t.Fatal("source not ready")
	}
	return d.Decide(pod, snap).Rewrites
}

func TestInformerSourceFollowsNodes(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(gpuNode("a", map[corev1.ResourceName]int64{mig2g20: 3}))
	s, err := NewInformerSource(client, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Snapshot(); ok {
		t.Fatal("ready before Run")
	}
	runSource(t, s)
	pod := gpuPod("p", mig2g20, "1")
	if got := decision(t, s, fallback.ModeExistence, pod); got != nil {
		t.Fatalf("rewrites %v, want none", got)
	}

	// The device plugin reconfigures a: 2g.20gb drops to 0, 1g.10gb appears.
	n, err := client.CoreV1().Nodes().Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Allocatable[mig2g20] = resource.MustParse("0")
	n.Status.Allocatable[mig1g10] = resource.MustParse("7")
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []fallback.Rewrite{{From: mig2g20, To: mig1g10, Reason: fallback.ReasonAbsent}}
	testutil.Eventually(t, "the reconfiguration", func() bool {
		return cmp.Equal(want, decision(t, s, fallback.ModeExistence, pod))
	})

	// A new node with 2g.20gb, then it is cordoned, then deleted.
	if _, err := client.CoreV1().Nodes().Create(ctx, gpuNode("b", map[corev1.ResourceName]int64{mig2g20: 3}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "node b", func() bool { return decision(t, s, fallback.ModeExistence, pod) == nil })
	b, err := client.CoreV1().Nodes().Get(ctx, "b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.Spec.Unschedulable = true
	if _, err := client.CoreV1().Nodes().Update(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the cordon", func() bool { return cmp.Equal(want, decision(t, s, fallback.ModeExistence, pod)) })
	b.Spec.Unschedulable = false
	if _, err := client.CoreV1().Nodes().Update(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the uncordon", func() bool { return decision(t, s, fallback.ModeExistence, pod) == nil })
	if err := client.CoreV1().Nodes().Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the deletion", func() bool { return cmp.Equal(want, decision(t, s, fallback.ModeExistence, pod)) })
}

func TestInformerSourceCountsPods(t *testing.T) {
	ctx := context.Background()
	bound := func(name, node string, phase corev1.PodPhase) *corev1.Pod {
		p := gpuPod(name, mig2g20, "1")
		p.Spec.NodeName = node
		p.Status.Phase = phase
		return p
	}
	client := fake.NewClientset(
		gpuNode("a", map[corev1.ResourceName]int64{mig2g20: 2}),
		gpuNode("b", map[corev1.ResourceName]int64{mig1g10: 7}),
		bound("running", "a", corev1.PodRunning),
		// Terminal pods hold no device (the fake ignores the field selector,
		// so the handler's own check is exercised here).
		bound("done", "a", corev1.PodSucceeded),
	)
	s, err := NewInformerSource(client, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	runSource(t, s)
	pod := gpuPod("new", mig2g20, "1")
	if got := decision(t, s, fallback.ModeCapacity, pod); got != nil {
		t.Fatalf("1 of 2 used: rewrites %v, want none", got)
	}
	if _, err := client.CoreV1().Pods("default").Create(ctx, bound("second", "a", corev1.PodPending), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	exhausted := []fallback.Rewrite{{From: mig2g20, To: mig1g10, Reason: fallback.ReasonExhausted}}
	testutil.Eventually(t, "the second pod to count", func() bool { return cmp.Equal(exhausted, decision(t, s, fallback.ModeCapacity, pod)) })

	// The pod finishing frees its device.
	p, err := client.CoreV1().Pods("default").Get(ctx, "running", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodFailed
	if _, err := client.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the finished pod to be released", func() bool { return decision(t, s, fallback.ModeCapacity, pod) == nil })
	if _, err := client.CoreV1().Pods("default").Create(ctx, bound("third", "a", corev1.PodRunning), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the third pod to count", func() bool { return cmp.Equal(exhausted, decision(t, s, fallback.ModeCapacity, pod)) })
	if err := client.CoreV1().Pods("default").Delete(ctx, "third", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the deleted pod to be released", func() bool { return decision(t, s, fallback.ModeCapacity, pod) == nil })
}

func TestTransformNode(t *testing.T) {
	n := gpuNode("a", map[corev1.ResourceName]int64{mig1g10: 7})
	n.UID, n.ResourceVersion = "uid-a", "42"
	n.Labels["pool"] = "p"
	n.Annotations = map[string]string{"big": "annotation"}
	n.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
	n.Spec.Unschedulable = true
	n.Spec.PodCIDR = "10.0.0.0/24"
	n.Spec.Taints = []corev1.Taint{
		{Key: "hard", Value: "v", Effect: corev1.TaintEffectNoSchedule, TimeAdded: &metav1.Time{}},
		{Key: "soft", Effect: corev1.TaintEffectPreferNoSchedule},
	}
	n.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse("64")
	n.Status.Capacity = n.Status.Allocatable.DeepCopy()
	n.Status.Images = []corev1.ContainerImage{{Names: []string{"cuda"}, SizeBytes: 1 << 30}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}

	want := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "uid-a", ResourceVersion: "42",
			Labels: map[string]string{corev1.LabelHostname: "a", "pool": "p"}},
		Spec: corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{
			{Key: "hard", Value: "v", Effect: corev1.TaintEffectNoSchedule},
		}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{mig1g10: resource.MustParse("7")}},
	}
	got, err := TransformNode(n)
	if err != nil {
		t.Fatal(err)
	}
	eq := cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })
	if diff := cmp.Diff(want, got, eq); diff != "" {
		t.Errorf("TransformNode (-want +got):\n%s", diff)
	}
	again, err := TransformNode(got)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got, again, eq); diff != "" {
		t.Errorf("TransformNode is not idempotent (-once +twice):\n%s", diff)
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "a", Obj: n}
	if got, _ := TransformNode(tomb); !cmp.Equal(got, tomb, eq) {
		t.Errorf("TransformNode changed a tombstone")
	}
}

// Nodes with equal GPU counts share one list in the cache and one map in
// the decision's view; each still reads its own counts.
func TestTransformNodeSharesEqualAllocatable(t *testing.T) {
	same := func(a, b any) bool { return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer() }
	slim := func(name string, n int64) *corev1.Node {
		t.Helper()
		node := gpuNode(name, map[corev1.ResourceName]int64{mig1g10: n, mig2g20: 1})
		node.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse("64")
		out, err := TransformNode(node)
		if err != nil {
			t.Fatal(err)
		}
		return out.(*corev1.Node)
	}
	a, b, c := slim("a", 5), slim("b", 5), slim("c", 4)
	if !same(a.Status.Allocatable, b.Status.Allocatable) {
		t.Error("two Nodes with equal GPU counts hold two lists")
	}
	if same(a.Status.Allocatable, c.Status.Allocatable) {
		t.Error("Nodes with different GPU counts share a list")
	}
	for _, tc := range []struct {
		n    *corev1.Node
		want int64
	}{{a, 5}, {b, 5}, {c, 4}} {
		got := tc.n.Status.Allocatable[mig1g10]
		if got.Value() != tc.want || len(tc.n.Status.Allocatable) != 2 {
			t.Errorf("%s: allocatable %v, want %d of %s and one %s", tc.n.Name, tc.n.Status.Allocatable, tc.want, mig1g10, mig2g20)
		}
	}
	ca, cb := schedview.NodeFromAPI(a).Allocatable, schedview.NodeFromAPI(b).Allocatable
	if same(ca, cb) {
		t.Fatal("NodeFromAPI shares maps by itself; the check below proves nothing")
	}
	if !same(sharedCounts(ca), sharedCounts(cb)) {
		t.Error("two equal counts are kept twice")
	}
	if same(sharedCounts(ca), sharedCounts(schedview.NodeFromAPI(c).Allocatable)) {
		t.Error("different counts share a map")
	}
}

func TestTransformPod(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	p := gpuPod("p", mig2g20, "2")
	p.UID, p.ResourceVersion = "uid-p", "7"
	p.Annotations = map[string]string{"a": "b"}
	p.Spec.NodeName = "n1"
	p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "X", Value: "y"}}
	p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("1")
	p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "cpu-only", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
	}})
	p.Spec.InitContainers = []corev1.Container{{Name: "sidecar", RestartPolicy: &always, Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{mig1g10: resource.MustParse("1")},
	}}}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady}}

	want := &PodDevices{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "uid-p", ResourceVersion: "7"},
		Node:       "n1",
		// Sidecars add up with the main containers.
		Devices: map[corev1.ResourceName]int64{mig2g20: 2, mig1g10: 1},
	}
	got, err := TransformPod(p)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("TransformPod (-want +got):\n%s", diff)
	}
	again, _ := TransformPod(got)
	if diff := cmp.Diff(got, again); diff != "" {
		t.Errorf("TransformPod is not idempotent (-once +twice):\n%s", diff)
	}
	if diff := cmp.Diff(got, got.(*PodDevices).DeepCopyObject()); diff != "" {
		t.Errorf("DeepCopyObject (-orig +copy):\n%s", diff)
	}

	p.Status.Phase = corev1.PodSucceeded
	done, _ := TransformPod(p)
	if d := done.(*PodDevices).Devices; d != nil {
		t.Errorf("terminal pod holds %v, want no devices", d)
	}
}

// In existence mode the source records the devices a node's agent reports
// held in its layout annotation, so a rewrite to a type whose devices are
// all held is warned of; a layout that frees it, or one the source cannot
// read, warns no more.
func TestInformerSourceExistenceSeesHeldDevices(t *testing.T) {
	const (
		mig4g = corev1.ResourceName("nvidia.com/mig-4g.40gb")
		mig7g = corev1.ResourceName("nvidia.com/mig-7g.80gb")
	)
	ctx := context.Background()
	layout := func(usedBy ...string) string {
		s, err := json.Marshal([]nodeinfo.GPU{{Index: 0, UUID: "GPU-0", MigMode: nodeinfo.MigModeEnabled, Instances: []nodeinfo.Instance{
			{Profile: "4g.40gb", UUID: "MIG-4g", Health: nodeinfo.HealthHealthy, UsedBy: usedBy},
		}}})
		if err != nil {
			t.Fatal(err)
		}
		return string(s)
	}
	n := gpuNode("a", map[corev1.ResourceName]int64{mig4g: 1})
	n.Annotations = map[string]string{nodeinfo.AnnotationLayout: layout("ns/holder")}
	client := fake.NewClientset(n)
	s, err := NewInformerSource(client, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	runSource(t, s)
	d, err := fallback.NewDecider(fallback.Options{Policy: fallback.DefaultPolicy(), Mode: fallback.ModeExistence})
	if err != nil {
		t.Fatal(err)
	}
	pod := gpuPod("p", mig7g, "1")
	warned := func() bool {
		snap, _ := s.Snapshot()
		dec := d.Decide(pod, snap)
		if want := []fallback.Rewrite{{From: mig7g, To: mig4g, Reason: fallback.ReasonAbsent}}; !cmp.Equal(want, dec.Rewrites) {
			t.Fatalf("rewrites %v, want %v", dec.Rewrites, want)
		}
		for _, w := range dec.Warnings {
			if strings.Contains(w, "is in use, as their agents last reported") {
				return true
			}
		}
		return false
	}
	testutil.Eventually(t, "the warning while the only 4g.40gb is held", warned)

	for _, tc := range []struct{ name, layout string }{
		{"the holder left", layout()},
		{"an unreadable layout", "{not json"},
		{"the holder is back", layout("ns/holder")},
	} {
		n, err := client.CoreV1().Nodes().Get(ctx, "a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Annotations[nodeinfo.AnnotationLayout] = tc.layout
		if _, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		want := tc.name == "the holder is back"
		testutil.Eventually(t, tc.name, func() bool { return warned() == want })
	}
}

// noPlanner is a planner that serves nothing, now or later.
type noPlanner struct{}

func (noPlanner) Serve(*corev1.Pod, map[corev1.ResourceName]int64) fallback.Served {
	return fallback.Served{}
}

// In existence mode the source counts a shared instance's replicas in use,
// as its agent reports them, against the replicas the allocatable counts:
// a pod asking for the shared resource is left as asked while a replica is
// free, and, reshape-first, falls back to a free type once none is.
func TestInformerSourceExistenceCountsReplicas(t *testing.T) {
	const (
		mig1g = corev1.ResourceName("nvidia.com/mig-1g.10gb")
		mig3g = corev1.ResourceName("nvidia.com/mig-3g.40gb")
	)
	for _, tc := range []struct {
		name   string
		usedBy []string
		inUse  int
		// want is what the pod's 1g.10gb becomes; warn: the decision
		// without a planner warns that every 1g.10gb is in use.
		want corev1.ResourceName
		warn bool
	}{
		{name: "no replica in use", want: mig1g},
		{name: "one of two replicas in use", usedBy: []string{"ns/a"}, inUse: 1, want: mig1g},
		{name: "both replicas in use", usedBy: []string{"ns/a", "ns/b"}, inUse: 2, want: mig3g, warn: true},
		{name: "one pod on both replicas", usedBy: []string{"ns/a"}, inUse: 2, want: mig3g, warn: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := json.Marshal([]nodeinfo.GPU{{Index: 0, UUID: "GPU-0", MigMode: nodeinfo.MigModeEnabled, Instances: []nodeinfo.Instance{
				{Profile: "3g.40gb", UUID: "MIG-3g", Health: nodeinfo.HealthHealthy},
				{Profile: "1g.10gb", UUID: "MIG-1g", Health: nodeinfo.HealthHealthy, UsedBy: tc.usedBy,
					Shared: &nodeinfo.Shared{Resource: string(mig1g), Replicas: 2, InUse: tc.inUse}},
			}}})
			if err != nil {
				t.Fatal(err)
			}
			n := gpuNode("a", map[corev1.ResourceName]int64{mig1g: 2, mig3g: 1})
			n.Annotations = map[string]string{nodeinfo.AnnotationLayout: string(l)}
			s, err := NewInformerSource(fake.NewClientset(n), false, 0)
			if err != nil {
				t.Fatal(err)
			}
			runSource(t, s)
			snap, _ := s.Snapshot()
			d, err := fallback.NewDecider(fallback.Options{Policy: fallback.DefaultPolicy(), Mode: fallback.ModeExistence})
			if err != nil {
				t.Fatal(err)
			}
			pod := gpuPod("p", mig1g, "1")
			dec := d.DecideWith(context.Background(), pod, snap, noPlanner{})
			var want []fallback.Rewrite
			if tc.want != mig1g {
				want = []fallback.Rewrite{{From: mig1g, To: tc.want, Reason: fallback.ReasonExhausted}}
			}
			if !cmp.Equal(want, dec.Rewrites) {
				t.Errorf("reshape-first: rewrites %v, want %v", dec.Rewrites, want)
			}
			alone := d.Decide(pod, snap)
			if len(alone.Rewrites) > 0 {
				t.Errorf("without a planner: rewrites %v, want none (existence mode keeps a type that exists)", alone.Rewrites)
			}
			warned := slices.ContainsFunc(alone.Warnings, func(w string) bool { return strings.Contains(w, "is in use, as their agents last reported") })
			if warned != tc.warn {
				t.Errorf("without a planner: warned all in use %v, want %v (warnings %q)", warned, tc.warn, alone.Warnings)
			}
		})
	}
}
