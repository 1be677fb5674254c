package sim

import (
	"fmt"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// The MIG geometry of A100, H100, H200, B200 and GB200: 8 memory slices
// (placement units) and 7 compute slices. They are the defaults for a model
// that sets none; A30 and the RTX PRO Blackwell cards differ (see their
// tables).
const (
	MemorySlices  = 8
	ComputeSlices = 7
)

// maxMemorySlices bounds a model's placement units: occupancy is a 64-bit
// mask here and in the config engine.
const maxMemorySlices = 64

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
	// H100 80GB HBM3"); informational, shown by `device-plugin models`, and
	// how `device-plugin probe` finds the built-in model of a real GPU.
	ProductName string
	// PCIDeviceID is PciInfo.PciDeviceId: device id in the high 16 bits,
	// vendor 0x10DE in the low ones (0x233010DE).
	PCIDeviceID uint32
	// PCISubsystemID is PciInfo.PciSubSystemId, the board's subsystem
	// device and vendor ids the same way (0x16C110DE); 0 where the model
	// does not say, as NVML reports for an unknown subsystem. mig-parted's
	// device-filter may name it ("0x233010DE:0x16C110DE").
	PCISubsystemID uint32
	// MemoryMiB is the total memory NVML reports (GetMemoryInfo().Total in MiB).
	MemoryMiB uint64
	// SMs is the multiprocessor count of the whole GPU.
	SMs          int
	Architecture Architecture
	// MemorySlices is the number of placement units a GPU instance's
	// placement is counted in (8 on A100..GB200, 4 on A30, 12 on RTX PRO
	// 6000 Blackwell); ComputeSlices the number of compute slices (7, or 4).
	// Zero means the default (MemorySlices, ComputeSlices).
	MemorySlices  int
	ComputeSlices int
	// Profiles are the GPU-instance profiles the model supports, ordered by
	// Query.
	Profiles []Profile
}

// Geometry returns the model's memory slices (placement units) and compute
// slices, defaults filled in.
func (m *Model) Geometry() (memorySlices, computeSlices int) {
	memorySlices, computeSlices = m.MemorySlices, m.ComputeSlices
	if memorySlices == 0 {
		memorySlices = MemorySlices
	}
	if computeSlices == 0 {
		computeSlices = ComputeSlices
	}
	return memorySlices, computeSlices
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
	// MemorySlices is the placement size in memory slices (placement units).
	MemorySlices int
	MemoryMiB    uint64
	SMs          int
	// MaxCount is how many instances of the profile fit on an empty GPU.
	MaxCount int
	// Placements are the memory-slice starts the profile may be created at.
	Placements []int
	// Engines are the copy and media engines an instance of the profile
	// gets. The media engines of all instances on a GPU never add up to more
	// than the GPU has (the most any one profile has, the whole-GPU one), so
	// 1g.6gb+me and 2g.12gb+me, which both need the A30's only OFA, do not
	// coexist. A model without engine counts has no such limit.
	Engines Engines
	// ComputeProfiles are the compute-instance profiles NVML reports for an
	// instance of this profile. Empty means the one the simulator creates:
	// a compute instance spanning the whole GPU instance. Smaller ones (from
	// a probe of a real GPU) are reported, never created.
	ComputeProfiles []ComputeProfile
}

// Engines are the engine counts of GpuInstanceProfileInfo.
type Engines struct {
	CopyEngines int
	Decoders    int
	Encoders    int
	JPEGs       int
	OFAs        int
}

// ComputeProfile is a compute-instance profile of a GPU-instance profile.
type ComputeProfile struct {
	// Query is the COMPUTE_INSTANCE_PROFILE_* constant (the id NVML reports).
	Query      int
	Slices     int
	SMs        int
	MaxCount   int
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

func (m *Model) profileByName(name string) (*Profile, bool) {
	for i := range m.Profiles {
		if m.Profiles[i].Name == name {
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

// BuiltinModels returns the GPU models the simulator knows without a models
// file. The result is a fresh copy the caller may change.
func BuiltinModels() []Model { return builtinModels() }

// modelSet resolves model names. A custom model named like a built-in one
// replaces it: a `device-plugin probe` dump of a real GPU names its model
// after the built-in it corrects.
type modelSet map[string]*Model

func newModelSet(custom []Model) (modelSet, error) {
	set := modelSet{}
	for _, m := range builtinModels() {
		set[m.Name] = &m
	}
	seen := map[string]bool{}
	for i := range custom {
		m := custom[i]
		if err := m.Validate(); err != nil {
			return nil, err
		}
		if seen[m.Name] {
			return nil, fmt.Errorf("model %q: name used by two custom models", m.Name)
		}
		seen[m.Name] = true
		set[m.Name] = &m
	}
	return set, nil
}

// IsBuiltin reports whether name is a built-in model's.
func IsBuiltin(name string) bool {
	for _, m := range builtinModels() {
		if m.Name == name {
			return true
		}
	}
	return false
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

// plus adds the media engines of o to e (copy engines too, unchecked).
func (e Engines) plus(o Engines) Engines {
	return Engines{e.CopyEngines + o.CopyEngines, e.Decoders + o.Decoders, e.Encoders + o.Encoders, e.JPEGs + o.JPEGs, e.OFAs + o.OFAs}
}

// within reports whether e's media engines are at most limit's. Copy
// engines are not limited: nvidia-smi shows the whole-GPU profile with
// fewer copy engines than seven 1g instances have between them (B200).
func (e Engines) within(limit Engines) bool {
	return e.Decoders <= limit.Decoders && e.Encoders <= limit.Encoders && e.JPEGs <= limit.JPEGs && e.OFAs <= limit.OFAs
}

// mediaLimits is how many media engines the GPU has: per engine, the most
// any profile has (the whole-GPU profile, or an _ALL_ME one, holds them
// all).
func (m *Model) mediaLimits() Engines {
	var l Engines
	for _, p := range m.Profiles {
		l.Decoders = max(l.Decoders, p.Engines.Decoders)
		l.Encoders = max(l.Encoders, p.Engines.Encoders)
		l.JPEGs = max(l.JPEGs, p.Engines.JPEGs)
		l.OFAs = max(l.OFAs, p.Engines.OFAs)
	}
	return l
}

// media says how a profile's media engines relate to the rest of the GPU.
type media int

const (
	someMedia media = iota // the usual profiles: their share, or none
	allMedia               // _ALL_ME: every media engine of the GPU
	noMedia                // _NO_ME: none, and compatible with _ALL_ME
)

func mediaKind(query int) media {
	switch query {
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME, nvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME:
		return allMedia
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, nvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME:
		return noMedia
	}
	return someMedia
}
