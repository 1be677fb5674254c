//go:build e2e

package e2e

import (
	"fmt"
	"testing"
)

// TestPodGetsMigDevice: pods requesting nvidia.com/mig-1g.10gb are placed by
// the scheduler from the Node's allocatable, the kubelet asks the agent's
// device plugin to Allocate, and the container sees the devices it got in
// its environment (simulated backend: no device nodes, the variables say
// which MIG devices and that they are simulated).
func TestPodGetsMigDevice(t *testing.T) {
	migflex(t)
	_, layout := applyLayout(t, "1g.10gb", "1g.10gb", "2g.20gb")
	ns := cluster.Namespace(t)

	// One after the other: the second needs both 1g.10gb devices.
	for _, n := range []int{1, 2} {
		pod := gpuPod(ns, fmt.Sprintf("mig-1g-x%d", n), "nvidia.com/mig-1g.10gb", int64(n), "env")
		env := runEnvPod(t, pod)
		checkAllocateEnv(t, env, layout, "1g.10gb", n)
	}
}
