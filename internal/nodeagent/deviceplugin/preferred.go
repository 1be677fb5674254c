package deviceplugin

import (
	"errors"
	"fmt"
	"slices"
	"sort"
)

// preferredAllocation picks size device IDs out of available for one
// container, starting with mustInclude, following policy over the parent
// GPUs of devices (the resource's current device list, in placement order).
// Unknown IDs in available are skipped (the kubelet's view may trail a
// layout change by a message); unknown must-include IDs are an error.
//
// Replicas of shared devices follow the same policy one level down, over
// the devices they share: packed takes a replica of the device with the
// most replicas in use, so that other devices stay idle and can be
// repartitioned (a device with any replica in use is busy); distributed
// takes one of the device with the fewest in use, as NVIDIA's device
// plugin does, so that time-sliced pods contend as little as they can.
// Either way one request gets replicas of distinct devices while there
// are any: a second replica of a device gives a container nothing more.
func preferredAllocation(policy AllocationPolicy, devices []Device, available, mustInclude []string, size int) ([]string, error) {
	if size <= 0 {
		return nil, fmt.Errorf("allocation size %d is not positive", size)
	}
	if len(mustInclude) > size {
		return nil, fmt.Errorf("%d must-include devices exceed the allocation size %d", len(mustInclude), size)
	}
	p, err := newPick(policy, devices, available, mustInclude, size)
	if err != nil {
		return nil, err
	}
	switch policy {
	case AllocationPacked:
		return p.packed(), nil
	case AllocationDistributed:
		return p.distributed(), nil
	}
	return nil, errors.New("unknown allocation policy " + string(policy))
}

// pick is an allocation being chosen: the devices picked so far and the
// free ones left, by parent GPU.
type pick struct {
	size   int
	picked []string
	// pickedOn counts the devices picked on each parent GPU (by index).
	pickedOn map[int]int
	// free are the available devices of each parent GPU, in placement
	// order; gpus lists the GPUs with any, total counts every device of
	// each GPU, free or not.
	free  map[int][]string
	gpus  []int
	total map[int]int
	// under is the device under each ID (itself unless it is a replica);
	// freeOf counts the available IDs of each device, inRequest the IDs
	// of each in the request so far.
	under     map[string]string
	freeOf    map[string]int
	inRequest map[string]int
}

// newPick starts with the must-include devices and sorts the other
// available ones by parent GPU, checking that enough are available.
func newPick(policy AllocationPolicy, devices []Device, available, mustInclude []string, size int) (*pick, error) {
	byID := make(map[string]Device, len(devices))
	order := make(map[string]int, len(devices))
	p := &pick{size: size, picked: make([]string, 0, size), pickedOn: map[int]int{}, free: map[int][]string{}, total: map[int]int{},
		under: map[string]string{}, freeOf: map[string]int{}, inRequest: map[string]int{}}
	for i, d := range devices {
		byID[d.ID] = d
		order[d.ID] = i
		p.total[d.GPUIndex]++
		p.under[d.ID] = d.Underlying()
	}
	isPicked := map[string]bool{}
	for _, id := range mustInclude {
		d, ok := byID[id]
		if !ok {
			return nil, fmt.Errorf("must-include device %q is not a device of this resource", id)
		}
		if isPicked[id] {
			continue
		}
		isPicked[id] = true
		p.picked = append(p.picked, id)
		p.pickedOn[d.GPUIndex]++
		p.inRequest[p.under[id]]++
	}
	for _, id := range available {
		d, ok := byID[id]
		if !ok || isPicked[id] || slices.Contains(p.free[d.GPUIndex], id) {
			continue
		}
		p.free[d.GPUIndex] = append(p.free[d.GPUIndex], id)
		p.freeOf[p.under[id]]++
	}
	nFree := 0
	for g, ids := range p.free {
		sort.Slice(ids, func(i, j int) bool { return order[ids[i]] < order[ids[j]] })
		if policy == AllocationPacked {
			// The device with the most replicas in use first: the
			// fewest free (a device served whole has one, so whole
			// devices keep placement order).
			sort.SliceStable(ids, func(i, j int) bool { return p.freeOf[p.under[ids[i]]] < p.freeOf[p.under[ids[j]]] })
		}
		p.gpus = append(p.gpus, g)
		nFree += len(ids)
	}
	if need := size - len(p.picked); need > nFree {
		return nil, fmt.Errorf("allocation size %d exceeds the %d must-include and %d other available devices", size, len(p.picked), nFree)
	}
	return p, nil
}

// packed fills GPUs up and leaves others whole: a GPU that already holds
// part of this request comes first, then the GPU with the fewest free
// devices (most in use).
func (p *pick) packed() []string {
	free, pickedOn := p.free, p.pickedOn
	sort.Slice(p.gpus, func(i, j int) bool {
		a, b := p.gpus[i], p.gpus[j]
		if (pickedOn[a] > 0) != (pickedOn[b] > 0) {
			return pickedOn[a] > 0
		}
		if len(free[a]) != len(free[b]) {
			return len(free[a]) < len(free[b])
		}
		if ua, ub := p.total[a]-len(free[a]), p.total[b]-len(free[b]); ua != ub {
			return ua > ub
		}
		return a < b
	})
	// First one replica of each device not in the request yet, then any.
	taken := map[string]bool{}
	for _, fresh := range []bool{true, false} {
		for _, g := range p.gpus {
			for _, id := range free[g] {
				if len(p.picked) == p.size {
					return p.picked
				}
				if taken[id] || fresh && p.inRequest[p.under[id]] > 0 {
					continue
				}
				taken[id] = true
				p.picked = append(p.picked, id)
				p.inRequest[p.under[id]]++
			}
		}
	}
	return p.picked
}

// distributed spreads the request: each next device comes from the GPU
// holding the fewest devices of this request so far, preferring the one
// with the most free, among the GPUs with a device not in the request yet
// while there are any; on that GPU, the replica of the device with the
// fewest replicas in this request, then the most free.
func (p *pick) distributed() []string {
	free, pickedOn := p.free, p.pickedOn
	hasFresh := func(g int) bool {
		return slices.ContainsFunc(free[g], func(id string) bool { return p.inRequest[p.under[id]] == 0 })
	}
	for len(p.picked) < p.size {
		best, bestFresh := -1, false
		for _, g := range p.gpus {
			if len(free[g]) == 0 {
				continue
			}
			fresh := hasFresh(g)
			switch {
			case best < 0, fresh && !bestFresh:
			case fresh != bestFresh:
				continue
			case pickedOn[g] < pickedOn[best] ||
				pickedOn[g] == pickedOn[best] && (len(free[g]) > len(free[best]) || len(free[g]) == len(free[best]) && g < best):
			default:
				continue
			}
			best, bestFresh = g, fresh
		}
		i := 0
		for j, id := range free[best] {
			a, b := p.under[id], p.under[free[best][i]]
			if p.inRequest[a] < p.inRequest[b] || p.inRequest[a] == p.inRequest[b] && p.freeOf[a] > p.freeOf[b] {
				i = j
			}
		}
		id := free[best][i]
		p.picked = append(p.picked, id)
		free[best] = slices.Delete(free[best], i, i+1)
		pickedOn[best]++
		p.inRequest[p.under[id]]++
		p.freeOf[p.under[id]]--
	}
	return p.picked
}
