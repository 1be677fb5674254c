// Package reserve decides which nodes to hold for pods that wait for
// several whole GPUs on one node. Such a pod needs k GPUs of one node free
// at once; without a reservation every GPU that frees goes to whichever
// one-GPU pod the scheduler takes first, and a node rarely empties. A
// reservation names a node, the k GPUs of it expected to free soonest and
// the pod; while it holds, those GPUs' free devices are offered to that
// pod alone (the agent withholds them from every other pod), and the
// planner gives them back to whole as their MIG instances empty.
//
// Decide is pure: the nodes with what runs on their GPUs (and, where
// known, since when and until when), the pending pods, the time and the
// reservations held go in; the reservations to hold come out. The
// controller and the trace replay call it alike.
//
// # Rules
//
//   - Only a pod asking for k >= 2 whole GPUs (nvidia.com/gpu) on one node,
//     pending for at least Policy.After, gets a reservation; pods claim
//     them in the scheduler's order (priority, then age, then name).
//   - Its node is one it may be scheduled to (schedview's filter), opted in
//     to the planner and not frozen (its layout must be able to change),
//     not reserved already, with at least k GPUs: of those,
//     the node whose k-th GPU is expected to free soonest (ties: the least
//     GPU-time its other k-1 GPUs would sit idle waiting, then the fewest
//     GPUs, then the name).
//   - Never a node the reservation would keep empty for long: a GPU's free
//     devices are withheld from when it frees until the pod binds, so a
//     node is taken only if its k GPUs are expected free within the pod's
//     lead: Policy.Lead, or, while no pod but those asking for several
//     whole GPUs is pending, as long as the pod has already waited, up to
//     Policy.MaxLead. Some GPU of every node is nearly always expected
//     busy for longer than a few minutes, so a fixed lead can starve the
//     pod for hours, and every later pod of its kind behind it; a lead
//     that grows with its wait serves it. It grows only while nothing else
//     waits: then the GPUs it withholds would sit idle anyway, whereas
//     with other pods pending each GPU-hour withheld is one they are not
//     served. The reservation lapses Policy.Grace after its GPUs were
//     expected free (its deadline), and a node whose reservation lapsed is
//     not reserved again for Policy.After.
//   - At most Policy.Max reservations at once. A reservation ends when its
//     pod is no longer pending (bound, or gone), at its deadline, or when
//     its node no longer qualifies.
//   - A reservation takes nothing: instances in use stay in use, whole
//     GPUs held stay held; it only keeps what frees from other pods.
//
// # When GPUs free
//
// A whole GPU that no pod holds is free now. One a pod holds frees when
// the pod ends: at its expected end where the caller knows it (the trace
// replay knows every task's duration), otherwise estimated from its age
// (a pod that has run for d is expected to run about d more, the median
// remaining life of a heavy-tailed job: Lindy's rule); a pod of unknown
// start and end never frees as far as this package knows. A MIG GPU frees
// when its last instance in use ends and the planner may change it (its
// cooldown, from its last change, has passed): it is made whole then. On
// a node served through DRA in dynamic mode (solver.Node.Dynamic) a MIG
// GPU never frees whole: nothing there turns MIG off.
package reserve

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"

	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/planner/solver"
)

// Policy bounds the reservations.
type Policy struct {
	// After is how long a pod waits before a node is reserved for it, and
	// how long a node whose reservation lapsed is left to other pods.
	After time.Duration
	// Max is the most reservations held at once.
	Max int
	// Lead is the longest a reservation may expect to wait for its GPUs:
	// how long a GPU freed at once could sit withheld.
	Lead time.Duration
	// MaxLead is the longest the lead grows to for a pod that has waited
	// longer than Lead while no pod but those asking for several whole
	// GPUs is pending: its lead is as long as it has waited, up to this
	// (at most Lead: no growth).
	MaxLead time.Duration
	// Grace is how long after the GPUs were expected free a reservation
	// lapses if its pod has not bound.
	Grace time.Duration
}

// DefaultPolicy is what the planner runs with unless told otherwise.
func DefaultPolicy() Policy {
	return Policy{After: 5 * time.Minute, Max: 4, Lead: 10 * time.Minute, MaxLead: 2 * time.Hour, Grace: 2 * time.Minute}
}

// Validate rejects a policy Decide cannot run.
func (p Policy) Validate() error {
	var errs []error
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"after", p.After}, {"lead", p.Lead}, {"max lead", p.MaxLead}, {"grace", p.Grace}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s %s is negative", d.name, d.v))
		}
	}
	if p.Max < 0 {
		errs = append(errs, fmt.Errorf("max %d is negative (0: no reservations)", p.Max))
	}
	return errors.Join(errs...)
}

// Reservation is a node's GPUs held for one pod.
type Reservation struct {
	// Node is the node's name; GPUs the indexes of the GPUs held, in
	// order.
	Node string `json:"node"`
	GPUs []int  `json:"gpus"`
	// Pod is the pod's namespace/name.
	Pod string `json:"pod"`
	// Since is when the reservation was made; Ready when its GPUs were
	// expected free; Deadline when it lapses.
	Since    time.Time `json:"since"`
	Ready    time.Time `json:"ready"`
	Deadline time.Time `json:"deadline"`
}

// Input is what one decision looks at.
type Input struct {
	Now time.Time
	// Nodes are the planner's nodes: their GPUs, the instances in use, and
	// where known since when and until when (solver.GPU and
	// solver.Instance's Since and Until).
	Nodes []solver.Node
	// Pending are the pods waiting to be scheduled.
	Pending []*corev1.Pod
	// Cooldown is the planner's: a MIG GPU is made whole no sooner than
	// this after its last change.
	Cooldown time.Duration
	// Held are the reservations of the last decision (Decision.Held), and
	// Lapsed those that lapsed lately (Decision.Lapsed).
	Held, Lapsed []Reservation
}

// Decision is the reservations to hold now, and those that ended.
type Decision struct {
	// Held are the reservations to hold: those kept, then the new ones.
	Held []Reservation
	// Ended are the reservations that ended, with why.
	Ended []Ended
	// Lapsed are the reservations that lapsed less than Policy.After ago:
	// give them back in the next Input.
	Lapsed []Reservation
}

// Ended is a reservation that ended.
type Ended struct {
	Reservation
	// Why says why, in words.
	Why string
}

// Reasons a reservation ends.
const (
	EndedNotPending = "its pod is no longer pending (bound or gone)"
	EndedLapsed     = "its deadline passed"
	EndedNode       = "its node no longer qualifies"
)

// Decide returns the reservations to hold at in.Now.
func Decide(pol Policy, in Input) Decision {
	var d Decision
	pending := map[string]*corev1.Pod{}
	for _, p := range in.Pending {
		if p != nil {
			pending[key(p)] = p
		}
	}
	nodes := map[string]*solver.Node{}
	sched := make([]schedview.Node, 0, len(in.Nodes))
	for i := range in.Nodes {
		n := &in.Nodes[i]
		nodes[n.Name] = n
		sched = append(sched, n.Node)
	}
	view := schedview.NewSnapshot(sched)
	taken := map[string]bool{}
	barred := map[string]bool{}
	for _, r := range in.Lapsed {
		if in.Now.Before(r.Deadline.Add(pol.After)) {
			d.Lapsed = append(d.Lapsed, r)
			barred[r.Node] = true
		}
	}
	reserved := map[string]bool{}
	for _, r := range in.Held {
		p, n := pending[r.Pod], nodes[r.Node]
		switch {
		case p == nil:
			d.Ended = append(d.Ended, Ended{r, EndedNotPending})
		case !in.Now.Before(r.Deadline):
			d.Ended = append(d.Ended, Ended{r, EndedLapsed})
			d.Lapsed = append(d.Lapsed, r)
			barred[r.Node] = true
		case n == nil || !n.OptedIn || !hasGPUs(n, r.GPUs) || !slices.Contains(eligible(view, p).nodes, r.Node) || taken[r.Node] || reserved[r.Pod]:
			d.Ended = append(d.Ended, Ended{r, EndedNode})
		default:
			d.Held = append(d.Held, r)
			taken[r.Node], reserved[r.Pod] = true, true
		}
	}
	if len(d.Held) >= pol.Max {
		return d
	}
	var cands []*corev1.Pod
	for _, p := range in.Pending {
		if p != nil && !reserved[key(p)] && in.Now.Sub(p.CreationTimestamp.Time) >= pol.After {
			cands = append(cands, p)
		}
	}
	slices.SortFunc(cands, func(a, b *corev1.Pod) int {
		return cmp.Or(cmp.Compare(corev1helpers.PodPriority(b), corev1helpers.PodPriority(a)),
			a.CreationTimestamp.Time.Compare(b.CreationTimestamp.Time), cmp.Compare(key(a), key(b)))
	})
	// Pods that could use what a reservation withholds: while one waits,
	// leads do not grow.
	others := false
	for _, p := range in.Pending {
		if p != nil && wholeGPUs(p) < 2 {
			others = true
			break
		}
	}
	frees := map[string][]gpuFree{}
	// Pods that may land on the same nodes and need as many GPUs as one
	// that found no node find none either, unless their lead is longer:
	// at saturation, most of them.
	failed := map[string]time.Duration{}
	for _, p := range cands {
		k := wholeGPUs(p)
		if k < 2 {
			continue
		}
		el := eligible(view, p)
		fk := fmt.Sprintf("%d|%s", k, el.key)
		lead := pol.Lead
		if !others {
			lead = pol.leadFor(in.Now.Sub(p.CreationTimestamp.Time))
		}
		if f, ok := failed[fk]; ok && lead <= f {
			continue
		}
		var best *choice
		for _, name := range el.nodes {
			n := nodes[name]
			if taken[name] || barred[name] || !n.OptedIn || n.Frozen != "" || len(n.GPUs) < k {
				continue
			}
			f, ok := frees[name]
			if !ok {
				f = freeTimes(n, in.Now, in.Cooldown)
				frees[name] = f
			}
			c, ok := choose(n, f, k)
			if ok && c.ready.Sub(in.Now) <= lead && (best == nil || c.better(best)) {
				best = &c
			}
		}
		if best == nil {
			failed[fk] = lead
			continue
		}
		d.Held = append(d.Held, Reservation{Node: best.node.Name, GPUs: best.gpus, Pod: key(p), Since: in.Now,
			Ready: best.ready, Deadline: best.ready.Add(pol.Grace)})
		taken[best.node.Name] = true
		if len(d.Held) >= pol.Max {
			break
		}
	}
	return d
}

// leadFor is the lead of a pod that has waited so long: Lead, or its wait
// up to MaxLead.
func (p Policy) leadFor(waited time.Duration) time.Duration {
	return max(p.Lead, min(waited, p.MaxLead))
}

func key(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

// wholeGPUs is how many whole GPUs the pod asks for on one node, 0 when it
// asks for anything else too.
func wholeGPUs(p *corev1.Pod) int {
	devs := schedview.Devices(p)
	if len(devs) != 1 {
		return 0
	}
	return int(devs[resourcename.GPU])
}

// eligibility is the nodes a pod may be scheduled to, and a key that is
// the same for pods that may land on the same nodes.
type eligibility struct {
	nodes []string
	key   string
}

func eligible(view *schedview.Snapshot, p *corev1.Pod) eligibility {
	var e eligibility
	var key strings.Builder
	view.EligibleGroups(p, func(group int, members []string) {
		fmt.Fprintf(&key, "%d", group)
		if members == nil {
			members = view.GroupNodes(group)
		} else {
			key.WriteString(":" + strings.Join(members, ","))
		}
		key.WriteByte(';')
		e.nodes = append(e.nodes, members...)
	})
	e.key = key.String()
	return e
}

func hasGPUs(n *solver.Node, idx []int) bool {
	for _, i := range idx {
		if !slices.ContainsFunc(n.GPUs, func(g solver.GPU) bool { return g.Index == i }) {
			return false
		}
	}
	return true
}

// gpuFree is when one GPU of a node is expected free and whole; known
// false when it is not expected to free.
type gpuFree struct {
	index int
	at    time.Time
	known bool
}

// freeTimes is when each of the node's GPUs is expected free and whole,
// soonest first (ties: the lower index).
func freeTimes(n *solver.Node, now time.Time, cooldown time.Duration) []gpuFree {
	out := make([]gpuFree, 0, len(n.GPUs))
	for _, g := range n.GPUs {
		f := gpuFree{index: g.Index, at: now, known: true}
		if !g.MigEnabled {
			if g.InUse {
				f.at, f.known = ends(now, g.Run)
			}
			out = append(out, f)
			continue
		}
		if n.Dynamic {
			// Nothing on a dynamic DRA node turns MIG off: its agent
			// applies no layout and Prepare never changes MIG mode, and
			// a whole GPU is served there only with MIG off.
			f.known = false
			out = append(out, f)
			continue
		}
		for _, in := range g.Instances {
			if !in.InUse {
				continue
			}
			at, ok := ends(now, in.Run)
			f.known = f.known && ok
			if at.After(f.at) {
				f.at = at
			}
		}
		// The planner makes it whole once its cooldown ends.
		if cool := g.LastChanged.Add(cooldown); !g.LastChanged.IsZero() && cool.After(f.at) {
			f.at = cool
		}
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b gpuFree) int {
		if a.known != b.known {
			if a.known {
				return -1
			}
			return 1
		}
		return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.index, b.index))
	})
	return out
}

// ends is when a pod holding a device is expected to end: its expected
// end while ahead, otherwise as long again as it has run (Lindy's rule);
// false when neither is known.
func ends(now time.Time, r *solver.Run) (time.Time, bool) {
	if r == nil {
		return time.Time{}, false
	}
	since, until := r.Since, r.Until
	switch {
	case until.After(now):
		return until, true
	case !since.IsZero() && !since.After(now):
		return now.Add(now.Sub(since)), true
	case !until.IsZero():
		// Past its expected end, start unknown: it may end any moment.
		return now, true
	}
	return time.Time{}, false
}

// choice is a node for a pod: its k GPUs that free soonest.
type choice struct {
	node  *solver.Node
	gpus  []int
	ready time.Time
	// idle is the GPU-time the node's chosen GPUs wait, withheld, for the
	// last of them.
	idle time.Duration
}

func choose(n *solver.Node, f []gpuFree, k int) (choice, bool) {
	if len(f) < k || !f[k-1].known {
		return choice{}, false
	}
	c := choice{node: n, ready: f[k-1].at}
	for _, g := range f[:k] {
		c.gpus = append(c.gpus, g.index)
		c.idle += c.ready.Sub(g.at)
	}
	slices.Sort(c.gpus)
	return c, true
}

func (c *choice) better(o *choice) bool {
	return cmp.Or(c.ready.Compare(o.ready), cmp.Compare(c.idle, o.idle), cmp.Compare(len(c.node.GPUs), len(o.node.GPUs)),
		cmp.Compare(c.node.Name, o.node.Name)) < 0
}
