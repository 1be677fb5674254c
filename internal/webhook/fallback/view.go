package fallback

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/schedview"
)

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
	g       *schedview.Group
	members []*schedview.Member
}

// fits reports whether one eligible node has at least need[t] free devices
// of every type t in need.
func (v *view) fits(need map[corev1.ResourceName]int64) bool {
	return v.covered(need, v.free, (*schedview.Group).MaxFree, (*schedview.Member).Fits)
}

// fitsAllocatable reports whether one eligible node has at least need[t]
// allocatable devices of every type t in need, used or not, and on a
// dynamic DRA node could make them together.
func (v *view) fitsAllocatable(need map[corev1.ResourceName]int64) bool {
	return v.covered(need, v.most, (*schedview.Group).MaxAllocatable, (*schedview.Member).Holds)
}

// covered reports whether one eligible node covers need (member: by its
// counts and, on a dynamic DRA node, by what its pool serves together);
// most and ofGroup are the most on one node, over the view and over a
// group.
func (v *view) covered(need, most map[corev1.ResourceName]int64,
	ofGroup func(*schedview.Group) map[corev1.ResourceName]int64, member func(*schedview.Member, map[corev1.ResourceName]int64) bool) bool {
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
			members = e.g.Members()
		}
		for _, m := range members {
			if member(m, need) {
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

// viewFor collects the GPU types on the nodes of s the pod can be
// scheduled to (f); withGroups also records those nodes for view.fits and
// fitsAllocatable.
func viewFor(s *schedview.Snapshot, f *schedview.Filter, withGroups bool) view {
	v := view{free: map[corev1.ResourceName]int64{}, most: map[corev1.ResourceName]int64{}}
	s.Eligible(f, true, func(g *schedview.Group) {
		v.add(g.Types(), g.MaxFree(), g.MaxAllocatable())
		v.gpuNodes += len(g.Members())
		if withGroups {
			v.groups = append(v.groups, eligibleGroup{g: g})
		}
	}, func(g *schedview.Group, m *schedview.Member) {
		v.add(g.Types(), m.Free(), m.Allocatable())
		v.gpuNodes++
		if !withGroups {
			return
		}
		if last := len(v.groups) - 1; last >= 0 && v.groups[last].g == g {
			v.groups[last].members = append(v.groups[last].members, m)
			return
		}
		v.groups = append(v.groups, eligibleGroup{g: g, members: []*schedview.Member{m}})
	})
	return v
}
