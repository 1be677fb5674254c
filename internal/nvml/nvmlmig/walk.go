package nvmlmig

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/migflex/migflex/internal/domain/mig"
)

// The walk over a GPU's GPU-instance profiles and instances that both
// Discover and the probe (internal/nvml/probe) make: the NVML calls in one place,
// what each makes of them in its own.

// GIProfile is a GPU-instance profile a GPU supports, as NVML reports it.
type GIProfile struct {
	// Query is the GPU_INSTANCE_PROFILE_* constant it was looked up by.
	Query int
	// Name is the profile's canonical name (see ProfileName).
	Name       string
	Info       nvml.GpuInstanceProfileInfo
	Placements []nvml.GpuInstancePlacement
}

// MIG is the profile in its domain form. Every placement of a profile has
// the same size, its MemorySlices.
func (p GIProfile) MIG() mig.Profile {
	info := p.Info
	out := mig.Profile{
		Name:      p.Name,
		ID:        info.Id,
		Query:     p.Query,
		Slices:    int(info.SliceCount),
		MemoryMiB: info.MemorySizeMB,
		SMs:       int(info.MultiprocessorCount),
		MaxCount:  int(info.InstanceCount),
		Engines: mig.Engines{
			CopyEngines: int(info.CopyEngineCount),
			Decoders:    int(info.DecoderCount),
			Encoders:    int(info.EncoderCount),
			JPEGs:       int(info.JpegCount),
			OFAs:        int(info.OfaCount),
		},
	}
	for _, pl := range p.Placements {
		out.Placements = append(out.Placements, int(pl.Start))
		out.MemorySlices = int(pl.Size)
	}
	return out
}

// GIProfiles enumerates the GPU_INSTANCE_PROFILE_* constants on GPU d
// (index gpu, totalMemBytes of memory), in query order, leaving out those
// the GPU or driver does not support, with each profile's name and
// possible placements.
func GIProfiles(lib nvml.Interface, d nvml.Device, gpu int, totalMemBytes uint64) ([]GIProfile, error) {
	var out []GIProfile
	for q := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		info, ret := d.GetGpuInstanceProfileInfo(q)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_INVALID_ARGUMENT:
			continue // the GPU (or this driver) has no such profile
		default:
			return nil, nvmlErr(gpu, ret, "get GPU instance profile %s", mig.QueryName(q))
		}
		placements, ret := d.GetGpuInstancePossiblePlacements(&info)
		if ret != nvml.SUCCESS {
			return nil, nvmlErr(gpu, ret, "get placements of GPU instance profile %s", mig.QueryName(q))
		}
		out = append(out, GIProfile{Query: q, Name: ProfileName(lib, d, q, info, totalMemBytes), Info: info, Placements: placements})
	}
	return out, nil
}

// EachGPUInstance calls f with every GPU instance of profiles on GPU d, a
// profile at a time, with its info; p is the instance's profile's index in
// profiles. It stops at the first error, f's included.
func EachGPUInstance(d nvml.Device, gpu int, profiles []GIProfile, f func(p int, gi nvml.GpuInstance, info nvml.GpuInstanceInfo) error) error {
	for i := range profiles {
		p := &profiles[i]
		if p.Info.InstanceCount == 0 {
			continue // go-nvml would index an empty buffer
		}
		gis, ret := d.GetGpuInstances(&p.Info)
		if ret != nvml.SUCCESS {
			return nvmlErr(gpu, ret, "list %s GPU instances", p.Name)
		}
		for _, gi := range gis {
			info, ret := gi.GetInfo()
			if ret != nvml.SUCCESS {
				return nvmlErr(gpu, ret, "get %s GPU instance info", p.Name)
			}
			if err := f(i, gi, info); err != nil {
				return err
			}
		}
	}
	return nil
}
