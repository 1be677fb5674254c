package schedview

import corev1 "k8s.io/api/core/v1"

// Eligible visits the nodes of s that f lets the pod land on, in the
// snapshot's order, a group at a time: whole(g) when every member of g is
// eligible (the pod's constraints do not name nodes, so one match decides
// for the group), and each(g, m) for each eligible member of a group
// otherwise. With gpuOnly, groups without GPU types are passed over.
func (s *Snapshot) Eligible(f *Filter, gpuOnly bool, whole func(g *Group), each func(g *Group, m *Member)) {
	s.walk(f, gpuOnly, func(_ int, g *Group) { whole(g) }, func(_ int, g *Group, m *Member) { each(g, m) })
}

// walk is Eligible with each group's index.
func (s *Snapshot) walk(f *Filter, gpuOnly bool, whole func(i int, g *Group), each func(i int, g *Group, m *Member)) {
	for i, g := range s.groups {
		if gpuOnly && len(g.types) == 0 || !f.GroupAllowed(g) {
			continue
		}
		if !f.perNode {
			if f.matches(g.rep) {
				whole(i, g)
			}
			continue
		}
		for _, m := range g.members {
			if f.matches(m.node) {
				each(i, g, m)
			}
		}
	}
}

// EligibleNodes counts the nodes f lets the pod land on, GPU or not.
func (s *Snapshot) EligibleNodes(f *Filter) int {
	n := 0
	s.Eligible(f, false, func(g *Group) { n += len(g.members) }, func(*Group, *Member) { n++ })
	return n
}

// Find returns the node named name and its group, or nils.
func (s *Snapshot) Find(name string) (*Group, *Member) {
	for _, g := range s.groups {
		for _, m := range g.members {
			if m.node.Name == name {
				return g, m
			}
		}
	}
	return nil, nil
}

// EligibleGroups reports the nodes of s that pod may be scheduled to by the
// filters that look only at the pod and the Node object: nodeSelector,
// required node affinity, scheduling taints, the cordon and spec.nodeName,
// exactly as the webhook's decision judges them. Free capacity and GPU
// types are not looked at: the planner, which can change what a node
// offers, asks where a pod may land at all.
//
// visit is called once per group with an eligible member, in the snapshot's
// group order, with the group's index (see GroupNodes). members is nil when
// every member of the group is eligible; when the pod's constraints name
// nodes it lists the eligible members' names.
func (s *Snapshot) EligibleGroups(pod *corev1.Pod, visit func(group int, members []string)) {
	cur, names := -1, []string(nil)
	flush := func() {
		if len(names) > 0 {
			visit(cur, names)
		}
		names = nil
	}
	s.walk(NewFilter(pod, s), false, func(i int, _ *Group) { visit(i, nil) }, func(i int, _ *Group, m *Member) {
		if i != cur {
			flush()
			cur = i
		}
		names = append(names, m.node.Name)
	})
	flush()
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
