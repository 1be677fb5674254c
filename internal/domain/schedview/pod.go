package schedview

import (
	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/migflex/migflex/internal/domain/resourcename"
)

// Devices is the GPU devices a pod holds on its node, by resource, by the
// scheduler's request rules (k8s.io/component-helpers/resource.PodRequests:
// init containers take the max, sidecars add up); nil when it asks for
// none.
func Devices(pod *corev1.Pod) map[corev1.ResourceName]int64 {
	reqs := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{
		ExcludeOverhead:       true,
		SkipPodLevelResources: true,
	})
	var out map[corev1.ResourceName]int64
	for name, q := range reqs {
		if resourcename.IsGPU(name) && q.Sign() > 0 {
			if out == nil {
				out = map[corev1.ResourceName]int64{}
			}
			out[name] = q.Value()
		}
	}
	return out
}

// HasGPURequest reports whether any container or init container requests or
// limits a GPU resource. It allocates nothing: most pods a webhook sees
// take this exit.
func HasGPURequest(pod *corev1.Pod) bool {
	for _, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range cs {
			r := &cs[i].Resources
			if hasGPU(r.Requests) || hasGPU(r.Limits) {
				return true
			}
		}
	}
	return false
}

func hasGPU(l corev1.ResourceList) bool {
	for name, q := range l {
		if resourcename.IsGPU(name) && q.Sign() > 0 {
			return true
		}
	}
	return false
}
