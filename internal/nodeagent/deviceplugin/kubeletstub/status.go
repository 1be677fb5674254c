package kubeletstub

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Allocatable is what the kubelet's device manager reports for the
// registered plugins, by resource: every device of a connected plugin in
// capacity, its healthy ones in allocatable. A disconnected plugin's
// devices count as unhealthy, as the kubelet treats them until the plugin
// registers again.
func (st State) Allocatable() (capacity, allocatable map[string]int64) {
	capacity, allocatable = map[string]int64{}, map[string]int64{}
	for name, p := range st.Plugins {
		capacity[name] = int64(len(p.Devices))
		allocatable[name] = 0
		if !p.Connected {
			continue
		}
		for _, d := range p.Devices {
			if d.Health == "Healthy" {
				allocatable[name]++
			}
		}
	}
	return capacity, allocatable
}

// PublishNodeStatus does the kubelet's part that the stand-in lacks: it
// keeps the Node's status.capacity and status.allocatable in step with the
// plugins' devices, patching the status after every change once delay has
// passed (the kubelet publishes them at its next node status update, every
// 10 s by default; 0 publishes at once). A resource that goes away is
// published as 0, as the kubelet keeps it until its plugin is gone for
// good. It returns when ctx ends, or with the error of a failed patch.
func (k *Kubelet) PublishNodeStatus(ctx context.Context, client kubernetes.Interface, node string, delay time.Duration) error {
	var lastCap, lastAlloc map[string]int64
	for {
		_, err := k.Wait(ctx, func(st State) bool {
			c, a := st.Allocatable()
			return lastCap == nil || !maps.Equal(withZeros(c, lastCap), lastCap) || !maps.Equal(withZeros(a, lastAlloc), lastAlloc)
		})
		if err != nil {
			return nil // ctx ended
		}
		if delay > 0 {
			select {
			case <-time.After(delay): // the kubelet's status period, not a wait for a condition
			case <-ctx.Done():
				return nil
			}
		}
		c, a := k.State().Allocatable()
		c, a = withZeros(c, lastCap), withZeros(a, lastAlloc)
		patch, err := json.Marshal(map[string]any{"status": map[string]any{"capacity": quantities(c), "allocatable": quantities(a)}})
		if err != nil {
			return err
		}
		if _, err := client.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("kubelet stand-in: publishing the status of Node %s: %w", node, err)
		}
		lastCap, lastAlloc = c, a
	}
}

// withZeros is counts plus a 0 for every resource of before it lacks.
func withZeros(counts, before map[string]int64) map[string]int64 {
	out := maps.Clone(counts)
	for name := range before {
		if _, ok := out[name]; !ok {
			out[name] = 0
		}
	}
	return out
}

func quantities(counts map[string]int64) corev1.ResourceList {
	out := corev1.ResourceList{}
	for name, n := range counts {
		out[corev1.ResourceName(name)] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	return out
}
