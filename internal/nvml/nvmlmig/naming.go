package nvmlmig

import (
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/migflex/migflex/internal/domain/mig"
)

// ProfileNamer is an optional capability of an nvml.Device that names its
// GPU-instance profiles itself. The simulator implements it so custom
// models keep the names their tables give; real devices do not.
type ProfileNamer interface {
	ProfileName(info nvml.GpuInstanceProfileInfo) (string, bool)
}

// ProfileName names a GPU-instance profile: by the device's ProfileNamer,
// else by the name NVML reports through the versioned profile info, else
// derived from memory like NVIDIA's go-nvlib.
func ProfileName(lib nvml.Interface, d nvml.Device, query int, info nvml.GpuInstanceProfileInfo, totalMemBytes uint64) string {
	if n, ok := d.(ProfileNamer); ok {
		if name, ok := n.ProfileName(info); ok {
			return name
		}
	}
	if v, ok := VersionedProfileInfo(lib, d, query); ok && v.Name != "" {
		return v.Name
	}
	return mig.DeriveProfileName(query, int(info.SliceCount), info.MemorySizeMB, totalMemBytes)
}

// profileInfoVSymbol is the NVML function behind the versioned profile info
// (R510 and later).
const profileInfoVSymbol = "nvmlDeviceGetGpuInstanceProfileInfoV"

// ProfileInfoV is what the versioned profile info adds to version 1.
type ProfileInfoV struct {
	// Name is the profile's name without the "MIG " prefix ("1g.10gb+me").
	Name string
	// Capabilities are NVML's GPU_INSTANCE_PROFILE_CAPS_* bits (P2P, GFX);
	// only version 3 reports them.
	Capabilities uint32
	// Version is the struct version the driver answered: 3 or 2.
	Version int
}

// VersionedProfileInfo asks NVML for a profile's version-3 info, or version 2
// on a driver without it. It answers false where the library lacks the call
// (drivers before R510, the simulator) or the device handle is not one
// go-nvml filled from the C library: calling the handler then would crash
// the process.
func VersionedProfileInfo(lib nvml.Interface, d nvml.Device, query int) (ProfileInfoV, bool) {
	if lib == nil || lib.Extensions().LookupSymbol(profileInfoVSymbol) != nil {
		return ProfileInfoV{}, false
	}
	h := d.GetGpuInstanceProfileInfoV(query)
	if h == (nvml.GpuInstanceProfileInfoHandler{}) {
		return ProfileInfoV{}, false
	}
	if v3, ret := h.V3(); ret == nvml.SUCCESS {
		return ProfileInfoV{Name: cName(v3.Name[:]), Capabilities: v3.Capabilities, Version: 3}, true
	}
	if v2, ret := h.V2(); ret == nvml.SUCCESS {
		return ProfileInfoV{Name: cName(v2.Name[:]), Version: 2}, true
	}
	return ProfileInfoV{}, false
}

// cName reads a NUL-terminated C string and drops NVML's "MIG " prefix.
func cName(c []int8) string {
	var b strings.Builder
	for _, ch := range c {
		if ch == 0 {
			break
		}
		b.WriteByte(byte(ch))
	}
	return strings.TrimPrefix(b.String(), "MIG ")
}
