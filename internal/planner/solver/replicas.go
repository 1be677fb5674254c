package solver

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// replicaState is the free replicas of the shared devices of the round's
// nodes, which serve pods before any change is looked for: the
// scheduler places a pod on a free replica as on a free device, so a pod
// they can serve needs no new instance, and once a replica is handed out
// the device under it is in use, never changed (occupy).
type replicaState struct {
	// nodes are the nodes with free replicas, in node order; free[i] is
	// what is left of nodes[i]'s Replicas this round.
	nodes []int32
	free  [][]int64
}

func (r *round) addReplicas() {
	for ni := range r.nodes {
		rs := r.nodes[ni].n.Replicas
		if len(rs) == 0 {
			continue
		}
		free := make([]int64, len(rs))
		for i, x := range rs {
			free[i] = max(x.Free, 0)
		}
		r.replicas.nodes = append(r.replicas.nodes, int32(ni))
		r.replicas.free = append(r.replicas.free, free)
	}
}

// fromReplicas finds the first node of el, by name, whose free replicas
// cover the whole need (by resource), and which replicas, one device per
// replica, a device with more free first; k indexes replicas.nodes.
func (r *round) fromReplicas(el eligibility, need map[corev1.ResourceName]int64) (k int, devices []Device, taken []int, ok bool) {
	if len(r.replicas.nodes) == 0 || len(need) == 0 {
		return -1, nil, nil, false
	}
	for k, ni := range r.replicas.nodes {
		if !el.has(r, ni) {
			continue
		}
		rs := r.nodes[ni].n.Replicas
		free := slices.Clone(r.replicas.free[k])
		devices, taken = nil, nil
		covered := true
		for _, res := range slices.Sorted(maps.Keys(need)) {
			for range need[res] {
				best := -1
				for i, x := range rs {
					if x.Resource == res && free[i] > 0 && (best < 0 || free[i] > free[best]) {
						best = i
					}
				}
				if best < 0 {
					covered = false
					break
				}
				free[best]--
				taken = append(taken, best)
				devices = append(devices, Device{GPU: rs[best].GPU, Resource: res, Start: max(rs[best].Start, 0)})
			}
			if !covered {
				break
			}
		}
		if covered {
			return k, devices, taken, true
		}
	}
	return -1, nil, nil, false
}

// has tells whether node ni is one where the pod may land.
func (el eligibility) has(r *round, ni int32) bool {
	return slices.Contains(el.groups, r.nodes[ni].group) || slices.Contains(el.nodes, ni)
}

// placeOnReplicas serves ps from free replicas when they cover its need
// on a node it may land on, and takes them for the rest of the round.
func (r *round) placeOnReplicas(ps *podState) bool {
	if len(r.replicas.nodes) == 0 {
		return false
	}
	need := map[corev1.ResourceName]int64{}
	for _, n := range ps.needs {
		need[r.res.names[n.res]] += n.count
	}
	k, devices, taken, ok := r.fromReplicas(r.eligible(ps), need)
	if !ok {
		return false
	}
	ni := r.replicas.nodes[k]
	for _, i := range taken {
		r.replicas.free[k][i]--
		r.occupy(ni, r.nodes[ni].n.Replicas[i])
	}
	ps.plan.Node = r.nodes[ni].name
	ps.plan.Action = ActionExisting
	ps.plan.Devices = devices
	return true
}

// occupy marks a shared device the round hands a replica of as in use,
// as commit does a free device it hands out: a device no pod used before
// is then neither handed out whole, nor changed, nor reclaimed.
func (r *round) occupy(ni int32, x Replicas) {
	for _, gi := range r.nodes[ni].gpus {
		g := &r.gpus[gi]
		if g.g.Index != x.GPU {
			continue
		}
		k := g.key
		switch {
		case x.Profile == "":
			if k.migEnabled || k.whole || k.dynamic {
				return
			}
			k.whole = true
		case k.tab >= 0 && k.migEnabled && !k.dynamic:
			t := r.tabs[k.tab]
			xi := t.find(x.Profile, x.Start)
			if xi < 0 || k.free&(1<<xi) == 0 {
				return // in use already
			}
			occ := t.add(k.occ, xi)
			if occ < 0 {
				return
			}
			k.occ, k.free = occ, k.free&^(1<<xi)
		default:
			return
		}
		r.setKey(gi, k)
		r.refreshNodeClasses(ni)
		r.touchNode(ni)
		return
	}
}

// tookDevice takes one replica of the shared device the round handed
// out as a free device (commit): the pod it went to holds one.
func (r *round) tookDevice(ni int32, gpu int, profile string, start int) {
	k, ok := slices.BinarySearch(r.replicas.nodes, ni)
	if !ok {
		return
	}
	for i, x := range r.nodes[ni].n.Replicas {
		if x.GPU == gpu && x.Profile == profile && (profile == "" || x.Start == start) && r.replicas.free[k][i] > 0 {
			r.replicas.free[k][i]--
			return
		}
	}
}
