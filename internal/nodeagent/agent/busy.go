package agent

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/migconfig"
	"github.com/migflex/migflex/internal/domain/sharing"
	"github.com/migflex/migflex/internal/nodeagent/podresources"
)

// deviceRef is where a device the kubelet knows by ID lives on the node.
type deviceRef struct {
	GPU int
	// MIG is true for a MIG device, which is GPU instance GI; false for
	// a whole GPU.
	MIG bool
	GI  uint32
}

// deviceIndex maps every device ID a server can serve (GPU UUIDs
// and MIG device UUIDs) to where it lives.
func deviceIndex(gpus []mig.GPU) map[string]deviceRef {
	idx := map[string]deviceRef{}
	for _, g := range gpus {
		idx[g.UUID] = deviceRef{GPU: g.Index}
		for _, in := range g.Instances {
			if in.UUID != "" {
				idx[in.UUID] = deviceRef{GPU: g.Index, MIG: true, GI: in.GIID}
			}
		}
	}
	return idx
}

// deviceOf is the ID of the device a pod holds: the device itself, or the
// device under a replica of a shared device ("<uuid>::<n>"), so that a
// device with any replica in use is busy.
func deviceOf(id string) string {
	if d, _, ok := sharing.SplitReplicaID(id); ok {
		return d
	}
	return id
}

// busyGPUs returns, for each GPU the plan would disturb a pod on, the pods
// ("namespace/name", sorted) in the way. A pod is in the way when the plan
// changes the GPU it holds whole, destroys the GPU instance of its MIG
// device, or changes the MIG mode of its GPU (which destroys every
// instance). A pod on a MIG device the plan keeps is not: MIG isolates it
// from instances created or destroyed beside it. Assigned IDs that are no
// device of this node (another plugin's, or one already gone) are ignored.
func busyGPUs(plan migconfig.Plan, gpus []mig.GPU, assignments []podresources.Assignment) map[int][]string {
	idx := deviceIndex(gpus)
	plans := map[int]migconfig.GPUPlan{}
	for _, p := range plan.GPUs {
		if p.Changed() {
			plans[p.GPU] = p
		}
	}
	pods := map[int]map[string]bool{}
	for _, a := range assignments {
		ref, ok := idx[deviceOf(a.DeviceID)]
		if !ok {
			continue
		}
		p, ok := plans[ref.GPU]
		if !ok {
			continue
		}
		if ref.MIG && p.Mode == migconfig.ModeUnchanged && !destroys(p, ref.GI) {
			continue
		}
		if pods[ref.GPU] == nil {
			pods[ref.GPU] = map[string]bool{}
		}
		pods[ref.GPU][a.PodKey()] = true
	}
	out := make(map[int][]string, len(pods))
	for gpu, set := range pods {
		out[gpu] = slices.Sorted(maps.Keys(set))
	}
	return out
}

func destroys(p migconfig.GPUPlan, gi uint32) bool {
	return slices.ContainsFunc(p.Destroy, func(in mig.Instance) bool { return in.GIID == gi })
}

// withoutGPUs returns plan without the GPUs in skip.
func withoutGPUs[V any](plan migconfig.Plan, skip map[int]V) migconfig.Plan {
	var out migconfig.Plan
	for _, p := range plan.GPUs {
		if _, ok := skip[p.GPU]; !ok {
			out.GPUs = append(out.GPUs, p)
		}
	}
	return out
}

// busyPods lists every pod in busy once, sorted.
func busyPods(busy map[int][]string) []string {
	set := map[string]bool{}
	for _, pods := range busy {
		for _, p := range pods {
			set[p] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// describeBusy says which pods hold which GPUs: "GPU 0: ns/a, ns/b; GPU 2: ns/c".
func describeBusy(busy map[int][]string) string {
	parts := make([]string, 0, len(busy))
	for _, gpu := range slices.Sorted(maps.Keys(busy)) {
		parts = append(parts, fmt.Sprintf("GPU %d: %s", gpu, strings.Join(busy[gpu], ", ")))
	}
	return strings.Join(parts, "; ")
}
