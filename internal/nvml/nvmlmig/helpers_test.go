package nvmlmig_test

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim/simtest"
)

// newSim returns an in-memory simulator. It is not initialized: the code
// under test holds its own NVML reference.
func newSim(t *testing.T, gpus ...sim.GPUSpec) *sim.Lib {
	t.Helper()
	return newSimConfig(t, sim.Config{GPUs: gpus, UUIDSeed: "test-node"})
}

func newSimConfig(t *testing.T, cfg sim.Config) *sim.Lib {
	t.Helper()
	return simtest.New(t, cfg)
}

func gpus(model string, n int) sim.GPUSpec { return sim.GPUSpec{Model: model, Count: n} }

// plainLib hides the simulator's optional capabilities: its devices have no
// ProfileName and it has no ResetGPU, like a backend migflex knows nothing
// about.
type plainLib struct{ nvml.Interface }

func (l plainLib) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	d, ret := l.Interface.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	return plainDevice{d}, ret
}

type plainDevice struct{ nvml.Device }
