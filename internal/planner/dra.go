package planner

import (
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/planner/plansnap"
	"github.com/migflex/migflex/internal/platform/textcut"
)

// ReasonClaimUnread: part of a pending pod's ResourceClaims on migflex's
// DeviceClasses is of a form the planner does not read (a CEL selector
// other than the documented ones, firstAvailable, allocationMode All);
// the planner plans for the rest only and leaves that part to the
// scheduler.
const ReasonClaimUnread = "MigReshapeClaimUnread"

// maxUnreadMessage bounds the MigReshapeClaimUnread message: each line
// quotes a selector (cut by dracel), and a pod may name many claims.
const maxUnreadMessage = 1024

// DRAView is what a round reads of the cluster's DRA objects: the
// DeviceClasses of migflex's driver, and the claims and templates pods
// name (drawatch's informers in the cluster, what kubectl migflex listed
// in a preview).
type DRAView interface {
	Classes() *schedview.DRAClasses
	schedview.ClaimSource
}

// PoolSource reads a DRA node's pool: a DRAView that also has the
// slices (drawatch.Watch with Slices) implements it, and a round then
// sees a dynamic node's placements allocated and not prepared yet.
type PoolSource interface {
	Pool(node string) *schedview.Pool
}

// poolsOf is dv's Pool when it has one.
func poolsOf(dv DRAView) func(string) *schedview.Pool {
	if ps, ok := dv.(PoolSource); ok {
		return ps.Pool
	}
	return nil
}

// hasClaims tells whether a pod names ResourceClaims: the informer keeps
// such pods (they may ask for our devices without an extended resource).
func hasClaims(p *corev1.Pod) bool { return len(p.Spec.ResourceClaims) > 0 }

// scheduled is the pods as the round reads them (asScheduled).
type scheduled struct {
	pods []*corev1.Pod
	// unread says, by pod, what of its claims could not be read.
	unread map[types.UID][]string
	// claimed are the pods, "namespace/name" by node, that have not
	// started and hold devices of ours on that node through allocated
	// claims: they ask for no more devices, so plansnap.StartingOn does not
	// see them, but the devices are theirs from the allocation on, before
	// the node's agent reports them.
	claimed map[string][]string
}

// asScheduled is each pod as the scheduling view places it
// (schedview.AsScheduled): what its claims ask of our driver added as the
// extended resources of the same devices, on DRA nodes only, and an
// extended resource no class of ours serves kept off DRA nodes.
func asScheduled(dv DRAView, pods []*corev1.Pod) scheduled {
	if dv == nil {
		return scheduled{pods: pods}
	}
	classes := dv.Classes()
	out := scheduled{pods: make([]*corev1.Pod, len(pods))}
	for i, p := range pods {
		d := classes.PodClaims(p, dv)
		if len(d.Unknown) > 0 {
			if out.unread == nil {
				out.unread = map[types.UID][]string{}
			}
			out.unread[p.UID] = d.Unknown
		}
		if node := claimedOn(p, d); node != "" {
			if out.claimed == nil {
				out.claimed = map[string][]string{}
			}
			out.claimed[node] = append(out.claimed[node], p.Namespace+"/"+p.Name)
		}
		out.pods[i] = p
		if len(d.Devices) > 0 || schedview.HasGPURequest(p) {
			out.pods[i] = classes.AsScheduled(p, d)
		}
	}
	return out
}

// claimedOn is the node on which a pod that has not started holds devices
// of ours through allocated claims: the node it is bound to, or, between
// the scheduler's allocation and its binding, the pool the allocation is
// in. Empty otherwise.
func claimedOn(p *corev1.Pod, d schedview.ClaimDemand) string {
	switch {
	case len(d.AllocatedIn) == 0, p.Status.Phase != corev1.PodPending, p.DeletionTimestamp != nil:
		return ""
	case p.Spec.NodeName != "":
		return p.Spec.NodeName
	}
	return d.AllocatedIn[0]
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
		msg := textcut.Bytes("the planner does not read part of the pod's ResourceClaims and leaves it to the scheduler: "+strings.Join(u, "; "), maxUnreadMessage, "...")
		if m.unread[p.UID] == msg {
			continue
		}
		m.unread[p.UID] = msg
		out = append(out, podEvent{pod: p, typ: corev1.EventTypeWarning, reason: ReasonClaimUnread, message: msg})
	}
	maps.DeleteFunc(m.unread, func(uid types.UID, _ string) bool { return !live[uid] })
	return out
}
