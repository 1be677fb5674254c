package sim

import (
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/migflex/migflex/internal/domain/gpumodel"
)

// migHandle is the nvml.Device of a MIG device: one compute instance. It
// goes stale with its compute instance, like a real MIG device handle.
type migHandle struct {
	unsupportedDevice
	lib    *Lib
	gpu    int
	gi, ci uint32
	// giSerial and serial identify the instances the handle was made for.
	giSerial, serial uint64
}

var _ nvml.Device = (*migHandle)(nil)

// migDevices lists GPU gpu's MIG devices ordered by GPU instance id, then
// compute instance id. Call with the lock held.
func (l *Lib) migDevices(gpu int) []*migHandle {
	var out []*migHandle
	g := &l.st.GPUs[gpu]
	for _, gi := range g.Instances {
		for _, ci := range gi.CIs {
			out = append(out, &migHandle{lib: l, gpu: gpu, gi: gi.ID, ci: ci.ID, giSerial: gi.serial, serial: ci.serial})
		}
	}
	slices.SortFunc(out, func(a, b *migHandle) int {
		if a.gi != b.gi {
			return int(a.gi) - int(b.gi)
		}
		return int(a.ci) - int(b.ci)
	})
	return out
}

// begin locks the library and finds the MIG device's instances; the caller
// unlocks on SUCCESS.
func (h *migHandle) begin() (*gpuState, *gpumodel.Profile, nvml.Return) {
	if r := h.lib.begin(); r != nvml.SUCCESS {
		return nil, nil, r
	}
	ci := ciHandle{lib: h.lib, gpu: h.gpu, gi: h.gi, giSerial: h.giSerial, id: h.ci, serial: h.serial}
	_, _, p, r := ci.lookup(&h.lib.st)
	if r != nvml.SUCCESS {
		h.lib.mu.Unlock()
		return nil, nil, r
	}
	return &h.lib.st.GPUs[h.gpu], p, nvml.SUCCESS
}

func (h *migHandle) IsMigDeviceHandle() (bool, nvml.Return) {
	if _, _, r := h.begin(); r != nvml.SUCCESS {
		return false, r
	}
	defer h.lib.mu.Unlock()
	return true, nvml.SUCCESS
}

func (h *migHandle) GetDeviceHandleFromMigDeviceHandle() (nvml.Device, nvml.Return) {
	if _, _, r := h.begin(); r != nvml.SUCCESS {
		return nil, r
	}
	defer h.lib.mu.Unlock()
	return h.lib.gpus[h.gpu], nvml.SUCCESS
}

func (h *migHandle) GetGpuInstanceId() (int, nvml.Return) {
	if _, _, r := h.begin(); r != nvml.SUCCESS {
		return 0, r
	}
	defer h.lib.mu.Unlock()
	return int(h.gi), nvml.SUCCESS
}

func (h *migHandle) GetComputeInstanceId() (int, nvml.Return) {
	if _, _, r := h.begin(); r != nvml.SUCCESS {
		return 0, r
	}
	defer h.lib.mu.Unlock()
	return int(h.ci), nvml.SUCCESS
}

func (h *migHandle) GetUUID() (string, nvml.Return) {
	g, _, r := h.begin()
	if r != nvml.SUCCESS {
		return "", r
	}
	defer h.lib.mu.Unlock()
	gi, _ := g.instance(h.gi) // begin found both
	ci, _ := gi.ci(h.ci)
	return ci.UUID, nvml.SUCCESS
}

// GetName is "<model> MIG <profile>", the shape real NVML uses ("NVIDIA
// A100-SXM4-40GB MIG 1g.5gb").
func (h *migHandle) GetName() (string, nvml.Return) {
	_, p, r := h.begin()
	if r != nvml.SUCCESS {
		return "", r
	}
	defer h.lib.mu.Unlock()
	return h.lib.models[h.gpu].Name + " MIG " + p.Name, nvml.SUCCESS
}

func (h *migHandle) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	_, p, r := h.begin()
	if r != nvml.SUCCESS {
		return nvml.Memory{}, r
	}
	defer h.lib.mu.Unlock()
	total := p.MemoryMiB << 20
	return nvml.Memory{Total: total, Free: total}, nvml.SUCCESS
}

// GetAttributes describes the MIG device (real NVML supports the call only
// on MIG device handles; the GPU handle answers ERROR_NOT_SUPPORTED).
func (h *migHandle) GetAttributes() (nvml.DeviceAttributes, nvml.Return) {
	_, p, r := h.begin()
	if r != nvml.SUCCESS {
		return nvml.DeviceAttributes{}, r
	}
	defer h.lib.mu.Unlock()
	return nvml.DeviceAttributes{
		MultiprocessorCount:       uint32(p.SMs),
		GpuInstanceSliceCount:     uint32(p.Slices),
		ComputeInstanceSliceCount: uint32(p.Slices),
		MemorySizeMB:              p.MemoryMiB,
	}, nvml.SUCCESS
}

func (h *migHandle) GetArchitecture() (nvml.DeviceArchitecture, nvml.Return) {
	if _, _, r := h.begin(); r != nvml.SUCCESS {
		return 0, r
	}
	defer h.lib.mu.Unlock()
	return archNVML(h.lib.models[h.gpu].Architecture), nvml.SUCCESS
}

func (h *migHandle) GetCudaComputeCapability() (int, int, nvml.Return) {
	if _, _, r := h.begin(); r != nvml.SUCCESS {
		return 0, 0, r
	}
	defer h.lib.mu.Unlock()
	major, minor := h.lib.models[h.gpu].Architecture.ComputeCapability()
	return major, minor, nvml.SUCCESS
}
