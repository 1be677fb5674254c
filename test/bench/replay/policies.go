package replay

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/fallback"
	"github.com/migflex/migflex/internal/mig"
	"github.com/migflex/migflex/internal/migconfig"
	"github.com/migflex/migflex/internal/planner"
)

// Policy names, in report order.
const (
	PolicyStatic1g          = "static-1g"
	PolicyStaticBalanced    = "static-balanced"
	PolicyFallback1g        = "fallback-1g"
	PolicyFallbackBalanced  = "fallback-balanced"
	PolicyFirstFit          = "dra-first-fit"
	PolicyNos               = "nos-greedy"
	PolicyMigflex           = "migflex"
	PolicyFluid             = "fluid-bound"
	defaultMigflexIdle      = 2.0
	defaultMigflexMaxWindow = 10.0
	nosIdle                 = 10.0
	nosMaxWindow            = 60.0
)

// AllPolicies lists every policy the replay knows.
var AllPolicies = []string{
	PolicyStatic1g, PolicyStaticBalanced, PolicyFallback1g, PolicyFallbackBalanced,
	PolicyFirstFit, PolicyNos, PolicyMigflex, PolicyFluid,
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
	case PolicyNos:
		return &nos{static: static{label: name, layout: balanced}}, nil
	case PolicyMigflex:
		pl, err := planner.New(cfg.planner)
		if err != nil {
			return nil, err
		}
		return &migflex{static: static{label: name, layout: balanced}, pl: pl, mix: planner.NewMixTracker(cfg.mixHalfLife)}, nil
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

func (p *static) name() string                                 { return p.label }
func (p *static) carves() bool                                 { return false }
func (p *static) arrive(*sim, *simPod)                         {}
func (p *static) batching() (idle, maxWindow float64, ok bool) { return 0, 0, false }
func (p *static) round(*sim)                                   {}
func (p *static) started(*sim, *simPod)                        {}
func (p *static) released(*sim, *simPod)                       {}

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
	b   *fallback.Builder
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
	return &fallbackPolicy{static: static{label: name, layout: layout}, dec: dec, b: fallback.NewBuilder(nil)}, nil
}

func (p *fallbackPolicy) setup(s *sim) error {
	if err := p.static.setup(s); err != nil {
		return err
	}
	for _, n := range s.f.nodes {
		alloc := map[corev1.ResourceName]int64{}
		for _, g := range n.gpus {
			if !g.mig {
				alloc[planner.ResourceGPU]++
				continue
			}
			for _, in := range g.insts {
				alloc[in.res]++
			}
		}
		p.b.SetNode(fallback.Node{Name: n.name, Labels: n.labels, Allocatable: alloc})
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
	if to != planner.ResourceGPU {
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

func (firstFit) name() string                                 { return PolicyFirstFit }
func (firstFit) carves() bool                                 { return true }
func (firstFit) arrive(*sim, *simPod)                         {}
func (firstFit) batching() (idle, maxWindow float64, ok bool) { return 0, 0, false }
func (firstFit) round(*sim)                                   {}
func (firstFit) started(*sim, *simPod)                        {}
func (firstFit) released(*sim, *simPod)                       {}
func (firstFit) setup(s *sim) error {
	for _, g := range s.f.gpus {
		g.mig = true
	}
	return nil
}

// nos batches pending pods (a window of 60 s, closed early after 10 s
// without a new one) and then, as nebuly-ai/nos does, walks the nodes in
// name order and gives each MIG GPU the known geometry that supplies most
// of the profiles still lacking (pods by priority, then smallest profile
// first). It leaves whole GPUs alone, knows profile counts but not
// placements (a geometry the agent cannot place around busy instances
// fails), and weighs neither churn nor fragmentation. It starts from the
// same layout as migflex.
type nos struct {
	static
}

func (p *nos) batching() (idle, maxWindow float64, ok bool) { return nosIdle, nosMaxWindow, true }

func (p *nos) round(s *sim) {
	pods := s.waiting()
	slices.SortStableFunc(pods, func(a, b *simPod) int {
		return cmp.Or(cmp.Compare(b.prio, a.prio), cmp.Compare(a.req.size, b.req.size), cmp.Compare(a.arrival, b.arrival))
	})
	lacking := map[corev1.ResourceName]int{}
	for _, pod := range pods {
		if pod.req.res != planner.ResourceGPU {
			lacking[pod.req.res] += pod.req.count
		}
	}
	// What is free now or coming from changes in flight.
	for _, g := range s.f.gpus {
		list := g.insts
		if g.changing {
			list = g.target
		}
		for _, in := range list {
			if in.pod < 0 && (!g.changing || !containsInst(g.insts, in)) {
				lacking[in.res]--
			}
		}
	}
	for r, n := range lacking {
		if n <= 0 {
			delete(lacking, r)
		}
	}
	for _, n := range s.f.nodes {
		if len(lacking) == 0 {
			return
		}
		if n.changing > 0 {
			continue
		}
		for _, g := range n.gpus {
			if len(lacking) == 0 {
				return
			}
			if !g.mig || g.changing {
				continue
			}
			p.updateGeometry(s, g, lacking)
		}
	}
}

func (p *nos) updateGeometry(s *sim, g *gpu, lacking map[corev1.ResourceName]int) {
	used, cur := map[string]int{}, map[string]int{}
	for _, in := range g.insts {
		cur[in.profile]++
		if in.pod >= 0 {
			used[in.profile]++
		}
	}
	provides := func(geom map[string]int) (int, map[corev1.ResourceName]int) {
		total, by := 0, map[corev1.ResourceName]int{}
		for res, q := range lacking {
			name := profileOfResource(g.model, res)
			if name == "" {
				continue
			}
			free := cur[name] - used[name]
			if free >= q {
				continue
			}
			if add := geom[name] - cur[name]; add > 0 {
				n := min(add, q-free)
				total += n
				by[res] = n
			}
		}
		return total, by
	}
	var best map[string]int
	var bestBy map[corev1.ResourceName]int
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
		if n, by := provides(geom); n > bestN {
			best, bestBy, bestN = geom, by, n
		}
	}
	if best == nil {
		return
	}
	target, err := agentLayout(g, best)
	if err != nil {
		s.m.failedChanges++
		return
	}
	if err := s.change(g, true, target); err != nil {
		s.m.failedChanges++
		return
	}
	for res, n := range bestBy {
		if lacking[res] -= n; lacking[res] <= 0 {
			delete(lacking, res)
		}
	}
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
		out = append(out, inst{profile: pl.Profile, start: pl.Start, res: planner.MigResource(pl.Profile), pod: -1})
	}
	return out, nil
}

// migflex runs internal/planner on every batch of pending pods.
type migflex struct {
	static
	pl  *planner.Planner
	mix *planner.MixTracker
}

func (p *migflex) batching() (idle, maxWindow float64, ok bool) {
	return defaultMigflexIdle, defaultMigflexMaxWindow, true
}

func (p *migflex) arrive(s *sim, pod *simPod) { p.mix.Observe(simTime(s.now), pod.k8s) }

func (p *migflex) round(s *sim) {
	pods := s.waiting()
	if len(pods) == 0 {
		return
	}
	snap := planner.Snapshot{Now: simTime(s.now), Mix: p.mix.Mix(simTime(s.now))}
	for _, mi := range s.f.models {
		snap.Models = append(snap.Models, mi.m)
	}
	slices.SortFunc(snap.Models, func(a, b planner.Model) int { return cmp.Compare(a.Name, b.Name) })
	for _, n := range s.f.nodes {
		pn := planner.Node{Node: fallback.Node{Name: n.name, Labels: n.labels}, OptedIn: true}
		if n.changing > 0 {
			pn.Frozen = "a layout is being applied"
		}
		for _, g := range n.gpus {
			pg := planner.GPU{Index: g.index, Model: g.model.m.Name, MigEnabled: g.mig, InUse: !g.mig && g.whole >= 0}
			if !math.IsInf(g.lastChanged, -1) {
				pg.LastChanged = simTime(g.lastChanged)
			}
			for _, in := range g.insts {
				pg.Instances = append(pg.Instances, planner.Instance{Profile: in.profile, Start: in.start, InUse: in.pod >= 0})
			}
			pn.GPUs = append(pn.GPUs, pg)
		}
		snap.Nodes = append(snap.Nodes, pn)
	}
	for _, pod := range pods {
		snap.Pending = append(snap.Pending, pod.k8s)
	}
	res, err := p.pl.Plan(snap)
	if err != nil {
		panic(fmt.Sprintf("replay: planner: %v", err))
	}
	byName := map[string]*node{}
	for _, n := range s.f.nodes {
		byName[n.name] = n
	}
	for _, nc := range res.Nodes {
		n := byName[nc.Node]
		for _, gc := range nc.GPUs {
			g := n.gpus[gc.Index]
			var target []inst
			for _, in := range gc.Layout {
				target = append(target, inst{profile: in.Profile, start: in.Start, res: planner.MigResource(in.Profile), pod: -1})
			}
			if err := s.change(g, gc.MigEnabled, target); err != nil {
				panic(fmt.Sprintf("replay: the planner broke a rule: %v", err))
			}
		}
	}
	until := s.now + s.cfg.latency
	for i, pp := range res.Pods {
		if pp.Action == planner.ActionReshape {
			pods[i].plannedUntil = until
		}
	}
}
