package replay

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/migconfig"
	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/planner/reserve"
	"github.com/migflex/migflex/internal/planner/solver"
	"github.com/migflex/migflex/internal/webhook/fallback"
)

// Policy names, in report order.
const (
	PolicyStatic1g         = "static-1g"
	PolicyStaticBalanced   = "static-balanced"
	PolicyFallback1g       = "fallback-1g"
	PolicyFallbackBalanced = "fallback-balanced"
	PolicyFirstFit         = "dra-first-fit"
	PolicyHAMi             = "hami-dynamic-mig"
	PolicyMigflexDynamic   = "migflex-dynamic"
	PolicyNos              = "nos-greedy"
	PolicyMigflex          = "migflex"
	PolicyFluid            = "fluid"
)

// nosCadence is nos's batch window (batchWindowIdleSeconds 10,
// batchWindowTimeoutSeconds 60), looking again as migflex does while pods
// wait.
var nosCadence = solver.Cadence{Idle: 10 * time.Second, Max: time.Minute, Resync: solver.DefaultCadence().Resync}

// AllPolicies lists every policy the replay knows.
var AllPolicies = []string{
	PolicyStatic1g, PolicyStaticBalanced, PolicyFallback1g, PolicyFallbackBalanced,
	PolicyFirstFit, PolicyHAMi, PolicyMigflexDynamic, PolicyNos, PolicyMigflex, PolicyFluid,
}

func newPolicy(name string, cfg *runConfig) (policy, error) {
	switch name {
	case PolicyStatic1g:
		return &static{label: name, layout: all1g}, nil
	case PolicyStaticBalanced:
		return &static{label: name, layout: balanced}, nil
	case PolicyFallback1g:
		return newFallback(name, all1g)
	case PolicyFallbackBalanced:
		return newFallback(name, balanced)
	case PolicyFirstFit:
		return &firstFit{}, nil
	case PolicyHAMi:
		return &hami{}, nil
	case PolicyMigflexDynamic:
		return &migflexDynamic{nodes: map[string]*nodeOffers{}}, nil
	case PolicyNos:
		return &nos{static: static{label: name, layout: balanced}}, nil
	case PolicyMigflex:
		pl, err := solver.New(cfg.planner)
		if err != nil {
			return nil, err
		}
		return &migflex{static: static{label: name, layout: balanced}, pl: pl, mix: solver.NewMixTracker(cfg.mixHalfLife), cadence: cfg.cadence,
			preset: cfg.migflexPreset, departures: cfg.migflexDepartures, resv: cfg.reserve, byKey: map[string]*simPod{}, reserved: map[int]applied{}}, nil
	}
	return nil, fmt.Errorf("unknown policy %q (known: %v)", name, AllPolicies)
}

// static lays the fleet out once: a share of the GPUs whole (MIG
// disabled), on whole nodes, biggest nodes first, for whole-GPU tasks; the
// rest with one MIG layout.
type static struct {
	label  string
	layout func(*modelInfo) ([]inst, error)
}

func (p *static) name() string                     { return p.label }
func (p *static) carves() bool                     { return false }
func (p *static) arrive(*sim, *simPod)             {}
func (p *static) batching() (solver.Cadence, bool) { return solver.Cadence{}, false }
func (p *static) round(*sim)                       {}
func (p *static) started(*sim, *simPod)            {}
func (p *static) released(*sim, *simPod)           {}

func (p *static) setup(s *sim) error {
	whole := int(math.Round(s.cfg.wholeShare * s.f.capacity))
	nodes := slices.Clone(s.f.nodes)
	slices.SortStableFunc(nodes, func(a, b *node) int { return cmp.Compare(len(b.gpus), len(a.gpus)) })
	layouts := map[*modelInfo][]inst{}
	for _, n := range nodes {
		for _, g := range n.gpus {
			if whole > 0 {
				whole--
				s.f.setLayout(g, false, nil)
				continue
			}
			l, ok := layouts[g.model]
			if !ok {
				var err error
				if l, err = p.layout(g.model); err != nil {
					return fmt.Errorf("%s: %w", g.model.m.Name, err)
				}
				layouts[g.model] = l
			}
			s.f.setLayout(g, true, slices.Clone(l))
		}
	}
	return nil
}

// all1g is seven of the smallest instance (1g.10gb on H100): as many of
// the profile with the fewest compute and memory slices as fit.
func all1g(mi *modelInfo) ([]inst, error) {
	var smallest mig.Profile
	for _, pr := range mi.m.Profiles {
		if plain(pr) && (smallest.Name == "" || cmp.Or(cmp.Compare(pr.Slices, smallest.Slices), cmp.Compare(pr.MemorySlices, smallest.MemorySlices)) < 0) {
			smallest = pr
		}
	}
	for n := smallest.MaxCount; n > 0; n-- {
		if l, err := mi.layoutFor(map[string]int{smallest.Name: n}); err == nil {
			return l, nil
		}
	}
	return nil, fmt.Errorf("no layout of %s", smallest.Name)
}

// balanced is mig-parted's all-balanced: two of the smallest 1-slice
// profile, one 2-slice and one 3-slice (2 x 1g.10gb + 2g.20gb + 3g.40gb on
// H100); a model without those takes its geometry with the most distinct
// profiles.
func balanced(mi *modelInfo) ([]inst, error) {
	bySlices := map[int]mig.Profile{}
	for _, pr := range mi.m.Profiles {
		if !plain(pr) {
			continue
		}
		if cur, ok := bySlices[pr.Slices]; !ok || pr.MemorySlices < cur.MemorySlices {
			bySlices[pr.Slices] = pr
		}
	}
	if len(bySlices[1].Name) > 0 && len(bySlices[2].Name) > 0 && len(bySlices[3].Name) > 0 {
		if l, err := mi.layoutFor(map[string]int{bySlices[1].Name: 2, bySlices[2].Name: 1, bySlices[3].Name: 1}); err == nil {
			return l, nil
		}
	}
	best := mi.geoms[0]
	for _, g := range mi.geoms {
		if len(g) > len(best) {
			best = g
		}
	}
	return mi.layoutFor(best)
}

func plain(p mig.Profile) bool {
	for _, c := range p.Name {
		if c == '+' || c == '-' {
			return false
		}
	}
	return true
}

// fallbackPolicy is a static layout with the real fallback webhook
// deciding at admission, in capacity mode with the default policy
// (smaller profiles first, then larger, then a whole GPU), letting
// unsatisfiable pods through to wait.
type fallbackPolicy struct {
	static
	dec *fallback.Decider
	b   *schedview.Builder
}

func newFallback(name string, layout func(*modelInfo) ([]inst, error)) (*fallbackPolicy, error) {
	dec, err := fallback.NewDecider(fallback.Options{
		Policy:          fallback.DefaultPolicy(),
		Mode:            fallback.ModeCapacity,
		OnUnsatisfiable: fallback.UnsatisfiableAllow,
	})
	if err != nil {
		return nil, err
	}
	return &fallbackPolicy{static: static{label: name, layout: layout}, dec: dec, b: schedview.NewBuilder(nil)}, nil
}

func (p *fallbackPolicy) setup(s *sim) error {
	if err := p.static.setup(s); err != nil {
		return err
	}
	for _, n := range s.f.nodes {
		alloc := map[corev1.ResourceName]int64{}
		for _, g := range n.gpus {
			if !g.mig {
				alloc[resourcename.GPU]++
				continue
			}
			for _, in := range g.insts {
				alloc[in.res]++
			}
		}
		p.b.SetNode(schedview.Node{Name: n.name, Labels: n.labels, Allocatable: alloc})
	}
	return nil
}

func (p *fallbackPolicy) arrive(s *sim, pod *simPod) {
	d := p.dec.Decide(pod.k8s, p.b.Snapshot())
	if len(d.Rewrites) == 0 {
		return
	}
	to := d.Rewrites[0].To
	size := 1.0
	if to != resourcename.GPU {
		size = s.f.primary.share(profileOfResource(s.f.primary, to))
	}
	if size < pod.req.size {
		s.m.downgraded++
	}
	pod.req.res, pod.req.size = to, size
}

func (p *fallbackPolicy) started(_ *sim, pod *simPod) {
	p.b.SetPod(pod.name, pod.node.name, map[corev1.ResourceName]int64{pod.req.res: int64(pod.req.count)})
}

func (p *fallbackPolicy) released(_ *sim, pod *simPod) { p.b.DeletePod(pod.name) }

// firstFit carves each pod's instance where it first fits when the pod is
// scheduled and destroys it when the pod ends, never moving anything: the
// DRA DynamicMIG / HAMi model. Every GPU starts with MIG on and empty; a
// GPU with no instance is handed out whole.
type firstFit struct{}

func (firstFit) name() string                     { return PolicyFirstFit }
func (firstFit) carves() bool                     { return true }
func (firstFit) arrive(*sim, *simPod)             {}
func (firstFit) batching() (solver.Cadence, bool) { return solver.Cadence{}, false }
func (firstFit) round(*sim)                       {}
func (firstFit) started(*sim, *simPod)            {}
func (firstFit) released(*sim, *simPod)           {}
func (firstFit) setup(s *sim) error {
	for _, g := range s.f.gpus {
		g.mig = true
	}
	return nil
}

// nos batches pending pods (a window of 60 s, closed early after 10 s
// without a new one) and then plans as nebuly-ai/nos's planner does
// (internal/partitioning/core/planner.go): pods by priority, then smallest
// profile first; the profiles still lacking; nodes in name order, and on
// each node every MIG GPU given, in index order, the known geometry that
// supplies most of what is still lacking next to its devices in use
// (pkg/gpu/mig GPU.UpdateGeometryFor); the node's new layout is kept only
// if a lacking pod that may land on the node then fits there (nos runs the
// scheduler's filters), and the pods that fit stop lacking. It leaves whole
// GPUs alone, knows profile counts but not placements (a geometry the agent
// cannot place around busy instances fails), and weighs neither churn nor
// fragmentation. It starts from the same layout as migflex.
//
// One difference makes it stronger than nos, never weaker: nos computes
// each pod's lacking profile against the free devices of the whole cluster
// separately (ten pods and three free devices: none lacks), here the free
// devices are counted once.
type nos struct {
	static
}

func (p *nos) batching() (solver.Cadence, bool) { return nosCadence, true }

func (p *nos) round(s *sim) {
	pods := s.waiting()
	slices.SortStableFunc(pods, func(a, b *simPod) int {
		return cmp.Or(cmp.Compare(b.prio, a.prio), cmp.Compare(a.req.size, b.req.size), cmp.Compare(a.arrival, b.arrival))
	})
	// What is free now or coming from changes in flight serves the first
	// pods; the others lack their profile.
	free := map[corev1.ResourceName]int{}
	for _, g := range s.f.gpus {
		list := g.insts
		if g.changing {
			list = g.target
		}
		for _, in := range list {
			if in.pod < 0 && (!g.changing || !containsInst(g.insts, in)) {
				free[in.res]++
			}
		}
	}
	var lacking []*simPod
	for _, pod := range pods {
		if pod.req.res == resourcename.GPU {
			continue
		}
		if free[pod.req.res] >= pod.req.count {
			free[pod.req.res] -= pod.req.count
			continue
		}
		lacking = append(lacking, pod)
	}
	for _, n := range s.f.nodes {
		if len(lacking) == 0 {
			return
		}
		if n.changing > 0 {
			continue
		}
		lacking = p.updateNode(s, n, lacking)
	}
}

// nosGeometry is a GPU's new geometry in a node's tentative update.
type nosGeometry struct {
	g      *gpu
	counts map[string]int
}

// updateNode tries a new geometry on the node for the lacking pods, keeps
// it if one of the pods that may land there then fits, and returns the
// pods still lacking.
func (p *nos) updateNode(s *sim, n *node, lacking []*simPod) []*simPod {
	required := map[corev1.ResourceName]int{}
	for _, pod := range lacking {
		required[pod.req.res] += pod.req.count
	}
	var updates []nosGeometry
	devices := map[corev1.ResourceName]int{}
	for _, g := range n.gpus {
		if !g.mig || g.changing {
			continue
		}
		cur := map[string]int{}
		for _, in := range g.insts {
			cur[in.profile]++
		}
		geom, ok := p.bestGeometry(g, required)
		if !ok {
			geom = cur
		} else if !maps.Equal(geom, cur) {
			updates = append(updates, nosGeometry{g: g, counts: geom})
		}
		used := map[string]int{}
		for _, in := range g.insts {
			if in.pod >= 0 {
				used[in.profile]++
			}
		}
		for name, c := range geom {
			res := resourcename.MIG(name)
			if f := c - used[name]; f > 0 {
				devices[res] += f
				if required[res] -= f; required[res] <= 0 {
					delete(required, res)
				}
			}
		}
	}
	if len(updates) == 0 {
		return lacking
	}
	// The scheduler's filters: which lacking pods, in order, fit the node
	// with its new devices (only what it did not have before is new).
	for res := range devices {
		devices[res] -= n.free[res]
	}
	var rest []*simPod
	added := 0
	for _, pod := range lacking {
		if s.eligs.masks[pod.elig][n.idx] && devices[pod.req.res] >= pod.req.count {
			devices[pod.req.res] -= pod.req.count
			added++
			continue
		}
		rest = append(rest, pod)
	}
	if added == 0 {
		return lacking
	}
	for _, u := range updates {
		target, err := agentLayout(u.g, u.counts)
		if err != nil {
			s.m.failedChanges++
			continue
		}
		if err := s.change(u.g, true, target); err != nil {
			s.m.failedChanges++
		}
	}
	return rest
}

// bestGeometry is the known geometry of the GPU's model that supplies most
// of the required profiles, keeping its devices in use; false when none
// supplies any.
func (p *nos) bestGeometry(g *gpu, required map[corev1.ResourceName]int) (map[string]int, bool) {
	used, cur := map[string]int{}, map[string]int{}
	for _, in := range g.insts {
		cur[in.profile]++
		if in.pod >= 0 {
			used[in.profile]++
		}
	}
	var best map[string]int
	bestN := 0
	for _, geom := range g.model.geoms {
		applicable := true
		for name, u := range used {
			if geom[name] < u {
				applicable = false
			}
		}
		if !applicable {
			continue
		}
		total := 0
		for res, q := range required {
			name := profileOfResource(g.model, res)
			if name == "" || cur[name]-used[name] >= q {
				continue
			}
			if add := geom[name] - used[name]; add > 0 {
				total += min(add, q)
			}
		}
		if total > bestN {
			best, bestN = geom, total
		}
	}
	return best, best != nil
}

// agentLayout is where the agent would put counts on the GPU now
// (migconfig's planning from its current layout), refused when that
// destroys an instance in use.
func agentLayout(g *gpu, counts map[string]int) ([]inst, error) {
	cur := mig.GPU{Model: g.model.m.Name, MigCapable: true, MigEnabled: g.mig, MigPending: g.mig, Profiles: g.model.m.Profiles}
	for i, in := range g.insts {
		pr, _ := g.model.profile(in.profile)
		cur.Instances = append(cur.Instances, mig.Instance{Profile: in.profile, Start: in.start, Size: pr.MemorySlices, GIID: uint32(i + 1), HasCI: true, UUID: fmt.Sprint(i)})
	}
	slices.SortFunc(cur.Instances, func(a, b mig.Instance) int { return cmp.Compare(a.Start, b.Start) })
	plan, err := migconfig.MakePlan([]mig.GPU{cur}, []migconfig.Desired{{GPU: 0, MigEnabled: true, Profiles: counts}})
	if err != nil {
		return nil, err
	}
	for _, d := range plan.GPUs[0].Destroy {
		for _, in := range g.insts {
			if in.pod >= 0 && in.start == d.Start && in.profile == d.Profile {
				return nil, fmt.Errorf("would destroy %s@%d in use", in.profile, in.start)
			}
		}
	}
	var out []inst
	for _, pl := range plan.GPUs[0].After() {
		out = append(out, inst{profile: pl.Profile, start: pl.Start, res: resourcename.MIG(pl.Profile), pod: -1})
	}
	return out, nil
}

// migflex runs internal/planner/solver on every batch of pending pods.
type migflex struct {
	static
	pl      *solver.Planner
	mix     *solver.MixTracker
	cadence solver.Cadence
	// preset: the fleet starts from the static layouts
	// (Options.MigflexPreset), not every GPU whole.
	preset bool
	// departures: a pod leaving its devices starts a batch, as in the
	// controller (Options.MigflexIgnoresDepartures).
	departures bool
	// resv is when nodes are reserved for pods waiting for several whole
	// GPUs; held and lapsed are the last decision's (reserve.Decide), and
	// reserved the reservations in force in the fleet, by pod id.
	resv          reserve.Policy
	held, lapsed  []reserve.Reservation
	reserved      map[int]applied
	byKey         map[string]*simPod
	reservedCount int
}

// applied is a reservation in force: its node, and which of the pod's
// reservations it is (a timer for an older one must not end it).
type applied struct {
	n   *node
	gen int
}

func (p *migflex) setup(s *sim) error {
	if p.preset {
		return p.static.setup(s)
	}
	for _, g := range s.f.gpus {
		s.f.setLayout(g, false, nil)
	}
	return nil
}

// batching is the controller's cadence (solver.DefaultCadence unless the
// replay is told otherwise).
func (p *migflex) batching() (solver.Cadence, bool) { return p.cadence, true }

func (p *migflex) arrive(s *sim, pod *simPod) {
	p.mix.Observe(simTime(s.now), pod.k8s)
	p.byKey[pod.k8s.Namespace+"/"+pod.k8s.Name] = pod
}

// started ends the pod's reservation: the agent offers the rest of the
// node's GPUs again once the reserved pod is bound.
func (p *migflex) started(s *sim, pod *simPod) {
	if a, ok := p.reserved[pod.id]; ok {
		if pod.node == a.n {
			s.m.reservationsBound++
		}
		p.release(s, pod.id, false)
	}
}

// release ends the reservation in force for pod id.
func (p *migflex) release(s *sim, id int, lapsed bool) {
	a, ok := p.reserved[id]
	if !ok {
		return
	}
	delete(p.reserved, id)
	s.f.unreserve(a.n)
	s.dirtyAll = true
	if lapsed {
		s.m.reservationsLapsed++
	}
}

// reserve decides the reservations as the controller does
// (reserve.Decide on the round's snapshot), puts them in force in the
// fleet as the agent would (the reserved GPUs' free devices go to their
// pod alone, until it binds or the deadline passes) and shows the
// reserved GPUs to the planner.
func (p *migflex) reserve(s *sim, snap *solver.Snapshot, byName map[string]*node) {
	d := reserve.Decide(p.resv, reserve.Input{Now: snap.Now, Nodes: snap.Nodes, Pending: snap.Pending, Cooldown: p.pl.Policy().Cooldown,
		Held: p.held, Lapsed: p.lapsed})
	p.held, p.lapsed = d.Held, d.Lapsed
	for _, e := range d.Ended {
		if pod := p.byKey[e.Pod]; pod != nil {
			if a, ok := p.reserved[pod.id]; ok && a.n.name == e.Node {
				p.release(s, pod.id, e.Why == reserve.EndedLapsed)
			}
		}
	}
	for _, r := range d.Held {
		pod, n := p.byKey[r.Pod], byName[r.Node]
		if a, ok := p.reserved[pod.id]; ok && a.n == n {
			continue
		}
		p.release(s, pod.id, false)
		p.reservedCount++
		gen := p.reservedCount
		s.f.reserve(n, r.GPUs, pod.id)
		s.dirtyAll = true
		p.reserved[pod.id] = applied{n: n, gen: gen}
		s.m.reservations++
		id := pod.id
		s.push(event{t: simSeconds(r.Deadline), kind: evCall, call: func() {
			if a, ok := p.reserved[id]; ok && a.gen == gen {
				p.release(s, id, true)
			}
		}})
	}
	for i := range snap.Nodes {
		n := byName[snap.Nodes[i].Name]
		for j := range snap.Nodes[i].GPUs {
			snap.Nodes[i].GPUs[j].Reserved = n.gpus[snap.Nodes[i].GPUs[j].Index].reserved
		}
	}
}

// roundsOnDeparture: the controller starts a batch on every change of a
// Node's annotations, and the agent's layout annotation names the pods
// holding each device, so a pod leaving starts a round a batch window
// later, pods waiting or not.
func (p *migflex) roundsOnDeparture() bool { return p.departures }

func (p *migflex) round(s *sim) {
	pods := s.waiting()
	snap := solver.Snapshot{Now: simTime(s.now), Mix: p.mix.Mix(simTime(s.now))}
	for _, mi := range s.f.models {
		snap.Models = append(snap.Models, mi.m)
	}
	slices.SortFunc(snap.Models, func(a, b solver.Model) int { return cmp.Compare(a.Name, b.Name) })
	for _, n := range s.f.nodes {
		pn := solver.Node{Node: schedview.Node{Name: n.name, Labels: n.labels}, OptedIn: true}
		if n.changing > 0 {
			pn.Frozen = "a layout is being applied"
		}
		for _, g := range n.gpus {
			pg := solver.GPU{Index: g.index, Model: g.model.m.Name, MigEnabled: g.mig, InUse: !g.mig && g.whole >= 0}
			if !math.IsInf(g.lastChanged, -1) {
				pg.LastChanged = simTime(g.lastChanged)
			}
			if pg.InUse {
				pg.Run = runs(s.pods[g.whole])
			}
			list := g.insts
			if g.changing {
				// As the controller sees it (internal/planner/plansnap): a layout
				// written but not in place yet shows as done, its node
				// frozen, so that the next round plans pods onto the
				// instances coming rather than changing another GPU.
				pg.MigEnabled, list = g.targetMig, g.target
			}
			for _, in := range list {
				pi := solver.Instance{Profile: in.profile, Start: in.start}
				if id := holder(g, in); id >= 0 {
					pi.InUse = true
					pi.Run = runs(s.pods[id])
				}
				pg.Instances = append(pg.Instances, pi)
			}
			pn.GPUs = append(pn.GPUs, pg)
		}
		snap.Nodes = append(snap.Nodes, pn)
	}
	for _, pod := range pods {
		snap.Pending = append(snap.Pending, pod.k8s)
	}
	byName := map[string]*node{}
	for _, n := range s.f.nodes {
		byName[n.name] = n
	}
	if p.resv.Max > 0 {
		p.reserve(s, &snap, byName)
	}
	res, err := p.pl.Plan(snap)
	if err != nil {
		panic(fmt.Sprintf("replay: planner: %v", err))
	}
	for _, nc := range res.Nodes {
		n := byName[nc.Node]
		for _, gc := range nc.GPUs {
			g := n.gpus[gc.Index]
			var target []inst
			for _, in := range gc.Layout {
				target = append(target, inst{profile: in.Profile, start: in.Start, res: resourcename.MIG(in.Profile), pod: -1})
			}
			if err := s.change(g, gc.MigEnabled, target); err != nil {
				panic(fmt.Sprintf("replay: the planner broke a rule: %v", err))
			}
		}
	}
}

// holder is the pod holding the GPU's instance of in's profile at in's
// start, -1 if none.
func holder(g *gpu, in inst) int {
	for _, x := range g.insts {
		if x.pod >= 0 && x.profile == in.profile && x.start == in.start {
			return x.pod
		}
	}
	return -1
}

// runs is when a running pod started and will end, as the planner's
// snapshot carries them: the replay knows every task's duration (the fill
// experiment's pods never end: no end given).
func runs(p *simPod) *solver.Run {
	r := &solver.Run{Since: simTime(p.start)}
	if !math.IsInf(p.duration, 0) {
		r.Until = simTime(p.start + p.duration)
	}
	return r
}
