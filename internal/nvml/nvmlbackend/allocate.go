package nvmlbackend

import (
	"strings"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/migflex/migflex/internal/nodeagent/deviceplugin"
)

// What a container given simulated devices finds in its environment
// instead of device nodes (a simulated device has none).
const (
	// EnvSimulated marks a container whose devices come from the simulated
	// NVML.
	EnvSimulated = "MIGFLEX_SIMULATED"
	// EnvDeviceIDs lists the allocated device IDs, comma-separated.
	EnvDeviceIDs = "MIGFLEX_DEVICE_IDS"
	// EnvProfiles lists the MIG profile of each allocated device in the
	// order of EnvDeviceIDs ("gpu" for a whole GPU).
	EnvProfiles = "MIGFLEX_MIG_PROFILES"
)

// SimulatedDevices is the device plugin's PostAllocator for the simulated
// backend: no device nodes, and the devices named in the environment. The
// simulated library Open returns has it, so the agent finds it by type
// assertion.
type SimulatedDevices struct{}

var _ deviceplugin.PostAllocator = SimulatedDevices{}

// PostAllocate implements deviceplugin.PostAllocator.
func (SimulatedDevices) PostAllocate(resp *pluginapi.ContainerAllocateResponse, devs []deviceplugin.Device) error {
	ids := make([]string, len(devs))
	profiles := make([]string, len(devs))
	for i, d := range devs {
		ids[i], profiles[i] = d.ID, d.Profile
		if !d.MIG {
			profiles[i] = "gpu"
		}
	}
	if resp.Envs == nil {
		resp.Envs = map[string]string{}
	}
	resp.Envs[EnvSimulated] = "true"
	resp.Envs[EnvDeviceIDs] = strings.Join(ids, ",")
	resp.Envs[EnvProfiles] = strings.Join(profiles, ",")
	return nil
}
