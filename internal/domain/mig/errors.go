package mig

import "errors"

// Sentinels for errors.Is on errors from the NVML adapter (nvmlmig) and
// anything else that changes MIG state: callers such as the config engine
// decide on them without knowing the backend.
var (
	// ErrInUse: the GPU or instance is busy (instances exist, processes
	// run); nothing was changed.
	ErrInUse = errors.New("in use")
	// ErrResetRequired: the MIG mode change is pending until the GPU is
	// reset (Ampere, or a GPU NVML could not reset).
	ErrResetRequired = errors.New("GPU reset required")
	// ErrInsufficientResources: the instance does not fit next to the
	// existing ones (overlap, profile count, compute slices).
	ErrInsufficientResources = errors.New("insufficient resources")
	// ErrNotFound: no such GPU, profile or instance.
	ErrNotFound = errors.New("not found")
	// ErrNotSupported: the GPU or backend cannot do it (no MIG, MIG
	// disabled, no reset capability).
	ErrNotSupported = errors.New("not supported")
	// ErrNoReturn: a call did not return in time and may still be running
	// in the driver (NVML calls cannot be cancelled), so nothing else may
	// be called on its GPU until it does, not even a rollback.
	ErrNoReturn = errors.New("the call has not returned")
)
