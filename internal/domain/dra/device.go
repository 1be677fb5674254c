package dra

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/migflex/migflex/internal/domain/mig"
)

// DriverName is the name migflex's kubelet plugin registers with the
// kubelet and publishes ResourceSlices under. It is not NVIDIA's
// gpu.nvidia.com: a driver name says which plugin prepares a device, and
// NVIDIA's driver may run on other nodes of the same cluster. The gpu.
// prefix keeps selectors parallel to NVIDIA's
// (device.attributes['gpu.migflex.io'].profile), and migflex.io is the
// domain the agent's Node annotations already use.
const DriverName = "gpu.migflex.io"

// Device is one device the driver publishes: a MIG device, or a whole GPU
// with MIG off.
type Device struct {
	// Name is the device's name in the ResourceSlice, a DNS label that
	// depends only on where the device is (see Devices).
	Name string `json:"name"`
	// UUID is the MIG device UUID or the GPU UUID: what the NVIDIA
	// runtime and the device-plugin path know the device by, and the ID
	// the agent's busy check keys devices by.
	UUID string `json:"uuid"`
	// MIG is true for a MIG device.
	MIG bool `json:"mig,omitempty"`
	// Profile is the MIG profile ("1g.10gb+me"); empty for a whole GPU.
	Profile string `json:"profile,omitempty"`
	// ProfileID is the GPU-instance profile id (19 for 1g.10gb).
	ProfileID uint32 `json:"profileID,omitempty"`
	// GPUIndex, GPUUUID, Minor and Model identify the (parent) GPU.
	GPUIndex int    `json:"gpuIndex"`
	GPUUUID  string `json:"gpuUUID"`
	Minor    int    `json:"minor"`
	Model    string `json:"model,omitempty"`
	// GI and CI are the GPU-instance and compute-instance ids; Start and
	// Size the placement in memory slices. Zero for a whole GPU.
	GI    uint32 `json:"gi,omitempty"`
	CI    uint32 `json:"ci,omitempty"`
	Start int    `json:"start,omitempty"`
	Size  int    `json:"size,omitempty"`
	// MemoryMB is the device's memory in MiB: the profile's for a MIG
	// device, the GPU's for a whole GPU. SMs and Engines are the
	// profile's multiprocessors and engines (zero for a whole GPU: NVML
	// reports them per profile only).
	MemoryMB uint64      `json:"memoryMB,omitempty"`
	SMs      int         `json:"sms,omitempty"`
	Engines  mig.Engines `json:"engines,omitzero"`
}

// Devices returns the devices of a layout, ordered by GPU index and
// placement: the whole GPU for a GPU with MIG off, and for a GPU with MIG
// on each GPU instance that has a compute instance (one without is no
// device, as on the device-plugin path). It fails, with no partial result,
// on a layout it cannot name: a MIG device without a UUID or with a profile
// its GPU does not list, two devices with one name or one UUID.
//
// A device's name depends only on where it is, never on its UUID, so
// republishing the same layout, or restarting the agent, names every device
// the same, and a claim allocated before still names its device. The names
// follow NVIDIA's DRA driver: gpu-<minor> for a whole GPU and
// gpu-<minor>-mig-<profile>-<profile id>-<placement start> for a MIG
// device, the profile lower-cased without dots and with other characters a
// DNS label cannot hold as '-' (1g.10gb+me is 1g10gb-me; the profile id
// keeps it apart from 1g.10gb-me).
func Devices(gpus []mig.GPU) ([]Device, error) {
	gpus = slices.Clone(gpus)
	slices.SortStableFunc(gpus, func(a, b mig.GPU) int { return a.Index - b.Index })
	var out []Device
	for _, g := range gpus {
		if !g.MigEnabled {
			out = append(out, Device{
				Name: fmt.Sprintf("gpu-%d", g.Minor), UUID: g.UUID,
				GPUIndex: g.Index, GPUUUID: g.UUID, Minor: g.Minor, Model: g.Model,
				MemoryMB: g.MemoryMiB,
			})
			continue
		}
		instances := slices.Clone(g.Instances)
		slices.SortStableFunc(instances, func(a, b mig.Instance) int { return a.Start - b.Start })
		for _, in := range instances {
			if !in.HasCI {
				continue
			}
			p, ok := g.Profile(in.Profile)
			if !ok {
				return nil, fmt.Errorf("GPU %d GI %d: profile %q is not one GPU %d supports", g.Index, in.GIID, in.Profile, g.Index)
			}
			if in.UUID == "" {
				return nil, fmt.Errorf("GPU %d GI %d (%s) has no UUID", g.Index, in.GIID, in.Profile)
			}
			out = append(out, Device{
				Name: migDeviceName(g.Minor, in.Profile, p.ID, in.Start), UUID: in.UUID,
				MIG: true, Profile: in.Profile, ProfileID: p.ID,
				GPUIndex: g.Index, GPUUUID: g.UUID, Minor: g.Minor, Model: g.Model,
				GI: in.GIID, CI: in.CIID, Start: in.Start, Size: in.Size,
				MemoryMB: p.MemoryMiB, SMs: p.SMs, Engines: p.Engines,
			})
		}
	}
	if err := checkDevices(out); err != nil {
		return nil, err
	}
	return out, nil
}

func migDeviceName(minor int, profile string, id uint32, start int) string {
	return fmt.Sprintf("gpu-%d-mig-%s-%d-%d", minor, labelPart(profile), id, start)
}

// labelPart makes a profile name fit inside a DNS label the way NVIDIA's
// driver does: lower case, dots dropped, anything else not [a-z0-9-] a '-'.
func labelPart(profile string) string {
	var b strings.Builder
	for _, c := range strings.ToLower(profile) {
		switch {
		case c == '.':
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-':
			b.WriteRune(c)
		default:
			b.WriteByte('-')
		}
	}
	return strings.Trim(b.String(), "-")
}

func checkDevices(devs []Device) error {
	names, uuids := map[string]string{}, map[string]string{}
	for _, d := range devs {
		where := d.describe()
		if errs := validation.IsDNS1123Label(d.Name); len(errs) > 0 {
			return fmt.Errorf("%s: device name %q: %s", where, d.Name, strings.Join(errs, "; "))
		}
		if d.UUID == "" {
			return fmt.Errorf("%s has no UUID", where)
		}
		if other, ok := names[d.Name]; ok {
			return fmt.Errorf("%s: device name %q is also the name of %s", where, d.Name, other)
		}
		if other, ok := uuids[d.UUID]; ok {
			return fmt.Errorf("%s: UUID %q is also the UUID of %s", where, d.UUID, other)
		}
		names[d.Name], uuids[d.UUID] = where, where
	}
	return nil
}

// describe says where a device is, for messages: "GPU 0" or "GPU 0 GI 3 (1g.10gb)".
func (d Device) describe() string {
	if d.MIG {
		return fmt.Sprintf("GPU %d GI %d (%s)", d.GPUIndex, d.GI, d.Profile)
	}
	return fmt.Sprintf("GPU %d", d.GPUIndex)
}

// ByName indexes devices by name.
func ByName(devs []Device) map[string]Device {
	out := make(map[string]Device, len(devs))
	for _, d := range devs {
		out[d.Name] = d
	}
	return out
}
