package mig

import (
	"fmt"
	"math"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// ProfileNamer is an optional capability of an nvml.Device that names its
// GPU-instance profiles itself. The simulator implements it so custom
// models keep the names their tables give; real devices do not.
type ProfileNamer interface {
	ProfileName(info nvml.GpuInstanceProfileInfo) (string, bool)
}

// profileName names a profile: by the device's ProfileNamer, else by the
// name real NVML reports through the versioned profile info, else derived
// from memory like NVIDIA's go-nvlib.
func profileName(d nvml.Device, query int, info nvml.GpuInstanceProfileInfo, totalMemBytes uint64) string {
	if n, ok := d.(ProfileNamer); ok {
		if name, ok := n.ProfileName(info); ok {
			return name
		}
	}
	if name, ok := nvmlProfileName(d, query); ok {
		return name
	}
	return DeriveProfileName(query, info, totalMemBytes)
}

// nvmlProfileName asks real NVML (R510 and later) for the profile's name.
// The versioned handler calls into the C library, so it is only used on a
// handler go-nvml filled from a real device: a zero handler comes from a
// fake, and calling it would crash the process.
func nvmlProfileName(d nvml.Device, query int) (string, bool) {
	h := d.GetGpuInstanceProfileInfoV(query)
	if h == (nvml.GpuInstanceProfileInfoHandler{}) {
		return "", false
	}
	info, ret := h.V2()
	if ret != nvml.SUCCESS {
		return "", false
	}
	var b strings.Builder
	for _, c := range info.Name {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	name := strings.TrimPrefix(b.String(), "MIG ")
	return name, name != ""
}

// DeriveProfileName builds a profile's canonical name from NVML's numbers
// the way NVIDIA's go-nvlib does: "<slices>g.<GB>gb", where GB is the
// instance memory as a fraction of the GPU's memory rounded up to eighths,
// times the GPU's memory in GB rounded up. Rounding to eighths is what makes
// 80384 MiB on an 80 GB A100 7g.80gb rather than 79. Attribute suffixes
// follow the query constant: +me, +me.all, -me, +gfx.
func DeriveProfileName(query int, info nvml.GpuInstanceProfileInfo, totalMemBytes uint64) string {
	return fmt.Sprintf("%dg.%dgb%s", info.SliceCount, memoryGB(totalMemBytes, info.MemorySizeMB), profileSuffix(query))
}

func memoryGB(totalMemBytes, instanceMiB uint64) uint64 {
	const (
		eighths = 8
		mib     = 1 << 20
		gib     = 1 << 30
	)
	if totalMemBytes == 0 {
		return 0
	}
	fraction := float64(instanceMiB*mib) / float64(totalMemBytes)
	fraction = math.Ceil(fraction*eighths) / eighths
	totalGB := float64((totalMemBytes + gib - 1) / gib)
	return uint64(math.Round(fraction * totalGB))
}

func profileSuffix(query int) string {
	switch query {
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1:
		return "+me"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME, nvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME:
		return "+me.all"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, nvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME:
		return "-me"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_GFX, nvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX,
		nvml.GPU_INSTANCE_PROFILE_4_SLICE_GFX, nvml.GPU_INSTANCE_PROFILE_3_SLICE_GFX:
		return "+gfx"
	}
	return ""
}
