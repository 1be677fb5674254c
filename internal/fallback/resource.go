package fallback

import (
	"fmt"
	"regexp"
	"slices"
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
	compute, _ := strconv.Atoi(m[1])
	mem, _ := strconv.Atoi(m[2])
	p := Profile{Resource: name, Slices: compute, MemoryGB: mem}
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

// knownProfiles are the MIG profiles (compute slices and memory, without
// attributes) of the GPUs NVIDIA makes, as NVIDIA's mig-parted lays them out
// (its config-default.yaml and examples at commit bd7160f: A30, A100/A800
// 40/80GB, H100/H800 80GB, H100 NVL, H100 96GB, H20, H200, GH200, B200,
// B300, GB200, GB300, RTX PRO 6000 Blackwell). A profile missing here is
// still named by MetricLabel when a node has it.
var knownProfiles = wordSet(`
	1g.5gb 1g.6gb 1g.10gb 1g.12gb 1g.18gb 1g.20gb 1g.23gb 1g.24gb 1g.34gb
	1g.35gb 1g.36gb 1g.45gb 1g.47gb 1g.67gb 1g.70gb
	2g.10gb 2g.12gb 2g.20gb 2g.24gb 2g.35gb 2g.36gb 2g.45gb 2g.47gb 2g.48gb
	2g.67gb 2g.70gb
	3g.20gb 3g.40gb 3g.47gb 3g.48gb 3g.71gb 3g.72gb 3g.90gb 3g.93gb 3g.95gb
	3g.135gb 3g.139gb
	4g.20gb 4g.24gb 4g.40gb 4g.47gb 4g.48gb 4g.71gb 4g.72gb 4g.90gb 4g.93gb
	4g.95gb 4g.96gb 4g.135gb 4g.139gb
	7g.40gb 7g.80gb 7g.94gb 7g.96gb 7g.141gb 7g.144gb 7g.180gb 7g.186gb
	7g.189gb 7g.269gb 7g.278gb`)

// knownAttrs are the profile attributes NVIDIA's GPUs have: media
// extensions (+me, +me.all) and graphics (+gfx).
var knownAttrs = wordSet("me gfx all")

func wordSet(s string) map[string]bool {
	out := map[string]bool{}
	for _, w := range strings.Fields(s) {
		out[w] = true
	}
	return out
}

// knownProfile reports whether p is a MIG profile of a GPU NVIDIA makes:
// a known slices/memory pair with known attributes, none twice. The set of
// such names is small and fixed, unlike the names a pod may ask for.
func knownProfile(p Profile) bool {
	if p.WholeGPU() || !knownProfiles[fmt.Sprintf("%dg.%dgb", p.Slices, p.MemoryGB)] {
		return false
	}
	for i, a := range p.Attrs {
		if !knownAttrs[a] || slices.Contains(p.Attrs[:i], a) {
			return false
		}
	}
	return true
}
