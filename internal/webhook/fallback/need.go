package fallback

import (
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/domain/schedview"
)

// insufficient says why no node the pod can be scheduled to can ever give
// it the devices it asks for (pn) of the types decided (chosen), by their
// allocatable counts, used or not; or returns "". Such a pod is admitted
// and stays Pending until some node has more (the planner may reshape
// one), unless --on-insufficient-count=deny. Types the planner serves or
// will make (forPlanner) are the planner's to count. withGroups is v with
// its nodes, for a need of several types when v has none.
func insufficient(pn *needs, chosen map[corev1.ResourceName]corev1.ResourceName, forPlanner map[corev1.ResourceName]bool, v *view, withGroups func() view) string {
	if len(chosen) == 0 {
		return ""
	}
	to := make(map[corev1.ResourceName]corev1.ResourceName, len(chosen))
	decided := make(map[corev1.ResourceName]bool, len(chosen))
	for r, t := range chosen {
		if r != t {
			to[r] = t
		}
		decided[t] = true
	}
	all := pn.of(to)
	need := make(map[corev1.ResourceName]int64, len(decided))
	for t := range decided {
		if n := all[t]; n > 0 && !forPlanner[t] {
			need[t] = n
		}
	}
	short := false
	for t, n := range need {
		short = short || n > v.most[t]
	}
	switch {
	case len(need) == 0:
		return ""
	case !short && len(need) == 1:
		return ""
	case !short && v.groups == nil:
		// Each type alone fits on some node: whether one node holds them
		// all takes the nodes, which existence mode did not collect.
		if wv := withGroups(); wv.fitsAllocatable(need) {
			return ""
		}
	case !short && v.fitsAllocatable(need):
		return ""
	}
	items := make([]string, 0, len(need))
	for _, t := range slices.Sorted(maps.Keys(need)) {
		item := fmt.Sprintf("%d %s", need[t], t)
		if need[t] > v.most[t] {
			item += fmt.Sprintf(" (at most %d on one node)", v.most[t])
		}
		items = append(items, item)
	}
	return "no node this pod can be scheduled to has the GPU devices it needs on one node: " + listed(items) +
		"; it stays Pending until one has"
}

// podNeeds is the devices of each GPU type the pod needs on one node, by the
// scheduler's rules (init containers take the max, sidecars add up), after
// renaming the types in to as the patch would (a container's quantities of
// two types moved to one add up). A GPU limit without a request counts as
// the request, as API defaulting makes it. Its cost grows with the pod's
// containers; a decision asks it of the pod's gpuShape.
func podNeeds(pod *corev1.Pod, to map[corev1.ResourceName]corev1.ResourceName) map[corev1.ResourceName]int64 {
	p := &corev1.Pod{}
	for i := range pod.Spec.Containers {
		p.Spec.Containers = append(p.Spec.Containers, gpuOnly(&pod.Spec.Containers[i], to))
	}
	for i := range pod.Spec.InitContainers {
		p.Spec.InitContainers = append(p.Spec.InitContainers, gpuOnly(&pod.Spec.InitContainers[i], to))
	}
	return schedview.Devices(p)
}

// gpuShape is the pod reduced to what podNeeds reads, whatever the
// renaming: its init containers' GPU requests, in order, sidecars among
// them, and one container with the sum of its containers' (renaming then
// adding is adding then renaming). podNeeds answers the same for it as for
// the pod, at a cost that does not grow with the pod's containers. A pod
// of one container is its own shape.
func gpuShape(pod *corev1.Pod) *corev1.Pod {
	if len(pod.Spec.Containers) <= 1 {
		return pod
	}
	p := &corev1.Pod{}
	var sum corev1.ResourceList
	for i := range pod.Spec.Containers {
		for name, q := range gpuOnly(&pod.Spec.Containers[i], nil).Resources.Requests {
			if sum == nil {
				sum = corev1.ResourceList{}
			}
			total := sum[name]
			total.Add(q)
			sum[name] = total
		}
	}
	if sum != nil {
		p.Spec.Containers = []corev1.Container{{Name: "containers", Resources: corev1.ResourceRequirements{Requests: sum}}}
	}
	for i := range pod.Spec.InitContainers {
		p.Spec.InitContainers = append(p.Spec.InitContainers, gpuOnly(&pod.Spec.InitContainers[i], nil))
	}
	return p
}

// needs are one pod's needs on one node under the renamings a decision
// tries: computed on its gpuShape, and as asked (no type renamed) once.
type needs struct {
	shape *corev1.Pod
	asked map[corev1.ResourceName]int64
}

func newNeeds(pod *corev1.Pod) *needs { return &needs{shape: gpuShape(pod)} }

// of is podNeeds of the pod with its types renamed by to. The map may be
// shared: callers must not change it.
func (n *needs) of(to map[corev1.ResourceName]corev1.ResourceName) map[corev1.ResourceName]int64 {
	for r, t := range to {
		if r != t {
			return podNeeds(n.shape, to)
		}
	}
	if n.asked == nil {
		n.asked = podNeeds(n.shape, nil)
	}
	return n.asked
}

// gpuOnly is c with only its GPU requests (a limit without a request
// counting as one), renamed by to.
func gpuOnly(c *corev1.Container, to map[corev1.ResourceName]corev1.ResourceName) corev1.Container {
	out := corev1.Container{Name: c.Name, RestartPolicy: c.RestartPolicy}
	requests := map[corev1.ResourceName]resource.Quantity{}
	for _, l := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
		for name, q := range l {
			if resourcename.IsGPU(name) {
				requests[name] = q
			}
		}
	}
	for name, q := range requests {
		if t, ok := to[name]; ok {
			name = t
		}
		if out.Resources.Requests == nil {
			out.Resources.Requests = corev1.ResourceList{}
		}
		sum := out.Resources.Requests[name]
		sum.Add(q)
		out.Resources.Requests[name] = sum
	}
	return out
}
