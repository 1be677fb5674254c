package fallback

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/resourcename"
)

// Profile is what a GPU resource name says about the device it stands for.
type Profile struct {
	Resource corev1.ResourceName
	// Slices is the number of compute slices; 0 for a whole GPU.
	Slices int
	// MemoryGB is the instance memory; 0 for a whole GPU (unknown, and never
	// less than any slice of the same GPU).
	MemoryGB int
	// Suffix is the attribute part of the name after the memory, as in the
	// resource name: ".me" (1g.10gb+me), ".me.all", "-me", ".gfx"; "" for a
	// plain profile. It is part of the type: a profile with media
	// extensions is not interchangeable with one without.
	Suffix string
}

// WholeGPU reports whether p is nvidia.com/gpu.
func (p Profile) WholeGPU() bool { return p.Resource == resourcename.GPU }

// ParseResource parses nvidia.com/gpu and nvidia.com/mig-<N>g.<M>gb[.attr...]
// resource names (resourcename.ParseMIG). Anything else is not a type the
// default chain can reason about.
func ParseResource(name corev1.ResourceName) (Profile, bool) {
	if name == resourcename.GPU {
		return Profile{Resource: name}, true
	}
	m, ok := resourcename.ParseMIG(name)
	if !ok {
		return Profile{}, false
	}
	return Profile{Resource: name, Slices: m.Slices, MemoryGB: m.MemoryGB, Suffix: m.Suffix}, true
}

// compare orders MIG profiles by size: compute slices, then memory, then
// plain before suffixed (1g.10gb < 1g.10gb.me), then name so that the order
// is total. Whole GPUs are not ordered here; the chain puts them last.
func compare(a, b Profile) int {
	switch {
	case a.Slices != b.Slices:
		return a.Slices - b.Slices
	case a.MemoryGB != b.MemoryGB:
		return a.MemoryGB - b.MemoryGB
	case (a.Suffix == "") != (b.Suffix == ""):
		if a.Suffix == "" {
			return -1
		}
		return 1
	}
	return strings.Compare(string(a.Resource), string(b.Resource))
}

// Direction classifies a move from the requested type to a candidate.
type Direction int

const (
	// Down is a smaller MIG profile, or any MIG profile in place of a whole GPU.
	Down Direction = iota
	// Up is a larger MIG profile.
	Up
	// Whole is nvidia.com/gpu in place of a MIG profile.
	Whole
)

func (d Direction) String() string {
	switch d {
	case Down:
		return "down"
	case Up:
		return "up"
	default:
		return "whole-gpu"
	}
}

// direction of the move from -> to; both must be parsed profiles and differ.
func direction(from, to Profile) Direction {
	switch {
	case to.WholeGPU():
		return Whole
	case from.WholeGPU():
		return Down
	case compare(to, from) < 0:
		return Down
	default:
		return Up
	}
}
