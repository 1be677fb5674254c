package sim_test

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim/simtest"
)

// newLib returns an initialized in-memory simulator with the given GPUs.
func newLib(t *testing.T, gpus ...sim.GPUSpec) *sim.Lib {
	t.Helper()
	return newLibConfig(t, sim.Config{GPUs: gpus, UUIDSeed: "test-node"})
}

func newLibConfig(t *testing.T, cfg sim.Config) *sim.Lib {
	t.Helper()
	return simtest.NewInit(t, cfg)
}

func gpu(model string) sim.GPUSpec { return sim.GPUSpec{Model: model, Count: 1} }

func device(t *testing.T, l nvml.Interface, i int) nvml.Device {
	t.Helper()
	d, ret := l.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		t.Fatalf("DeviceGetHandleByIndex(%d) = %v", i, ret)
	}
	return d
}

// enableMIG turns MIG on for GPU i, resetting it when the mode is pending
// (Ampere).
func enableMIG(t *testing.T, l *sim.Lib, i int) nvml.Device {
	t.Helper()
	d := device(t, l, i)
	if _, ret := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		t.Fatalf("SetMigMode() = %v", ret)
	}
	if err := l.ResetGPU(i); err != nil {
		t.Fatalf("ResetGPU(%d) = %v", i, err)
	}
	return d
}

func profileInfo(t *testing.T, d nvml.Device, query int) nvml.GpuInstanceProfileInfo {
	t.Helper()
	info, ret := d.GetGpuInstanceProfileInfo(query)
	if ret != nvml.SUCCESS {
		t.Fatalf("GetGpuInstanceProfileInfo(%d) = %v", query, ret)
	}
	return info
}

// createGI creates a GPU instance of the query's profile at start, or at
// the driver's choice for start < 0.
func createGI(d nvml.Device, info nvml.GpuInstanceProfileInfo, start int, memSlices uint32) (nvml.GpuInstance, nvml.Return) {
	if start < 0 {
		return d.CreateGpuInstance(&info)
	}
	return d.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: uint32(start), Size: memSlices})
}

// createInstance makes a GPU instance with its full-size compute instance.
func createInstance(t *testing.T, d nvml.Device, query, start int) (nvml.GpuInstance, nvml.ComputeInstance) {
	t.Helper()
	info := profileInfo(t, d, query)
	placements, _ := d.GetGpuInstancePossiblePlacements(&info)
	gi, ret := createGI(d, info, start, placements[0].Size)
	if ret != nvml.SUCCESS {
		t.Fatalf("create GPU instance (query %d at %d) = %v", query, start, ret)
	}
	ciInfo, ret := gi.GetComputeInstanceProfileInfo(fullCI[info.SliceCount], nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if ret != nvml.SUCCESS {
		t.Fatalf("GetComputeInstanceProfileInfo() = %v", ret)
	}
	ci, ret := gi.CreateComputeInstance(&ciInfo)
	if ret != nvml.SUCCESS {
		t.Fatalf("CreateComputeInstance() = %v", ret)
	}
	return gi, ci
}

var fullCI = map[uint32]int{
	1: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE,
	2: nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE,
	3: nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE,
	4: nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE,
	7: nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE,
}

var builtinNames = []string{"A100-SXM4-40GB", "A100-SXM4-80GB", "H100-SXM5-80GB", "H200-SXM-141GB"}
