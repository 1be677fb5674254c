package solver

import (
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"

	"github.com/migflex/migflex/internal/domain/schedview"
)

// Supplier answers, for one snapshot, whether the planner could serve a
// pod's GPU needs on a node the pod may land on: from free devices that
// exist, or by repartitioning idle capacity of opted-in nodes without
// touching an instance in use. It is what the webhook asks before it falls
// back: build one per snapshot (the pending pods are ignored) and ask per
// pod. Answers do not reserve anything: two pods may be told about the same
// free capacity. It is safe for concurrent use.
type Supplier struct {
	mu sync.Mutex
	r  *round
}

// NewSupplier indexes a snapshot for CanSupply.
func (p *Planner) NewSupplier(snap Snapshot) (*Supplier, error) {
	snap.Pending = nil
	r, err := p.newRound(snap, true)
	if err != nil {
		return nil, err
	}
	return &Supplier{r: r}, nil
}

// CanSupply says where the planner would serve the pod now, or why it
// could not (Action none) and whether it could later (PodPlan.Later).
func (s *Supplier) CanSupply(pod *corev1.Pod) PodPlan {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.r
	ps := podState{pod: pod, key: pod.Namespace + "/" + pod.Name, priority: corev1helpers.PodPriority(pod), created: pod.CreationTimestamp.Time}
	ps.plan = PodPlan{Pod: ps.key, Action: ActionNone}
	devs := schedview.Devices(pod)
	if len(r.replicas.nodes) > 0 {
		if k, devices, _, ok := r.fromReplicas(r.eligible(&ps), devs); ok {
			ps.plan.Node, ps.plan.Action, ps.plan.Devices = r.nodes[r.replicas.nodes[k]].name, ActionExisting, devices
			return ps.plan
		}
	}
	for res, n := range devs {
		id, known := r.res.ids[res]
		if !known {
			ps.plan.Reason = fmt.Sprintf("no GPU model in the cluster offers %s", res)
			return ps.plan
		}
		ps.needs = append(ps.needs, need{res: id, count: n})
	}
	r.sortNeeds(ps.needs)
	ni, as, why := r.find(&ps)
	if as == nil {
		ps.plan.Reason = why()
		if len(ps.needs) > 0 {
			ps.plan.Later = r.later(r.eligible(&ps), ps.needs[0].res)
		}
		return ps.plan
	}
	ps.plan.Node = r.nodes[ni].name
	ps.plan.Action = ActionExisting
	for _, a := range as {
		g := &r.gpus[a.gpu]
		if !a.opt.existing {
			ps.plan.Action = ActionReshape
		}
		d := Device{GPU: g.g.Index, Resource: r.res.names[a.res]}
		if a.opt.x >= 0 {
			d.Start = r.tabs[g.key.tab].xs[a.opt.x].start
		}
		ps.plan.Devices = append(ps.plan.Devices, d)
	}
	return ps.plan
}

// later tells whether a GPU of the nodes in el could serve one device of
// res once what blocks it now passes: the planner may change it (opted in,
// understood) and, for a MIG profile, its model has the profile. Blocks
// that pass are instances in use, a cooldown, a frozen or held node and the
// round's cap; only the largest device is looked at, as in explanations.
func (r *round) later(el eligibility, res int32) bool {
	could := func(k classKey) bool {
		if !k.reshapable {
			return false
		}
		return res == 0 || k.tab >= 0 && r.res.prof[k.tab][res] >= 0
	}
	for _, g := range el.groups {
		for c, n := range r.groups[g].classCount {
			if n > 0 && could(r.keys[c]) {
				return true
			}
		}
	}
	for _, ni := range el.nodes {
		for _, gi := range r.nodes[ni].gpus {
			if could(r.gpus[gi].key) {
				return true
			}
		}
	}
	return false
}
