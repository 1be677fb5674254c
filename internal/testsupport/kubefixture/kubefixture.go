// Package kubefixture builds the Nodes and Pods of table tests, so that
// each case states only what it is about: a node with its GPU allocatable
// and options (labels, taints, the cordon), a pod with its containers'
// requests and placement constraints. The scheduler's view
// (internal/domain/schedview) and the webhook's decision
// (internal/webhook/fallback) are tested on the same fixtures.
package kubefixture

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeOpt changes a Node being built.
type NodeOpt func(*corev1.Node)

// Node is a Node named name (and labelled so, as a kubelet does) with 64
// CPUs, 512Gi of memory and the devices of alloc allocatable.
func Node(name string, alloc map[corev1.ResourceName]int64, opts ...NodeOpt) *corev1.Node {
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

// Labeled sets label k to v.
func Labeled(k, v string) NodeOpt { return func(n *corev1.Node) { n.Labels[k] = v } }

// Tainted adds the taint key=true with effect.
func Tainted(key string, effect corev1.TaintEffect) NodeOpt {
	return func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Value: "true", Effect: effect})
	}
}

// Cordoned marks the node unschedulable.
func Cordoned(n *corev1.Node) { n.Spec.Unschedulable = true }

// PodOpt changes a Pod being built.
type PodOpt func(*corev1.Pod)

// Pod is pod default/p with opts applied.
func Pod(opts ...PodOpt) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"}}
	for _, o := range opts {
		o(p)
	}
	return p
}

// RL is a ResourceList of name/quantity pairs; nil without pairs.
func RL(kv ...string) corev1.ResourceList {
	if len(kv) == 0 {
		return nil
	}
	l := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

// Both is requests and limits of the same name/quantity pairs, as users
// write GPU requests.
func Both(kv ...string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: RL(kv...), Limits: RL(kv...)}
}

// WithContainer adds container name with res.
func WithContainer(name string, res corev1.ResourceRequirements) PodOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: name, Image: "cuda", Resources: res})
	}
}

// WithInit adds init container name with res.
func WithInit(name string, res corev1.ResourceRequirements) PodOpt {
	return func(p *corev1.Pod) {
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: name, Image: "cuda", Resources: res})
	}
}

// WithSidecar adds a sidecar (an init container that restarts always)
// name with res.
func WithSidecar(name string, res corev1.ResourceRequirements) PodOpt {
	always := corev1.ContainerRestartPolicyAlways
	return func(p *corev1.Pod) {
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: name, Image: "cuda", Resources: res, RestartPolicy: &always})
	}
}

// WithAnnotation sets annotation k to v.
func WithAnnotation(k, v string) PodOpt {
	return func(p *corev1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[k] = v
	}
}

// WithNodeSelector sets nodeSelector k to v.
func WithNodeSelector(k, v string) PodOpt {
	return func(p *corev1.Pod) {
		if p.Spec.NodeSelector == nil {
			p.Spec.NodeSelector = map[string]string{}
		}
		p.Spec.NodeSelector[k] = v
	}
}

// WithRequiredAffinity sets the required node affinity to terms (ORed).
func WithRequiredAffinity(terms ...corev1.NodeSelectorTerm) PodOpt {
	return func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms},
		}}
	}
}

// WithToleration adds t.
func WithToleration(t corev1.Toleration) PodOpt {
	return func(p *corev1.Pod) { p.Spec.Tolerations = append(p.Spec.Tolerations, t) }
}

// OnNode sets spec.nodeName.
func OnNode(name string) PodOpt { return func(p *corev1.Pod) { p.Spec.NodeName = name } }
