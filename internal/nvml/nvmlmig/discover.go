package nvmlmig

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/migflex/migflex/internal/domain/mig"
)

// Discover reads every GPU: identity, MIG mode, the profiles it supports
// and its current instances. It uses only calls real NVML supports (plus
// the optional ProfileNamer), so it reads a real node and a simulated one
// alike. It holds its own NVML reference (Init/Shutdown), so callers need
// not have initialized the library.
func Discover(lib nvml.Interface) ([]mig.GPU, error) {
	var gpus []mig.GPU
	err := withNVML(lib, func() error {
		n, ret := lib.DeviceGetCount()
		if ret != nvml.SUCCESS {
			return fmt.Errorf("counting GPUs: %w", ret)
		}
		for i := range n {
			g, err := discoverGPU(lib, i)
			if err != nil {
				return err
			}
			gpus = append(gpus, g)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return gpus, nil
}

// withNVML runs f between Init and Shutdown. NVML counts references, so
// this is cheap when the caller already holds one.
func withNVML(lib nvml.Interface, f func() error) error {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return fmt.Errorf("initializing NVML: %w", ret)
	}
	defer lib.Shutdown()
	return f()
}

func device(lib nvml.Interface, gpu int) (nvml.Device, error) {
	d, ret := lib.DeviceGetHandleByIndex(gpu)
	return d, nvmlErr(gpu, ret, "get device handle")
}

func discoverGPU(lib nvml.Interface, i int) (mig.GPU, error) {
	d, err := device(lib, i)
	if err != nil {
		return mig.GPU{}, err
	}
	g := mig.GPU{Index: i}
	var ret nvml.Return
	if g.UUID, ret = d.GetUUID(); ret != nvml.SUCCESS {
		return mig.GPU{}, nvmlErr(i, ret, "get UUID")
	}
	if g.Model, ret = d.GetName(); ret != nvml.SUCCESS {
		return mig.GPU{}, nvmlErr(i, ret, "get name")
	}
	pci, ret := d.GetPciInfo()
	if ret != nvml.SUCCESS {
		return mig.GPU{}, nvmlErr(i, ret, "get PCI info")
	}
	g.PCIDeviceID, g.PCISubsystemID = pci.PciDeviceId, pci.PciSubSystemId
	mem, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return mig.GPU{}, nvmlErr(i, ret, "get memory info")
	}
	g.MemoryMiB = mem.Total >> 20
	if g.Minor, ret = d.GetMinorNumber(); ret != nvml.SUCCESS {
		return mig.GPU{}, nvmlErr(i, ret, "get minor number")
	}

	cur, pending, ret := d.GetMigMode()
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_NOT_SUPPORTED:
		return g, nil // not MIG capable
	default:
		return mig.GPU{}, nvmlErr(i, ret, "get MIG mode")
	}
	g.MigCapable = true
	g.MigEnabled = cur == nvml.DEVICE_MIG_ENABLE
	g.MigPending = pending == nvml.DEVICE_MIG_ENABLE

	profiles, err := gpuProfiles(lib, d, i, mem.Total)
	if err != nil {
		return mig.GPU{}, err
	}
	for _, p := range profiles {
		g.Profiles = append(g.Profiles, p.Profile)
	}
	if g.MigEnabled {
		if g.Instances, err = instances(d, i, profiles); err != nil {
			return mig.GPU{}, err
		}
	}
	return g, nil
}

// profile is a Profile with the NVML info it was read from.
type profile struct {
	mig.Profile
	info nvml.GpuInstanceProfileInfo
}

// gpuProfiles is the GPU's profiles (GIProfiles) in their domain form.
func gpuProfiles(lib nvml.Interface, d nvml.Device, gpu int, totalMem uint64) ([]profile, error) {
	gips, err := GIProfiles(lib, d, gpu, totalMem)
	if err != nil {
		return nil, err
	}
	out := make([]profile, len(gips))
	for i, gp := range gips {
		out[i] = profile{info: gp.Info, Profile: gp.MIG()}
	}
	return out, nil
}

// instances reads the GPU instances of every profile with their full-size
// compute instance and MIG device UUID.
func instances(d nvml.Device, gpu int, profiles []profile) ([]mig.Instance, error) {
	uuids, err := migUUIDs(d, gpu)
	if err != nil {
		return nil, err
	}
	gips := make([]GIProfile, len(profiles))
	for i, p := range profiles {
		gips[i] = GIProfile{Query: p.Query, Name: p.Name, Info: p.info}
	}
	var out []mig.Instance
	err = EachGPUInstance(d, gpu, gips, func(pi int, gi nvml.GpuInstance, info nvml.GpuInstanceInfo) error {
		inst := mig.Instance{Profile: gips[pi].Name, Start: int(info.Placement.Start), Size: int(info.Placement.Size), GIID: info.Id}
		ci, ok, err := fullComputeInstance(gi, gpu, gips[pi].Info.SliceCount)
		if err != nil {
			return err
		}
		if ok {
			inst.HasCI, inst.CIID = true, ci
			inst.UUID = uuids[[2]uint32{inst.GIID, ci}]
		}
		out = append(out, inst)
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b mig.Instance) int { return cmp.Compare(a.Start, b.Start) })
	return out, nil
}

// fullComputeInstance returns the id of the GPU instance's compute instance
// that spans all its slices, if there is one. Smaller compute instances
// (made by hand with nvidia-smi) are not ones migflex creates or serves.
func fullComputeInstance(gi nvml.GpuInstance, gpu int, slices uint32) (uint32, bool, error) {
	q := mig.FullComputeProfile(int(slices))
	if q < 0 {
		return 0, false, nil
	}
	info, ret := gi.GetComputeInstanceProfileInfo(q, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if ret == nvml.ERROR_NOT_SUPPORTED {
		return 0, false, nil
	}
	if ret != nvml.SUCCESS {
		return 0, false, nvmlErr(gpu, ret, "get compute instance profile %d", q)
	}
	if info.InstanceCount == 0 {
		return 0, false, nil
	}
	cis, ret := gi.GetComputeInstances(&info)
	if ret != nvml.SUCCESS {
		return 0, false, nvmlErr(gpu, ret, "list compute instances")
	}
	if len(cis) == 0 {
		return 0, false, nil
	}
	ciInfo, ret := cis[0].GetInfo()
	if ret != nvml.SUCCESS {
		return 0, false, nvmlErr(gpu, ret, "get compute instance info")
	}
	return ciInfo.Id, true, nil
}

// migUUIDs maps (GPU instance id, compute instance id) to MIG device UUIDs.
func migUUIDs(d nvml.Device, gpu int) (map[[2]uint32]string, error) {
	n, ret := d.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil, nvmlErr(gpu, ret, "get max MIG device count")
	}
	out := map[[2]uint32]string{}
	for j := range n {
		m, ret := d.GetMigDeviceHandleByIndex(j)
		if ret == nvml.ERROR_NOT_FOUND {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, nvmlErr(gpu, ret, "get MIG device %d", j)
		}
		gi, ret := m.GetGpuInstanceId()
		if ret != nvml.SUCCESS {
			return nil, nvmlErr(gpu, ret, "get GPU instance id of MIG device %d", j)
		}
		ci, ret := m.GetComputeInstanceId()
		if ret != nvml.SUCCESS {
			return nil, nvmlErr(gpu, ret, "get compute instance id of MIG device %d", j)
		}
		uuid, ret := m.GetUUID()
		if ret != nvml.SUCCESS {
			return nil, nvmlErr(gpu, ret, "get UUID of MIG device %d", j)
		}
		out[[2]uint32{uint32(gi), uint32(ci)}] = uuid
	}
	return out, nil
}
