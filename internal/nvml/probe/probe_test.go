package probe

import (
	"bytes"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"

	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
)

func newSim(t *testing.T, cfg sim.Config) *sim.Lib {
	t.Helper()
	if cfg.UUIDSeed == "" {
		cfg.UUIDSeed = "probe-test"
	}
	l, err := sim.New(cfg)
	if err != nil {
		t.Fatalf("sim.New: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// withInstances enables MIG on GPU gpu and fills it first fit with the
// smallest profile (query 1_SLICE), each instance with its full-size
// compute instance, and leaves one more without a compute instance when
// there is room.
func withInstances(t *testing.T, l *sim.Lib, gpu int) {
	t.Helper()
	if ret := l.Init(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	defer l.Shutdown()
	d, _ := l.DeviceGetHandleByIndex(gpu)
	if _, ret := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		t.Fatalf("SetMigMode: %v", ret)
	}
	if err := l.ResetGPU(gpu); err != nil {
		t.Fatal(err)
	}
	info, ret := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_2_SLICE)
	if ret != nvml.SUCCESS {
		t.Fatalf("2-slice profile: %v", ret)
	}
	gi, ret := d.CreateGpuInstance(&info)
	if ret != nvml.SUCCESS {
		t.Fatalf("create 2-slice instance: %v", ret)
	}
	ci, ret := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if ret != nvml.SUCCESS {
		t.Fatalf("compute profile: %v", ret)
	}
	if _, ret := gi.CreateComputeInstance(&ci); ret != nvml.SUCCESS {
		t.Fatalf("create compute instance: %v", ret)
	}
	info, _ = d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	if _, ret := d.CreateGpuInstance(&info); ret != nvml.SUCCESS {
		t.Fatalf("create 1-slice instance: %v", ret)
	}
}

// TestRoundTripBuiltins probes every built-in model, runs the simulator
// from the dump and probes it again: the two dumps are the same, and the
// first compares clean with the built-in model.
func TestRoundTripBuiltins(t *testing.T) {
	builtins := gpumodel.Builtin()
	for _, m := range builtins {
		t.Run(m.Name, func(t *testing.T) {
			l := newSim(t, sim.Config{GPUs: []sim.GPUSpec{{Model: m.Name, Count: 2}}})
			withInstances(t, l, 1)
			first, err := Probe(l, builtins)
			if err != nil {
				t.Fatal(err)
			}
			if diffs := CompareWithBuiltin(first, builtins); len(diffs) != 0 {
				t.Errorf("probe of the built-in model differs from it: %v", diffs)
			}
			dump, err := first.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := sim.ParseConfig(dump, t.TempDir(), "")
			if err != nil {
				t.Fatalf("the dump is not a simulator config: %v\n%s", err, dump)
			}
			second, err := Probe(newSim(t, cfg), builtins)
			if err != nil {
				t.Fatal(err)
			}
			again, err := second.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(dump), string(again)); diff != "" {
				t.Errorf("dump of the simulator run from a dump (-first +second):\n%s", diff)
			}
			for _, p := range first.Config.Models[0].Profiles {
				if p.Query != nvml.GPU_INSTANCE_PROFILE_2_SLICE {
					continue
				}
				want := []gpumodel.ComputeProfile{{Query: nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE, Slices: 2, SMs: p.SMs, MaxCount: 1, Placements: []int{0}}}
				if diff := cmp.Diff(want, p.ComputeProfiles); diff != "" {
					t.Errorf("compute-instance profiles read on the 2-slice instance (-want +got):\n%s", diff)
				}
			}
			gpu1 := first.Config.GPUs[1].Initial
			if !gpu1.MigEnabled || len(gpu1.Instances) != 2 || len(gpu1.Instances[0].ComputeInstances)+len(gpu1.Instances[1].ComputeInstances) != 1 {
				t.Errorf("GPU 1 state = %+v, want MIG on, two instances, one compute instance", gpu1)
			}
		})
	}
}

func TestCompareFindsDifferences(t *testing.T) {
	builtins := gpumodel.Builtin()
	var h100 gpumodel.Model
	for _, m := range builtins {
		if m.Name == "H100-SXM5-80GB" {
			h100 = m
		}
	}
	// A "real" H100 whose driver reports another 1g.10gb size and no
	// 1g.10gb+me (a custom model replaces the built-in in the simulator).
	changed := h100
	changed.Profiles = nil
	for _, p := range h100.Profiles {
		switch p.Name {
		case "1g.10gb":
			p.MemoryMiB = 9856
			p.Placements = []int{0, 1, 2, 3, 4, 5}
			p.MaxCount = 6
		case "1g.10gb+me":
			continue
		}
		changed.Profiles = append(changed.Profiles, p)
	}
	l := newSim(t, sim.Config{Models: []gpumodel.Model{changed}, GPUs: []sim.GPUSpec{{Model: h100.Name, Count: 1}}})
	r, err := Probe(l, builtins)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range CompareWithBuiltin(r, builtins) {
		got = append(got, d.String())
	}
	want := []string{
		"H100-SXM5-80GB: profile 1g.10gb: memoryMiB: probe 9856, built-in 9984",
		"H100-SXM5-80GB: profile 1g.10gb: maxCount: probe 6, built-in 7",
		"H100-SXM5-80GB: profile 1g.10gb: placements: probe [0 1 2 3 4 5], built-in [0 1 2 3 4 5 6]",
		"H100-SXM5-80GB: profile 1g.10gb+me: probe (none), built-in id 20",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("differences (-want +got):\n%s", diff)
	}

	// A model without a built-in of its name (nor of its PCI device id) is
	// a difference.
	other := h100
	other.Name, other.PCIDeviceID = "H100-Lab", 0x000110DE
	l = newSim(t, sim.Config{Models: []gpumodel.Model{other}, GPUs: []sim.GPUSpec{{Model: "H100-Lab", Count: 1}}})
	if r, err = Probe(l, builtins); err != nil {
		t.Fatal(err)
	}
	if diffs := CompareWithBuiltin(r, builtins); len(diffs) != 1 || diffs[0].Field != "model" {
		t.Errorf("differences of a model without a built-in = %v", diffs)
	}
}

// guardLib fails the test on any NVML call that changes MIG state.
type guardLib struct {
	nvml.Interface
	t *testing.T
}

func (g guardLib) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	d, ret := g.Interface.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return d, ret
	}
	return guardDevice{d, g.t}, ret
}

type guardDevice struct {
	nvml.Device
	t *testing.T
}

func (g guardDevice) SetMigMode(int) (nvml.Return, nvml.Return) {
	g.t.Error("probe called SetMigMode")
	return nvml.ERROR_NO_PERMISSION, nvml.ERROR_NO_PERMISSION
}

func (g guardDevice) CreateGpuInstance(*nvml.GpuInstanceProfileInfo) (nvml.GpuInstance, nvml.Return) {
	g.t.Error("probe called CreateGpuInstance")
	return nil, nvml.ERROR_NO_PERMISSION
}

func (g guardDevice) CreateGpuInstanceWithPlacement(*nvml.GpuInstanceProfileInfo, *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
	g.t.Error("probe called CreateGpuInstanceWithPlacement")
	return nil, nvml.ERROR_NO_PERMISSION
}

func (g guardDevice) GetGpuInstances(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstance, nvml.Return) {
	gis, ret := g.Device.GetGpuInstances(info)
	for i := range gis {
		gis[i] = guardGI{gis[i], g.t}
	}
	return gis, ret
}

type guardGI struct {
	nvml.GpuInstance
	t *testing.T
}

func (g guardGI) Destroy() nvml.Return {
	g.t.Error("probe destroyed a GPU instance")
	return nvml.ERROR_NO_PERMISSION
}

func (g guardGI) CreateComputeInstance(*nvml.ComputeInstanceProfileInfo) (nvml.ComputeInstance, nvml.Return) {
	g.t.Error("probe called CreateComputeInstance")
	return nil, nvml.ERROR_NO_PERMISSION
}

func (g guardGI) CreateComputeInstanceWithPlacement(*nvml.ComputeInstanceProfileInfo, *nvml.ComputeInstancePlacement) (nvml.ComputeInstance, nvml.Return) {
	g.t.Error("probe called CreateComputeInstanceWithPlacement")
	return nil, nvml.ERROR_NO_PERMISSION
}

func (g guardGI) GetComputeInstances(info *nvml.ComputeInstanceProfileInfo) ([]nvml.ComputeInstance, nvml.Return) {
	cis, ret := g.GpuInstance.GetComputeInstances(info)
	for i := range cis {
		cis[i] = guardCI{cis[i], g.t}
	}
	return cis, ret
}

type guardCI struct {
	nvml.ComputeInstance
	t *testing.T
}

func (g guardCI) Destroy() nvml.Return {
	g.t.Error("probe destroyed a compute instance")
	return nvml.ERROR_NO_PERMISSION
}

// TestProbeIsReadOnly: no call that changes MIG state, and the state is the
// same afterwards, on a node with a pending mode change and instances.
func TestProbeIsReadOnly(t *testing.T) {
	l := newSim(t, sim.Config{GPUs: []sim.GPUSpec{{Model: "A100-SXM4-40GB", Count: 1}, {Model: "H100-SXM5-80GB", Count: 1}}})
	withInstances(t, l, 1)
	l.Init()
	d, _ := l.DeviceGetHandleByIndex(0)
	d.SetMigMode(nvml.DEVICE_MIG_ENABLE) // Ampere: pending until reset
	l.Shutdown()
	before := l.Snapshot()
	r, err := Probe(guardLib{l, t}, gpumodel.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, l.Snapshot()); diff != "" {
		t.Errorf("state changed by a probe (-before +after):\n%s", diff)
	}
	g0 := r.Config.GPUs[0].Initial
	if g0.MigEnabled || g0.MigPending == nil || !*g0.MigPending {
		t.Errorf("GPU 0 mode = enabled %v pending %v, want disabled with enable pending", g0.MigEnabled, g0.MigPending)
	}
	// Behind the guard the simulator's ProfileNamer is hidden: the names
	// come from memory sizes, as on a driver without versioned info.
	if !strings.Contains(strings.Join(r.Notes, "\n"), "profile names derived from memory sizes") {
		t.Errorf("notes %q do not say the names were derived", r.Notes)
	}
}

func TestMarshalHeader(t *testing.T) {
	l := newSim(t, sim.Config{GPUs: []sim.GPUSpec{{Model: "A30-24GB", Count: 1}}})
	r, err := Probe(l, gpumodel.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	r.Notes = append(r.Notes, "two\nlines")
	out, err := r.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"# device-plugin probe: 1 GPU(s), read-only.\n",
		"# NVIDIA driver " + sim.DriverVersion,
		"# note: two lines\n",
		"version: v1\n",
		"name: A30-24GB\n",
		"memorySlices: 4\n",
		"query: 2_SLICE_REV1\n",
	} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("dump lacks %q:\n%s", want, out)
		}
	}
}
