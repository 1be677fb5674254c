package plansnap

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/schedview"
)

// AsksForGPUs tells whether the pod requests nvidia.com/gpu or a
// nvidia.com/mig-* resource.
func AsksForGPUs(p *corev1.Pod) bool { return len(schedview.Devices(p)) > 0 }

// Unschedulable tells whether the pod waits for GPUs the scheduler found
// nowhere: pending, not bound, not being deleted, asking for GPUs, and
// marked PodScheduled=False with reason Unschedulable.
func Unschedulable(p *corev1.Pod) bool { return WaitsForScheduler(p) && AsksForGPUs(p) }

// WaitsForScheduler tells whether the scheduler found no node for the
// pod, whatever it asks for: pending, not bound, not being deleted, and
// marked PodScheduled=False with reason Unschedulable.
func WaitsForScheduler(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodPending || p.Spec.NodeName != "" || p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
		}
	}
	return false
}

// StartingOn is the node a pod asking for GPUs is bound to while it has
// not started: the kubelet may be handing it devices that its agent does
// not report as held yet. Empty otherwise.
func StartingOn(p *corev1.Pod) string {
	if p.Status.Phase != corev1.PodPending || p.Spec.NodeName == "" || !AsksForGPUs(p) {
		return ""
	}
	return p.Spec.NodeName
}
