package nvmlmig

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/migflex/migflex/internal/domain/mig"
)

// Error is a failed NVML call made for an operation on one GPU. It matches
// mig's sentinels and, through Unwrap, the nvml.Return itself.
type Error struct {
	GPU int
	// Op says what was attempted: "create 3g.40gb at 4".
	Op  string
	Ret nvml.Return
}

func (e *Error) Error() string { return fmt.Sprintf("GPU %d: %s: %v", e.GPU, e.Op, e.Ret) }

func (e *Error) Unwrap() error { return e.Ret }

func (e *Error) Is(target error) bool { return returnIs(e.Ret, target) }

// returnIs maps an NVML return to the sentinel it means.
func returnIs(ret nvml.Return, target error) bool {
	switch target {
	case mig.ErrInUse:
		return ret == nvml.ERROR_IN_USE
	case mig.ErrResetRequired:
		return ret == nvml.ERROR_RESET_REQUIRED
	case mig.ErrInsufficientResources:
		return ret == nvml.ERROR_INSUFFICIENT_RESOURCES
	case mig.ErrNotFound:
		return ret == nvml.ERROR_NOT_FOUND
	case mig.ErrNotSupported:
		return ret == nvml.ERROR_NOT_SUPPORTED
	}
	return false
}

// backendError is an error from a backend capability (GPUResetter) that
// wraps an nvml.Return: its text is the backend's, and it matches the
// sentinels like Error does.
type backendError struct {
	err error
	ret nvml.Return
}

func (e *backendError) Error() string        { return e.err.Error() }
func (e *backendError) Unwrap() error        { return e.err }
func (e *backendError) Is(target error) bool { return returnIs(e.ret, target) }

// nvmlErr wraps a failed return; nil for SUCCESS.
func nvmlErr(gpu int, ret nvml.Return, format string, args ...any) error {
	if ret == nvml.SUCCESS {
		return nil
	}
	return &Error{GPU: gpu, Op: fmt.Sprintf(format, args...), Ret: ret}
}
