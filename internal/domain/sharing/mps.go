package sharing

import (
	"fmt"
	"maps"
	"path"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// MPSContainerRoot is where a resource's MPS directories are seen inside
// the MPS daemon's and the clients' containers, as in NVIDIA's plugin.
const MPSContainerRoot = "/mps"

// MPS is what NVIDIA's device plugin serves for one resource shared with
// MPS, as data: the daemon that applies it is not part of migflex.
type MPS struct {
	// Resource is the served resource; each has its own daemon.
	Resource corev1.ResourceName
	// PipeDir and LogDir are the daemon's directories inside containers
	// (<root>/<resource>/pipe and /log).
	PipeDir, LogDir string
	// HostPipeDir and HostShmDir are the host directories mounted into
	// each client at PipeDir and /dev/shm.
	HostPipeDir, HostShmDir string
	// ContainerEnv is what each client container gets.
	ContainerEnv map[string]string
	// DaemonEnv is what the control daemon runs with.
	DaemonEnv map[string]string
	// ActiveThreadPercentage is the daemon's default share of the threads
	// per client: 100/replicas, rounded down.
	ActiveThreadPercentage int
	// PinnedMemoryLimits is the daemon's default pinned memory limit per
	// client, by device index: the device's memory over its replicas, in
	// MiB rounded down, written as NVIDIA writes it ("4864M"). A device
	// whose memory is unknown has none.
	PinnedMemoryLimits map[string]string
}

// DaemonCommands are the control commands NVIDIA's daemon sends after it
// starts, in a fixed order.
func (m MPS) DaemonCommands() []string {
	var out []string
	for _, idx := range slices.Sorted(maps.Keys(m.PinnedMemoryLimits)) {
		out = append(out, fmt.Sprintf("set_default_device_pinned_mem_limit %s %s", idx, m.PinnedMemoryLimits[idx]))
	}
	return append(out, fmt.Sprintf("set_default_active_thread_percentage %d", m.ActiveThreadPercentage))
}

func mpsFor(r Resource, devs []Device, picked []bool, hostRoot string) MPS {
	res := r.ServedAs()
	m := MPS{
		Resource:               res,
		PipeDir:                path.Join(MPSContainerRoot, string(res), "pipe"),
		LogDir:                 path.Join(MPSContainerRoot, string(res), "log"),
		HostPipeDir:            path.Join(hostRoot, string(res), "pipe"),
		HostShmDir:             path.Join(hostRoot, "shm"),
		ActiveThreadPercentage: 100 / r.Replicas,
		PinnedMemoryLimits:     map[string]string{},
	}
	m.ContainerEnv = map[string]string{"CUDA_MPS_PIPE_DIRECTORY": m.PipeDir}
	m.DaemonEnv = map[string]string{"CUDA_MPS_PIPE_DIRECTORY": m.PipeDir, "CUDA_MPS_LOG_DIRECTORY": m.LogDir}
	for i, d := range devs {
		if picked[i] && d.MemoryBytes > 0 {
			m.PinnedMemoryLimits[d.Index] = fmt.Sprintf("%dM", d.MemoryBytes/uint64(r.Replicas)/(1<<20))
		}
	}
	return m
}
