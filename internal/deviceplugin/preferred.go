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
	byID := make(map[string]Device, len(devices))
	order := make(map[string]int, len(devices))
	for i, d := range devices {
		byID[d.ID] = d
		order[d.ID] = i
	}

	picked := make([]string, 0, size)
	pickedOn := map[int]int{} // parent GPU index -> devices picked there
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
		picked = append(picked, id)
		pickedOn[d.GPUIndex]++
	}

	// Free devices per parent GPU, in placement order.
	free := map[int][]string{}
	for _, id := range available {
		d, ok := byID[id]
		if !ok || isPicked[id] || slices.Contains(free[d.GPUIndex], id) {
			continue
		}
		free[d.GPUIndex] = append(free[d.GPUIndex], id)
	}
	var gpus []int
	nFree := 0
	for g, ids := range free {
		sort.Slice(ids, func(i, j int) bool { return order[ids[i]] < order[ids[j]] })
		gpus = append(gpus, g)
		nFree += len(ids)
	}
	if need := size - len(picked); need > nFree {
		return nil, fmt.Errorf("allocation size %d exceeds the %d must-include and %d other available devices", size, len(picked), nFree)
	}
	total := map[int]int{}
	for _, d := range devices {
		total[d.GPUIndex]++
	}

	switch policy {
	case AllocationPacked:
		// A GPU that already holds part of this request comes first, then
		// the GPU with the fewest free devices (most in use): requests fill
		// GPUs up and leave others whole.
		sort.Slice(gpus, func(i, j int) bool {
			a, b := gpus[i], gpus[j]
			if (pickedOn[a] > 0) != (pickedOn[b] > 0) {
				return pickedOn[a] > 0
			}
			if len(free[a]) != len(free[b]) {
				return len(free[a]) < len(free[b])
			}
			if ua, ub := total[a]-len(free[a]), total[b]-len(free[b]); ua != ub {
				return ua > ub
			}
			return a < b
		})
		for _, g := range gpus {
			for _, id := range free[g] {
				if len(picked) == size {
					return picked, nil
				}
				picked = append(picked, id)
			}
		}
	case AllocationDistributed:
		// Each next device comes from the GPU holding the fewest devices of
		// this request so far, preferring the one with the most free.
		for len(picked) < size {
			best := -1
			for _, g := range gpus {
				if len(free[g]) == 0 {
					continue
				}
				if best < 0 || pickedOn[g] < pickedOn[best] ||
					pickedOn[g] == pickedOn[best] && (len(free[g]) > len(free[best]) || len(free[g]) == len(free[best]) && g < best) {
					best = g
				}
			}
			picked = append(picked, free[best][0])
			free[best] = free[best][1:]
			pickedOn[best]++
		}
	default:
		return nil, errors.New("unknown allocation policy " + string(policy))
	}
	return picked, nil
}
