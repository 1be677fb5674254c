package solver

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"

	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/domain/schedview"
)

// Planner decides rounds. It keeps nothing between rounds but the
// per-model layout tables (shared by all planners) and is safe for
// concurrent use.
type Planner struct {
	pol Policy
}

// New returns a planner for the policy.
func New(pol Policy) (*Planner, error) {
	if err := pol.Validate(); err != nil {
		return nil, fmt.Errorf("invalid planner policy: %w", err)
	}
	return &Planner{pol: pol}, nil
}

// Policy returns the planner's policy.
func (p *Planner) Policy() Policy { return p.pol }

// Plan decides one round: which GPUs to repartition, to what, and for every
// pending pod where it will run or why it cannot. It fails only on a
// malformed snapshot (a node or GPU given twice, a nil pod).
func (p *Planner) Plan(snap Snapshot) (Result, error) {
	r, err := p.newRound(snap, false)
	if err != nil {
		return Result{}, err
	}
	order := make([]int, len(r.pods))
	for i := range order {
		order[i] = i
	}
	// Priority first, then age, then name: the order in which pods claim
	// capacity, so that no pod is served at the cost of one before it.
	slices.SortStableFunc(order, func(a, b int) int {
		pa, pb := &r.pods[a], &r.pods[b]
		return cmp.Or(cmp.Compare(pb.priority, pa.priority), pa.created.Compare(pb.created), cmp.Compare(pa.key, pb.key))
	})
	for _, i := range order {
		r.place(&r.pods[i])
	}
	r.reclaim()
	return r.result(), nil
}

// round is the working state of one Plan call.
type round struct {
	pol  Policy
	now  time.Time
	tabs []*table
	// models maps a model name to its index in tabs.
	models map[string]int32

	nodes  []nodeState
	byName map[string]int32
	gpus   []gpuState
	fb     *schedview.Snapshot
	// groups[g] are the node indices of schedview group g.
	groups []groupState

	res resources
	mix mixWeights

	classes  map[classKey]int32
	keys     []classKey
	opts     [2][]option // [capReached][class*nres+res]
	touched  int
	capped   bool
	keepMemo map[keepKey]uint64
	bodies   map[bodyKey]string

	pods     []podState
	replicas replicaState
	warnings []string
	diag     map[string]string
	// coolEnds is groupCoolEnd's answer by group and class.
	coolEnds map[[2]int32]time.Time
	needIDs  map[string]int32
	needList [][]need
	// failed are the pods' needs and places that found no way this round.
	failed map[failKey]bool
}

type groupState struct {
	nodes []int32
	// heaps[res] is built on first use.
	heaps map[int32]*lazyHeap
	// nodeHeaps[needs] likewise, for pods that need several devices.
	nodeHeaps map[int32]*lazyHeap
	// classCount counts the group's GPUs by class, for explanations.
	classCount map[int32]int32
	gpus       int
}

type nodeState struct {
	n    *Node
	name string
	// block is why the node's GPUs cannot change (blockNone when they can).
	block blockReason
	gpus  []int32
	group int32
	// idle counts the GPUs that are, or can be made, an idle whole GPU;
	// wholeFree adds those held whole by a pod, which will be whole and
	// idle again when it ends (the cost model's node term).
	idle      int
	wholeFree int
	ver       uint32
}

type gpuState struct {
	node int32
	g    *GPU
	// key is the GPU's state as the cost model sees it; class its id.
	key   classKey
	class int32
	ver   uint32
	busy  uint64 // instances in use at the snapshot
	// initial is every instance at the snapshot.
	initial uint64
	// toWhole: this round disables MIG to give the GPU whole to a pod,
	// or, reclaimed, because nothing uses its instances.
	toWhole   bool
	reclaimed bool
	pods      []string
}

type blockReason uint8

const (
	blockNone blockReason = iota
	blockCap              // only in explanations: the round's GPU cap
	blockCooldown
	blockFrozen
	blockOptOut
	blockUnknown // layout or model the planner does not understand
)

type podState struct {
	pod      *corev1.Pod
	key      string
	idx      int
	priority int32
	created  time.Time
	// needs are the devices the pod needs on one node, as (resource,
	// count), larger devices first.
	needs []need
	plan  PodPlan
}

type need struct {
	res   int32
	count int64
}

// resources numbers the resource names a round deals with.
type resources struct {
	ids   map[corev1.ResourceName]int32
	names []corev1.ResourceName
	// prof[tab][res] is the profile index serving res on table tab, -1 if
	// none.
	prof [][]int16
	// size is the memory share of one device (1 for a whole GPU), the
	// largest over models; used to order needs.
	size []float64
}

func (rs *resources) id(r corev1.ResourceName) int32 {
	if id, ok := rs.ids[r]; ok {
		return id
	}
	id := int32(len(rs.names))
	rs.ids[r] = id
	rs.names = append(rs.names, r)
	return id
}

func (p *Planner) newRound(snap Snapshot, allResources bool) (*round, error) {
	r := &round{
		pol:      p.pol,
		now:      snap.Now,
		models:   map[string]int32{},
		byName:   make(map[string]int32, len(snap.Nodes)),
		classes:  map[classKey]int32{},
		keepMemo: map[keepKey]uint64{},
		bodies:   map[bodyKey]string{},
		diag:     map[string]string{},
		needIDs:  map[string]int32{},
		failed:   map[failKey]bool{},
		res:      resources{ids: map[corev1.ResourceName]int32{}},
	}
	r.res.id(resourcename.GPU) // id 0
	for _, m := range snap.Models {
		if _, dup := r.models[m.Name]; dup {
			return nil, fmt.Errorf("model %q given twice", m.Name)
		}
		t, err := tables.get(m)
		if err != nil {
			// The model's GPUs are left alone; planning goes on for the rest.
			r.warnings = append(r.warnings, fmt.Sprintf("model %s: %v", m.Name, err))
			r.models[m.Name] = -1
			continue
		}
		r.models[m.Name] = int32(len(r.tabs))
		r.tabs = append(r.tabs, t)
	}
	// A round prices only the resources its pods ask for (addPods adds
	// them); a Supplier answers any pod, so it knows them all.
	if allResources {
		for _, t := range r.tabs {
			for _, res := range t.resources {
				r.res.id(res)
			}
		}
	}
	if err := r.addNodes(snap.Nodes); err != nil {
		return nil, err
	}
	r.addReplicas()
	if err := r.addPods(snap.Pending); err != nil {
		return nil, err
	}
	r.buildResourceTables()
	r.mix = r.mixFrom(snap.Mix)
	for i := range r.nodes {
		r.refreshNode(int32(i))
	}
	for gi := range r.gpus {
		g := &r.gpus[gi]
		g.class = r.classOf(int32(gi))
		gs := &r.groups[r.nodes[g.node].group]
		gs.classCount[g.class]++
	}
	return r, nil
}

func (r *round) addNodes(nodes []Node) error {
	fbNodes := make([]schedview.Node, 0, len(nodes))
	total := 0
	for i := range nodes {
		total += len(nodes[i].GPUs)
	}
	r.gpus = make([]gpuState, 0, total)
	r.nodes = make([]nodeState, 0, len(nodes))
	sorted := make([]*Node, len(nodes))
	for i := range nodes {
		sorted[i] = &nodes[i]
	}
	// Name order, so that ties go to the first node by name whatever the
	// caller's order.
	slices.SortFunc(sorted, func(a, b *Node) int { return cmp.Compare(a.Name, b.Name) })
	for i, n := range sorted {
		if n.Name == "" {
			return fmt.Errorf("node %d has no name", i)
		}
		if i > 0 && sorted[i-1].Name == n.Name {
			return fmt.Errorf("node %q given twice", n.Name)
		}
		ns := nodeState{n: n, name: n.Name}
		switch {
		case !n.OptedIn:
			ns.block = blockOptOut
		case n.Frozen != "":
			ns.block = blockFrozen
		}
		r.byName[n.Name] = int32(i)
		for gi := range n.GPUs {
			g := &n.GPUs[gi]
			for _, prev := range n.GPUs[:gi] {
				if prev.Index == g.Index {
					return fmt.Errorf("node %q: GPU %d given twice", n.Name, g.Index)
				}
			}
			ns.gpus = append(ns.gpus, int32(len(r.gpus)))
			r.gpus = append(r.gpus, r.newGPU(int32(i), n, g, ns.block))
		}
		r.nodes = append(r.nodes, ns)
		fbNodes = append(fbNodes, schedview.Node{Name: n.Name, Labels: n.Labels, Taints: n.Taints, Unschedulable: n.Unschedulable, API: n.API})
	}
	r.fb = schedview.NewSnapshot(fbNodes)
	r.groups = make([]groupState, r.fb.Groups())
	for gi := range r.groups {
		gs := &r.groups[gi]
		gs.heaps = map[int32]*lazyHeap{}
		gs.nodeHeaps = map[int32]*lazyHeap{}
		gs.classCount = map[int32]int32{}
		for _, name := range r.fb.GroupNodes(gi) {
			ni := r.byName[name]
			gs.nodes = append(gs.nodes, ni)
			gs.gpus += len(r.nodes[ni].gpus)
			r.nodes[ni].group = int32(gi)
		}
	}
	return nil
}

func (r *round) newGPU(node int32, n *Node, g *GPU, block blockReason) gpuState {
	s := gpuState{node: node, g: g}
	k := classKey{tab: -1, migEnabled: g.MigEnabled, block: block, nodeIdle: -1, nodeWhole: -1, reserved: g.Reserved}
	leave := func(format string, args ...any) gpuState {
		r.warnings = append(r.warnings, fmt.Sprintf("node %s GPU %d: ", n.Name, g.Index)+fmt.Sprintf(format, args...))
		k.block, k.whole, k.reshapable = blockUnknown, true, false
		s.key = k
		return s
	}
	if ti, ok := r.models[g.Model]; ok && ti >= 0 {
		k.tab = ti
	}
	if !g.MigEnabled && len(g.Instances) > 0 {
		return leave("instances listed with MIG disabled; GPU left alone")
	}
	if k.tab < 0 {
		if g.MigEnabled {
			return leave("no MIG profile table for model %q; GPU left alone", g.Model)
		}
		// Not MIG capable: it serves whole-GPU pods only.
		k.block, k.whole = blockUnknown, g.InUse
		s.key = k
		return s
	}
	t := r.tabs[k.tab]
	var set, busy uint64
	for _, in := range g.Instances {
		x := t.find(in.Profile, in.Start)
		if x < 0 || set&(1<<x) != 0 {
			return leave("instance %s at %d is not a placement of %s; GPU left alone", in.Profile, in.Start, t.model)
		}
		set |= 1 << x
		if in.InUse {
			busy |= 1 << x
		}
	}
	if _, ok := t.layoutOf(set); !ok {
		return leave("current layout is not valid for %s; GPU left alone", t.model)
	}
	if n.Dynamic {
		// Every instance of a dynamic GPU is a claim's, made at Prepare:
		// one not in use is still no free device the planner may hand
		// out or destroy.
		busy = set
	}
	k.occ, _ = t.layoutOf(busy)
	k.free = set &^ busy
	k.whole = !g.MigEnabled && g.InUse
	k.reshapable = block != blockOptOut
	if n.Dynamic {
		k.dynamic, k.reshapable, k.block = true, true, blockNone
		s.key, s.busy, s.initial = k, busy, set
		return s
	}
	if k.block == blockNone && r.pol.Cooldown > 0 && !g.LastChanged.IsZero() && r.now.Sub(g.LastChanged) < r.pol.Cooldown {
		k.block = blockCooldown
	}
	s.key, s.busy, s.initial = k, busy, set
	return s
}

func (r *round) addPods(pods []*corev1.Pod) error {
	r.pods = make([]podState, len(pods))
	for i, pod := range pods {
		if pod == nil {
			return fmt.Errorf("pending pod %d is nil", i)
		}
		ps := podState{
			pod:      pod,
			key:      pod.Namespace + "/" + pod.Name,
			idx:      i,
			priority: corev1helpers.PodPriority(pod),
			created:  pod.CreationTimestamp.Time,
		}
		ps.plan = PodPlan{Pod: ps.key, Action: ActionNone}
		for res, n := range schedview.Devices(pod) {
			ps.needs = append(ps.needs, need{res: r.res.id(res), count: n})
		}
		r.pods[i] = ps
	}
	return nil
}

func (r *round) buildResourceTables() {
	n := len(r.res.names)
	r.res.size = make([]float64, n)
	r.res.size[0] = 1
	r.res.prof = make([][]int16, len(r.tabs))
	for ti, t := range r.tabs {
		row := make([]int16, n)
		for ri, name := range r.res.names {
			p := t.profileOf(name)
			row[ri] = int16(p)
			if p >= 0 {
				r.res.size[ri] = max(r.res.size[ri], t.size[p])
			}
		}
		r.res.prof[ti] = row
	}
	for i := range r.pods {
		r.sortNeeds(r.pods[i].needs)
	}
	for i := range r.opts {
		r.opts[i] = nil
	}
}

// sortNeeds orders needs biggest device first.
func (r *round) sortNeeds(needs []need) {
	slices.SortFunc(needs, func(a, b need) int {
		return cmp.Or(cmp.Compare(r.res.size[b.res], r.res.size[a.res]), cmp.Compare(r.res.names[a.res], r.res.names[b.res]))
	})
}

// refreshNode recounts the node's idle GPUs and its whole ones.
func (r *round) refreshNode(ni int32) {
	n := &r.nodes[ni]
	n.idle, n.wholeFree = 0, 0
	for _, gi := range n.gpus {
		k := r.gpus[gi].key
		if k.servesWhole() {
			n.idle++
		}
		if k.wholePotential() {
			n.wholeFree++
		}
	}
}
