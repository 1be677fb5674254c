package solver

import (
	"container/heap"
	"fmt"
	"strconv"
	"strings"
)

// lazyHeap holds candidates (GPUs, or nodes for pods that need several
// devices) cheapest first, ties to the lower index: node name order, then
// GPU index. An entry goes stale when its candidate changes (ver) and is
// dropped when met; reaching the round's cap only raises costs, so an entry
// priced before it is priced again when met and pushed back if it rose.
type lazyHeap struct {
	e []heapEntry
}

type heapEntry struct {
	cost   float64
	id     int32
	ver    uint32
	capped bool // priced with the cap reached
}

func (h *lazyHeap) Len() int { return len(h.e) }
func (h *lazyHeap) Less(i, j int) bool {
	a, b := h.e[i], h.e[j]
	return a.cost < b.cost || a.cost == b.cost && a.id < b.id
}
func (h *lazyHeap) Swap(i, j int) { h.e[i], h.e[j] = h.e[j], h.e[i] }
func (h *lazyHeap) Push(x any)    { h.e = append(h.e, x.(heapEntry)) }
func (h *lazyHeap) Pop() any {
	x := h.e[len(h.e)-1]
	h.e = h.e[:len(h.e)-1]
	return x
}

// top returns the cheapest live entry; price reprices an entry (ok false:
// the candidate can no longer serve). ver is the candidate's version.
func (h *lazyHeap) top(r *round, ver func(id int32) uint32, price func(id int32) (float64, bool)) (int32, bool) {
	for h.Len() > 0 {
		e := h.e[0]
		if ver(e.id) != e.ver {
			heap.Pop(h)
			continue
		}
		if e.capped != r.capped {
			cost, ok := price(e.id)
			if !ok {
				heap.Pop(h)
				continue
			}
			h.e[0].capped = r.capped
			if cost != e.cost {
				h.e[0].cost = cost
				heap.Fix(h, 0)
				continue
			}
		}
		return e.id, true
	}
	return -1, false
}

// gpuHeap returns group g's heap of GPUs for one device of res, built on
// first use.
func (r *round) gpuHeap(g int32, res int32) *lazyHeap {
	gs := &r.groups[g]
	if h := gs.heaps[res]; h != nil {
		return h
	}
	h := &lazyHeap{e: make([]heapEntry, 0, gs.gpus)}
	for _, ni := range gs.nodes {
		for _, gi := range r.nodes[ni].gpus {
			if o := r.option(r.gpus[gi].class, res); o.state == optOK {
				h.e = append(h.e, heapEntry{cost: o.cost, id: gi, ver: r.gpus[gi].ver, capped: r.capped})
			}
		}
	}
	heap.Init(h)
	gs.heaps[res] = h
	return h
}

// nodeHeap returns group g's heap of nodes for a pod's needs (several
// devices on one node), built on first use.
func (r *round) nodeHeap(g int32, needs int32) *lazyHeap {
	gs := &r.groups[g]
	if h := gs.nodeHeaps[needs]; h != nil {
		return h
	}
	h := &lazyHeap{}
	for _, ni := range gs.nodes {
		if cost, ok := r.nodeCost(ni, r.needList[needs]); ok {
			h.e = append(h.e, heapEntry{cost: cost, id: ni, ver: r.nodes[ni].ver, capped: r.capped})
		}
	}
	heap.Init(h)
	gs.nodeHeaps[needs] = h
	return h
}

func (r *round) bestInGPUHeap(h *lazyHeap, res int32) (int32, *option) {
	gi, ok := h.top(r,
		func(id int32) uint32 { return r.gpus[id].ver },
		func(id int32) (float64, bool) {
			o := r.option(r.gpus[id].class, res)
			return o.cost, o.state == optOK
		})
	if !ok {
		return -1, nil
	}
	return gi, r.option(r.gpus[gi].class, res)
}

func (r *round) bestInNodeHeap(h *lazyHeap, needs int32) (int32, float64) {
	ni, ok := h.top(r,
		func(id int32) uint32 { return r.nodes[id].ver },
		func(id int32) (float64, bool) { return r.nodeCost(id, r.needList[needs]) })
	if !ok {
		return -1, 0
	}
	return ni, h.e[0].cost
}

// eligibility is where a pod may land: whole groups, and single nodes when
// its constraints name nodes.
type eligibility struct {
	groups []int32
	nodes  []int32
	key    string
}

func (r *round) eligible(ps *podState) eligibility {
	var e eligibility
	var key strings.Builder
	r.fb.EligibleGroups(ps.pod, func(group int, members []string) {
		if members == nil {
			e.groups = append(e.groups, int32(group))
			key.WriteString(strconv.Itoa(group))
			key.WriteByte(';')
			return
		}
		for _, m := range members {
			e.nodes = append(e.nodes, r.byName[m])
			key.WriteString(m)
			key.WriteByte(',')
		}
		key.WriteByte(';')
	})
	e.key = key.String()
	return e
}

// place finds where a pod goes and commits it, or explains why it cannot.
func (r *round) place(ps *podState) {
	if r.placeOnReplicas(ps) {
		return
	}
	ni, as, why := r.find(ps)
	if as == nil {
		ps.plan.Reason = why()
		if r.pol.HoldForMultiGPU {
			r.holdFor(ps)
		}
		return
	}
	r.commit(ps, ni, as)
}

// holdFor keeps new MIG instances, for the rest of the round, off every
// node that could hold ps, a pod that waits for several whole GPUs on one
// node, once the pods on its whole GPUs and its idle MIG GPUs are gone:
// look-ahead on pending demand. Pods after it in the round's order (lower
// priority, or younger) then get MIG instances elsewhere, or wait, rather
// than put a MIG GPU on a node the waiting pod needs whole: a node that
// hosts MIG pods can hold no multi-GPU pod until every one of them ends,
// and the scheduler keeps giving the free instances left there to more.
// Free instances that exist still serve: they are MIG already.
func (r *round) holdFor(ps *podState) {
	if len(ps.needs) != 1 || ps.needs[0].res != 0 || ps.needs[0].count < 2 {
		return
	}
	el := r.eligible(ps)
	need := int(ps.needs[0].count)
	hold := func(ni int32) {
		n := &r.nodes[ni]
		if len(n.gpus) < need || n.block != blockNone {
			return
		}
		could := 0
		for _, gi := range n.gpus {
			if k := r.gpus[gi].key; k.wholePotential() || k.migEnabled && k.occ == 0 && k.reshapable && !k.dynamic {
				could++
			}
		}
		if could < need {
			return
		}
		for _, gi := range n.gpus {
			if k := r.gpus[gi].key; !k.held {
				k.held = true
				r.setKey(gi, k)
			}
		}
	}
	for _, g := range el.groups {
		for _, ni := range r.groups[g].nodes {
			hold(ni)
		}
	}
	for _, ni := range el.nodes {
		hold(ni)
	}
}

// find returns the node and devices for a pod, changing nothing; when there
// are none, why explains (lazily: explanations cost a scan).
func (r *round) find(ps *podState) (int32, []assignment, func() string) {
	if len(ps.needs) == 0 {
		return -1, nil, func() string { return "the pod asks for no GPU" }
	}
	el := r.eligible(ps)
	if len(el.groups) == 0 && len(el.nodes) == 0 {
		return -1, nil, func() string {
			return fmt.Sprintf("no node it may be scheduled to (nodeSelector, affinity, taints, cordon) among the %d nodes", len(r.nodes))
		}
	}
	// A pod that needs what an earlier pod of the round needed, where that
	// one could land, fails as it did: placing pods only uses capacity up,
	// and reaching the round's GPU cap only takes ways away. At
	// saturation most of the queue is such pods.
	fk := failKey{el.key, r.needsID(ps.needs)}
	if r.failed[fk] && !noFailMemo {
		return -1, nil, func() string { return r.explain(el, ps) }
	}
	if len(ps.needs) == 1 && ps.needs[0].count == 1 {
		if gi, o := r.bestGPU(el, ps.needs[0].res); gi >= 0 {
			return r.gpus[gi].node, []assignment{{gpu: gi, res: ps.needs[0].res, opt: *o}}, nil
		}
	} else if ni := r.bestNode(el, ps); ni >= 0 {
		if as := r.assignNode(ni, ps.needs); as != nil {
			return ni, as, nil
		}
	}
	r.failed[fk] = true
	return -1, nil, func() string { return r.explain(el, ps) }
}

// noFailMemo turns the shortcut off, for the test that checks it changes
// no result.
var noFailMemo bool

// failKey is where a pod may land and what it needs.
type failKey struct {
	elig  string
	needs int32
}

// bestGPU is the cheapest GPU of the pod's nodes for one device of res.
func (r *round) bestGPU(el eligibility, res int32) (int32, *option) {
	best, bestOpt := int32(-1), (*option)(nil)
	better := func(gi int32, o *option) bool {
		return best < 0 || o.cost < bestOpt.cost || o.cost == bestOpt.cost && gi < best
	}
	for _, g := range el.groups {
		if gi, o := r.bestInGPUHeap(r.gpuHeap(g, res), res); gi >= 0 && better(gi, o) {
			best, bestOpt = gi, o
		}
	}
	for _, ni := range el.nodes {
		for _, gi := range r.nodes[ni].gpus {
			if o := r.option(r.gpus[gi].class, res); o.state == optOK && better(gi, o) {
				best, bestOpt = gi, o
			}
		}
	}
	return best, bestOpt
}

// bestNode is the cheapest node for a pod that needs several devices on one
// node.
func (r *round) bestNode(el eligibility, ps *podState) int32 {
	needs := r.needsID(ps.needs)
	best, bestCost := int32(-1), 0.0
	for _, g := range el.groups {
		if ni, cost := r.bestInNodeHeap(r.nodeHeap(g, needs), needs); ni >= 0 && (best < 0 || cost < bestCost || cost == bestCost && ni < best) {
			best, bestCost = ni, cost
		}
	}
	for _, ni := range el.nodes {
		if cost, ok := r.nodeCost(ni, ps.needs); ok && (best < 0 || cost < bestCost || cost == bestCost && ni < best) {
			best, bestCost = ni, cost
		}
	}
	return best
}

// nodeCost prices needs on one node: each device goes, biggest first, to
// the node's cheapest GPU given the ones placed before it.
func (r *round) nodeCost(ni int32, needs []need) (float64, bool) {
	n := &r.nodes[ni]
	for _, nd := range needs {
		if nd.res == 0 && n.idle < int(nd.count) {
			return 0, false
		}
	}
	as := r.assignNode(ni, needs)
	if as == nil {
		return 0, false
	}
	cost := 0.0
	for _, a := range as {
		cost += a.opt.cost
	}
	return cost, true
}

func (r *round) needsID(needs []need) int32 {
	k := needsString(needs)
	id, ok := r.needIDs[k]
	if !ok {
		id = int32(len(r.needList))
		r.needIDs[k] = id
		r.needList = append(r.needList, needs)
	}
	return id
}

func needsString(needs []need) string {
	var b strings.Builder
	for _, n := range needs {
		fmt.Fprintf(&b, "%d:%d,", n.res, n.count)
	}
	return b.String()
}

// assignment is one device placed on one GPU.
type assignment struct {
	gpu int32
	res int32
	opt option
	// fixed: opt is the placement to commit, found by assignJoint, not
	// the GPU's cheapest option for res, which commit takes otherwise.
	fixed bool
}

// assignNode places needs on node ni, device by device, on a scratch copy
// of its GPUs' classes; nil when they do not all fit. The options are
// computed against the round's state, so commit must follow at once.
func (r *round) assignNode(ni int32, needs []need) []assignment {
	n := &r.nodes[ni]
	var keyBuf [8]classKey
	var classBuf [8]int32
	keys, classes := keyBuf[:0], classBuf[:0]
	for _, gi := range n.gpus {
		g := &r.gpus[gi]
		keys, classes = append(keys, g.key), append(classes, g.class)
	}
	savedCapped, savedTouched := r.capped, r.touched
	defer func() { r.capped, r.touched = savedCapped, savedTouched }()
	var out []assignment
	for _, nd := range needs {
		for range nd.count {
			bi := -1
			var bo *option
			for i, c := range classes {
				if o := r.option(c, nd.res); o.state == optOK && (bi < 0 || o.cost < bo.cost) {
					bi, bo = i, o
				}
			}
			if bi < 0 {
				// One by one, each device at its cheapest placement, may
				// miss a fit on a dynamic node that a joint search finds.
				return r.assignJoint(ni, needs)
			}
			out = append(out, assignment{gpu: n.gpus[bi], res: nd.res, opt: *bo})
			if bo.touch {
				r.touched++
				r.capped = r.pol.MaxGPUsPerRound > 0 && r.touched >= r.pol.MaxGPUsPerRound
			}
			keys[bi] = after(keys[bi], nd.res, bo)
			classes[bi] = r.intern(keys[bi])
			// The node's counts may have moved: so did the class of every
			// idle GPU left.
			idle, whole := 0, 0
			for _, k := range keys {
				if k.servesWhole() {
					idle++
				}
				if k.wholePotential() {
					whole++
				}
			}
			for i, k := range keys {
				if k.servesWhole() && (int(k.nodeIdle) != idle || int(k.nodeWhole) != whole) {
					k.nodeIdle, k.nodeWhole = int8(idle), int8(whole)
					keys[i], classes[i] = k, r.intern(k)
				}
			}
		}
	}
	return out
}

// commit applies the assignments of one pod on node ni.
func (r *round) commit(ps *podState, ni int32, as []assignment) {
	ps.plan.Node = r.nodes[ni].name
	ps.plan.Action = ActionExisting
	for _, a := range as {
		g := &r.gpus[a.gpu]
		// assignNode priced the same GPU in the same state, up to the
		// node's idle count, which moves no placement.
		o := r.option(g.class, a.res)
		if a.fixed {
			o = &a.opt
		}
		if o.state != optOK {
			panic(fmt.Sprintf("planner: option for %s on node %s GPU %d vanished", r.res.names[a.res], ps.plan.Node, g.g.Index))
		}
		if o.touch {
			r.touched++
			if r.pol.MaxGPUsPerRound > 0 && r.touched >= r.pol.MaxGPUsPerRound {
				r.capped = true
			}
		}
		if !o.existing {
			ps.plan.Action = ActionReshape
		}
		d := Device{GPU: g.g.Index, Resource: r.res.names[a.res]}
		if o.x >= 0 {
			t := r.tabs[g.key.tab]
			d.Start = t.xs[o.x].start
			if o.existing {
				r.tookDevice(ni, g.g.Index, t.profiles[t.xs[o.x].prof].Name, d.Start)
			}
		} else if g.key.migEnabled {
			g.toWhole = true
		} else if o.existing {
			r.tookDevice(ni, g.g.Index, "", -1)
		}
		ps.plan.Devices = append(ps.plan.Devices, d)
		if !o.existing {
			g.pods = append(g.pods, ps.key)
		}
		r.setKey(a.gpu, after(g.key, a.res, o))
		r.refreshNodeClasses(ni)
	}
	r.touchNode(ni)
}

// setKey moves a GPU to a new state and files it in the heaps again.
func (r *round) setKey(gi int32, k classKey) {
	g := &r.gpus[gi]
	gs := &r.groups[r.nodes[g.node].group]
	gs.classCount[g.class]--
	g.key = k
	g.ver++
	g.class = r.classOf(gi)
	gs.classCount[g.class]++
	for res, h := range gs.heaps {
		if o := r.option(g.class, res); o.state == optOK {
			heap.Push(h, heapEntry{cost: o.cost, id: gi, ver: g.ver, capped: r.capped})
		}
	}
}

// touchNode files a changed node in its group's node heaps again.
func (r *round) touchNode(ni int32) {
	n := &r.nodes[ni]
	n.ver++
	for needs, h := range r.groups[n.group].nodeHeaps {
		if cost, ok := r.nodeCost(ni, r.needList[needs]); ok {
			heap.Push(h, heapEntry{cost: cost, id: ni, ver: n.ver, capped: r.capped})
		}
	}
}

// refreshNodeClasses recounts the node's idle GPUs and refiles those whose
// class depends on it.
func (r *round) refreshNodeClasses(ni int32) {
	idle, whole := r.nodes[ni].idle, r.nodes[ni].wholeFree
	r.refreshNode(ni)
	if r.nodes[ni].idle == idle && r.nodes[ni].wholeFree == whole {
		return
	}
	for _, gi := range r.nodes[ni].gpus {
		if r.gpus[gi].key.servesWhole() {
			r.setKey(gi, r.gpus[gi].key)
		}
	}
}
