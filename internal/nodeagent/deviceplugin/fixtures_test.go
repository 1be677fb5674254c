package deviceplugin

import (
	"fmt"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/resourcename"
)

// resourceGPU is the resource of whole GPUs, and of MIG devices under the
// single strategy.
const resourceGPU = string(resourcename.GPU)

// Fixture builders for GPU layouts. UUIDs are short and readable; the
// plugin treats them as opaque IDs.

func gpuUUID(index int) string { return fmt.Sprintf("GPU-%d", index) }

func migUUID(gpu int, gi uint32) string { return fmt.Sprintf("MIG-%d-%d", gpu, gi) }

// migGPU is a MIG-enabled GPU with the given instances.
func migGPU(index int, instances ...mig.Instance) mig.GPU {
	for i := range instances {
		if instances[i].HasCI && instances[i].UUID == "" {
			instances[i].UUID = migUUID(index, instances[i].GIID)
		}
	}
	return mig.GPU{
		Index: index, UUID: gpuUUID(index), Model: "H100-SXM5-80GB", Minor: index,
		MigCapable: true, MigEnabled: true, MigPending: true, Instances: instances,
	}
}

// plainGPU is a GPU with MIG off.
func plainGPU(index int) mig.GPU {
	return mig.GPU{Index: index, UUID: gpuUUID(index), Model: "H100-SXM5-80GB", Minor: index, MigCapable: true}
}

// inst is a GPU instance with its full-size compute instance 0.
func inst(profile string, start, size int, gi uint32) mig.Instance {
	return mig.Instance{Profile: profile, Start: start, Size: size, GIID: gi, CIID: 0, HasCI: true}
}

// mixedLayout: GPU 0 has 3g+2g+1g, GPU 1 has 1g.10gb+me and 1g.10gb, GPU 2
// has MIG off.
func mixedLayout() []mig.GPU {
	return []mig.GPU{
		migGPU(0, inst("3g.40gb", 0, 4, 2), inst("2g.20gb", 4, 2, 3), inst("1g.10gb", 6, 1, 13)),
		migGPU(1, inst("1g.10gb+me", 0, 1, 7), inst("1g.10gb", 1, 1, 8)),
		plainGPU(2),
	}
}

// migDev is the Device Resources makes of instance gi on GPU gpu.
func migDev(resource, profile string, gpu int, gi uint32) Device {
	return Device{ID: migUUID(gpu, gi), Resource: resource, Profile: profile, GPUIndex: gpu, GPUUUID: gpuUUID(gpu), Minor: gpu, MIG: true, GI: gi}
}

func wholeDev(gpu int) Device {
	return Device{ID: gpuUUID(gpu), Resource: resourceGPU, GPUIndex: gpu, GPUUUID: gpuUUID(gpu), Minor: gpu}
}
