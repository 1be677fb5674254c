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
// which MIG devices and that they are simulated). A container can hold
// devices of both GPUs.
func TestPodGetsMigDevice(t *testing.T) {
	migflex(t)
	_, layout := applyLayout(t, "1g.10gb", "1g.10gb", "2g.20gb")
	ns := cluster.Namespace(t)

	// One after the other: the second needs every 1g.10gb device, two on
	// each GPU.
	for _, n := range []int{1, 2 * simGPUs} {
		pod := gpuPod(ns, fmt.Sprintf("mig-1g-x%d", n), "nvidia.com/mig-1g.10gb", int64(n), "env")
		env := runEnvPod(t, pod)
		ids := checkAllocateEnv(t, env, layout, "1g.10gb", n)
		gpus := map[int]bool{}
		for _, id := range ids {
			if i, ok := gpuHolding(layout, id); ok {
				gpus[i] = true
			}
		}
		if want := min(n, simGPUs); len(gpus) != want {
			t.Errorf("pod %s got devices %v on GPUs %v, want devices on %d GPUs", pod.Name, ids, gpus, want)
		}
	}
}
