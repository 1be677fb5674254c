package nvmlmig

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/migflex/migflex/internal/domain/mig"
)

// GPUResetter is an optional capability of an NVML backend: resetting a GPU
// so a pending MIG mode takes effect. The simulator has it; the real backend
// does not (migflex never shells out to nvidia-smi).
type GPUResetter interface {
	ResetGPU(index int) error
}

// Partitioner changes the MIG state of one GPU at a time through NVML. Each
// call holds its own NVML reference, like Discover.
type Partitioner struct {
	lib nvml.Interface
}

// NewPartitioner returns a Partitioner over lib.
func NewPartitioner(lib nvml.Interface) *Partitioner { return &Partitioner{lib: lib} }

// SetMigMode enables or disables MIG mode on a GPU. It returns nil once the
// mode is current; an error matching mig.ErrResetRequired when the change is
// pending until a GPU reset (Ampere); one matching mig.ErrInUse when the GPU is
// not idle, in which case nothing changed.
func (p *Partitioner) SetMigMode(gpu int, enabled bool) error {
	verb, mode := "disable", nvml.DEVICE_MIG_DISABLE
	if enabled {
		verb, mode = "enable", nvml.DEVICE_MIG_ENABLE
	}
	return withNVML(p.lib, func() error {
		d, err := device(p.lib, gpu)
		if err != nil {
			return err
		}
		cur, pending, ret := d.GetMigMode()
		if ret != nvml.SUCCESS {
			return nvmlErr(gpu, ret, "%s MIG mode: get MIG mode", verb)
		}
		if cur == mode && pending == mode {
			return nil
		}
		activation, ret := d.SetMigMode(mode)
		if ret != nvml.SUCCESS {
			return nvmlErr(gpu, ret, "%s MIG mode", verb)
		}
		if activation == nvml.SUCCESS {
			return nil
		}
		// NVML could not activate the mode (it needs a reset, or the GPU was
		// held open while NVML tried one); it stays pending.
		if cur, _, ret := d.GetMigMode(); ret == nvml.SUCCESS && cur == mode {
			return nil
		}
		return &Error{GPU: gpu, Op: fmt.Sprintf("%s MIG mode: pending until GPU reset (activation status %v)", verb, activation), Ret: nvml.ERROR_RESET_REQUIRED}
	})
}

// ResetGPU resets a GPU through the backend's GPUResetter capability, so a
// pending MIG mode takes effect. Backends without it give mig.ErrNotSupported;
// a GPU that is not idle gives an error matching mig.ErrInUse. The backend's
// errors already name the GPU and the operation.
func (p *Partitioner) ResetGPU(gpu int) error {
	r, ok := p.lib.(GPUResetter)
	if !ok {
		return fmt.Errorf("GPU %d: reset: the NVML backend cannot reset GPUs: %w", gpu, mig.ErrNotSupported)
	}
	if err := r.ResetGPU(gpu); err != nil {
		var ret nvml.Return
		if errors.As(err, &ret) {
			return &backendError{err: err, ret: ret}
		}
		return err
	}
	return nil
}

// CreateInstance creates a GPU instance of the named profile at memory
// slice start, with one compute instance spanning it (shared engines). If
// any step after the GPU instance fails, the GPU instance is destroyed
// again, so the GPU is left as it was.
func (p *Partitioner) CreateInstance(gpu int, profileName string, start int) (mig.Instance, error) {
	var inst mig.Instance
	err := withNVML(p.lib, func() error {
		var err error
		inst, err = p.createInstance(gpu, profileName, start)
		return err
	})
	return inst, err
}

func (p *Partitioner) createInstance(gpu int, name string, start int) (mig.Instance, error) {
	op := fmt.Sprintf("create %s at %d", name, start)
	d, err := device(p.lib, gpu)
	if err != nil {
		return mig.Instance{}, err
	}
	prof, err := findProfile(p.lib, d, gpu, name)
	if err != nil {
		return mig.Instance{}, fmt.Errorf("GPU %d: %s: %w", gpu, op, err)
	}
	if start < 0 || !slices.Contains(prof.Placements, start) {
		return mig.Instance{}, &Error{GPU: gpu, Op: fmt.Sprintf("%s: %s may start at %v", op, name, prof.Placements), Ret: nvml.ERROR_INVALID_ARGUMENT}
	}
	gi, ret := d.CreateGpuInstanceWithPlacement(&prof.info, &nvml.GpuInstancePlacement{Start: uint32(start), Size: uint32(prof.MemorySlices)})
	if ret != nvml.SUCCESS {
		return mig.Instance{}, nvmlErr(gpu, ret, "%s", op)
	}
	inst, err := describeNew(d, gi, gpu, prof, op)
	if err != nil {
		if ret := gi.Destroy(); ret != nvml.SUCCESS {
			err = errors.Join(err, nvmlErr(gpu, ret, "%s: roll back: destroy GPU instance", op))
		}
		return mig.Instance{}, err
	}
	return inst, nil
}

// describeNew creates the full-size compute instance in a new GPU instance
// and reads back what was made. On error it has destroyed the compute
// instance it made; the caller destroys the GPU instance.
func describeNew(d nvml.Device, gi nvml.GpuInstance, gpu int, prof profile, op string) (mig.Instance, error) {
	ciProf, ret := gi.GetComputeInstanceProfileInfo(mig.FullComputeProfile(int(prof.info.SliceCount)), nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if ret != nvml.SUCCESS {
		return mig.Instance{}, nvmlErr(gpu, ret, "%s: get compute instance profile", op)
	}
	ci, ret := gi.CreateComputeInstance(&ciProf)
	if ret != nvml.SUCCESS {
		return mig.Instance{}, nvmlErr(gpu, ret, "%s: create compute instance", op)
	}
	inst, err := readBack(d, gi, ci, gpu, prof, op)
	if err != nil {
		if ret := ci.Destroy(); ret != nvml.SUCCESS {
			err = errors.Join(err, nvmlErr(gpu, ret, "%s: roll back: destroy compute instance", op))
		}
		return mig.Instance{}, err
	}
	return inst, nil
}

func readBack(d nvml.Device, gi nvml.GpuInstance, ci nvml.ComputeInstance, gpu int, prof profile, op string) (mig.Instance, error) {
	giInfo, ret := gi.GetInfo()
	if ret != nvml.SUCCESS {
		return mig.Instance{}, nvmlErr(gpu, ret, "%s: get GPU instance info", op)
	}
	ciInfo, ret := ci.GetInfo()
	if ret != nvml.SUCCESS {
		return mig.Instance{}, nvmlErr(gpu, ret, "%s: get compute instance info", op)
	}
	uuids, err := migUUIDs(d, gpu)
	if err != nil {
		return mig.Instance{}, err
	}
	uuid, ok := uuids[[2]uint32{giInfo.Id, ciInfo.Id}]
	if !ok {
		return mig.Instance{}, &Error{GPU: gpu, Op: fmt.Sprintf("%s: find MIG device of GPU instance %d, compute instance %d", op, giInfo.Id, ciInfo.Id), Ret: nvml.ERROR_NOT_FOUND}
	}
	return mig.Instance{
		Profile: prof.Name,
		Start:   int(giInfo.Placement.Start),
		Size:    int(giInfo.Placement.Size),
		GIID:    giInfo.Id,
		CIID:    ciInfo.Id,
		HasCI:   true,
		UUID:    uuid,
	}, nil
}

// DestroyInstance destroys GPU instance gi and its compute instances. If a
// compute instance or the GPU instance is in use the error matches mig.ErrInUse
// and what is in use is still there.
func (p *Partitioner) DestroyInstance(gpu int, gi uint32) error {
	return withNVML(p.lib, func() error {
		op := fmt.Sprintf("destroy GPU instance %d", gi)
		d, err := device(p.lib, gpu)
		if err != nil {
			return err
		}
		inst, ret := d.GetGpuInstanceById(int(gi))
		if ret != nvml.SUCCESS {
			return nvmlErr(gpu, ret, "%s", op)
		}
		// Every compute instance, whatever its size: a GPU instance with any
		// left cannot be destroyed.
		for q := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
			info, ret := inst.GetComputeInstanceProfileInfo(q, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
			if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
				continue
			}
			if ret != nvml.SUCCESS {
				return nvmlErr(gpu, ret, "%s: get compute instance profile %d", op, q)
			}
			if info.InstanceCount == 0 {
				continue
			}
			cis, ret := inst.GetComputeInstances(&info)
			if ret != nvml.SUCCESS {
				return nvmlErr(gpu, ret, "%s: list compute instances", op)
			}
			for _, ci := range cis {
				ciInfo, ret := ci.GetInfo()
				if ret != nvml.SUCCESS {
					return nvmlErr(gpu, ret, "%s: get compute instance info", op)
				}
				if ret := ci.Destroy(); ret != nvml.SUCCESS {
					return nvmlErr(gpu, ret, "%s: destroy compute instance %d", op, ciInfo.Id)
				}
			}
		}
		return nvmlErr(gpu, inst.Destroy(), "%s", op)
	})
}

// findProfile looks a profile up by name among those the GPU supports.
func findProfile(lib nvml.Interface, d nvml.Device, gpu int, name string) (profile, error) {
	mem, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return profile{}, nvmlErr(gpu, ret, "get memory info")
	}
	profiles, err := gpuProfiles(lib, d, gpu, mem.Total)
	if err != nil {
		return profile{}, err
	}
	var names []string
	for _, p := range profiles {
		if p.Name == name {
			return p, nil
		}
		names = append(names, p.Name)
	}
	return profile{}, fmt.Errorf("no profile %q (the GPU has %s): %w", name, strings.Join(names, ", "), mig.ErrNotFound)
}
