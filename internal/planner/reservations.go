package planner

import (
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/planner/plansnap"
	"github.com/migflex/migflex/internal/planner/reserve"
	"github.com/migflex/migflex/internal/planner/solver"
)

// Event reasons of reservations, on the pod and on the Node.
const (
	// ReasonReserved: GPUs of a node are held for a pod waiting for
	// several whole GPUs; the message says which, for whom, until when.
	ReasonReserved = "GPUsReserved"
	// ReasonReservationEnded: the reservation ended; the message says why.
	ReasonReservationEnded = "GPUReservationEnded"
)

// objEvent is an Event on any object (a pod, a Node).
type objEvent struct {
	obj                  runtime.Object
	typ, reason, message string
}

// reservationManager is the field manager of the reservation annotation.
// It is not the planner's own, for the reason proposalManager gives: an
// apply refreshes its manager's time in managedFields, and the planner's
// entry's time says when it last changed nvidia.com/mig.config.
func reservationManager(o *Options) string {
	return o.FieldManager + "-reservation"
}

// reservations decides the round's reservations with reserve.Decide, the
// function the trace replay calls, on the round's nodes and pending pods:
// it marks the GPUs held in views (the round gives them to no pod and
// makes them whole), and returns the writes that put the Nodes' reservation
// annotation where the decision says, each with its Events. The Nodes
// hold the reservations (a new leader reads them back); the memory only
// the recently lapsed ones. A reservation the Node carries already is not
// written again, so a round at rest writes nothing.
//
// Nodes served through the device plugin and through DRA alike are
// reserved: the device plugin's agent withholds the reserved GPUs' free
// devices from the kubelet, a DRA agent taints them in its ResourceSlices
// (docs/PLANNER.md, "Reservations"). In dry-run mode, or with Policy.Max 0, none are made, and those the
// planner wrote are removed.
func (d *decision) reservations(o *Options, m *memory, now time.Time, nodes []*corev1.Node, views []plansnap.Node, pending []*corev1.Pod) []nodeWrite {
	byName := make(map[string]*corev1.Node, len(nodes))
	held := make([]reserve.Reservation, 0)
	uids := map[string]nodeinfo.Reservation{}
	for _, n := range nodes {
		byName[n.Name] = n
		v, ok := n.Annotations[nodeinfo.AnnotationReservation]
		if !ok {
			continue
		}
		r, err := nodeinfo.ParseReservation(v)
		if err != nil {
			d.warnings = append(d.warnings, fmt.Sprintf("node %s: %v", n.Name, err))
			continue
		}
		if owner, _ := plansnap.AnnotationOwner(n, nodeinfo.AnnotationReservation); owner != reservationManager(o) {
			// Someone else's: the agent honours it, the planner neither
			// keeps nor removes it, and reserves the node for no other.
			d.warnings = append(d.warnings, fmt.Sprintf("node %s: a reservation the planner did not make (%s): left as it is", n.Name, r))
			continue
		}
		held = append(held, reserve.Reservation{Node: n.Name, GPUs: r.GPUs, Pod: r.Pod, Since: r.Since, Ready: r.Ready, Deadline: r.Deadline})
		uids[n.Name] = r
	}
	var dec reserve.Decision
	if o.Reserve.Max > 0 && !o.DryRun {
		in := reserve.Input{Now: now, Pending: pending, Cooldown: o.Policy.Cooldown, Held: held, Lapsed: m.lapsed}
		for _, v := range views {
			n := byName[v.Name]
			if n == nil {
				continue
			}
			if _, foreign := n.Annotations[nodeinfo.AnnotationReservation]; foreign && !slices.ContainsFunc(held, func(r reserve.Reservation) bool { return r.Node == n.Name }) {
				continue
			}
			in.Nodes = append(in.Nodes, v.Node)
		}
		dec = reserve.Decide(o.Reserve, in)
	} else {
		for _, r := range held {
			dec.Ended = append(dec.Ended, reserve.Ended{Reservation: r, Why: "reservations are off"})
		}
	}
	m.lapsed = dec.Lapsed
	d.ended = dec.Ended

	pods := make(map[string]*corev1.Pod, len(pending))
	for _, p := range pending {
		pods[p.Namespace+"/"+p.Name] = p
	}
	writes := map[string]*nodeWrite{}
	write := func(node string) *nodeWrite {
		if w := writes[node]; w != nil {
			return w
		}
		w := &nodeWrite{node: byName[node], key: nodeinfo.AnnotationReservation, manager: reservationManager(o), anyVersion: true}
		writes[node] = w
		return w
	}
	for _, e := range dec.Ended {
		w := write(e.Node)
		msg := fmt.Sprintf("the reservation of %s ended: %s", describeReservation(e.Reservation), e.Why)
		w.notes = append(w.notes, objEvent{w.node, corev1.EventTypeNormal, ReasonReservationEnded, msg})
		if p := pods[e.Pod]; p != nil {
			w.notes = append(w.notes, objEvent{p, corev1.EventTypeNormal, ReasonReservationEnded, msg})
		}
	}
	for _, r := range dec.Held {
		if d.reservedFor == nil {
			d.reservedFor = map[string]bool{}
		}
		d.reservedFor[r.Pod] = true
		p := pods[r.Pod]
		ann := nodeinfo.Reservation{Pod: r.Pod, GPUs: r.GPUs, Since: r.Since, Ready: r.Ready, Deadline: r.Deadline}
		if p != nil {
			ann.UID = p.UID
		} else {
			ann.UID = uids[r.Node].UID
		}
		value, err := ann.Encode()
		if err != nil {
			d.warnings = append(d.warnings, fmt.Sprintf("node %s: %v", r.Node, err))
			continue
		}
		markReserved(views, r)
		d.held = append(d.held, r)
		if d.lifts.IsZero() || r.Deadline.Before(d.lifts) {
			// A round at the deadline ends it, whether pods change or not.
			d.lifts = r.Deadline
		}
		if byName[r.Node].Annotations[nodeinfo.AnnotationReservation] == value {
			delete(writes, r.Node) // kept as it is: nothing to write or tell
			continue
		}
		w := write(r.Node)
		w.value = value
		msg := fmt.Sprintf("%s (expected free at %s)", describeReservation(r), r.Ready.UTC().Format(time.RFC3339))
		w.notes = append(w.notes, objEvent{w.node, corev1.EventTypeNormal, ReasonReserved, msg})
		if p != nil {
			w.notes = append(w.notes, objEvent{p, corev1.EventTypeNormal, ReasonReserved, msg})
		}
	}
	var out []nodeWrite
	for _, name := range slices.Sorted(maps.Keys(writes)) {
		w := writes[name]
		if w.value == "" && w.node.Labels[nodeinfo.LabelPlanner] != nodeinfo.PlannerEnabled {
			// The planner may write only on opted-in nodes (its node-scope
			// policy says so): the agent's own deadline ends it there.
			d.warnings = append(d.warnings, fmt.Sprintf("node %s: its reservation ended, but the node opted out of the planner: its agent lets it lapse at its deadline", name))
			continue
		}
		out = append(out, *w)
	}
	return out
}

// reservedNodes are the nodes with GPUs reserved in the round's view.
func reservedNodes(views []plansnap.Node) map[string]bool {
	out := map[string]bool{}
	for _, v := range views {
		if slices.ContainsFunc(v.GPUs, func(g solver.GPU) bool { return g.Reserved }) {
			out[v.Name] = true
		}
	}
	return out
}

// markReserved shows the reservation's GPUs held in the round's view.
func markReserved(views []plansnap.Node, r reserve.Reservation) {
	for i := range views {
		if views[i].Name != r.Node {
			continue
		}
		// A copy: the view's GPUs may be the cache's (plansnap Reuse).
		views[i].GPUs = slices.Clone(views[i].GPUs)
		for j := range views[i].GPUs {
			if slices.Contains(r.GPUs, views[i].GPUs[j].Index) {
				views[i].GPUs[j].Reserved = true
			}
		}
	}
}

// describeReservation says what is reserved, for whom, until when.
func describeReservation(r reserve.Reservation) string {
	return fmt.Sprintf("node %s %s", r.Node, nodeinfo.Reservation{Pod: r.Pod, GPUs: r.GPUs, Deadline: r.Deadline})
}
