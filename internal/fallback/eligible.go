package fallback

import (
	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// podFilter is the node filters that depend only on the pod and the node
// object. For a pod the scheduler places they are the scheduler's:
// nodeSelector plus required node affinity (nodeaffinity, the scheduler's own
// code), taints with NoSchedule/NoExecute and the cordon. A pod created with
// spec.nodeName bypasses the scheduler and is admitted by that node's
// kubelet, which checks the node selector and affinity but, of the taints,
// only NoExecute ones (pkg/kubelet/lifecycle's admission), and ignores the
// cordon: so do these filters then.
type podFilter struct {
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

func newPodFilter(pod *corev1.Pod, identity map[string]bool) *podFilter {
	f := &podFilter{
		affinity:           nodeaffinity.GetRequiredNodeAffinity(pod),
		tolerations:        pod.Spec.Tolerations,
		nodeName:           pod.Spec.NodeName,
		tolerUnschedulable: corev1helpers.TolerationsTolerateTaint(klog.Background(), pod.Spec.Tolerations, &unschedulableTaint, comparisonOperators),
	}
	f.perNode = f.nodeName != "" || namesNode(pod, identity)
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

// groupAllowed applies the filters every member of g shares.
func (f *podFilter) groupAllowed(g *group) bool {
	if f.nodeName == "" && g.unschedulable && !f.tolerUnschedulable {
		return false
	}
	_, untolerated := f.untoleratedTaint(g)
	return !untolerated
}

// untoleratedTaint finds a taint of g that keeps the pod off its members:
// any scheduling taint for a pod the scheduler places, only a NoExecute one
// for a pod bound by spec.nodeName.
func (f *podFilter) untoleratedTaint(g *group) (corev1.Taint, bool) {
	var only func(*corev1.Taint) bool
	if f.nodeName != "" {
		only = func(t *corev1.Taint) bool { return t.Effect == corev1.TaintEffectNoExecute }
	}
	return corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), g.taints, f.tolerations, only, comparisonOperators)
}

// matches applies the label and name filters to one node.
func (f *podFilter) matches(n *corev1.Node) bool {
	if f.nodeName != "" && n.Name != f.nodeName {
		return false
	}
	// An affinity that does not parse never matches; API validation, which
	// runs after mutating admission, rejects such a pod anyway.
	ok, err := f.affinity.Match(n)
	return ok && err == nil
}

// view is what one pod can use: the GPU types on the nodes it can land on.
type view struct {
	// free maps each present type to the most free devices of it on one
	// eligible node. In existence mode only the keys matter.
	free map[corev1.ResourceName]int64
	// most maps each present type to the most allocatable devices of it on
	// one eligible node: what the pod can ever get of it there.
	most map[corev1.ResourceName]int64
	// gpuNodes is the number of eligible nodes with a GPU type.
	gpuNodes int
	// groups are the eligible groups with GPU types, for fits; collected
	// only when asked for (capacity mode, or a need of several types).
	groups []eligibleGroup
}

// eligibleGroup is a group the pod can land on; members lists the members
// that match when the pod's constraints name nodes, nil means all of them.
type eligibleGroup struct {
	g       *group
	members []*member
}

// fits reports whether one eligible node has at least need[t] free devices
// of every type t in need.
func (v *view) fits(need map[corev1.ResourceName]int64) bool {
	return v.covered(need, v.free, func(g *group) map[corev1.ResourceName]int64 { return g.maxFree },
		func(m *member) map[corev1.ResourceName]int64 { return m.free })
}

// fitsAllocatable reports whether one eligible node has at least need[t]
// allocatable devices of every type t in need, used or not.
func (v *view) fitsAllocatable(need map[corev1.ResourceName]int64) bool {
	return v.covered(need, v.most, func(g *group) map[corev1.ResourceName]int64 { return g.maxAlloc },
		func(m *member) map[corev1.ResourceName]int64 { return m.alloc })
}

// covered reports whether one eligible node's counts (of member) cover
// need; most and ofGroup are the most on one node, over the view and over
// a group.
func (v *view) covered(need, most map[corev1.ResourceName]int64,
	ofGroup func(*group) map[corev1.ResourceName]int64, of func(*member) map[corev1.ResourceName]int64) bool {
	if len(need) == 1 {
		// The most on one node decides, without visiting nodes.
		for t, n := range need {
			f, ok := most[t]
			return ok && f >= n
		}
	}
	for _, e := range v.groups {
		// No member has more than the group's most.
		if !covers(ofGroup(e.g), need) {
			continue
		}
		members := e.members
		if members == nil {
			members = e.g.members
		}
		for _, m := range members {
			if covers(of(m), need) {
				return true
			}
		}
	}
	return false
}

func covers(free, need map[corev1.ResourceName]int64) bool {
	for t, n := range need {
		if f, ok := free[t]; !ok || f < n {
			return false
		}
	}
	return true
}

func (v *view) present(r corev1.ResourceName) bool {
	_, ok := v.free[r]
	return ok
}

func (v *view) add(types []corev1.ResourceName, free, alloc map[corev1.ResourceName]int64) {
	for _, r := range types {
		if f, ok := v.free[r]; !ok || free[r] > f {
			v.free[r] = free[r]
		}
		if a, ok := v.most[r]; !ok || alloc[r] > a {
			v.most[r] = alloc[r]
		}
	}
}

// viewFor collects the GPU types on the nodes the pod can be scheduled to;
// withGroups also records those nodes for view.fits and fitsAllocatable.
func (s *Snapshot) viewFor(f *podFilter, withGroups bool) view {
	v := view{free: map[corev1.ResourceName]int64{}, most: map[corev1.ResourceName]int64{}}
	for _, g := range s.groups {
		if len(g.types) == 0 || !f.groupAllowed(g) {
			continue
		}
		if !f.perNode {
			if f.matches(g.rep) {
				v.add(g.types, g.maxFree, g.maxAlloc)
				v.gpuNodes += len(g.members)
				if withGroups {
					v.groups = append(v.groups, eligibleGroup{g: g})
				}
			}
			continue
		}
		var matched []*member
		for _, m := range g.members {
			if f.matches(m.node) {
				v.add(g.types, m.free, m.alloc)
				v.gpuNodes++
				if withGroups {
					matched = append(matched, m)
				}
			}
		}
		if len(matched) > 0 {
			v.groups = append(v.groups, eligibleGroup{g: g, members: matched})
		}
	}
	return v
}

// eligibleNodes counts every node the pod can be scheduled to, GPU or not.
// Only the deny message needs it, so it is not part of viewFor.
func (s *Snapshot) eligibleNodes(f *podFilter) int {
	n := 0
	for _, g := range s.groups {
		if !f.groupAllowed(g) {
			continue
		}
		if !f.perNode {
			if f.matches(g.rep) {
				n += len(g.members)
			}
			continue
		}
		for _, m := range g.members {
			if f.matches(m.node) {
				n++
			}
		}
	}
	return n
}

// find returns the node named name and its group, or nils.
func (s *Snapshot) find(name string) (*group, *member) {
	for _, g := range s.groups {
		for _, m := range g.members {
			if m.node.Name == name {
				return g, m
			}
		}
	}
	return nil, nil
}
