package fallback

import (
	"encoding/json"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/domain/schedview"
)

// Fixture builders, so that each table case states only what it is about.

const (
	mig1g10  corev1.ResourceName = "nvidia.com/mig-1g.10gb"
	mig1g20  corev1.ResourceName = "nvidia.com/mig-1g.20gb"
	mig2g20  corev1.ResourceName = "nvidia.com/mig-2g.20gb"
	mig3g40  corev1.ResourceName = "nvidia.com/mig-3g.40gb"
	mig4g40  corev1.ResourceName = "nvidia.com/mig-4g.40gb"
	mig7g80  corev1.ResourceName = "nvidia.com/mig-7g.80gb"
	mig1g10m corev1.ResourceName = "nvidia.com/mig-1g.10gb.me"
	gpu                          = resourcename.GPU
)

type nodeOpt func(*corev1.Node)

func node(name string, alloc map[corev1.ResourceName]int64, opts ...nodeOpt) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:   name,
		Labels: map[string]string{corev1.LabelHostname: name},
	}}
	n.Status.Allocatable = corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("512Gi"),
	}
	for r, v := range alloc {
		n.Status.Allocatable[r] = *resource.NewQuantity(v, resource.DecimalSI)
	}
	for _, o := range opts {
		o(n)
	}
	return n
}

func labeled(k, v string) nodeOpt { return func(n *corev1.Node) { n.Labels[k] = v } }

func tainted(key string, effect corev1.TaintEffect) nodeOpt {
	return func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Value: "true", Effect: effect})
	}
}

func cordoned(n *corev1.Node) { n.Spec.Unschedulable = true }

func snapshotOf(nodes ...*corev1.Node) *schedview.Snapshot {
	ns := make([]schedview.Node, len(nodes))
	for i, n := range nodes {
		ns[i] = schedview.NodeFromAPI(n)
	}
	return schedview.NewSnapshot(ns)
}

type podOpt func(*corev1.Pod)

func newPod(opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"}}
	for _, o := range opts {
		o(p)
	}
	return p
}

// rl builds a ResourceList from name/quantity pairs.
func rl(kv ...string) corev1.ResourceList {
	if len(kv) == 0 {
		return nil
	}
	l := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

// both requests and limits, as users write GPU requests.
func both(kv ...string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: rl(kv...), Limits: rl(kv...)}
}

func withContainer(name string, res corev1.ResourceRequirements) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: name, Image: "cuda", Resources: res})
	}
}

func withInit(name string, res corev1.ResourceRequirements) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: name, Image: "cuda", Resources: res})
	}
}

func withSidecar(name string, res corev1.ResourceRequirements) podOpt {
	always := corev1.ContainerRestartPolicyAlways
	return func(p *corev1.Pod) {
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: name, Image: "cuda", Resources: res, RestartPolicy: &always})
	}
}

func withAnnotation(k, v string) podOpt {
	return func(p *corev1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[k] = v
	}
}

func withNodeSelector(k, v string) podOpt {
	return func(p *corev1.Pod) {
		if p.Spec.NodeSelector == nil {
			p.Spec.NodeSelector = map[string]string{}
		}
		p.Spec.NodeSelector[k] = v
	}
}

func withRequiredAffinity(terms ...corev1.NodeSelectorTerm) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms},
		}}
	}
}

func withToleration(t corev1.Toleration) podOpt {
	return func(p *corev1.Pod) { p.Spec.Tolerations = append(p.Spec.Tolerations, t) }
}

func onNode(name string) podOpt { return func(p *corev1.Pod) { p.Spec.NodeName = name } }

func gpuPod(r corev1.ResourceName, n string, opts ...podOpt) *corev1.Pod {
	return newPod(append([]podOpt{withContainer("main", both(string(r), n))}, opts...)...)
}

// quantityEqual compares quantities by value: "1" and "1000m" are equal.
var quantityEqual = cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })

// applyPatch applies the decision's patch to the pod as the API server would.
func applyPatch(t *testing.T, pod *corev1.Pod, ops []Operation) *corev1.Pod {
	t.Helper()
	doc, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(ops)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := jsonpatch.DecodePatch(raw)
	if err != nil {
		t.Fatalf("decode patch %s: %v", raw, err)
	}
	out, err := patch.Apply(doc)
	if err != nil {
		t.Fatalf("apply patch %s: %v", raw, err)
	}
	var got corev1.Pod
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	return &got
}
