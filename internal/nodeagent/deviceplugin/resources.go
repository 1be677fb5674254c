package deviceplugin

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/resourcename"
)

// maxDeviceIDLen is the kubelet's limit on device IDs.
const maxDeviceIDLen = 63

// Device is one device served to the kubelet: a MIG device or a whole GPU.
type Device struct {
	// ID is what the kubelet sees: the MIG device UUID or the GPU UUID.
	ID string `json:"id"`
	// Resource is the extended resource the device is served as.
	Resource string `json:"resource"`
	// Profile is the MIG profile ("2g.20gb"); empty for a whole GPU.
	Profile string `json:"profile,omitempty"`
	// GPUIndex, GPUUUID and Minor identify the physical (parent) GPU.
	GPUIndex int    `json:"gpuIndex"`
	GPUUUID  string `json:"gpuUUID"`
	Minor    int    `json:"minor"`
	// MIG is true for a MIG device; GI and CI are then its GPU-instance and
	// compute-instance ids.
	MIG bool   `json:"mig"`
	GI  uint32 `json:"gi,omitempty"`
	CI  uint32 `json:"ci,omitempty"`
	// Shares is, for a replica of a shared device, the ID of that device
	// (ID is then sharing.ReplicaID(Shares, Replica), as NVIDIA's device
	// plugin names replicas); empty for a device served whole.
	Shares  string `json:"shares,omitempty"`
	Replica int    `json:"replica,omitempty"`
}

// Underlying is the ID of the GPU or MIG device under d: what health,
// draining, the busy check and the container runtime know it by.
func (d Device) Underlying() string {
	if d.Shares != "" {
		return d.Shares
	}
	return d.ID
}

// Resources maps a GPU layout to the devices of each resource under the
// given strategy. Every device list is ordered by GPU index and placement.
// It fails, without a partial result, when the layout cannot be served under
// the strategy (single with several profiles) or is malformed (a MIG device
// without a UUID, duplicate IDs).
func Resources(gpus []mig.GPU, strategy MigStrategy) (map[string][]Device, error) {
	gpus = slices.Clone(gpus)
	sort.SliceStable(gpus, func(i, j int) bool { return gpus[i].Index < gpus[j].Index })

	out := map[string][]Device{}
	add := func(d Device) { out[d.Resource] = append(out[d.Resource], d) }
	switch strategy {
	case MigStrategyMixed:
		for _, g := range gpus {
			if !g.MigEnabled {
				add(wholeGPU(g))
				continue
			}
			for _, in := range instancesOf(g) {
				add(migDevice(g, in, string(resourcename.MIG(in.Profile))))
			}
		}
	case MigStrategySingle:
		var migOn, migOff []int
		profiles := map[string]bool{}
		for _, g := range gpus {
			if !g.MigEnabled {
				migOff = append(migOff, g.Index)
				add(wholeGPU(g))
				continue
			}
			migOn = append(migOn, g.Index)
			for _, in := range instancesOf(g) {
				profiles[in.Profile] = true
				add(migDevice(g, in, string(resourcename.GPU)))
			}
		}
		if len(migOn) > 0 && len(migOff) > 0 {
			return nil, fmt.Errorf("mig strategy single: GPUs %v have MIG enabled and GPUs %v do not; single needs MIG on all GPUs or on none (use mixed)", migOn, migOff)
		}
		if len(profiles) > 1 {
			return nil, fmt.Errorf("mig strategy single: MIG devices have %d profiles (%s); single needs one profile on the whole node (use mixed)",
				len(profiles), strings.Join(slices.Sorted(maps.Keys(profiles)), ", "))
		}
	case MigStrategyNone:
		for _, g := range gpus {
			add(wholeGPU(g))
		}
	default:
		return nil, fmt.Errorf("unknown MIG strategy %q", strategy)
	}
	if err := checkIDs(out); err != nil {
		return nil, err
	}
	return out, nil
}

// instancesOf returns the GPU instances that are MIG devices: those with a
// compute instance. migflex creates one full-size compute instance per GPU
// instance, so every such device's compute slices equal its GPU slices.
func instancesOf(g mig.GPU) []mig.Instance {
	var out []mig.Instance
	for _, in := range g.Instances {
		if in.HasCI {
			out = append(out, in)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

func wholeGPU(g mig.GPU) Device {
	return Device{ID: g.UUID, Resource: string(resourcename.GPU), GPUIndex: g.Index, GPUUUID: g.UUID, Minor: g.Minor}
}

func migDevice(g mig.GPU, in mig.Instance, resource string) Device {
	return Device{
		ID: in.UUID, Resource: resource, Profile: in.Profile,
		GPUIndex: g.Index, GPUUUID: g.UUID, Minor: g.Minor,
		MIG: true, GI: in.GIID, CI: in.CIID,
	}
}

func checkIDs(resources map[string][]Device) error {
	seen := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(resources)) {
		for _, d := range resources[name] {
			where := fmt.Sprintf("GPU %d", d.GPUIndex)
			if d.MIG {
				where = fmt.Sprintf("GPU %d GI %d (%s)", d.GPUIndex, d.GI, d.Profile)
			}
			switch {
			case d.ID == "":
				return fmt.Errorf("%s has no UUID", where)
			case len(d.ID) > maxDeviceIDLen:
				return fmt.Errorf("%s: UUID %q is longer than the kubelet's %d-character limit on device IDs", where, d.ID, maxDeviceIDLen)
			case seen[d.ID] != "":
				return fmt.Errorf("%s: UUID %q is also the UUID of %s", where, d.ID, seen[d.ID])
			}
			seen[d.ID] = where
		}
	}
	return nil
}
