package planner

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/planner/reserve"
	"github.com/migflex/migflex/internal/planner/solver"
)

// Preview is what the planner's next round would do, computed from the
// cluster as a client lists it, with nothing written: the same decide as
// the controller's rounds, from a fresh memory (a new leader's).
type Preview struct {
	// Pending are the pods that wait for GPUs, in the order they claim
	// capacity; Result.Pods explains each, in the same order.
	Pending []*corev1.Pod
	Result  solver.Result
	// Writes are the Node annotations the round would set (value "":
	// remove), within Options.MaxNodesPerRound.
	Writes []PreviewWrite
	// Events are the Events the round would record on pods (a
	// reservation's Events on its Node are said by Writes).
	Events []PreviewEvent
	// Reservations are the reservations the round would hold, those kept
	// then the new ones, and ReservationsEnded those it would end, with
	// why: reserve.Decide's, as the controller's round decides them.
	Reservations      []PreviewReservation
	ReservationsEnded []reserve.Ended
	// Warnings say what of the cluster the planner could not read.
	Warnings []string
}

// PreviewReservation is a reservation a round would hold.
type PreviewReservation struct {
	reserve.Reservation
	// Written: the round would write it on its Node (a new reservation),
	// which carries it already otherwise.
	Written bool `json:"written,omitempty"`
}

// PreviewWrite is one Node annotation a round would write.
type PreviewWrite struct {
	Node, Key, Value string
	// GPUs are the GPUs whose layout the write changes.
	GPUs []int
}

// PreviewEvent is one Event a round would record on a pod.
type PreviewEvent struct {
	// Pod is namespace/name.
	Pod, Type, Reason, Message string
}

// PreviewRound plans one round read-only (kubectl migflex plan, explain):
// o gives the policy, the reservations' (o.Reserve; the zero Policy: none,
// as for the controller) and the planner's defaults (its Client is not
// used), nodes and pods are the cluster at now, and dv its DRA objects
// (nil: the pods' ResourceClaims are not read). Pods are read as the
// controller reads them (asScheduled): what their claims ask of migflex's
// driver counts, and the MigReshapeClaimUnread Event a round would record
// comes first among Events. Reservations are decided as the round decides
// them (reserve.Decide on the round's nodes, the reservations the Nodes
// carry kept or ended), and the GPUs held go to no other pod; a fresh
// memory knows of no reservation that lapsed lately.
func PreviewRound(o Options, now time.Time, nodes []*corev1.Node, pods []*corev1.Pod, dv DRAView) (Preview, error) {
	o.setDefaults()
	pl, err := solver.New(o.Policy)
	if err != nil {
		return Preview{}, fmt.Errorf("the planner's policy: %w", err)
	}
	sched := asScheduled(dv, pods)
	m := newMemory(o.MixHalfLife)
	m.claimed = sched.claimed
	m.pools = poolsOf(dv)
	unread := m.tellUnread(sched.pods, sched.unread)
	d, err := decide(&o, pl, m, now, nodes, sched.pods)
	if err != nil {
		return Preview{}, err
	}
	p := Preview{Pending: d.pending, Result: d.result, Warnings: d.warnings, ReservationsEnded: d.ended}
	ev := func(e podEvent) PreviewEvent {
		return PreviewEvent{Pod: e.pod.Namespace + "/" + e.pod.Name, Type: e.typ, Reason: e.reason, Message: e.message}
	}
	for _, e := range append(unread, d.events...) {
		p.Events = append(p.Events, ev(e))
	}
	written := map[string]bool{}
	for _, w := range d.writes {
		p.Writes = append(p.Writes, PreviewWrite{Node: w.node.Name, Key: w.key, Value: w.value, GPUs: w.gpus})
		if w.key == nodeinfo.AnnotationReservation && w.value != "" {
			written[w.node.Name] = true
		}
		for _, e := range w.eventsAfterward {
			p.Events = append(p.Events, ev(e))
		}
		for _, e := range w.notes {
			if pod, ok := e.obj.(*corev1.Pod); ok {
				p.Events = append(p.Events, ev(podEvent{pod: pod, typ: e.typ, reason: e.reason, message: e.message}))
			}
		}
	}
	for _, r := range d.held {
		p.Reservations = append(p.Reservations, PreviewReservation{Reservation: r, Written: written[r.Node]})
	}
	return p, nil
}
