package fallback

import corev1 "k8s.io/api/core/v1"

// EligibleGroups reports the nodes of s that pod may be scheduled to by the
// filters that look only at the pod and the Node object: nodeSelector,
// required node affinity, scheduling taints, the cordon and spec.nodeName,
// exactly as Decide judges them. Free capacity and GPU types are not looked
// at: the planner, which can change what a node offers, asks where a pod may
// land at all.
//
// visit is called once per group with an eligible member, in the snapshot's
// group order, with the group's index (see GroupNodes). members is nil when
// every member of the group is eligible; when the pod's constraints name
// nodes it lists the eligible members' names.
func (s *Snapshot) EligibleGroups(pod *corev1.Pod, visit func(group int, members []string)) {
	f := newPodFilter(pod, s.identity)
	for i, g := range s.groups {
		if !f.groupAllowed(g) {
			continue
		}
		if !f.perNode {
			if f.matches(g.rep) {
				visit(i, nil)
			}
			continue
		}
		var names []string
		for _, m := range g.members {
			if f.matches(m.node) {
				names = append(names, m.node.Name)
			}
		}
		if len(names) > 0 {
			visit(i, names)
		}
	}
}

// GroupNodes returns the names of the members of group i (0 <= i <
// Groups()), sorted.
func (s *Snapshot) GroupNodes(i int) []string {
	g := s.groups[i]
	names := make([]string, len(g.members))
	for j, m := range g.members {
		names[j] = m.node.Name
	}
	return names
}
