package dra

import (
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/migflex/migflex/internal/domain/mig"
)

// TaintReserved is the key of the NoSchedule taint a node's reservation
// (nodeinfo.AnnotationReservation) puts on the free devices of the GPUs it
// holds; its value is the reserved pod's UID. The scheduler allocates a
// tainted device to no claim that does not tolerate the taint, and pods
// that hold a device keep it (NoSchedule evicts nothing).
const TaintReserved = "migflex.io/reserved"

// Hold is what a reservation keeps from new claims on a node now.
type Hold struct {
	// Devices are the names of the devices kept from new claims, sorted;
	// empty when nothing is (no reservation, or its GPUs are all free and
	// whole: offered together).
	Devices []string
	// Ready is true when every reserved GPU is free and whole at once.
	Ready bool
	// Why says it in words, for the log.
	Why string
}

// Held decides which devices a reservation of the GPUs with indexes
// reserved keeps from new claims, the DRA side of the device plugin's
// withholding (agent.withheld), with the same rule: of the reserved GPUs,
// every device no claim holds, until every reserved GPU is whole (MIG off,
// no instance) and no claim holds any of its devices, when nothing is kept
// any more, so that the reserved pod, which needs all of them at once, is
// allocated them together. A device a claim holds is never kept (a taint
// on it would tell nothing, and the scheduler's allocation stands).
//
// gpus are the node's GPUs as last read (their MIG mode and instances);
// devs the devices published for them: static mode's Devices, or, in
// dynamic mode, every offered device (each placement and the whole GPU);
// inUse names the devices claims hold, prepared or only allocated. A
// reserved GPU the node does not have cannot free: the others stay kept
// until the reservation ends.
func Held(reserved []int, gpus []mig.GPU, devs []Device, inUse map[string]bool) Hold {
	if len(reserved) == 0 {
		return Hold{Why: "no reservation"}
	}
	ready := true
	for _, idx := range reserved {
		i := slices.IndexFunc(gpus, func(g mig.GPU) bool { return g.Index == idx })
		if i < 0 {
			ready = false
			continue
		}
		g := gpus[i]
		if g.MigEnabled || g.MigPending || len(g.Instances) > 0 {
			// Dynamic mode serves a whole GPU only with MIG off (Prepare
			// never changes MIG mode); static mode publishes a MIG GPU's
			// instances, not the GPU.
			ready = false
		}
		if slices.ContainsFunc(devs, func(d Device) bool { return d.GPUIndex == idx && inUse[d.Name] }) {
			ready = false
		}
	}
	if ready {
		return Hold{Ready: true, Why: "all its GPUs are free and whole: offered together"}
	}
	var out []string
	for _, d := range devs {
		if slices.Contains(reserved, d.GPUIndex) && !inUse[d.Name] {
			out = append(out, d.Name)
		}
	}
	slices.Sort(out)
	return Hold{Devices: slices.Compact(out), Why: "waiting for all its GPUs to be free and whole"}
}

// ReservedTaint is the taint Held's devices get: NoSchedule, keyed
// TaintReserved, valued the reserved pod's UID (a label value; empty where
// the reservation does not name one). Its time is left for the API server
// to set, as for the health taints.
func ReservedTaint(podUID string) resourceapi.DeviceTaint {
	return resourceapi.DeviceTaint{Key: TaintReserved, Value: podUID, Effect: resourceapi.DeviceTaintEffectNoSchedule}
}

// TaintDevices adds t to every device named in names, in every pool of
// res, in place. A device already carrying a taint of t's key gets t in its
// place.
func TaintDevices(res *resourceslice.DriverResources, names []string, t resourceapi.DeviceTaint) {
	if len(names) == 0 {
		return
	}
	for _, pool := range res.Pools {
		for si := range pool.Slices {
			devs := pool.Slices[si].Devices
			for di := range devs {
				if !slices.Contains(names, devs[di].Name) {
					continue
				}
				taints := slices.DeleteFunc(slices.Clone(devs[di].Taints), func(x resourceapi.DeviceTaint) bool { return x.Key == t.Key })
				devs[di].Taints = append(taints, t)
			}
		}
	}
}
