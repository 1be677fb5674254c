package schedview

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/internal/domain/resourcename"
)

// Fixture builders, so that each table case states only what it is about.

const (
	mig1g10 corev1.ResourceName = "nvidia.com/mig-1g.10gb"
	mig2g20 corev1.ResourceName = "nvidia.com/mig-2g.20gb"
	gpu                         = resourcename.GPU
)

type alloc = map[corev1.ResourceName]int64

type nodeOpt func(*corev1.Node)

func node(name string, a alloc, opts ...nodeOpt) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}}}
	n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64")}
	for r, v := range a {
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

func snapshotOf(nodes ...*corev1.Node) *Snapshot {
	ns := make([]Node, len(nodes))
	for i, n := range nodes {
		ns[i] = NodeFromAPI(n)
	}
	return NewSnapshot(ns)
}

type podOpt func(*corev1.Pod)

func newPod(opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"}}
	for _, o := range opts {
		o(p)
	}
	return p
}

// both requests and limits of name/quantity pairs, as users write GPU
// requests.
func both(kv ...string) corev1.ResourceRequirements {
	l := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return corev1.ResourceRequirements{Requests: l, Limits: l}
}

func withContainer(name string, res corev1.ResourceRequirements) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: name, Resources: res})
	}
}

func withInit(name string, res corev1.ResourceRequirements) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: name, Resources: res})
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

// eligibleNames is the names of the nodes of s that f lets a pod land on,
// sorted.
func eligibleNames(s *Snapshot, f *Filter) []string {
	var names []string
	s.Eligible(f, false, func(g *Group) {
		for _, m := range g.Members() {
			names = append(names, m.Name())
		}
	}, func(_ *Group, m *Member) { names = append(names, m.Name()) })
	slices.Sort(names)
	return names
}
