package mig

import (
	"fmt"
	"math"
)

// DeriveProfileName builds a profile's canonical name from NVML's numbers
// the way NVIDIA's go-nvlib does: "<slices>g.<GB>gb", where GB is the
// instance memory as a fraction of the GPU's memory rounded up to eighths,
// times the GPU's memory in GB rounded up. Rounding to eighths is what makes
// 80384 MiB on an 80 GB A100 7g.80gb rather than 79. Attribute suffixes
// follow the query constant: +me, +me.all, -me, +gfx.
func DeriveProfileName(query, slices int, memoryMiB, totalMemBytes uint64) string {
	return fmt.Sprintf("%dg.%dgb%s", slices, memoryGB(totalMemBytes, memoryMiB), ProfileSuffix(query))
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

// ProfileSuffix is the attribute suffix NVIDIA's tools write for a
// GPU-instance profile query constant: "+me", "+me.all", "-me", "+gfx" or "".
func ProfileSuffix(query int) string {
	switch query {
	case GIProfile1SliceRev1, GIProfile2SliceRev1:
		return "+me"
	case GIProfile1SliceAllME, GIProfile2SliceAllME:
		return "+me.all"
	case GIProfile1SliceNoME, GIProfile2SliceNoME:
		return "-me"
	case GIProfile1SliceGFX, GIProfile2SliceGFX, GIProfile4SliceGFX, GIProfile3SliceGFX:
		return "+gfx"
	}
	return ""
}

// Media says how a profile's media engines relate to the rest of the GPU.
type Media int

const (
	// SomeMedia: the usual profiles, with their share of the media
	// engines, or none.
	SomeMedia Media = iota
	// AllMedia: an _ALL_ME profile (+me.all), every media engine of the GPU.
	AllMedia
	// NoMedia: an _NO_ME profile (-me), none, and the only kind that may
	// share a GPU with an AllMedia instance (nvml.h).
	NoMedia
)

// MediaOf returns how the profile with this query constant shares media
// engines.
func MediaOf(query int) Media {
	switch query {
	case GIProfile1SliceAllME, GIProfile2SliceAllME:
		return AllMedia
	case GIProfile1SliceNoME, GIProfile2SliceNoME:
		return NoMedia
	}
	return SomeMedia
}
