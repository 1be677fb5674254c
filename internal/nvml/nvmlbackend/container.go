package nvmlbackend

import "strings"

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

// SimulatedDevices says what a container needs to use the simulated
// library's devices: they have no device nodes, so its environment names
// them. The simulated library Open returns has it; the serving layer (the
// device plugin's Allocate, the DRA driver's CDI specs) finds it by type
// assertion on an interface of its own and gives real GPUs' device nodes
// without it. The NVML layer knows nothing of how devices are served.
type SimulatedDevices struct{}

// ContainerEnv returns the environment of a container given the devices
// ids (their UUIDs, in allocation order); profiles[i] is the MIG profile of
// ids[i], empty for a whole GPU.
func (SimulatedDevices) ContainerEnv(ids, profiles []string) map[string]string {
	named := make([]string, len(ids))
	for i := range ids {
		named[i] = "gpu"
		if i < len(profiles) && profiles[i] != "" {
			named[i] = profiles[i]
		}
	}
	return map[string]string{
		EnvSimulated: "true",
		EnvDeviceIDs: strings.Join(ids, ","),
		EnvProfiles:  strings.Join(named, ","),
	}
}
