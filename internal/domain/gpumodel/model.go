// Package gpumodel owns the GPU models migflex knows: each model's identity
// and its table of MIG profiles (placements, memory, SMs, engines), the
// built-in tables with their sources (docs/MODELS.md), and the YAML form of
// custom models. It is pure, so the simulator that presents these models
// through NVML, the planner and the webhook read the same tables without
// linking go-nvml (cgo).
package gpumodel

import (
	"fmt"
	"slices"
	"strings"

	"github.com/migflex/migflex/internal/domain/mig"
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

// ComputeCapability is the CUDA compute capability NVML reports for the
// architecture's data-center parts (A100 8.0, H100/H200 9.0, B200 10.0).
func (a Architecture) ComputeCapability() (major, minor int) {
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

// PendingUntilReset reports whether a MIG mode change waits for a GPU reset.
func (a Architecture) PendingUntilReset() bool { return a == Ampere }

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
	// by (mig.GIProfile3Slice == 2).
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
	Engines mig.Engines
	// ComputeProfiles are the compute-instance profiles NVML reports for an
	// instance of this profile. Empty means the one the simulator creates:
	// a compute instance spanning the whole GPU instance. Smaller ones (from
	// a probe of a real GPU) are reported, never created.
	ComputeProfiles []ComputeProfile
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

// HasPlacement reports whether the profile may start at memory slice start.
func (p *Profile) HasPlacement(start int) bool { return slices.Contains(p.Placements, start) }

// ComputeProfilesOrFull is ComputeProfiles, or where the table gives none
// the one compute instance migflex creates, spanning the GPU instance.
func (p *Profile) ComputeProfilesOrFull() []ComputeProfile {
	if len(p.ComputeProfiles) > 0 {
		return p.ComputeProfiles
	}
	return []ComputeProfile{{Query: mig.FullComputeProfile(p.Slices), Slices: p.Slices, SMs: p.SMs, MaxCount: 1, Placements: []int{0}}}
}

// EffectiveComputeProfiles are the compute-instance profiles the simulator
// reports for an instance of p: ComputeProfilesOrFull, as a copy.
func (p *Profile) EffectiveComputeProfiles() []ComputeProfile {
	out := slices.Clone(p.ComputeProfilesOrFull())
	for i := range out {
		out[i].Placements = slices.Clone(out[i].Placements)
	}
	return out
}

// ProfileByID returns the profile with NVML id id.
func (m *Model) ProfileByID(id uint32) (*Profile, bool) {
	for i := range m.Profiles {
		if m.Profiles[i].ID == id {
			return &m.Profiles[i], true
		}
	}
	return nil, false
}

// ProfileByName returns the profile named name.
func (m *Model) ProfileByName(name string) (*Profile, bool) {
	for i := range m.Profiles {
		if m.Profiles[i].Name == name {
			return &m.Profiles[i], true
		}
	}
	return nil, false
}

// ProfileByQuery returns the profile with query constant q.
func (m *Model) ProfileByQuery(q int) (*Profile, bool) {
	for i := range m.Profiles {
		if m.Profiles[i].Query == q {
			return &m.Profiles[i], true
		}
	}
	return nil, false
}

// Builtin returns the GPU models migflex knows without a models file. The
// result is a fresh copy the caller may change.
func Builtin() []Model { return builtinModels() }

// Lookup returns the built-in model named name.
func Lookup(name string) (Model, bool) {
	for _, m := range builtinModels() {
		if m.Name == name {
			return m, true
		}
	}
	return Model{}, false
}

// Set resolves model names. A custom model named like a built-in one
// replaces it: a `device-plugin probe` dump of a real GPU names its model
// after the built-in it corrects.
type Set map[string]*Model

// NewSet returns the built-in models and the custom ones, each validated.
func NewSet(custom []Model) (Set, error) {
	set := Set{}
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

// Get returns the model named name, or an error that lists the known ones.
func (s Set) Get(name string) (*Model, error) {
	if m, ok := s[name]; ok {
		return m, nil
	}
	return nil, fmt.Errorf("unknown GPU model %q (known: %s)", name, strings.Join(s.names(), ", "))
}

func (s Set) names() []string {
	names := make([]string, 0, len(s))
	for n := range s {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// MediaLimits is how many media engines the GPU has: per engine, the most
// any profile has (the whole-GPU profile, or an _ALL_ME one, holds them
// all).
func (m *Model) MediaLimits() mig.Engines {
	var l mig.Engines
	for _, p := range m.Profiles {
		l = l.MediaMax(p.Engines)
	}
	return l
}

// MIGProfiles returns the model's table as mig's profiles, as Discover
// reads them from a GPU of this model.
func (m *Model) MIGProfiles() []mig.Profile {
	out := make([]mig.Profile, 0, len(m.Profiles))
	for _, p := range m.Profiles {
		out = append(out, mig.Profile{
			Name: p.Name, ID: p.ID, Query: p.Query, Slices: p.Slices, MemorySlices: p.MemorySlices,
			MemoryMiB: p.MemoryMiB, SMs: p.SMs, MaxCount: p.MaxCount, Placements: slices.Clone(p.Placements),
			Engines: p.Engines,
		})
	}
	return out
}
