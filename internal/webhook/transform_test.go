package webhook

import (
	"runtime"
	"testing"
	"unique"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/webhook/fallback"
)

// fullNodes are Nodes as a kubelet and an agent report them, with what the
// decision reads (labels, taints, the cordon, GPU allocatable) and what it
// does not (images, conditions, managed fields, other annotations).
func fullNodes() []*corev1.Node {
	fat := func(n *corev1.Node) *corev1.Node {
		n.Annotations = map[string]string{"node.alpha.kubernetes.io/ttl": "0", nodeinfo.AnnotationProfiles: "[]"}
		n.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate}}
		n.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse("64")
		n.Status.Capacity = n.Status.Allocatable.DeepCopy()
		n.Status.Images = []corev1.ContainerImage{{Names: []string{"cuda"}, SizeBytes: 1 << 30}}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Message: "kubelet is posting ready status"}}
		return n
	}
	free := fat(gpuNode("free", map[corev1.ResourceName]int64{mig1g10: 7}))
	tainted := fat(gpuNode("tainted", map[corev1.ResourceName]int64{mig3g40: 2}))
	tainted.Spec.Taints = []corev1.Taint{{Key: "gpu", Value: "reserved", Effect: corev1.TaintEffectNoSchedule}}
	cordoned := fat(gpuNode("cordoned", map[corev1.ResourceName]int64{mig2g20: 3}))
	cordoned.Spec.Unschedulable = true
	pool := fat(gpuNode("pool", map[corev1.ResourceName]int64{mig3g40: 1}))
	pool.Labels["pool"] = "a"
	return []*corev1.Node{free, tainted, cordoned, pool}
}

// TestTransformNodeKeepsTheDecision: every pod is decided the same against
// the Nodes as the API serves them and as the cache keeps them, in both
// modes and with the reshape-first transform; a field the transform
// dropped that the decision reads would change one of these.
func TestTransformNodeKeepsTheDecision(t *testing.T) {
	tolerates := gpuPod("tolerates", mig3g40, "1")
	tolerates.Spec.Tolerations = []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpEqual, Value: "reserved", Effect: corev1.TaintEffectNoSchedule}}
	inPool := gpuPod("in-pool", mig3g40, "1")
	inPool.Spec.NodeSelector = map[string]string{"pool": "a"}
	pods := []*corev1.Pod{
		gpuPod("1g", mig1g10, "1"), gpuPod("2g", mig2g20, "1"), gpuPod("3g", mig3g40, "1"),
		gpuPod("many", mig1g10, "8"), tolerates, inPool,
	}
	transforms := map[string]func(any) (any, error){"TransformNode": TransformNode, "transformReshapeNode": transformReshapeNode}
	for _, mode := range []fallback.Mode{fallback.ModeExistence, fallback.ModeCapacity} {
		for tname, transform := range transforms {
			full := fullNodes()
			var slim []*corev1.Node
			for _, n := range fullNodes() {
				out, err := transform(n)
				if err != nil {
					t.Fatal(err)
				}
				slim = append(slim, out.(*corev1.Node))
			}
			for _, pod := range pods {
				want := decision(t, StaticSource{Snap: snapshotOf(full...)}, mode, pod)
				got := decision(t, StaticSource{Snap: snapshotOf(slim...)}, mode, pod)
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("%s, %s mode, pod %s: decision changed (-full +transformed):\n%s", tname, mode, pod.Name, diff)
				}
			}
		}
	}
}

// TestTransformNodeSharesText: two Nodes' equal labels, resource names and
// profile tables are one copy in the cache, and the text is unchanged.
func TestTransformNodeSharesText(t *testing.T) {
	profiles := `[{"model":"H100-SXM5-80GB","profiles":[]}]`
	// unique's table holds entries weakly: hold them, so that a GC
	// between the two transforms cannot make this test flaky.
	held := []any{unique.Make(profiles), unique.Make("p"), unique.Make(string(mig1g10))}
	defer runtime.KeepAlive(held)
	var slim []*corev1.Node
	for _, name := range []string{"a", "b"} {
		n := gpuNode(name, map[corev1.ResourceName]int64{corev1.ResourceName(string([]byte(mig1g10))): 7})
		// Distinct copies, as two decoded Nodes hold them.
		n.Labels["pool"] = string([]byte("p"))
		n.Annotations = map[string]string{nodeinfo.AnnotationProfiles: string([]byte(profiles))}
		out, err := transformReshapeNode(n)
		if err != nil {
			t.Fatal(err)
		}
		slim = append(slim, out.(*corev1.Node))
	}
	a, b := slim[0], slim[1]
	if a.Annotations[nodeinfo.AnnotationProfiles] != profiles || a.Labels["pool"] != "p" {
		t.Fatalf("transform changed the text: %v, %v", a.Annotations, a.Labels)
	}
	same := func(x, y string) bool { return unsafe.StringData(x) == unsafe.StringData(y) }
	if !same(a.Annotations[nodeinfo.AnnotationProfiles], b.Annotations[nodeinfo.AnnotationProfiles]) {
		t.Error("the nodes' profile tables are two copies")
	}
	if !same(a.Labels["pool"], b.Labels["pool"]) {
		t.Error("the nodes' label values are two copies")
	}
	var ka, kb string
	for r := range a.Status.Allocatable {
		ka = string(r)
	}
	for r := range b.Status.Allocatable {
		kb = string(r)
	}
	if !same(ka, kb) {
		t.Error("the nodes' resource names are two copies")
	}
}
