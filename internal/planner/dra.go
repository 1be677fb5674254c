package planner

import (
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/planner/plansnap"
)

// ReasonClaimUnread: part of a pending pod's ResourceClaims on migflex's
// DeviceClasses is of a form the planner does not read (a CEL selector
// other than the documented ones, firstAvailable, allocationMode All);
// the planner plans for the rest only and leaves that part to the
// scheduler.
const ReasonClaimUnread = "MigReshapeClaimUnread"

// draView is what the round reads of the cluster's DRA objects.
type draView interface {
	Classes() *schedview.DRAClasses
	schedview.ClaimSource
}

// hasClaims tells whether a pod names ResourceClaims: the informer keeps
// such pods (they may ask for our devices without an extended resource).
func hasClaims(p *corev1.Pod) bool { return len(p.Spec.ResourceClaims) > 0 }

// asScheduled is each pod as the scheduling view places it
// (schedview.AsScheduled): what its claims ask of our driver added as the
// extended resources of the same devices, on DRA nodes only, and an
// extended resource no class of ours serves kept off DRA nodes. unread
// says, by pod, what of its claims could not be read.
func asScheduled(dv draView, pods []*corev1.Pod) (out []*corev1.Pod, unread map[types.UID][]string) {
	if dv == nil {
		return pods, nil
	}
	classes := dv.Classes()
	out = make([]*corev1.Pod, len(pods))
	for i, p := range pods {
		d := classes.PodClaims(p, dv)
		if len(d.Unknown) > 0 {
			if unread == nil {
				unread = map[types.UID][]string{}
			}
			unread[p.UID] = d.Unknown
		}
		out[i] = p
		if len(d.Devices) > 0 || schedview.HasGPURequest(p) {
			out[i] = classes.AsScheduled(p, d)
		}
	}
	return out, unread
}

// tellUnread is the Warning each pending pod gets once for the part of
// its claims the planner does not read; a pod no longer pending, or whose
// claims read fully now, is forgotten.
func (m *memory) tellUnread(pods []*corev1.Pod, unread map[types.UID][]string) []podEvent {
	var out []podEvent
	live := map[types.UID]bool{}
	for _, p := range pods {
		u := unread[p.UID]
		if len(u) == 0 || !plansnap.WaitsForScheduler(p) {
			continue
		}
		live[p.UID] = true
		msg := "the planner does not read part of the pod's ResourceClaims and leaves it to the scheduler: " + strings.Join(u, "; ")
		if m.unread[p.UID] == msg {
			continue
		}
		m.unread[p.UID] = msg
		out = append(out, podEvent{pod: p, typ: corev1.EventTypeWarning, reason: ReasonClaimUnread, message: msg})
	}
	maps.DeleteFunc(m.unread, func(uid types.UID, _ string) bool { return !live[uid] })
	return out
}
