package replay

import (
	"cmp"
	"container/heap"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/planner/solver"
)

// simPod is one task in the replay.
type simPod struct {
	id   int
	name string
	// req is what the pod asks for now (the fallback webhook may rewrite
	// it); asked is the original request's size in GPUs.
	req   request
	asked float64
	// askedKind is the original request ("nvidia.com/gpu x8").
	askedKind string
	wholeAsk  bool
	prio      int32
	arrival   float64
	duration  float64
	elig      int
	k8s       *corev1.Pod
	// start is when the pod began running (-1: not yet); node and devs
	// where.
	start float64
	node  *node
	devs  []devRef
	// got is the size in GPUs of the devices it runs on.
	got  float64
	done bool
}

type eventKind int

const (
	evArrive eventKind = iota
	evDepart
	evChanged
	evBatch
	evResync
	// evCall runs the event's call: a policy's timer.
	evCall
)

type event struct {
	t float64
	// at is t as the batcher's time, for evBatch: seconds and times need
	// not round-trip exactly.
	at   time.Time
	seq  int
	kind eventKind
	pod  *simPod
	gpu  *gpu
	call func()
}

type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	return q[i].t < q[j].t || q[i].t == q[j].t && q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// classKey groups pending pods the scheduler cannot tell apart: when the
// first does not fit, none does.
type classKey struct {
	res   corev1.ResourceName
	count int
	elig  int
}

type podClass struct {
	key     classKey
	q       []*simPod
	blocked bool
}

// policy is one way of running the fleet. The scheduler, the queue and the
// metrics are the engine's and the same for every policy.
type policy interface {
	name() string
	setup(s *sim) error
	// carves: devices are created for a pod when it is bound (DRA), not
	// bound from a layout.
	carves() bool
	// arrive may rewrite a pod's request (fallback webhook).
	arrive(s *sim, p *simPod)
	// batching says whether the policy plans in batches of pending pods,
	// and when its rounds run.
	batching() (solver.Cadence, bool)
	// round plans for the pending pods when a batch window closes.
	round(s *sim)
	// started is called when a pod is bound, released when its devices
	// are freed.
	started(s *sim, p *simPod)
	released(s *sim, p *simPod)
}

// departing is a policy whose rounds also start when a pod leaves its
// devices.
type departing interface {
	roundsOnDeparture() bool
}

// sim is one replay of one policy on one fleet.
type sim struct {
	cfg     *runConfig
	pol     policy
	f       *fleet
	now     float64
	seq     int
	events  eventQueue
	pods    []*simPod
	eligs   *eligCache
	classes map[classKey]*podClass
	pending int
	// pendingDemand is the GPUs' worth the pending pods ask for.
	pendingDemand float64
	// dirty are the resources whose free devices grew since the last pass;
	// dirtyAll makes every class worth another try.
	dirty    map[corev1.ResourceName]bool
	dirtyAll bool
	// batch decides when a batching policy's rounds run (nil: the policy
	// does not plan in batches): the planner package's Batcher, which the
	// controller runs too.
	batch *solver.Batcher
	m     metrics
}

func (s *sim) push(e event) {
	e.seq = s.seq
	s.seq++
	heap.Push(&s.events, e)
}

// run replays the pods through the policy until the horizon.
func (s *sim) run() error {
	if err := s.pol.setup(s); err != nil {
		return fmt.Errorf("%s: %w", s.pol.name(), err)
	}
	if c, ok := s.pol.batching(); ok {
		b, err := solver.NewBatcher(c)
		if err != nil {
			return fmt.Errorf("%s: %w", s.pol.name(), err)
		}
		s.batch = b
	}
	for _, p := range s.pods {
		s.push(event{t: p.arrival, kind: evArrive, pod: p})
	}
	for s.events.Len() > 0 {
		t := s.events[0].t
		if t > s.cfg.horizon {
			break
		}
		s.advance(t)
		var arrived []*simPod
		for s.events.Len() > 0 && s.events[0].t == t {
			e := heap.Pop(&s.events).(event)
			switch e.kind {
			case evArrive:
				s.pol.arrive(s, e.pod)
				s.enqueue(e.pod)
				arrived = append(arrived, e.pod)
			case evDepart:
				s.depart(e.pod)
				if d, ok := s.pol.(departing); ok && d.roundsOnDeparture() {
					s.trigger()
				}
			case evChanged:
				s.f.finishChange(e.gpu)
				s.dirtyAll = true
			case evBatch:
				s.maybeCloseBatch(e.at)
			case evResync:
				if s.pending > 0 {
					s.trigger()
				}
			case evCall:
				e.call()
			}
		}
		s.pass()
		for _, p := range arrived {
			if p.start < 0 && !p.done {
				s.trigger()
				break
			}
		}
	}
	s.advance(s.cfg.horizon)
	return nil
}

// advance moves the clock, integrating the idle capacity while pods wait
// and while the fleet is saturated.
func (s *sim) advance(t float64) {
	if dt := t - s.now; dt > 0 && s.pending > 0 {
		s.m.observe(dt, s.f.capacity-s.f.allocated, s.f.capacity, s.pendingDemand)
	}
	if dt := t - s.now; dt > 0 {
		s.m.withheld += dt * s.f.withheld
	}
	s.now = t
}

func (s *sim) enqueue(p *simPod) {
	k := classKey{res: p.req.res, count: p.req.count, elig: p.elig}
	c := s.classes[k]
	if c == nil {
		c = &podClass{key: k}
		s.classes[k] = c
	}
	i, _ := slices.BinarySearchFunc(c.q, p, queueOrder)
	c.q = slices.Insert(c.q, i, p)
	c.blocked = false
	s.pending++
	s.pendingDemand += p.req.total()
}

// queueOrder is the scheduler's: priority, then arrival, then id.
func queueOrder(a, b *simPod) int {
	return cmp.Or(cmp.Compare(b.prio, a.prio), cmp.Compare(a.arrival, b.arrival), cmp.Compare(a.id, b.id))
}

// pass binds pending pods in queue order while they fit; a class whose
// first pod does not fit waits until its resource frees up.
func (s *sim) pass() {
	var heads []*podClass
	for _, c := range s.classes {
		if len(c.q) == 0 {
			continue
		}
		if s.dirtyAll || s.dirty[c.key.res] {
			c.blocked = false
		}
		if !c.blocked {
			heads = append(heads, c)
		}
	}
	clear(s.dirty)
	s.dirtyAll = false
	for len(heads) > 0 {
		bi := 0
		for i, c := range heads {
			if queueOrder(c.q[0], heads[bi].q[0]) < 0 {
				bi = i
			}
		}
		c := heads[bi]
		p := c.q[0]
		if s.bind(p) {
			c.q = c.q[1:]
			s.pending--
			s.pendingDemand -= p.req.total()
			if len(c.q) > 0 {
				continue
			}
		} else {
			s.bindReserved(c)
			c.blocked = true
		}
		heads = slices.Delete(heads, bi, bi+1)
	}
}

// bindReserved binds the pods of a class whose head does not fit that a
// node is reserved for, where they fit: unlike the others of the class,
// they may use the devices withheld for them.
func (s *sim) bindReserved(c *podClass) {
	var ids []int
	for id := range s.f.reservedFor {
		if p := s.pods[id]; p.start < 0 && !p.done && (classKey{res: p.req.res, count: p.req.count, elig: p.elig}) == c.key {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		p := s.pods[id]
		i := slices.Index(c.q, p)
		if i < 0 || !s.bind(p) {
			continue
		}
		c.q = slices.Delete(c.q, i, i+1)
		s.pending--
		s.pendingDemand -= p.req.total()
	}
}

// bind places a pod now if it fits.
func (s *sim) bind(p *simPod) bool {
	if s.pol.carves() {
		return s.carve(p)
	}
	var best *node
	for _, n := range s.f.nodes {
		if !s.eligs.masks[p.elig][n.idx] || n.available(p.req.res, p.id) < p.req.count {
			continue
		}
		// Most allocated first: the node with the fewest free devices of
		// the kind (the bin-packing scoring GPU clusters use).
		if best == nil || n.available(p.req.res, p.id) < best.available(p.req.res, p.id) {
			best = n
		}
	}
	if best == nil {
		return false
	}
	need := p.req.count
	gpus := best.gpus
	if best.resvPod == p.id {
		// Its reservation's GPUs first: the rest stay offered to others.
		gpus = slices.Clone(gpus)
		slices.SortStableFunc(gpus, func(a, b *gpu) int { return cmp.Compare(b2i(b.reserved), b2i(a.reserved)) })
	}
	for _, g := range gpus {
		if g.changing || g.reserved && best.resvPod != p.id {
			continue
		}
		if p.req.res == resourcename.GPU {
			if !g.mig && g.whole < 0 && need > 0 {
				s.hold(p, g, -1)
				need--
			}
			continue
		}
		for i := range g.insts {
			if need > 0 && g.insts[i].pod < 0 && g.insts[i].res == p.req.res {
				s.hold(p, g, i)
				need--
			}
		}
	}
	if need != 0 {
		panic(fmt.Sprintf("replay: node %s counted %d free %s but had fewer", best.name, best.available(p.req.res, p.id), p.req.res))
	}
	s.started(p, best, s.now)
	return true
}

// hold gives one device to a pod: instance i, or the whole GPU (-1).
func (s *sim) hold(p *simPod, g *gpu, i int) {
	if i < 0 {
		g.whole = p.id
		s.f.bump(g, resourcename.GPU, 1, -1)
		s.f.allocated++
		p.got++
		p.devs = append(p.devs, devRef{g: g, start: -1})
		return
	}
	g.insts[i].pod = p.id
	sh := g.share(g.insts[i])
	s.f.bump(g, g.insts[i].res, sh, -1)
	s.f.allocated += sh
	p.got += sh
	p.devs = append(p.devs, devRef{g: g, start: g.insts[i].start})
}

func (s *sim) started(p *simPod, n *node, at float64) {
	p.node, p.start = n, at
	s.pol.started(s, p)
	s.push(event{t: at + p.duration, kind: evDepart, pod: p})
}

// depart frees a pod's devices.
func (s *sim) depart(p *simPod) {
	p.done = true
	for _, d := range p.devs {
		g := d.g
		if d.start < 0 {
			g.whole = -1
			s.f.allocated--
			if !g.changing && !g.mig {
				s.f.bump(g, resourcename.GPU, 1, 1)
			}
			s.dirty[resourcename.GPU] = true
			continue
		}
		i := g.instAt(d.start, p.id)
		if i < 0 {
			panic(fmt.Sprintf("replay: pod %s lost its instance at %d on %s GPU %d", p.name, d.start, g.node.name, g.index))
		}
		in := &g.insts[i]
		in.pod = -1
		s.f.allocated -= g.share(*in)
		if s.pol.carves() {
			// Carved instances go with their pod.
			g.insts = slices.Delete(g.insts, i, i+1)
			g.lastChanged = s.now
			s.m.repartitions++
		} else if !g.changing {
			s.f.bump(g, in.res, g.share(*in), 1)
		}
		s.dirty[in.res] = true
	}
	if s.pol.carves() {
		s.dirtyAll = true
	}
	s.pol.released(s, p)
}

// carve binds a pod by creating its devices when it is scheduled, never
// moving anything: the DRA DynamicMIG and HAMi models. The node is the
// scheduler's bin-packing choice, as for every policy: of the nodes where
// the pod's devices can be carved, the one with the least free capacity
// (ties to the first by name); on it, the policy's carvePlan picks the
// GPUs and placements. The instances are created now and the pod starts
// when they are there.
func (s *sim) carve(p *simPod) bool {
	// Nodes by free capacity, then name: the first where the devices can
	// be carved is the choice. (Free capacity is a sum of memory shares,
	// eighths or quarters, exact in floating point.)
	type cand struct {
		n    *node
		free float64
	}
	cands := make([]cand, 0, len(s.f.nodes))
	for _, n := range s.f.nodes {
		if free := n.freeCapacity(); s.eligs.masks[p.elig][n.idx] && free >= p.req.total()-1e-9 {
			cands = append(cands, cand{n, free})
		}
	}
	slices.SortFunc(cands, func(a, b cand) int { return cmp.Or(cmp.Compare(a.free, b.free), cmp.Compare(a.n.idx, b.n.idx)) })
	var best *node
	var bestPlan []carved
	for _, c := range cands {
		if plan, ok := s.pol.(carver).carvePlan(s, p, c.n); ok {
			best, bestPlan = c.n, plan
			break
		}
	}
	if best == nil {
		return false
	}
	created := false
	for _, c := range bestPlan {
		g := c.g
		if c.start < 0 {
			g.whole = p.id
			s.f.allocated++
			p.got++
			p.devs = append(p.devs, devRef{g: g, start: -1})
			continue
		}
		g.insts = append(g.insts, inst{profile: c.profile, start: c.start, res: p.req.res, pod: p.id})
		sh := g.share(g.insts[len(g.insts)-1])
		s.f.allocated += sh
		p.got += sh
		p.devs = append(p.devs, devRef{g: g, start: c.start})
		g.lastChanged = s.now
		s.m.repartitions++
		created = true
	}
	at := s.now
	if created {
		at += s.cfg.latency
	}
	s.started(p, best, at)
	return true
}

type carved struct {
	g       *gpu
	profile string
	start   int // -1: the whole GPU
}

// carver is a policy that carves devices when a pod is bound: it says
// which, on one node.
type carver interface {
	carvePlan(s *sim, p *simPod, n *node) ([]carved, bool)
}

// carvePlan is first fit's: GPUs in index order, the lowest start that
// fits.
func (firstFit) carvePlan(_ *sim, p *simPod, n *node) ([]carved, bool) {
	var out []carved
	extra := map[*gpu][]solver.Instance{}
	taken := map[*gpu]bool{}
	for range p.req.count {
		found := false
		for _, g := range n.gpus {
			if g.whole >= 0 || taken[g] {
				continue
			}
			if p.req.res == resourcename.GPU {
				if len(g.insts) == 0 && len(extra[g]) == 0 {
					taken[g] = true
					out = append(out, carved{g: g, start: -1})
					found = true
					break
				}
				continue
			}
			profile := profileOfResource(g.model, p.req.res)
			if profile == "" {
				continue
			}
			have := append(instances(g.insts), extra[g]...)
			if start, ok := g.model.lay.Add(have, profile); ok {
				extra[g] = append(extra[g], solver.Instance{Profile: profile, Start: start})
				out = append(out, carved{g: g, profile: profile, start: start})
				found = true
				break
			}
		}
		if !found {
			return nil, false
		}
	}
	return out, true
}

func instances(in []inst) []solver.Instance {
	out := make([]solver.Instance, len(in))
	for i, x := range in {
		out[i] = solver.Instance{Profile: x.profile, Start: x.start, InUse: x.pod >= 0}
	}
	return out
}

func profileOfResource(mi *modelInfo, res corev1.ResourceName) string {
	for _, p := range mi.m.Profiles {
		if resourcename.MIG(p.Name) == res {
			return p.Name
		}
	}
	return ""
}

// trigger notes a pod waiting, for policies that plan in batches: a batch
// window opens, or stays open a little longer.
func (s *sim) trigger() {
	if s.batch == nil {
		return
	}
	closes := s.batch.Trigger(simTime(s.now))
	s.push(event{t: simSeconds(closes), at: closes, kind: evBatch})
}

// maybeCloseBatch runs a round if the batch closes at at, the time of the
// event that fired.
func (s *sim) maybeCloseBatch(at time.Time) {
	if s.batch == nil || !s.batch.Due(at) {
		return
	}
	start := time.Now()
	s.pol.round(s)
	s.m.rounds = append(s.m.rounds, time.Since(start))
	s.dirtyAll = true
	// Pods that cannot be scheduled open a window; while pods wait the
	// planner also looks again every resync period, for capacity that
	// pods leaving freed and cooldowns that ended.
	if next, ok := s.batch.Ran(at, s.pending > 0); ok {
		s.push(event{t: simSeconds(next), kind: evResync})
	}
}

// change starts a reconfiguration that completes after the latency.
func (s *sim) change(g *gpu, enabled bool, target []inst) error {
	if err := s.f.startChange(g, enabled, target, s.now); err != nil {
		return err
	}
	s.m.repartitions++
	s.push(event{t: s.now + s.cfg.latency, kind: evChanged, gpu: g})
	return nil
}

// waiting lists the pods not running, in queue order.
func (s *sim) waiting() []*simPod {
	var out []*simPod
	for _, c := range s.classes {
		out = append(out, c.q...)
	}
	slices.SortFunc(out, queueOrder)
	return out
}

// eligCache numbers the distinct places pods may land (node masks),
// computed with the fallback package's node filter as the scheduler sees
// it; pods of the trace differ only by gpu_spec.
type eligCache struct {
	snap  *schedview.Snapshot
	idx   map[string]int
	byKey map[string]int
	masks [][]bool
}

func newEligCache(f *fleet) *eligCache {
	fbNodes := make([]schedview.Node, len(f.nodes))
	e := &eligCache{idx: map[string]int{}, byKey: map[string]int{}}
	for i, n := range f.nodes {
		fbNodes[i] = schedview.Node{Name: n.name, Labels: n.labels}
		e.idx[n.name] = i
	}
	e.snap = schedview.NewSnapshot(fbNodes)
	return e
}

func (e *eligCache) of(p *corev1.Pod) int {
	key := ""
	if a := p.Spec.Affinity; a != nil {
		key = fmt.Sprint(a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Values)
	}
	if i, ok := e.byKey[key]; ok {
		return i
	}
	mask := make([]bool, len(e.idx))
	e.snap.EligibleGroups(p, func(group int, members []string) {
		if members == nil {
			members = e.snap.GroupNodes(group)
		}
		for _, m := range members {
			mask[e.idx[m]] = true
		}
	})
	e.byKey[key] = len(e.masks)
	e.masks = append(e.masks, mask)
	return len(e.masks) - 1
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
