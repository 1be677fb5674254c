package sim

import (
	"fmt"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Every GPU the simulator knows has 8 memory slices and 7 compute slices,
// like A100, H100 and H200.
const (
	MemorySlices  = 8
	ComputeSlices = 7
)

// Architecture is the GPU generation. It matters for MIG mode: Ampere keeps a
// MIG mode change pending until the GPU is reset; Hopper and later switch on
// demand.
type Architecture string

const (
	Ampere    Architecture = "ampere"
	Hopper    Architecture = "hopper"
	Blackwell Architecture = "blackwell"
)

func (a Architecture) nvml() nvml.DeviceArchitecture {
	switch a {
	case Ampere:
		return nvml.DEVICE_ARCH_AMPERE
	case Hopper:
		return nvml.DEVICE_ARCH_HOPPER
	case Blackwell:
		return nvml.DEVICE_ARCH_BLACKWELL
	}
	return nvml.DEVICE_ARCH_UNKNOWN
}

// computeCapability is the CUDA compute capability NVML reports for the
// architecture's data-center parts (A100 8.0, H100/H200 9.0, B200 10.0).
func (a Architecture) computeCapability() (major, minor int) {
	switch a {
	case Ampere:
		return 8, 0
	case Hopper:
		return 9, 0
	case Blackwell:
		return 10, 0
	}
	return 0, 0
}

// pendingUntilReset reports whether a MIG mode change waits for a GPU reset.
func (a Architecture) pendingUntilReset() bool { return a == Ampere }

// Model is a GPU model the simulator can present: its identity as NVML
// reports it and its table of GPU-instance profiles.
type Model struct {
	// Name identifies the model in configs and is what the simulated GetName
	// returns: "H100-SXM5-80GB".
	Name string
	// ProductName is the name real NVML reports for this product ("NVIDIA
	// H100 80GB HBM3"); informational, shown by `device-plugin models`.
	ProductName string
	// PCIDeviceID is PciInfo.PciDeviceId: device id in the high 16 bits,
	// vendor 0x10DE in the low ones (0x233010DE).
	PCIDeviceID uint32
	// MemoryMiB is the total memory NVML reports (GetMemoryInfo().Total in MiB).
	MemoryMiB uint64
	// SMs is the multiprocessor count of the whole GPU.
	SMs          int
	Architecture Architecture
	// Profiles are the GPU-instance profiles the model supports, ordered by
	// Query.
	Profiles []Profile
}

// Profile is one GPU-instance profile of a model.
type Profile struct {
	// Name is the canonical profile name ("3g.40gb", "1g.10gb+me").
	Name string
	// ID is GpuInstanceProfileInfo.Id, the number nvidia-smi prints.
	ID uint32
	// Query is the GPU_INSTANCE_PROFILE_* constant NVML looks the profile up
	// by (nvml.GPU_INSTANCE_PROFILE_3_SLICE == 2).
	Query int
	// Slices is the number of compute slices (the 3 in 3g.40gb).
	Slices int
	// MemorySlices is the placement size in memory slices (out of 8).
	MemorySlices int
	MemoryMiB    uint64
	SMs          int
	// MaxCount is how many instances of the profile fit on an empty GPU.
	MaxCount int
	// Placements are the memory-slice starts the profile may be created at.
	Placements []int
}

func (p *Profile) hasPlacement(start int) bool { return slices.Contains(p.Placements, start) }

func (m *Model) profileByID(id uint32) (*Profile, bool) {
	for i := range m.Profiles {
		if m.Profiles[i].ID == id {
			return &m.Profiles[i], true
		}
	}
	return nil, false
}

func (m *Model) profileByQuery(q int) (*Profile, bool) {
	for i := range m.Profiles {
		if m.Profiles[i].Query == q {
			return &m.Profiles[i], true
		}
	}
	return nil, false
}

// The tables below are copied from ../shared/mig-profiles.md (MIG reference
// tables gathered from public sources): NVML profile ids, max counts, memory,
// SM counts and placements. The whole-GPU memory totals (40960, 81920, 81559
// and 143771 MiB) and SM counts (108, 132) are the values nvidia-smi commonly
// reports for these products; they are not in that file.
//
// Where the file gives GiB (H100) the MiB value is GiB*1024 (19.62 GiB read as
// 19.625). Where it says "about" (H200) or gives nothing, the MiB and SM values
// are plausible choices, not measurements: they are picked so that the name
// derived from memory (internal/mig) equals the table's name, and the H200
// 1g.35gb SM count copies the H100 1g.20gb row.
func builtinModels() []Model {
	// A100 and H100 tables share ids, queries and placements; only memory
	// and SMs differ.
	type row struct {
		name   string
		memMiB uint64
		sms    int
	}
	build := func(rows [7]row) []Profile {
		// Order: 1g, 1g+me, 1g (2 memory slices), 2g, 3g, 4g, 7g.
		shape := [7]Profile{
			{ID: 19, Query: nvml.GPU_INSTANCE_PROFILE_1_SLICE, Slices: 1, MemorySlices: 1, MaxCount: 7, Placements: []int{0, 1, 2, 3, 4, 5, 6}},
			{ID: 20, Query: nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, Slices: 1, MemorySlices: 1, MaxCount: 1, Placements: []int{0, 1, 2, 3, 4, 5, 6}},
			{ID: 15, Query: nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, Slices: 1, MemorySlices: 2, MaxCount: 4, Placements: []int{0, 2, 4, 6}},
			{ID: 14, Query: nvml.GPU_INSTANCE_PROFILE_2_SLICE, Slices: 2, MemorySlices: 2, MaxCount: 3, Placements: []int{0, 2, 4}},
			{ID: 9, Query: nvml.GPU_INSTANCE_PROFILE_3_SLICE, Slices: 3, MemorySlices: 4, MaxCount: 2, Placements: []int{0, 4}},
			{ID: 5, Query: nvml.GPU_INSTANCE_PROFILE_4_SLICE, Slices: 4, MemorySlices: 4, MaxCount: 1, Placements: []int{0}},
			{ID: 0, Query: nvml.GPU_INSTANCE_PROFILE_7_SLICE, Slices: 7, MemorySlices: 8, MaxCount: 1, Placements: []int{0}},
		}
		out := make([]Profile, len(shape))
		for i, p := range shape {
			p.Name, p.MemoryMiB, p.SMs = rows[i].name, rows[i].memMiB, rows[i].sms
			out[i] = p
		}
		slices.SortFunc(out, func(a, b Profile) int { return a.Query - b.Query })
		return out
	}
	return []Model{
		{
			Name:         "A100-SXM4-40GB",
			ProductName:  "NVIDIA A100-SXM4-40GB",
			PCIDeviceID:  0x20B010DE,
			MemoryMiB:    40960,
			SMs:          108,
			Architecture: Ampere,
			Profiles: build([7]row{
				{"1g.5gb", 4864, 14},
				{"1g.5gb+me", 4864, 14},
				{"1g.10gb", 9856, 14},
				{"2g.10gb", 9856, 28},
				{"3g.20gb", 19968, 42},
				{"4g.20gb", 19968, 56},
				{"7g.40gb", 40192, 98},
			}),
		},
		{
			Name:         "A100-SXM4-80GB",
			ProductName:  "NVIDIA A100-SXM4-80GB",
			PCIDeviceID:  0x20B210DE,
			MemoryMiB:    81920,
			SMs:          108,
			Architecture: Ampere,
			Profiles: build([7]row{
				{"1g.10gb", 9856, 14},
				{"1g.10gb+me", 9856, 14},
				{"1g.20gb", 19968, 14},
				{"2g.20gb", 19968, 28},
				{"3g.40gb", 40192, 42},
				{"4g.40gb", 40192, 56},
				{"7g.80gb", 80384, 98},
			}),
		},
		{
			Name:         "H100-SXM5-80GB",
			ProductName:  "NVIDIA H100 80GB HBM3",
			PCIDeviceID:  0x233010DE,
			MemoryMiB:    81559,
			SMs:          132,
			Architecture: Hopper,
			Profiles: build([7]row{
				{"1g.10gb", 9984, 16},    // 9.75 GiB
				{"1g.10gb+me", 9984, 16}, // 9.75 GiB
				{"1g.20gb", 20096, 26},   // 19.62 GiB
				{"2g.20gb", 20096, 32},   // 19.62 GiB
				{"3g.40gb", 40448, 60},   // 39.50 GiB
				{"4g.40gb", 40448, 64},   // 39.50 GiB
				{"7g.80gb", 81152, 132},  // 79.25 GiB
			}),
		},
		{
			Name:         "H200-SXM-141GB",
			ProductName:  "NVIDIA H200",
			PCIDeviceID:  0x233510DE,
			MemoryMiB:    143771,
			SMs:          132,
			Architecture: Hopper,
			Profiles: build([7]row{
				{"1g.18gb", 16384, 16},    // "about 16 GiB"
				{"1g.18gb+me", 16384, 16}, // as 1g.18gb
				{"1g.35gb", 33280, 26},    // 32.5 GiB as 2g.35gb; SMs as H100 1g.20gb
				{"2g.35gb", 33280, 32},    // "about 32.5 GiB"
				{"3g.71gb", 66560, 60},    // 65 GiB, chosen
				{"4g.71gb", 66560, 64},    // as 3g.71gb
				{"7g.141gb", 143360, 132}, // "about 140 GiB"
			}),
		},
	}
}

// BuiltinModels returns the GPU models the simulator knows without a models
// file. The result is a fresh copy the caller may change.
func BuiltinModels() []Model { return builtinModels() }

// modelSet resolves model names; custom models come after the built-ins.
type modelSet map[string]*Model

func newModelSet(custom []Model) (modelSet, error) {
	set := modelSet{}
	for _, m := range builtinModels() {
		set[m.Name] = &m
	}
	for i := range custom {
		m := custom[i]
		if err := m.Validate(); err != nil {
			return nil, err
		}
		if _, dup := set[m.Name]; dup {
			return nil, fmt.Errorf("model %q: name already used by another model", m.Name)
		}
		set[m.Name] = &m
	}
	return set, nil
}

func (s modelSet) get(name string) (*Model, error) {
	if m, ok := s[name]; ok {
		return m, nil
	}
	return nil, fmt.Errorf("unknown GPU model %q (known: %s)", name, strings.Join(s.names(), ", "))
}

func (s modelSet) names() []string {
	names := make([]string, 0, len(s))
	for n := range s {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
