package planner

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/planner/plansnap"
	"github.com/migflex/migflex/internal/planner/reserve"
	"github.com/migflex/migflex/internal/planner/solver"
)

// Event reasons on pods.
const (
	// ReasonPlanned: a node's layout changes for the pod; the message
	// names the node and GPU.
	ReasonPlanned = "MigReshapePlanned"
	// ReasonImpossible: no change the planner may make serves the pod; the
	// message says why, naming the pods holding the GPUs that could.
	ReasonImpossible = "MigReshapeImpossible"
)

type gpuKey struct {
	node string
	gpu  int
}

// memory is what the leader keeps from one round to the next. Losing it
// (a new leader) is safe: the cluster holds what matters (see decide).
type memory struct {
	// changed is when this process last changed each GPU.
	changed map[gpuKey]time.Time
	// told is the last Event each pending pod got, so that a round repeats
	// none.
	told map[types.UID]string
	// mix follows the demand: every GPU pod created, not only those that
	// wait, as the trace replay feeds it (see observe). seen are the pods
	// it has counted that are still in the pending set; arrived, those the
	// informer saw created since the last round.
	mix     *solver.MixTracker
	seen    map[types.UID]bool
	arrived []arrival
	// started are pods that left the pending set bound to a node, by
	// node, with when: until the node's agent reports them holding their
	// devices, they may hold instances it reports free.
	started map[string]map[string]time.Time
	// decoded keeps the Nodes' decoded annotations from round to round.
	decoded *plansnap.Cache
	// unread is the last ReasonClaimUnread message each pending pod got.
	unread map[types.UID]string
	// claimed are this round's pods holding devices of ours through
	// allocated claims before they start, by node (scheduled.claimed).
	claimed map[string][]string
	// pools reads a DRA node's pool (slices and allocated claims), for a
	// dynamic node's placements allocated and not prepared yet; nil when
	// the round reads no slices.
	pools func(node string) *schedview.Pool
	// backoff spaces the writes to Nodes whose last write was refused.
	backoff writeBackoff
	// lapsed are the reservations that lapsed lately
	// (reserve.Decision.Lapsed): their nodes are left to other pods for
	// a while. The reservations held are on the Nodes.
	lapsed []reserve.Reservation
}

// arrival is a GPU pod the informer saw created, and when.
type arrival struct {
	pod *corev1.Pod
	at  time.Time
}

func newMemory(halfLife time.Duration) *memory {
	return &memory{
		changed: map[gpuKey]time.Time{},
		told:    map[types.UID]string{},
		mix:     solver.NewMixTracker(halfLife),
		seen:    map[types.UID]bool{},
		started: map[string]map[string]time.Time{},
		decoded: plansnap.NewCache(),
		unread:  map[types.UID]string{},
		backoff: writeBackoff{},
	}
}

// nodeWrite is one server-side apply of the planner's annotation.
type nodeWrite struct {
	node       *corev1.Node
	key, value string // value "" removes the key
	// manager is the field manager the apply is made under: the
	// planner's for nvidia.com/mig.config, its proposal manager for a
	// proposal (see proposalManager).
	manager         string
	gpus            []int
	pods            int
	eventsAfterward []podEvent
	// anyVersion sends the apply without the Node's resourceVersion as a
	// precondition: a reservation's key is its manager's alone, and the
	// round's layout write to the same Node, sent first, changes the
	// version it read.
	anyVersion bool
	// notes are Events on any object, recorded once the write succeeded.
	notes []objEvent
}

type podEvent struct {
	pod                  *corev1.Pod
	typ, reason, message string
}

// decision is what one round does.
type decision struct {
	writes []nodeWrite
	// events are recorded whatever the writes do; eventsAfterward of a
	// write only once it succeeded.
	events     []podEvent
	demand     map[corev1.ResourceName]float64
	impossible int
	// waiting: pods still wait, so look again after Cadence.Resync.
	waiting bool
	// lifts is when the first start grace that freezes a node ends (zero:
	// none): pods that wait may be served then. A pod that started and
	// went before a round saw its agent report it freezes its node until
	// then, and a resync may be far later.
	lifts    time.Time
	warnings []string
	// result is the planner's decision and pending the pods it was for,
	// in its order (empty when no pod waits), for Preview.
	result  solver.Result
	pending []*corev1.Pod
	// reservedFor are the pods a reservation is held for, by
	// namespace/name: the round gives their GPUs to no pod, so they are
	// not told no change serves them.
	reservedFor map[string]bool
	// held are the reservations the round holds, kept then new, and
	// ended those it ends (reserve.Decide's), for Preview.
	held  []reserve.Reservation
	ended []reserve.Ended
}

// decide plans one round from the cluster as the informers show it. It is
// idempotent: what it would write is compared with what the Nodes carry,
// and changes written but not applied yet are seen as done (plansnap), so
// a round after a leader change, or right after the previous one, finds
// nothing more to do. Its steps: read the nodes (readNodes), the pods
// that wait (collectPending), the reservations (reservations), plan, pick the nodes to write within the cap
// (nodeOrder, newWrites), tell each pod what it will get (tellPods) and
// keep the writes that change something (addWrites).
func decide(o *Options, pl *solver.Planner, m *memory, now time.Time, nodes []*corev1.Node, pods []*corev1.Pod) (decision, error) {
	d := decision{demand: map[corev1.ResourceName]float64{}}
	views := d.readNodes(o, m, now, nodes, pods)
	m.observe(now, pods)
	pending := d.collectPending(m, pods, views)
	// Before the plan, which gives the reserved GPUs to no pod; and when no
	// pod waits, which ends every reservation.
	reserved := d.reservations(o, m, now, nodes, views, pending)
	if len(pending) == 0 {
		d.writes = append(d.writes, reserved...)
		return d, d.proposalsLeft(o, nodes, nil)
	}
	models, warnings := plansnap.MergeModels(views)
	d.warnings = append(d.warnings, warnings...)
	snap := solver.Snapshot{Now: now, Models: models, Pending: pending, Mix: m.mix.Mix(now), Nodes: make([]solver.Node, 0, len(views))}
	for _, v := range views {
		snap.Nodes = append(snap.Nodes, v.Node)
	}
	res, err := pl.Plan(snap)
	if err != nil {
		return d, fmt.Errorf("planning: %w", err)
	}
	d.result, d.pending = res, pending
	d.warnings = append(d.warnings, res.Warnings...)

	changes := map[string]solver.NodeChange{}
	for _, nc := range res.Nodes {
		changes[nc.Node] = nc
	}
	order := d.nodeOrder(o, res, reservedNodes(views))
	writes := newWrites(o, order, changes, nodes)
	d.tellPods(o, m, roundPlan{res: res, pending: pending, changes: changes, views: views, models: snap.Models}, writes)
	d.addWrites(order, writes)
	d.writes = append(d.writes, reserved...)
	return d, d.proposalsLeft(o, nodes, writes)
}

// readNodes is each Node as the planner sees it (plansnap), frozen while
// pods are starting on it whose devices its agent does not report yet: the
// pods bound but not started, and those that left the pending set bound to
// it within the start grace (m.started), whose end the round says (lifts).
// Each GPU's last change is what this process remembers, or the Node says.
func (d *decision) readNodes(o *Options, m *memory, now time.Time, nodes []*corev1.Node, pods []*corev1.Pod) []plansnap.Node {
	starting := map[string][]string{}
	for _, p := range pods {
		if n := plansnap.StartingOn(p); n != "" {
			starting[n] = append(starting[n], p.Namespace+"/"+p.Name)
		}
	}
	for n, claimed := range m.claimed {
		for _, p := range claimed {
			if !slices.Contains(starting[n], p) {
				starting[n] = append(starting[n], p)
			}
		}
	}
	views := make([]plansnap.Node, 0, len(nodes))
	m.decoded.Sweep()
	for _, n := range nodes {
		// Reuse: a Node unchanged since the last round is not read again;
		// its view's slices are then shared with the cache's, so the round
		// clones what it changes (rememberChanges, markReserved).
		v := plansnap.FromAPI(n, plansnap.Options{FieldManager: o.FieldManager, ManualHold: o.ManualHold, Now: now, Cache: m.decoded, Pools: m.pools, Reuse: true})
		d.warnings = append(d.warnings, v.Warnings...)
		var users []string
		if len(m.started[n.Name]) > 0 {
			users = v.Users()
		}
		for pod, since := range m.started[n.Name] {
			ends := since.Add(o.StartGrace)
			if slices.Contains(users, pod) || !now.Before(ends) {
				delete(m.started[n.Name], pod)
				continue
			}
			starting[n.Name] = append(starting[n.Name], pod)
			if d.lifts.IsZero() || ends.Before(d.lifts) {
				d.lifts = ends
			}
		}
		if s := starting[n.Name]; len(s) > 0 && v.Frozen == "" {
			slices.Sort(s)
			what := "pods are"
			if len(s) == 1 {
				what = "a pod is"
			}
			v.Frozen = fmt.Sprintf("%s starting on it (%s) whose devices its agent does not report yet", what, describeList(s))
		}
		rememberChanges(o, m, &v, now)
		views = append(views, v)
	}
	return views
}

// collectPending is the pods waiting for GPUs the scheduler found nowhere,
// in the order they claim capacity (priority, then age, then name), with
// their demand; the Events told to pods no longer waiting are forgotten.
// A pod a node's layout lists holding a device is not waiting, whatever
// the pod informer says (dropHeld).
func (d *decision) collectPending(m *memory, pods []*corev1.Pod, views []plansnap.Node) []*corev1.Pod {
	pending := make([]*corev1.Pod, 0)
	for _, p := range pods {
		if plansnap.Unschedulable(p) {
			pending = append(pending, p)
		}
	}
	pending = d.dropHeld(pending, views)
	live := map[types.UID]bool{}
	for _, p := range pending {
		live[p.UID] = true
		for res, n := range schedview.Devices(p) {
			d.demand[res] += float64(n)
		}
	}
	maps.DeleteFunc(m.told, func(uid types.UID, _ string) bool { return !live[uid] })
	slices.SortStableFunc(pending, func(a, b *corev1.Pod) int {
		return cmp.Or(cmp.Compare(corev1helpers.PodPriority(b), corev1helpers.PodPriority(a)),
			a.CreationTimestamp.Compare(b.CreationTimestamp.Time), cmp.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name))
	})
	return pending
}

// dropHeld is pending without the pods a node's layout lists holding a
// device. The informers of Nodes and pods each catch up on their own
// after a lost watch (an API server restart backs each off by up to a
// minute), so the pod informer may still show as waiting a pod that its
// agent already reports running: planning for it again would change a
// second GPU for a pod that has one. A pod deleted and made again under
// the same name waits until its agent's next report.
func (d *decision) dropHeld(pending []*corev1.Pod, views []plansnap.Node) []*corev1.Pod {
	if len(pending) == 0 {
		return pending
	}
	held := make(map[string]bool, len(pending))
	for _, p := range pending {
		held[p.Namespace+"/"+p.Name] = false
	}
	for i := range views {
		for u := range views[i].AllUsers() {
			if seen, ok := held[u]; ok && !seen {
				held[u] = true
				d.warnings = append(d.warnings, fmt.Sprintf("pod %s waits for the scheduler as the pod informer shows it, but Node %s's layout lists it holding a device: not planned for (the informer is behind)", u, views[i].Name))
			}
		}
	}
	return slices.DeleteFunc(pending, func(p *corev1.Pod) bool { return held[p.Namespace+"/"+p.Name] })
}

// nodeOrder is the nodes to write, in the order their first pod claims
// capacity, then the reserved nodes the round changes (their idle MIG GPUs
// made whole for the reserved pod), up to Options.MaxNodesPerRound; the
// pods of nodes over the cap wait for the next round.
func (d *decision) nodeOrder(o *Options, res solver.Result, reserved map[string]bool) []string {
	chosen := map[string]bool{}
	var order []string
	add := func(node string) {
		if chosen[node] {
			return
		}
		if o.MaxNodesPerRound > 0 && len(order) == o.MaxNodesPerRound {
			d.waiting = true
			return
		}
		chosen[node] = true
		order = append(order, node)
	}
	for _, pp := range res.Pods {
		if pp.Action == solver.ActionReshape {
			add(pp.Node)
		}
	}
	for _, nc := range res.Nodes {
		if reserved[nc.Node] {
			add(nc.Node)
		}
	}
	return order
}

// newWrites is the write of each node in order: its new layout in
// nvidia.com/mig.config, or in the proposal annotation in dry-run mode.
func newWrites(o *Options, order []string, changes map[string]solver.NodeChange, nodes []*corev1.Node) map[string]*nodeWrite {
	byName := make(map[string]*corev1.Node, len(nodes))
	for _, n := range nodes {
		byName[n.Name] = n
	}
	writes := map[string]*nodeWrite{}
	for _, name := range order {
		nc, n := changes[name], byName[name]
		if n == nil {
			continue
		}
		w := &nodeWrite{node: n, key: nodeinfo.AnnotationMigConfig, value: nc.Config, manager: o.FieldManager}
		if o.DryRun {
			w.key, w.manager = nodeinfo.AnnotationProposed, proposalManager(o)
		}
		for _, g := range nc.GPUs {
			w.gpus = append(w.gpus, g.Index)
		}
		writes[name] = w
	}
	return writes
}

// roundPlan is what tellPods needs of the round's plan.
type roundPlan struct {
	res     solver.Result
	pending []*corev1.Pod
	changes map[string]solver.NodeChange
	views   []plansnap.Node
	models  []solver.Model
}

// tellPods gives each pending pod its news: where it will run, recorded
// once its node's write succeeded, or why no change serves it (naming the
// pods holding the GPUs that could), recorded at once.
func (d *decision) tellPods(o *Options, m *memory, r roundPlan, writes map[string]*nodeWrite) {
	viewOf := make(map[string]*plansnap.Node, len(r.views))
	for i := range r.views {
		viewOf[r.views[i].Name] = &r.views[i]
	}
	var blockers *blockerIndex
	for i, pp := range r.res.Pods {
		pod := r.pending[i]
		switch pp.Action {
		case solver.ActionReshape:
			w := writes[pp.Node]
			if w == nil {
				continue // over the round's cap: the next round
			}
			w.pods++
			msg := plannedMessage(o, pp, r.changes[pp.Node], viewOf[pp.Node])
			if ev, news := m.tell(pod, corev1.EventTypeNormal, ReasonPlanned, msg); news {
				w.eventsAfterward = append(w.eventsAfterward, ev)
			}
		case solver.ActionNone:
			d.waiting = true
			if d.reservedFor[pod.Namespace+"/"+pod.Name] {
				continue // its reservation's Event says what it waits for
			}
			d.impossible++
			if blockers == nil {
				blockers = newBlockerIndex(r.views, r.models)
			}
			msg := "no change the planner may make serves it: " + pp.Reason
			if b := blockers.holding(pod); b != "" {
				msg += "; " + b
			}
			if ev, news := m.tell(pod, corev1.EventTypeWarning, ReasonImpossible, msg); news {
				d.events = append(d.events, ev)
			}
		}
	}
}

// addWrites keeps the writes that change their Node, in order; a write
// the Node carries already (a dry-run proposal still standing) is not
// sent again, and its Events are recorded now.
func (d *decision) addWrites(order []string, writes map[string]*nodeWrite) {
	for _, name := range order {
		w := writes[name]
		if w == nil {
			continue
		}
		if w.node.Annotations[w.key] == w.value {
			d.events = append(d.events, w.eventsAfterward...)
			continue
		}
		d.writes = append(d.writes, *w)
	}
}

// proposalsLeft removes the planner's proposals that no longer stand: a
// node proposed for in dry-run whose pods are gone or served.
func (d *decision) proposalsLeft(o *Options, nodes []*corev1.Node, writes map[string]*nodeWrite) error {
	for _, n := range nodes {
		if _, ok := n.Annotations[nodeinfo.AnnotationProposed]; !ok {
			continue
		}
		// Proposals of an older planner were written under its own
		// field manager; either is ours to remove.
		owner, _ := plansnap.AnnotationOwner(n, nodeinfo.AnnotationProposed)
		if owner != proposalManager(o) && owner != o.FieldManager {
			continue
		}
		// The planner may write only on opted-in nodes (its policy says
		// so): a proposal on a node opted out since stays for its owner.
		if n.Labels[nodeinfo.LabelPlanner] != nodeinfo.PlannerEnabled {
			continue
		}
		if w := writes[n.Name]; w != nil && w.key == nodeinfo.AnnotationProposed {
			continue
		}
		d.writes = append(d.writes, nodeWrite{node: n, key: nodeinfo.AnnotationProposed, manager: owner})
	}
	return nil
}

// proposalManager is the field manager of dry-run proposals. It is not the
// planner's own: an apply refreshes the time of its manager's entry in
// managedFields, and the entry that owns nvidia.com/mig.config tells a new
// leader, and the webhook, when the planner last changed the node, which
// starts a cooldown. A proposal changes nothing, so it must not touch it.
func proposalManager(o *Options) string {
	return o.FieldManager + "-proposal"
}

// rememberChanges sets each GPU's last change: this process's memory; for
// a node it has no memory of (a new leader), the time the planner last
// wrote the node's mig.config, for all its GPUs, which may over-protect
// but never under-protects.
func rememberChanges(o *Options, m *memory, v *plansnap.Node, now time.Time) {
	known, cloned := false, false
	for i := range v.GPUs {
		if t, ok := m.changed[gpuKey{v.Name, v.GPUs[i].Index}]; ok {
			known = true
			if t.After(v.GPUs[i].LastChanged) {
				if !cloned {
					v.GPUs, cloned = slices.Clone(v.GPUs), true
				}
				v.GPUs[i].LastChanged = t
			}
		}
	}
	if !known {
		plansnap.HoldRecentChange(v, o.FieldManager, o.Policy.Cooldown, now)
	}
}

// merge adds the pods that left the pending set bound to a node (they may
// hold devices their agent does not report yet) and forgets those an
// agent reported since (departed first: a report of the same round names
// a pod that has started).
func (m *memory) merge(departed []departure, reported map[string][]string) {
	for _, d := range departed {
		if m.started[d.node] == nil {
			m.started[d.node] = map[string]time.Time{}
		}
		m.started[d.node][d.pod] = d.at
	}
	for node, pods := range reported {
		for _, p := range pods {
			delete(m.started[node], p)
		}
	}
}

// observe counts in the demand mix, once each, the GPU pods created since
// the last round (at their creation: some have started and left the
// pending set already) and the GPU pods of the pending set it has not
// counted (at now: all of them, for a new leader).
func (m *memory) observe(now time.Time, pods []*corev1.Pod) {
	for _, a := range m.arrived {
		if !m.seen[a.pod.UID] {
			m.seen[a.pod.UID] = true
			m.mix.Observe(a.at, a.pod)
		}
	}
	m.arrived = nil
	inSet := make(map[types.UID]bool, len(pods))
	for _, p := range pods {
		if !plansnap.AsksForGPUs(p) {
			continue
		}
		inSet[p.UID] = true
		if !m.seen[p.UID] {
			m.seen[p.UID] = true
			m.mix.Observe(now, p)
		}
	}
	// A pod leaves the pending set for good: forgetting it cannot count
	// it twice.
	maps.DeleteFunc(m.seen, func(uid types.UID, _ bool) bool { return !inSet[uid] })
}

// wrote records a write that succeeded: the GPUs of a layout written in
// nvidia.com/mig.config start their cooldown. A dry-run proposal changes
// nothing, so it starts none.
func (m *memory) wrote(o *Options, w nodeWrite, now time.Time) {
	if o.DryRun || w.key != nodeinfo.AnnotationMigConfig || w.value == "" {
		return
	}
	for _, g := range w.gpus {
		m.changed[gpuKey{w.node.Name, g}] = now
	}
}

// tell returns the Event for a pod and whether it is news: the same
// reason and message as last time is not.
func (m *memory) tell(pod *corev1.Pod, typ, reason, message string) (podEvent, bool) {
	key := reason + "\x00" + message
	if m.told[pod.UID] == key {
		return podEvent{}, false
	}
	m.told[pod.UID] = key
	return podEvent{pod: pod, typ: typ, reason: reason, message: message}, true
}

// plannedMessage says which node and GPUs will serve the pod, and how
// they change.
func plannedMessage(o *Options, pp solver.PodPlan, nc solver.NodeChange, v *plansnap.Node) string {
	var parts []string
	for _, dev := range pp.Devices {
		i := slices.IndexFunc(nc.GPUs, func(g solver.GPUChange) bool { return g.Index == dev.GPU })
		if i < 0 {
			parts = append(parts, fmt.Sprintf("GPU %d (%s free already)", dev.GPU, strings.TrimPrefix(string(dev.Resource), "nvidia.com/")))
			continue
		}
		g := nc.GPUs[i]
		parts = append(parts, fmt.Sprintf("GPU %d repartitioned %s -> %s", dev.GPU, layoutString(before(v, dev.GPU)), layoutString(g.Layout)))
	}
	parts = slices.Compact(parts)
	verb := "will run"
	suffix := ""
	if o.DryRun {
		verb = "would run"
		suffix = fmt.Sprintf(" (dry run: proposed in %s, %s not changed)", nodeinfo.AnnotationProposed, nodeinfo.AnnotationMigConfig)
	}
	return fmt.Sprintf("%s on node %s: %s%s", verb, pp.Node, strings.Join(parts, "; "), suffix)
}

func before(v *plansnap.Node, gpu int) []solver.Instance {
	if v == nil {
		return nil
	}
	for _, g := range v.GPUs {
		if g.Index == gpu {
			return g.Instances
		}
	}
	return nil
}

// layoutString is "3g.40gb + 4x1g.10gb", or "empty".
func layoutString(in []solver.Instance) string {
	counts := map[string]int{}
	var names []string
	for _, i := range in {
		if counts[i.Profile] == 0 {
			names = append(names, i.Profile)
		}
		counts[i.Profile]++
	}
	if len(names) == 0 {
		return "empty"
	}
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = n
		if c := counts[n]; c > 1 {
			parts[i] = fmt.Sprintf("%dx%s", c, n)
		}
	}
	return strings.Join(parts, " + ")
}

// describeList names the first few items and counts the rest.
func describeList(items []string) string {
	const shown = 4
	if len(items) <= shown {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:shown], ", "), len(items)-shown)
}

// blockerIndex finds, for a pod no change can serve, the pods holding the
// GPUs that could serve it were their instances free: on opted-in nodes
// the pod may land on, GPUs of a model with the profile (or MIG capable,
// for a whole GPU) that pods hold. A node frozen for now counts: its
// freeze ends by itself (a change lands, a pod starts), the pods holding
// its GPUs do not, and a new leader finds the node it was handed frozen
// by its predecessor's change in flight.
//
// A round may have hundreds of such pods on thousands of nodes: the busy
// GPUs are listed once, and pods with the same devices and scheduling
// constraints share one answer.
type blockerIndex struct {
	fb     *schedview.Snapshot
	busy   map[string][]busyGPU
	offers map[string]map[corev1.ResourceName]bool
	said   map[string]string
}

// busyGPU is a GPU that pods hold, and who.
type busyGPU struct {
	index int
	model string
	users []string
}

func newBlockerIndex(views []plansnap.Node, models []solver.Model) *blockerIndex {
	b := &blockerIndex{busy: map[string][]busyGPU{}, offers: map[string]map[corev1.ResourceName]bool{}, said: map[string]string{}}
	fbNodes := make([]schedview.Node, 0, len(views))
	for i := range views {
		v := &views[i]
		fbNodes = append(fbNodes, schedview.Node{Name: v.Name, Labels: v.Labels, Taints: v.Taints, Unschedulable: v.Unschedulable, API: v.API})
		if !v.OptedIn {
			continue
		}
		for _, g := range v.GPUs {
			if users := v.GPUUsers(g.Index); len(users) > 0 {
				b.busy[v.Name] = append(b.busy[v.Name], busyGPU{index: g.Index, model: g.Model, users: users})
			}
		}
	}
	for _, m := range models {
		set := map[corev1.ResourceName]bool{resourcename.GPU: true}
		for _, p := range m.Profiles {
			set[resourcename.MIG(p.Name)] = true
		}
		b.offers[m.Name] = set
	}
	b.fb = schedview.NewSnapshot(fbNodes)
	return b
}

// holdingKey is what holding's answer depends on: the pod's devices and
// what decides the nodes it may land on.
func holdingKey(pod *corev1.Pod, devs map[corev1.ResourceName]int64) string {
	var affinity *corev1.NodeAffinity
	if pod.Spec.Affinity != nil {
		affinity = pod.Spec.Affinity.NodeAffinity
	}
	key, err := json.Marshal(struct {
		Devs         map[corev1.ResourceName]int64
		NodeName     string
		NodeSelector map[string]string
		Affinity     *corev1.NodeAffinity
		Tolerations  []corev1.Toleration
	}{devs, pod.Spec.NodeName, pod.Spec.NodeSelector, affinity, pod.Spec.Tolerations})
	if err != nil {
		return "" // not shared
	}
	return string(key)
}

func (b *blockerIndex) holding(pod *corev1.Pod) string {
	devs := schedview.Devices(pod)
	key := holdingKey(pod, devs)
	if s, ok := b.said[key]; ok && key != "" {
		return s
	}
	type at struct {
		node string
		gpu  *busyGPU
	}
	// The message names the first few GPUs by node and index and counts
	// the rest: keep those few, not every busy GPU of thousands of nodes.
	const shown = 4
	var first [shown]at
	kept, held := 0, 0
	less := func(x, y at) bool {
		return cmp.Or(cmp.Compare(x.node, y.node), cmp.Compare(x.gpu.index, y.gpu.index)) < 0
	}
	b.fb.EligibleGroups(pod, func(group int, members []string) {
		if members == nil {
			members = b.fb.GroupNodes(group)
		}
		for _, name := range members {
			busy := b.busy[name]
			for i := range busy {
				if !b.offersAll(busy[i].model, devs) {
					continue
				}
				held++
				h := at{name, &busy[i]}
				if kept == shown && !less(h, first[shown-1]) {
					continue
				}
				j := min(kept, shown-1)
				for ; j > 0 && less(h, first[j-1]); j-- {
					first[j] = first[j-1]
				}
				first[j] = h
				kept = min(kept+1, shown)
			}
		}
	})
	s := ""
	if held > 0 {
		names := make([]string, 0, shown)
		for _, h := range first[:kept] {
			names = append(names, fmt.Sprintf("%s GPU %d (%s)", h.node, h.gpu.index, strings.Join(h.gpu.users, ", ")))
		}
		list := strings.Join(names, ", ")
		if held > shown {
			list = fmt.Sprintf("%s and %d more", list, held-shown)
		}
		s = "the GPUs that could take it hold pods, whose instances the planner never repartitions: " + list
	}
	if key != "" {
		b.said[key] = s
	}
	return s
}

func (b *blockerIndex) offersAll(model string, devs map[corev1.ResourceName]int64) bool {
	set := b.offers[model]
	for res := range devs {
		if !set[res] {
			return false
		}
	}
	return len(set) > 0
}
