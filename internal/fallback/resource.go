package fallback

import (
	"regexp"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

const (
	// ResourceGPU is a whole GPU, the last resort of every default chain.
	ResourceGPU corev1.ResourceName = "nvidia.com/gpu"

	vendorPrefix = "nvidia.com/"
	migPrefix    = "nvidia.com/mig-"
)

// migName matches the resource names the mixed MIG strategy advertises:
// nvidia.com/mig-<slices>g.<memory>gb with optional dotted attributes
// ("nvidia.com/mig-1g.10gb.me" for the 1g.10gb+me profile; "+" is not legal
// in a resource name).
var migName = regexp.MustCompile(`^nvidia\.com/mig-([1-9][0-9]{0,2})g\.([1-9][0-9]{0,4})gb((?:\.[a-z0-9]+)*)$`)

// Profile is what a GPU resource name says about the device it stands for.
type Profile struct {
	Resource corev1.ResourceName
	// Slices is the number of compute slices; 0 for a whole GPU.
	Slices int
	// MemoryGB is the instance memory; 0 for a whole GPU (unknown, and never
	// less than any slice of the same GPU).
	MemoryGB int
	// Attrs are the dotted attributes after the memory ("me" in 1g.10gb.me).
	Attrs []string
}

// WholeGPU reports whether p is nvidia.com/gpu.
func (p Profile) WholeGPU() bool { return p.Resource == ResourceGPU }

// ParseResource parses nvidia.com/gpu and nvidia.com/mig-<N>g.<M>gb[.attr...]
// resource names. Anything else (other vendors, compute-instance profiles such
// as mig-1c.3g.40gb) is not a type the default chain can reason about.
func ParseResource(name corev1.ResourceName) (Profile, bool) {
	if name == ResourceGPU {
		return Profile{Resource: name}, true
	}
	m := migName.FindStringSubmatch(string(name))
	if m == nil {
		return Profile{}, false
	}
	slices, _ := strconv.Atoi(m[1])
	mem, _ := strconv.Atoi(m[2])
	p := Profile{Resource: name, Slices: slices, MemoryGB: mem}
	if m[3] != "" {
		p.Attrs = strings.Split(m[3][1:], ".")
	}
	return p, true
}

// IsGPUResource reports whether a resource name is one the webhook tracks on
// nodes: nvidia.com/gpu or any nvidia.com/mig-* resource. It does not
// allocate, so the no-GPU fast path can call it for every resource of a pod.
func IsGPUResource(name corev1.ResourceName) bool {
	return name == ResourceGPU || strings.HasPrefix(string(name), migPrefix)
}

// ShortName is the form the fallback annotation uses: "2g.20gb" for
// nvidia.com/mig-2g.20gb and "gpu" for nvidia.com/gpu.
func ShortName(name corev1.ResourceName) string {
	if name == ResourceGPU {
		return "gpu"
	}
	if s, ok := strings.CutPrefix(string(name), migPrefix); ok {
		return s
	}
	return string(name)
}

// compare orders MIG profiles by size: compute slices, then memory, then the
// number of attributes (1g.10gb < 1g.10gb.me), then name so that the order is
// total. Whole GPUs are not ordered here; the chain puts them last.
func compare(a, b Profile) int {
	switch {
	case a.Slices != b.Slices:
		return a.Slices - b.Slices
	case a.MemoryGB != b.MemoryGB:
		return a.MemoryGB - b.MemoryGB
	case len(a.Attrs) != len(b.Attrs):
		return len(a.Attrs) - len(b.Attrs)
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
