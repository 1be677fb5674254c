package sim

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/migflex/migflex/internal/domain/gpumodel"
)

// gpuHandle is the nvml.Device of a whole GPU. Its identity never changes,
// so handles stay valid across resets and reboots like real ones.
type gpuHandle struct {
	unsupportedDevice
	lib   *Lib
	index int
}

var _ nvml.Device = (*gpuHandle)(nil)

// begin locks the library and returns the GPU's current state; the caller
// unlocks on SUCCESS. A GPU off the bus answers ERROR_GPU_IS_LOST.
func (h *gpuHandle) begin() (*gpuState, *gpumodel.Model, nvml.Return) {
	if r := h.lib.begin(); r != nvml.SUCCESS {
		return nil, nil, r
	}
	if r := lostErr(&h.lib.st, h.index); r != nvml.SUCCESS {
		h.lib.mu.Unlock()
		return nil, nil, r
	}
	return &h.lib.st.GPUs[h.index], h.lib.models[h.index], nvml.SUCCESS
}

func (h *gpuHandle) GetIndex() (int, nvml.Return) {
	if _, _, r := h.begin(); r != nvml.SUCCESS {
		return 0, r
	}
	defer h.lib.mu.Unlock()
	return h.index, nvml.SUCCESS
}

func (h *gpuHandle) GetMinorNumber() (int, nvml.Return) { return h.GetIndex() }

func (h *gpuHandle) GetUUID() (string, nvml.Return) {
	g, _, r := h.begin()
	if r != nvml.SUCCESS {
		return "", r
	}
	defer h.lib.mu.Unlock()
	return g.UUID, nvml.SUCCESS
}

// GetName returns the model name (see mig.GPU.Model).
func (h *gpuHandle) GetName() (string, nvml.Return) {
	_, m, r := h.begin()
	if r != nvml.SUCCESS {
		return "", r
	}
	defer h.lib.mu.Unlock()
	return m.Name, nvml.SUCCESS
}

func (h *gpuHandle) GetPciInfo() (nvml.PciInfo, nvml.Return) {
	_, m, r := h.begin()
	if r != nvml.SUCCESS {
		return nvml.PciInfo{}, r
	}
	defer h.lib.mu.Unlock()
	id := pciBusID(h.index)
	info := nvml.PciInfo{Bus: uint32(0x18 + h.index*0x10), PciDeviceId: m.PCIDeviceID, PciSubSystemId: m.PCISubsystemID}
	copyCString(info.BusId[:], id)
	copyCString(info.BusIdLegacy[:], id[4:]) // "0000:18:00.0"
	return info, nvml.SUCCESS
}

func copyCString(dst []int8, s string) {
	for i := 0; i < len(s) && i < len(dst)-1; i++ {
		dst[i] = int8(s[i])
	}
}

func (h *gpuHandle) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	_, m, r := h.begin()
	if r != nvml.SUCCESS {
		return nvml.Memory{}, r
	}
	defer h.lib.mu.Unlock()
	total := m.MemoryMiB << 20
	return nvml.Memory{Total: total, Free: total}, nvml.SUCCESS
}

func (h *gpuHandle) GetArchitecture() (nvml.DeviceArchitecture, nvml.Return) {
	_, m, r := h.begin()
	if r != nvml.SUCCESS {
		return 0, r
	}
	defer h.lib.mu.Unlock()
	return archNVML(m.Architecture), nvml.SUCCESS
}

func (h *gpuHandle) GetCudaComputeCapability() (int, int, nvml.Return) {
	_, m, r := h.begin()
	if r != nvml.SUCCESS {
		return 0, 0, r
	}
	defer h.lib.mu.Unlock()
	major, minor := m.Architecture.ComputeCapability()
	return major, minor, nvml.SUCCESS
}

func (h *gpuHandle) IsMigDeviceHandle() (bool, nvml.Return) {
	if _, _, r := h.begin(); r != nvml.SUCCESS {
		return false, r
	}
	defer h.lib.mu.Unlock()
	return false, nvml.SUCCESS
}

// GetDeviceHandleFromMigDeviceHandle on a GPU handle is a caller error.
func (h *gpuHandle) GetDeviceHandleFromMigDeviceHandle() (nvml.Device, nvml.Return) {
	if _, _, r := h.begin(); r != nvml.SUCCESS {
		return nil, r
	}
	defer h.lib.mu.Unlock()
	return nil, nvml.ERROR_INVALID_ARGUMENT
}

func (h *gpuHandle) GetMigMode() (int, int, nvml.Return) {
	g, _, r := h.begin()
	if r != nvml.SUCCESS {
		return 0, 0, r
	}
	defer h.lib.mu.Unlock()
	return migMode(g.MigEnabled), migMode(g.MigPending), nvml.SUCCESS
}

func migMode(enabled bool) int {
	if enabled {
		return nvml.DEVICE_MIG_ENABLE
	}
	return nvml.DEVICE_MIG_DISABLE
}

// SetMigMode requests a MIG mode. The GPU must be idle (no GPU instances, no
// processes): otherwise the call fails with ERROR_IN_USE and changes
// nothing. Hopper and later switch at once. Ampere only records the pending
// mode and returns SUCCESS with activation status ERROR_RESET_REQUIRED: on
// real hardware NVML tries to reset the GPU itself and, on a node where the
// GPU is held open (persistenced, DCGM, a device plugin), reports the
// activation failure while the mode stays pending until `nvidia-smi -r` or
// a reboot. Asking for the mode the GPU already has with nothing pending is
// a no-op, even with instances present.
func (h *gpuHandle) SetMigMode(mode int) (activation nvml.Return, ret nvml.Return) {
	l := h.lib
	if r := l.callFault(CallSetMigMode, h.index); r != nvml.SUCCESS {
		return r, r
	}
	if r := l.beginWrite(); r != nvml.SUCCESS {
		return r, r
	}
	defer l.mu.Unlock()
	if r := lostErr(&l.st, h.index); r != nvml.SUCCESS {
		return r, r
	}
	if mode != nvml.DEVICE_MIG_DISABLE && mode != nvml.DEVICE_MIG_ENABLE {
		return nvml.ERROR_INVALID_ARGUMENT, nvml.ERROR_INVALID_ARGUMENT
	}
	want := mode == nvml.DEVICE_MIG_ENABLE
	g := &l.st.GPUs[h.index]
	if g.MigEnabled == want && g.MigPending == want {
		return nvml.SUCCESS, nvml.SUCCESS
	}
	if len(g.Instances) > 0 || g.Busy {
		return nvml.ERROR_IN_USE, nvml.ERROR_IN_USE
	}
	next := l.st.clone()
	ng := &next.GPUs[h.index]
	ng.MigPending = want
	activation = nvml.SUCCESS
	if l.models[h.index].Architecture.PendingUntilReset() {
		if ng.MigEnabled != want {
			activation = nvml.ERROR_RESET_REQUIRED
		}
	} else {
		ng.MigEnabled = want
	}
	if r := l.commit(next); r != nvml.SUCCESS {
		return r, r
	}
	return activation, nvml.SUCCESS
}

// GetMaxMigDeviceCount is the number of compute slices (one MIG device per
// compute slice: 7, or 4 on A30 and RTX PRO) with MIG enabled and 0
// otherwise, as NVML documents.
func (h *gpuHandle) GetMaxMigDeviceCount() (int, nvml.Return) {
	g, m, r := h.begin()
	if r != nvml.SUCCESS {
		return 0, r
	}
	defer h.lib.mu.Unlock()
	if !g.MigEnabled {
		return 0, nvml.SUCCESS
	}
	_, computeSlices := m.Geometry()
	return computeSlices, nvml.SUCCESS
}

// GetMigDeviceHandleByIndex indexes the GPU's MIG devices ordered by GPU
// instance id, then compute instance id.
func (h *gpuHandle) GetMigDeviceHandleByIndex(index int) (nvml.Device, nvml.Return) {
	if _, _, r := h.begin(); r != nvml.SUCCESS {
		return nil, r
	}
	defer h.lib.mu.Unlock()
	if index < 0 {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	devs := h.lib.migDevices(h.index)
	if index >= len(devs) {
		return nil, nvml.ERROR_NOT_FOUND
	}
	return devs[index], nvml.SUCCESS
}

// GetSupportedEventTypes reports Xid errors only: they are the events the
// simulator can produce.
func (h *gpuHandle) GetSupportedEventTypes() (uint64, nvml.Return) {
	if _, _, r := h.begin(); r != nvml.SUCCESS {
		return 0, r
	}
	defer h.lib.mu.Unlock()
	return supportedEvents, nvml.SUCCESS
}

// ProfileName names a GPU-instance profile from the model's table, so custom
// models keep their names (3g.30gb on a 70 GB card). internal/domain/mig finds it
// by type assertion; real NVML has no such call.
func (h *gpuHandle) ProfileName(info nvml.GpuInstanceProfileInfo) (string, bool) {
	p, ok := h.lib.models[h.index].ProfileByID(info.Id)
	if !ok {
		return "", false
	}
	return p.Name, true
}

// archNVML is the architecture as NVML reports it.
func archNVML(a gpumodel.Architecture) nvml.DeviceArchitecture {
	switch a {
	case gpumodel.Ampere:
		return nvml.DEVICE_ARCH_AMPERE
	case gpumodel.Hopper:
		return nvml.DEVICE_ARCH_HOPPER
	case gpumodel.Blackwell:
		return nvml.DEVICE_ARCH_BLACKWELL
	}
	return nvml.DEVICE_ARCH_UNKNOWN
}
