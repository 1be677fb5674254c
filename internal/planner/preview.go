package planner

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

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
	// Events are the Events the round would record on pods.
	Events []PreviewEvent
	// Warnings say what of the cluster the planner could not read.
	Warnings []string
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
// o gives the policy and the planner's defaults (its Client is not used),
// nodes and pods are the cluster at now, and dv its DRA objects (nil: the
// pods' ResourceClaims are not read). Pods are read as the controller
// reads them (asScheduled): what their claims ask of migflex's driver
// counts, and the MigReshapeClaimUnread Event a round would record comes
// first among Events.
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
	p := Preview{Pending: d.pending, Result: d.result, Warnings: d.warnings}
	ev := func(e podEvent) PreviewEvent {
		return PreviewEvent{Pod: e.pod.Namespace + "/" + e.pod.Name, Type: e.typ, Reason: e.reason, Message: e.message}
	}
	for _, e := range append(unread, d.events...) {
		p.Events = append(p.Events, ev(e))
	}
	for _, w := range d.writes {
		p.Writes = append(p.Writes, PreviewWrite{Node: w.node.Name, Key: w.key, Value: w.value, GPUs: w.gpus})
		for _, e := range w.eventsAfterward {
			p.Events = append(p.Events, ev(e))
		}
	}
	return p, nil
}
