package fallback

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
)

// Planner is the planner's word on a pod, in reshape-first mode: whether
// it serves the pod, with need on one node, in its next round (from free
// devices, or by reshaping free capacity of an opted-in node), and if not,
// whether it could once what blocks it passes. The webhook answers from the
// planner's own function on its Node cache (internal/webhook).
type Planner interface {
	Serve(pod *corev1.Pod, need map[corev1.ResourceName]int64) Served
}

// Served is a Planner's answer.
type Served struct {
	// Now: the planner serves the pod in its next round, on Node; Reshape
	// says it changes a layout for it (else free devices serve it).
	Now     bool
	Node    string
	Reshape bool
	// Later (not Now): a GPU of a node the pod may land on, one the planner
	// may change, has the profile; what blocks it (instances in use, a
	// cooldown, a hold) passes in time, and the planner tries every round.
	Later bool
	// Reason says why not now, in the planner's words.
	Reason string
}

// maxPlannerAsks bounds the questions one pod's decision asks the planner:
// each candidate of each type may be one.
const maxPlannerAsks = 8

// asker asks the planner about one pod, at most maxPlannerAsks times. A nil
// asker is no planner: reshape-first is off.
type asker struct {
	p    Planner
	pod  *corev1.Pod
	need *needs
	left int
}

func newAsker(p Planner, pod *corev1.Pod, need *needs) *asker {
	if p == nil {
		return nil
	}
	return &asker{p: p, pod: pod, need: need, left: maxPlannerAsks}
}

// serve asks whether the planner serves the pod with r moved to t and the
// types decided before as fit recorded them. Past the bound it answers no.
func (a *asker) serve(fit *fitting, r, t corev1.ResourceName) Served {
	if a == nil || a.left == 0 {
		return Served{}
	}
	a.left--
	to := maps.Clone(fit.to)
	if to == nil {
		to = map[corev1.ResourceName]corev1.ResourceName{}
	}
	to[r] = t
	return a.p.Serve(a.pod, a.need.of(to))
}

// final asks whether the planner serves the pod with its types renamed by
// to, the choices made: one question besides the bound.
func (a *asker) final(to map[corev1.ResourceName]corev1.ResourceName) Served {
	return a.p.Serve(a.pod, a.need.of(to))
}
