package nvmlmig_test

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"

	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
	"github.com/migflex/migflex/internal/nvml/nvmlmig"
)

// TestDiscoverA100 spells out one model completely, from
// ../shared/mig-profiles.md.
func TestDiscoverA100(t *testing.T) {
	l := newSim(t, gpus("A100-SXM4-40GB", 1))
	got, err := nvmlmig.Discover(l)
	if err != nil {
		t.Fatal(err)
	}
	seven := []int{0, 1, 2, 3, 4, 5, 6}
	want := []mig.GPU{{
		Index:       0,
		UUID:        got[0].UUID,
		Model:       "A100-SXM4-40GB",
		PCIDeviceID: 0x20B010DE,
		MemoryMiB:   40960,
		Minor:       0,
		MigCapable:  true,
		Profiles: []mig.Profile{
			{Name: "1g.5gb", ID: 19, Query: 0, Slices: 1, MemorySlices: 1, MemoryMiB: 4864, SMs: 14, MaxCount: 7, Placements: seven, Engines: mig.Engines{CopyEngines: 1}},
			{Name: "2g.10gb", ID: 14, Query: 1, Slices: 2, MemorySlices: 2, MemoryMiB: 9856, SMs: 28, MaxCount: 3, Placements: []int{0, 2, 4}, Engines: mig.Engines{CopyEngines: 2, Decoders: 1}},
			{Name: "3g.20gb", ID: 9, Query: 2, Slices: 3, MemorySlices: 4, MemoryMiB: 19968, SMs: 42, MaxCount: 2, Placements: []int{0, 4}, Engines: mig.Engines{CopyEngines: 3, Decoders: 2}},
			{Name: "4g.20gb", ID: 5, Query: 3, Slices: 4, MemorySlices: 4, MemoryMiB: 19968, SMs: 56, MaxCount: 1, Placements: []int{0}, Engines: mig.Engines{CopyEngines: 4, Decoders: 2}},
			{Name: "7g.40gb", ID: 0, Query: 4, Slices: 7, MemorySlices: 8, MemoryMiB: 40192, SMs: 98, MaxCount: 1, Placements: []int{0}, Engines: mig.Engines{CopyEngines: 7, Decoders: 5, JPEGs: 1, OFAs: 1}},
			{Name: "1g.5gb+me", ID: 20, Query: 7, Slices: 1, MemorySlices: 1, MemoryMiB: 4864, SMs: 14, MaxCount: 1, Placements: seven, Engines: mig.Engines{CopyEngines: 1, Decoders: 1, JPEGs: 1, OFAs: 1}},
			{Name: "1g.10gb", ID: 15, Query: 9, Slices: 1, MemorySlices: 2, MemoryMiB: 9856, SMs: 14, MaxCount: 4, Placements: []int{0, 2, 4, 6}, Engines: mig.Engines{CopyEngines: 1, Decoders: 1}},
		},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Discover() (-want +got):\n%s", diff)
	}
}

// TestDiscoverBuiltins checks every model against the simulator's tables,
// named both ways: by the simulator's ProfileName and, through a device
// without it, derived from memory.
func TestDiscoverBuiltins(t *testing.T) {
	for _, m := range gpumodel.Builtin() {
		var want []mig.Profile
		for _, p := range m.Profiles {
			want = append(want, mig.Profile{Name: p.Name, ID: p.ID, Query: p.Query, Slices: p.Slices, MemorySlices: p.MemorySlices,
				MemoryMiB: p.MemoryMiB, SMs: p.SMs, MaxCount: p.MaxCount, Placements: p.Placements, Engines: mig.Engines(p.Engines)})
		}
		for _, tc := range []struct {
			name string
			lib  func(*sim.Lib) nvml.Interface
		}{
			{"simulator names", func(l *sim.Lib) nvml.Interface { return l }},
			{"derived names", func(l *sim.Lib) nvml.Interface { return plainLib{l} }},
		} {
			t.Run(m.Name+"/"+tc.name, func(t *testing.T) {
				l := newSim(t, gpus(m.Name, 2))
				got, err := nvmlmig.Discover(tc.lib(l))
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != 2 || got[0].UUID == got[1].UUID {
					t.Fatalf("got %+v, want 2 GPUs with distinct UUIDs", got)
				}
				for i, g := range got {
					if g.Index != i || g.Minor != i || g.Model != m.Name || g.PCIDeviceID != m.PCIDeviceID || g.MemoryMiB != m.MemoryMiB || !g.MigCapable {
						t.Errorf("GPU %d identity = %+v", i, g)
					}
					if diff := cmp.Diff(want, g.Profiles); diff != "" {
						t.Errorf("GPU %d profiles (-want +got):\n%s", i, diff)
					}
				}
			})
		}
	}
}

func TestDiscoverInstances(t *testing.T) {
	l := newSim(t, gpus("H100-SXM5-80GB", 2))
	p := nvmlmig.NewPartitioner(l)
	if err := p.SetMigMode(1, true); err != nil {
		t.Fatal(err)
	}
	var made []mig.Instance
	for _, c := range []struct {
		profile string
		start   int
	}{{"3g.40gb", 4}, {"1g.10gb", 0}, {"1g.20gb", 2}} {
		inst, err := p.CreateInstance(1, c.profile, c.start)
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, inst)
	}
	// A GPU instance without a compute instance, as a crash mid-create
	// would leave it.
	l.Init()
	d, _ := l.DeviceGetHandleByIndex(1)
	info, _ := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	if _, ret := d.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: 1, Size: 1}); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	l.Shutdown()

	got, err := nvmlmig.Discover(l)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].MigEnabled || got[0].MigPending || len(got[0].Instances) != 0 {
		t.Errorf("GPU 0 = MIG %v/%v with %d instances, want disabled and empty", got[0].MigEnabled, got[0].MigPending, len(got[0].Instances))
	}
	want := []mig.Instance{ // ordered by start
		made[1],
		{Profile: "1g.10gb", Start: 1, Size: 1, GIID: 4},
		made[2],
		made[0],
	}
	if diff := cmp.Diff(want, got[1].Instances); diff != "" {
		t.Errorf("GPU 1 instances (-want +got):\n%s", diff)
	}
	for _, inst := range got[1].Instances {
		if inst.HasCI && inst.UUID == "" {
			t.Errorf("instance %+v has a compute instance but no UUID", inst)
		}
	}
}

func TestDiscoverErrors(t *testing.T) {
	l := newSim(t, gpus("H100-SXM5-80GB", 1))
	if _, err := nvmlmig.Discover(brokenLib{l}); err == nil || err.Error() != "GPU 0: get memory info: ERROR_GPU_IS_LOST" {
		t.Errorf("Discover() on a lost GPU = %v", err)
	}
	// Discover leaves NVML's reference count as it found it.
	if _, ret := l.DeviceGetCount(); ret != nvml.ERROR_UNINITIALIZED {
		t.Errorf("after Discover, DeviceGetCount() = %v, want ERROR_UNINITIALIZED", ret)
	}
}

type brokenLib struct{ nvml.Interface }

func (l brokenLib) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	d, ret := l.Interface.DeviceGetHandleByIndex(i)
	return brokenDevice{d}, ret
}

type brokenDevice struct{ nvml.Device }

func (brokenDevice) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST
}

// TestDiscoverCustomNames: a custom model keeps its table's names, which
// memory alone would not give (30 GiB of 70 derives as 3g.35gb).
func TestDiscoverCustomNames(t *testing.T) {
	models, err := gpumodel.Parse([]byte(`version: v1
models:
- name: H100-PCIE-70GB
  pciDeviceID: 0x233110DE
  memoryMiB: 71680
  sms: 114
  architecture: hopper
  profiles:
  - {name: 3g.30gb, slices: 3, memorySlices: 4, memoryMiB: 30720, sms: 42, maxCount: 2, placements: [0, 4]}
`))
	if err != nil {
		t.Fatal(err)
	}
	l := newSimConfig(t, sim.Config{Models: models, GPUs: []sim.GPUSpec{gpus("H100-PCIE-70GB", 1)}})
	for _, tc := range []struct {
		lib  nvml.Interface
		want string
	}{{l, "3g.30gb"}, {plainLib{l}, "3g.35gb"}} {
		got, err := nvmlmig.Discover(tc.lib)
		if err != nil {
			t.Fatal(err)
		}
		if name := got[0].Profiles[0].Name; name != tc.want {
			t.Errorf("profile name via %T = %q, want %q", tc.lib, name, tc.want)
		}
	}
}
