package mig

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// NVML's GPU_INSTANCE_PROFILE_* values (nvml.h), which Profile.Query holds.
// They are part of NVML's ABI and are spelled here so that the pure packages
// (config engine, planner, webhook tables) need not link go-nvml, a cgo
// package; nvmlmig's tests check them against go-nvml's.
const (
	GIProfile1Slice      = 0
	GIProfile2Slice      = 1
	GIProfile3Slice      = 2
	GIProfile4Slice      = 3
	GIProfile7Slice      = 4
	GIProfile8Slice      = 5
	GIProfile6Slice      = 6
	GIProfile1SliceRev1  = 7
	GIProfile2SliceRev1  = 8
	GIProfile1SliceRev2  = 9
	GIProfile1SliceGFX   = 10
	GIProfile2SliceGFX   = 11
	GIProfile4SliceGFX   = 12
	GIProfile1SliceNoME  = 13
	GIProfile2SliceNoME  = 14
	GIProfile1SliceAllME = 15
	GIProfile2SliceAllME = 16
	GIProfile3SliceGFX   = 17
	GIProfileCount       = 18
)

// NVML's COMPUTE_INSTANCE_PROFILE_* values (nvml.h), checked like the above.
const (
	CIProfile1Slice     = 0
	CIProfile2Slice     = 1
	CIProfile3Slice     = 2
	CIProfile4Slice     = 3
	CIProfile7Slice     = 4
	CIProfile8Slice     = 5
	CIProfile6Slice     = 6
	CIProfile1SliceRev1 = 7
	CIProfile7SliceNVL  = 8
	CIProfileCount      = 9
)

// queryNames spells the GPU_INSTANCE_PROFILE_* constants without their
// prefix, indexed by value.
var queryNames = [GIProfileCount]string{
	GIProfile1Slice:      "1_SLICE",
	GIProfile2Slice:      "2_SLICE",
	GIProfile3Slice:      "3_SLICE",
	GIProfile4Slice:      "4_SLICE",
	GIProfile7Slice:      "7_SLICE",
	GIProfile8Slice:      "8_SLICE",
	GIProfile6Slice:      "6_SLICE",
	GIProfile1SliceRev1:  "1_SLICE_REV1",
	GIProfile2SliceRev1:  "2_SLICE_REV1",
	GIProfile1SliceRev2:  "1_SLICE_REV2",
	GIProfile1SliceGFX:   "1_SLICE_GFX",
	GIProfile2SliceGFX:   "2_SLICE_GFX",
	GIProfile4SliceGFX:   "4_SLICE_GFX",
	GIProfile1SliceNoME:  "1_SLICE_NO_ME",
	GIProfile2SliceNoME:  "2_SLICE_NO_ME",
	GIProfile1SliceAllME: "1_SLICE_ALL_ME",
	GIProfile2SliceAllME: "2_SLICE_ALL_ME",
	GIProfile3SliceGFX:   "3_SLICE_GFX",
}

// QueryName returns the GPU_INSTANCE_PROFILE_* constant's name without the
// prefix ("3_SLICE"), or the number for a value NVML does not define.
func QueryName(q int) string {
	if q >= 0 && q < len(queryNames) {
		return queryNames[q]
	}
	return strconv.Itoa(q)
}

// ParseQuery accepts "3_SLICE", "GPU_INSTANCE_PROFILE_3_SLICE" or a number.
func ParseQuery(s string) (int, error) {
	name := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(s)), "GPU_INSTANCE_PROFILE_")
	if i := slices.Index(queryNames[:], name); i >= 0 {
		return i, nil
	}
	if n, err := strconv.Atoi(name); err == nil && n >= 0 && n < len(queryNames) {
		return n, nil
	}
	return 0, fmt.Errorf("unknown GPU instance profile query %q (want one of %s)", s, strings.Join(queryNames[:], ", "))
}

// computeQueryNames spells the COMPUTE_INSTANCE_PROFILE_* constants without
// their prefix, indexed by value.
var computeQueryNames = [CIProfileCount]string{
	CIProfile1Slice:     "1_SLICE",
	CIProfile2Slice:     "2_SLICE",
	CIProfile3Slice:     "3_SLICE",
	CIProfile4Slice:     "4_SLICE",
	CIProfile7Slice:     "7_SLICE",
	CIProfile8Slice:     "8_SLICE",
	CIProfile6Slice:     "6_SLICE",
	CIProfile1SliceRev1: "1_SLICE_REV1",
	CIProfile7SliceNVL:  "7_SLICE_NVL",
}

// ComputeQueryName returns the COMPUTE_INSTANCE_PROFILE_* constant's name
// without the prefix ("3_SLICE"), or the number for a value NVML does not
// define.
func ComputeQueryName(q int) string {
	if q >= 0 && q < len(computeQueryNames) {
		return computeQueryNames[q]
	}
	return strconv.Itoa(q)
}

// ParseComputeQuery accepts "3_SLICE" or "COMPUTE_INSTANCE_PROFILE_3_SLICE".
func ParseComputeQuery(s string) (int, error) {
	name := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(s)), "COMPUTE_INSTANCE_PROFILE_")
	if i := slices.Index(computeQueryNames[:], name); i >= 0 {
		return i, nil
	}
	return 0, fmt.Errorf("unknown compute instance profile query %q (want one of %s)", s, strings.Join(computeQueryNames[:], ", "))
}

// FullComputeProfile is the COMPUTE_INSTANCE_PROFILE_* constant of the
// compute instance spanning a GPU instance of that many slices, or -1 where
// NVML has none. It is the only compute instance migflex creates or serves.
func FullComputeProfile(slices int) int {
	switch slices {
	case 1:
		return CIProfile1Slice
	case 2:
		return CIProfile2Slice
	case 3:
		return CIProfile3Slice
	case 4:
		return CIProfile4Slice
	case 6:
		return CIProfile6Slice
	case 7:
		return CIProfile7Slice
	case 8:
		return CIProfile8Slice
	}
	return -1
}
