package sim_test

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
)

const customModels = `version: v1
models:
- name: H100-PCIE-70GB
  productName: Example 70 GB card
  pciDeviceID: "0x233110DE"
  memoryMiB: 71680
  sms: 114
  architecture: Hopper
  profiles:
  - {name: 1g.9gb, slices: 1, memorySlices: 1, memoryMiB: 8960, sms: 14, maxCount: 7, placements: [0, 1, 2, 3, 4, 5, 6]}
  - {name: 3g.30gb, slices: 3, memorySlices: 4, memoryMiB: 30720, sms: 42, maxCount: 2, placements: [0, 4]}
  - {name: 1g.9gb+me, query: 1_SLICE_REV1, slices: 1, memorySlices: 1, memoryMiB: 8960, sms: 14, maxCount: 1, placements: [0, 1, 2, 3, 4, 5, 6]}
  - {name: 7g.70gb, id: 42, query: GPU_INSTANCE_PROFILE_7_SLICE, slices: 7, memorySlices: 8, memoryMiB: 70000, sms: 98, maxCount: 1, placements: [0]}
`

// TestCustomModel runs a custom model through NVML: its own profile names
// (3g.30gb on a 70 GB card) and the compute-slice limit on a profile whose
// memory placements alone would allow more.
func TestCustomModel(t *testing.T) {
	models, err := gpumodel.Parse([]byte(customModels + `- name: SLICE-TEST
  pciDeviceID: 0x10DE
  memoryMiB: 40960
  sms: 98
  architecture: hopper
  profiles:
  - {name: 4g.20gb, slices: 4, memorySlices: 4, memoryMiB: 19968, sms: 56, maxCount: 2, placements: [0, 4]}
`))
	if err != nil {
		t.Fatal(err)
	}
	l := newLibConfig(t, sim.Config{Models: models, GPUs: []sim.GPUSpec{gpu("H100-PCIE-70GB"), gpu("SLICE-TEST")}})

	d := device(t, l, 0)
	info := profileInfo(t, d, nvml.GPU_INSTANCE_PROFILE_3_SLICE)
	namer, ok := d.(interface {
		ProfileName(nvml.GpuInstanceProfileInfo) (string, bool)
	})
	if !ok {
		t.Fatal("simulated device has no ProfileName")
	}
	if name, ok := namer.ProfileName(info); !ok || name != "3g.30gb" {
		t.Errorf("ProfileName() = %q, %v, want 3g.30gb", name, ok)
	}
	if info.MemorySizeMB != 30720 || info.SliceCount != 3 || info.InstanceCount != 2 {
		t.Errorf("profile info = %+v", info)
	}

	d = enableMIG(t, l, 1)
	info = profileInfo(t, d, nvml.GPU_INSTANCE_PROFILE_4_SLICE)
	if n, _ := d.GetGpuInstanceRemainingCapacity(&info); n != 1 {
		t.Errorf("remaining capacity of 2 × 4 slices on 7 = %d, want 1", n)
	}
	if _, ret := createGI(d, info, 0, 4); ret != nvml.SUCCESS {
		t.Fatalf("first 4-slice instance = %v", ret)
	}
	if _, ret := createGI(d, info, 4, 4); ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
		t.Errorf("second 4-slice instance (8 compute slices of 7) = %v, want ERROR_INSUFFICIENT_RESOURCES", ret)
	}
}

func TestUnknownModel(t *testing.T) {
	_, err := sim.New(sim.Config{GPUs: []sim.GPUSpec{gpu("V100")}})
	want := `simulator config: gpus[0]: unknown GPU model "V100" (known: A100-PCIE-40GB, A100-PCIE-80GB, A100-SXM4-40GB, A100-SXM4-80GB, A30-24GB, B200-180GB, GB200-186GB, H100-NVL-94GB, H100-PCIE-80GB, H100-SXM5-80GB, H20-96GB, H200-NVL-141GB, H200-SXM-141GB, RTX-PRO-6000-Server-96GB)`
	if err == nil || err.Error() != want {
		t.Errorf("New() error = %v, want %q", err, want)
	}
	models, _ := gpumodel.Parse([]byte(customModels))
	if _, err := sim.New(sim.Config{Models: append(models, models...)}); err == nil || !strings.Contains(err.Error(), "name used by two custom models") {
		t.Errorf("New() with two custom models of one name = %v, want a name clash", err)
	}
}

// TestCustomModelReplacesBuiltin: a probe dump names its model after the
// built-in one it corrects, and the simulator runs the dump's table.
func TestCustomModelReplacesBuiltin(t *testing.T) {
	models, err := gpumodel.Parse([]byte(strings.Replace(customModels, "H100-PCIE-70GB", "A100-SXM4-40GB", 1)))
	if err != nil {
		t.Fatal(err)
	}
	l := newLibConfig(t, sim.Config{Models: models, GPUs: []sim.GPUSpec{gpu("A100-SXM4-40GB")}})
	info := profileInfo(t, device(t, l, 0), nvml.GPU_INSTANCE_PROFILE_3_SLICE)
	if info.MemorySizeMB != 30720 {
		t.Errorf("3-slice profile memory = %d MiB, want the custom table's 30720", info.MemorySizeMB)
	}
	if !gpumodel.IsBuiltin("A100-SXM4-40GB") || gpumodel.IsBuiltin("H100-PCIE-70GB") {
		t.Error("IsBuiltin is wrong")
	}
}
