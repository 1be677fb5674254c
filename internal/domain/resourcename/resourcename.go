// Package resourcename owns the Kubernetes resource names of NVIDIA GPUs:
// nvidia.com/gpu for a whole GPU and nvidia.com/mig-<profile> for a MIG
// profile under the mixed strategy, with "+" written as "." because "+" is
// not legal in a resource name (1g.10gb+me is nvidia.com/mig-1g.10gb.me, as
// NVIDIA's device plugin serves it). The device plugin, the agent's labels,
// the webhook and the planner all name resources through it.
package resourcename

import (
	"regexp"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

const (
	// GPU is the resource of a whole GPU, and of MIG devices under the
	// single strategy.
	GPU corev1.ResourceName = "nvidia.com/gpu"
	// MIGPrefix starts the resource of every MIG profile.
	MIGPrefix = "nvidia.com/mig-"
)

// MIG returns the resource a MIG profile is served as under the mixed
// strategy: "1g.10gb+me" is nvidia.com/mig-1g.10gb.me, "1g.24gb-me" is
// nvidia.com/mig-1g.24gb-me.
func MIG(profile string) corev1.ResourceName {
	return corev1.ResourceName(MIGPrefix + Suffix(profile))
}

// Suffix is the part of a profile's resource name after MIGPrefix
// ("1g.10gb.me" for 1g.10gb+me), which is also how the GFD labels name the
// profile (nvidia.com/mig-1g.10gb.me.count).
func Suffix(profile string) string { return strings.ReplaceAll(profile, "+", ".") }

// IsGPU reports whether r is nvidia.com/gpu or any nvidia.com/mig-*
// resource. It does not allocate.
func IsGPU(r corev1.ResourceName) bool {
	return r == GPU || strings.HasPrefix(string(r), MIGPrefix)
}

// Short is the resource without MIGPrefix ("2g.20gb", "1g.10gb.me"), "gpu"
// for nvidia.com/gpu, and any other name as it is.
func Short(r corev1.ResourceName) string {
	if r == GPU {
		return "gpu"
	}
	if s, ok := strings.CutPrefix(string(r), MIGPrefix); ok {
		return s
	}
	return string(r)
}

// migName matches the resource names MIG returns for the profiles NVIDIA
// names: nvidia.com/mig-<slices>g.<memory>gb and an optional attribute
// suffix (".me", ".me.all", "-me", ".gfx").
var migName = regexp.MustCompile(`^nvidia\.com/mig-([1-9][0-9]{0,2})g\.([1-9][0-9]{0,4})gb((?:[.-][a-z0-9]+)*)$`)

// MIGName is what a MIG resource name says about its profile.
type MIGName struct {
	// Slices is the number of compute slices; MemoryGB the instance memory.
	Slices, MemoryGB int
	// Suffix is the attribute part after the memory, as in the resource
	// name: ".me", ".me.all", "-me", ".gfx"; "" for a plain profile.
	Suffix string
}

// ParseMIG parses nvidia.com/mig-<N>g.<M>gb[.attr...]. Anything else (other
// vendors, nvidia.com/gpu, compute-instance profiles such as
// mig-1c.3g.40gb) is false.
func ParseMIG(r corev1.ResourceName) (MIGName, bool) {
	m := migName.FindStringSubmatch(string(r))
	if m == nil {
		return MIGName{}, false
	}
	slices, _ := strconv.Atoi(m[1])
	mem, _ := strconv.Atoi(m[2])
	return MIGName{Slices: slices, MemoryGB: mem, Suffix: m[3]}, true
}
