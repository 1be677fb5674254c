package schedview

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// Filter is the node filters of one pod that depend only on the pod and
// the Node object. For a pod the scheduler places they are the
// scheduler's: nodeSelector plus required node affinity (nodeaffinity, the
// scheduler's own code), taints with NoSchedule/NoExecute and the cordon.
// A pod created with spec.nodeName bypasses the scheduler and is admitted
// by that node's kubelet, which checks the node selector and affinity but,
// of the taints, only NoExecute ones (pkg/kubelet/lifecycle's admission),
// and ignores the cordon: so do these filters then. Free capacity and GPU
// types are not filters: whoever asks decides what a node must offer.
type Filter struct {
	affinity    nodeaffinity.RequiredNodeAffinity
	tolerations []corev1.Toleration
	nodeName    string
	// tolerUnschedulable is whether the pod tolerates the cordon taint, as
	// the scheduler's NodeUnschedulable plugin checks.
	tolerUnschedulable bool
	// perNode is set when the constraints name a node (spec.nodeName, an
	// identity label, a field selector on metadata.name): they must then be
	// matched against every member of a group, not once per group.
	perNode bool
}

var unschedulableTaint = corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}

// comparisonOperators lets tolerations with Gt/Lt match numerically, as the
// scheduler does with TaintTolerationComparisonOperators on. The API server
// admits such a toleration only when that gate is on, so a pod that carries
// one comes from a cluster where the scheduler compares too.
const comparisonOperators = true

// NewFilter is pod's filters over the nodes of s.
func NewFilter(pod *corev1.Pod, s *Snapshot) *Filter {
	f := &Filter{
		affinity:           nodeaffinity.GetRequiredNodeAffinity(pod),
		tolerations:        pod.Spec.Tolerations,
		nodeName:           pod.Spec.NodeName,
		tolerUnschedulable: corev1helpers.TolerationsTolerateTaint(klog.Background(), pod.Spec.Tolerations, &unschedulableTaint, comparisonOperators),
	}
	f.perNode = f.nodeName != "" || namesNode(pod, s.identity)
	return f
}

// lifecycleTolerations tolerate the taints the node lifecycle controller
// puts on a node whose kubelet does not report Ready (not-ready) or does
// not report at all (unreachable), with either effect. It takes them off
// when the kubelet reports Ready again: a kubelet restart sets them for a
// few seconds.
var lifecycleTolerations = []corev1.Toleration{
	{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists},
	{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists},
}

// NewAdmissionFilter is NewFilter for a decision that stays with the pod,
// the webhook's: the node lifecycle controller's not-ready and unreachable
// taints do not keep the pod off a node. They say how the node is this
// second, not what it is; the scheduler keeps a pod waiting while they
// last, and a rewrite or a refusal made because of them would outlast
// them (a pod pinned to a node refused because its kubelet restarted).
// The cordon and every other taint, the kubelet's pressure taints
// included, still filter.
func NewAdmissionFilter(pod *corev1.Pod, s *Snapshot) *Filter {
	f := NewFilter(pod, s)
	// Clip: the pod's slice is shared, never written to.
	f.tolerations = append(slices.Clip(f.tolerations), lifecycleTolerations...)
	return f
}

func namesNode(pod *corev1.Pod, identity map[string]bool) bool {
	for k := range pod.Spec.NodeSelector {
		if identity[k] {
			return true
		}
	}
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		if len(term.MatchFields) > 0 {
			return true
		}
		for _, e := range term.MatchExpressions {
			if identity[e.Key] {
				return true
			}
		}
	}
	return false
}

// NodeName is the pod's spec.nodeName: the one node it may land on, chosen
// without the scheduler; "" for a pod the scheduler places.
func (f *Filter) NodeName() string { return f.nodeName }

// GroupAllowed applies the filters every member of g shares: the cordon
// and the taints.
func (f *Filter) GroupAllowed(g *Group) bool {
	if f.nodeName == "" && g.unschedulable && !f.tolerUnschedulable {
		return false
	}
	_, untolerated := f.UntoleratedTaint(g)
	return !untolerated
}

// UntoleratedTaint finds a taint of g that keeps the pod off its members:
// any scheduling taint for a pod the scheduler places, only a NoExecute one
// for a pod bound by spec.nodeName.
func (f *Filter) UntoleratedTaint(g *Group) (corev1.Taint, bool) {
	var only func(*corev1.Taint) bool
	if f.nodeName != "" {
		only = func(t *corev1.Taint) bool { return t.Effect == corev1.TaintEffectNoExecute }
	}
	return corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), g.taints, f.tolerations, only, comparisonOperators)
}

// Matches applies the label and name filters to one member.
func (f *Filter) Matches(m *Member) bool { return f.matches(m.node) }

func (f *Filter) matches(n *corev1.Node) bool {
	if f.nodeName != "" && n.Name != f.nodeName {
		return false
	}
	// An affinity that does not parse never matches; API validation, which
	// runs after mutating admission, rejects such a pod anyway.
	ok, err := f.affinity.Match(n)
	return ok && err == nil
}
