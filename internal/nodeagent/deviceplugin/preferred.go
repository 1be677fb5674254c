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
func preferredAllocation(policy AllocationPolicy, devices []Device, available, mustInclude []string, size int) ([]string, error) {
	if size <= 0 {
		return nil, fmt.Errorf("allocation size %d is not positive", size)
	}
	if len(mustInclude) > size {
		return nil, fmt.Errorf("%d must-include devices exceed the allocation size %d", len(mustInclude), size)
	}
	p, err := newPick(devices, available, mustInclude, size)
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
}

// newPick starts with the must-include devices and sorts the other
// available ones by parent GPU, checking that enough are available.
func newPick(devices []Device, available, mustInclude []string, size int) (*pick, error) {
	byID := make(map[string]Device, len(devices))
	order := make(map[string]int, len(devices))
	p := &pick{size: size, picked: make([]string, 0, size), pickedOn: map[int]int{}, free: map[int][]string{}, total: map[int]int{}}
	for i, d := range devices {
		byID[d.ID] = d
		order[d.ID] = i
		p.total[d.GPUIndex]++
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
	}
	for _, id := range available {
		d, ok := byID[id]
		if !ok || isPicked[id] || slices.Contains(p.free[d.GPUIndex], id) {
			continue
		}
		p.free[d.GPUIndex] = append(p.free[d.GPUIndex], id)
	}
	nFree := 0
	for g, ids := range p.free {
		sort.Slice(ids, func(i, j int) bool { return order[ids[i]] < order[ids[j]] })
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
	for _, g := range p.gpus {
		for _, id := range free[g] {
			if len(p.picked) == p.size {
				return p.picked
			}
			p.picked = append(p.picked, id)
		}
	}
	return p.picked
}

// distributed spreads the request: each next device comes from the GPU
// holding the fewest devices of this request so far, preferring the one
// with the most free.
func (p *pick) distributed() []string {
	free, pickedOn := p.free, p.pickedOn
	for len(p.picked) < p.size {
		best := -1
		for _, g := range p.gpus {
			if len(free[g]) == 0 {
				continue
			}
			if best < 0 || pickedOn[g] < pickedOn[best] ||
				pickedOn[g] == pickedOn[best] && (len(free[g]) > len(free[best]) || len(free[g]) == len(free[best]) && g < best) {
				best = g
			}
		}
		p.picked = append(p.picked, free[best][0])
		free[best] = free[best][1:]
		pickedOn[best]++
	}
	return p.picked
}
