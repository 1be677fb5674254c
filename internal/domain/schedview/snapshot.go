package schedview

import (
	"maps"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/resourcename"
)

// Node is one Node as the scheduler sees it when it places a GPU pod.
type Node struct {
	Name   string
	Labels map[string]string
	// Taints holds only the effects the scheduler filters on (NoSchedule,
	// NoExecute); PreferNoSchedule never keeps a pod off a node.
	Taints []corev1.Taint
	// Unschedulable is spec.unschedulable (cordoned).
	Unschedulable bool
	// Allocatable holds the GPU resources with Allocatable > 0, in devices. A
	// type left at 0 after a MIG reconfiguration is absent, not present.
	// On a DRA node it is the devices of its ResourceSlices that our
	// DeviceClasses serve (SetDRA), never status.allocatable, which keeps
	// the device plugin's stale entries.
	Allocatable map[corev1.ResourceName]int64
	// DRA: the node's agent serves its GPUs through DRA (the serving
	// label). Its devices in use are then Allocated, those allocated to
	// ResourceClaims, and the extended-resource requests of its pods are
	// not counted again: the scheduler serves them with claims too.
	DRA       bool
	Allocated map[corev1.ResourceName]int64
	// Together is a dynamic DRA node's joint check (SetDRAPool): whether
	// its pool serves a need of several types at once; nil elsewhere.
	// TogetherEver: whether it could with nothing allocated.
	Together, TogetherEver func(map[corev1.ResourceName]int64) bool
	// API, when set, is the Node this was read from (read-only, as an
	// informer's objects are), whose name and labels a pod's node
	// affinity is matched against: a Builder then keeps it instead of a
	// Node of its own, which is most of a member's memory (a corev1.Node
	// is about 1.5 KB before any field is set). It is used only while its
	// name and labels are this node's; a Builder that leaves a node as it
	// is (SetNode of an equal node) keeps the API it had.
	API *corev1.Node
}

// NodeFromAPI extracts the scheduler's view of a Node. The label map is shared
// with n, not copied: informer objects are read-only.
func NodeFromAPI(n *corev1.Node) Node {
	out := Node{Name: n.Name, Labels: n.Labels, Unschedulable: n.Spec.Unschedulable, DRA: IsDRANode(n.Labels)}
	for _, t := range n.Spec.Taints {
		if schedulingTaint(t) {
			out.Taints = append(out.Taints, t)
		}
	}
	if out.DRA {
		// No supply until SetDRA reads its slices.
		return out
	}
	for name, q := range n.Status.Allocatable {
		if !resourcename.IsGPU(name) {
			continue
		}
		if v := q.Value(); v > 0 {
			if out.Allocatable == nil {
				out.Allocatable = make(map[corev1.ResourceName]int64)
			}
			out.Allocatable[name] = v
		}
	}
	return out
}

// SetDRA sets a DRA node's supply, as DRASupply counts it; zero counts
// are left out, as in Allocatable.
func (n *Node) SetDRA(allocatable, allocated map[corev1.ResourceName]int64) {
	n.Allocatable, n.Allocated = nil, nil
	for r, v := range allocatable {
		if v <= 0 {
			continue
		}
		if n.Allocatable == nil {
			n.Allocatable = map[corev1.ResourceName]int64{}
		}
		n.Allocatable[r] = v
		if a := allocated[r]; a > 0 {
			if n.Allocated == nil {
				n.Allocated = map[corev1.ResourceName]int64{}
			}
			n.Allocated[r] = a
		}
	}
}

func schedulingTaint(t corev1.Taint) bool {
	return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
}

// DefaultIdentityLabels are node labels that differ on every node. They are
// left out of the grouping key, so nodes that differ only by them share a
// group and a pod's placement constraints are evaluated once per group.
var DefaultIdentityLabels = []string{corev1.LabelHostname}

// Snapshot is an immutable view of the nodes, grouped by everything the
// scheduler's filters look at except node identity: labels (without the
// identity labels), scheduling taints, cordon state and the set of GPU types.
// A pod's nodeSelector, required affinity and tolerations are then matched
// once per group instead of once per node, unless they name a node (see
// Filter and Eligible).
type Snapshot struct {
	groups   []*Group
	nodes    int
	identity map[string]bool
}

// Group is nodes the scheduler's filters cannot tell apart, but by name.
type Group struct {
	// rep is the first member's Node; the non-identity part of its labels
	// is every member's.
	rep           *corev1.Node
	taints        []corev1.Taint
	unschedulable bool
	// types are the GPU types every member has (Allocatable > 0), sorted.
	types   []corev1.ResourceName
	members []*Member
	// maxFree is the most free devices of each type on one member.
	maxFree map[corev1.ResourceName]int64
	// maxAlloc is the most allocatable devices of each type on one member.
	maxAlloc map[corev1.ResourceName]int64
}

// Types are the GPU types every member has (Allocatable > 0), sorted.
func (g *Group) Types() []corev1.ResourceName { return g.types }

// Members are the group's nodes, by name.
func (g *Group) Members() []*Member { return g.members }

// MaxFree is the most free devices of each type on one member.
func (g *Group) MaxFree() map[corev1.ResourceName]int64 { return g.maxFree }

// MaxAllocatable is the most allocatable devices of each type on one
// member.
func (g *Group) MaxAllocatable() map[corev1.ResourceName]int64 { return g.maxAlloc }

// Member is one node of a Group. It is replaced, never changed, once in a
// Snapshot.
type Member struct {
	// node carries only the name and labels, for nodeaffinity matching.
	node *corev1.Node
	free map[corev1.ResourceName]int64
	// alloc is the node's Allocatable (shared with its Node, not copied).
	alloc map[corev1.ResourceName]int64
	// together and togetherEver are the node's (Node.Together,
	// TogetherEver), for Fits and Holds.
	together, togetherEver func(map[corev1.ResourceName]int64) bool
}

// Name is the node's name.
func (m *Member) Name() string { return m.node.Name }

// Free is the node's free devices of each GPU type: allocatable less what
// the pods bound to it request (Builder.SetPod).
func (m *Member) Free() map[corev1.ResourceName]int64 { return m.free }

// Allocatable is the node's allocatable devices of each GPU type.
func (m *Member) Allocatable() map[corev1.ResourceName]int64 { return m.alloc }

// Nodes is the number of nodes in the snapshot.
func (s *Snapshot) Nodes() int { return s.nodes }

// Has reports whether some node of the snapshot, eligible for a pod or not,
// has the type (Allocatable > 0).
func (s *Snapshot) Has(r corev1.ResourceName) bool {
	for _, g := range s.groups {
		if _, ok := slices.BinarySearch(g.types, r); ok {
			return true
		}
	}
	return false
}

// Groups is the number of node groups; tests and benchmarks read it.
func (s *Snapshot) Groups() int { return len(s.groups) }

// Builder maintains node groups incrementally from informer events and hands
// out immutable Snapshots. It is not safe for concurrent use: the caller
// serializes updates and Snapshot calls.
type Builder struct {
	identity map[string]bool
	nodes    map[string]*nodeEntry
	groups   map[string]*groupEntry
	// used is the devices the pods bound to a node request, by node name; it
	// survives the node, so pod events that arrive first are not lost.
	used  map[string]map[corev1.ResourceName]int64
	pods  map[string]podUsage
	dirty map[*groupEntry]bool
	snap  *Snapshot
}

type nodeEntry struct {
	node  Node
	key   string
	api   *corev1.Node
	m     *Member
	group *groupEntry
}

type groupEntry struct {
	key string
	// order is the members sorted by name; kept sorted on insert so that a
	// rebuild is a copy, not a sort.
	order []*nodeEntry
	// hist counts the members by free devices of each type, so that maxFree
	// is found without visiting every member after each pod event.
	hist map[corev1.ResourceName]map[int64]int
	// allocHist counts the members by allocatable devices of each type,
	// for maxAlloc; pod events leave it alone.
	allocHist map[corev1.ResourceName]map[int64]int
	built     *Group
}

func (g *groupEntry) index(name string) (int, bool) {
	return slices.BinarySearchFunc(g.order, name, func(e *nodeEntry, n string) int {
		return strings.Compare(e.node.Name, n)
	})
}

func (g *groupEntry) add(e *nodeEntry) {
	i, _ := g.index(e.node.Name)
	g.order = slices.Insert(g.order, i, e)
	g.count(e.m.free, 1)
	countIn(g.allocHist, e.m.alloc, 1)
}

func (g *groupEntry) remove(e *nodeEntry) {
	if i, ok := g.index(e.node.Name); ok {
		g.order = slices.Delete(g.order, i, i+1)
		g.count(e.m.free, -1)
		countIn(g.allocHist, e.m.alloc, -1)
	}
}

func (g *groupEntry) count(free map[corev1.ResourceName]int64, delta int) {
	countIn(g.hist, free, delta)
}

func countIn(hist map[corev1.ResourceName]map[int64]int, counts map[corev1.ResourceName]int64, delta int) {
	for r, f := range counts {
		h := hist[r]
		if h == nil {
			h = map[int64]int{}
			hist[r] = h
		}
		h[f] += delta
		if h[f] == 0 {
			delete(h, f)
		}
	}
}

type podUsage struct {
	node string
	used map[corev1.ResourceName]int64
}

// NewBuilder returns an empty Builder. identity are the node labels left out
// of the grouping key; nil means DefaultIdentityLabels.
func NewBuilder(identity []string) *Builder {
	if identity == nil {
		identity = DefaultIdentityLabels
	}
	b := &Builder{
		identity: make(map[string]bool, len(identity)),
		nodes:    map[string]*nodeEntry{},
		groups:   map[string]*groupEntry{},
		used:     map[string]map[corev1.ResourceName]int64{},
		pods:     map[string]podUsage{},
		dirty:    map[*groupEntry]bool{},
	}
	for _, l := range identity {
		b.identity[l] = true
	}
	return b
}

// NewSnapshot groups a list of nodes, for callers that list nodes instead
// of watching them (the planner's round, the replay) and for tests.
func NewSnapshot(nodes []Node) *Snapshot {
	b := NewBuilder(nil)
	for _, n := range nodes {
		b.SetNode(n)
	}
	return b.Snapshot()
}

// SetNode adds or replaces a node. An update that changes nothing the
// decision reads leaves the current Snapshot in place.
func (b *Builder) SetNode(n Node) {
	old := b.nodes[n.Name]
	if old != nil && nodeEqual(old.node, n) {
		return
	}
	if old != nil {
		b.detach(old)
	}
	e := &nodeEntry{
		node: n,
		key:  b.groupKey(n),
		api:  n.API,
	}
	if e.api == nil || e.api.Name != n.Name || !maps.Equal(e.api.Labels, n.Labels) {
		e.api = &corev1.Node{}
		e.api.Name = n.Name
		e.api.Labels = n.Labels
	}
	e.m = &Member{node: e.api, free: freeDevices(n.Allocatable, b.usedOn(n)), alloc: n.Allocatable, together: n.Together, togetherEver: n.TogetherEver}
	g := b.groups[e.key]
	if g == nil {
		g = &groupEntry{key: e.key, hist: map[corev1.ResourceName]map[int64]int{}, allocHist: map[corev1.ResourceName]map[int64]int{}}
		b.groups[e.key] = g
	}
	g.add(e)
	e.group = g
	b.nodes[n.Name] = e
	b.markDirty(g)
}

// DeleteNode removes a node.
func (b *Builder) DeleteNode(name string) {
	if e := b.nodes[name]; e != nil {
		b.detach(e)
		delete(b.nodes, name)
	}
}

func (b *Builder) detach(e *nodeEntry) {
	g := e.group
	g.remove(e)
	if len(g.order) == 0 {
		delete(b.groups, g.key)
		delete(b.dirty, g)
		b.snap = nil
		return
	}
	b.markDirty(g)
}

// SetPod records the GPU devices a pod bound to node requests (capacity
// mode), replacing what was recorded for the same key. An empty node or an
// empty used removes the pod: unbound pods hold no device.
func (b *Builder) SetPod(key, node string, used map[corev1.ResourceName]int64) {
	old, had := b.pods[key]
	if had && old.node == node && maps.Equal(old.used, used) {
		return
	}
	if had {
		b.addUsage(old.node, old.used, -1)
		delete(b.pods, key)
	}
	if node == "" || len(used) == 0 {
		return
	}
	b.pods[key] = podUsage{node: node, used: used}
	b.addUsage(node, used, 1)
}

// DeletePod forgets a pod (deleted, or terminal: it holds no device).
func (b *Builder) DeletePod(key string) { b.SetPod(key, "", nil) }

func (b *Builder) addUsage(node string, used map[corev1.ResourceName]int64, sign int64) {
	u := b.used[node]
	if u == nil {
		u = map[corev1.ResourceName]int64{}
		b.used[node] = u
	}
	for r, v := range used {
		u[r] += sign * v
		if u[r] == 0 {
			delete(u, r)
		}
	}
	if len(u) == 0 {
		delete(b.used, node)
	}
	if e := b.nodes[node]; e != nil {
		// A new member, so that Snapshots already handed out keep theirs.
		e.group.count(e.m.free, -1)
		e.m = &Member{node: e.api, free: freeDevices(e.node.Allocatable, b.usedOn(e.node)), alloc: e.node.Allocatable, together: e.node.Together, togetherEver: e.node.TogetherEver}
		e.group.count(e.m.free, 1)
		b.markDirty(e.group)
	}
}

// usedOn is what is in use on a node: its claims' devices on a DRA node,
// its pods' requests otherwise.
func (b *Builder) usedOn(n Node) map[corev1.ResourceName]int64 {
	if n.DRA {
		return n.Allocated
	}
	return b.used[n.Name]
}

func (b *Builder) markDirty(g *groupEntry) {
	b.dirty[g] = true
	b.snap = nil
}

// Snapshot returns the current view. It costs nothing while nothing changed,
// and otherwise rebuilds only the groups that did.
func (b *Builder) Snapshot() *Snapshot {
	if b.snap != nil {
		return b.snap
	}
	for g := range b.dirty {
		g.built = buildGroup(g)
	}
	clear(b.dirty)
	keys := slices.Sorted(maps.Keys(b.groups))
	s := &Snapshot{groups: make([]*Group, 0, len(keys)), nodes: len(b.nodes), identity: b.identity}
	for _, k := range keys {
		s.groups = append(s.groups, b.groups[k].built)
	}
	b.snap = s
	return s
}

func buildGroup(g *groupEntry) *Group {
	first := g.order[0]
	out := &Group{
		rep:           first.api,
		taints:        first.node.Taints,
		unschedulable: first.node.Unschedulable,
		types:         slices.Sorted(maps.Keys(first.node.Allocatable)),
		members:       make([]*Member, len(g.order)),
		maxFree:       maxOf(g.hist),
		maxAlloc:      maxOf(g.allocHist),
	}
	for i, e := range g.order {
		out.members[i] = e.m
	}
	return out
}

func maxOf(hist map[corev1.ResourceName]map[int64]int) map[corev1.ResourceName]int64 {
	out := make(map[corev1.ResourceName]int64, len(hist))
	for r, h := range hist {
		for f := range h {
			out[r] = max(out[r], f)
		}
	}
	return out
}

func freeDevices(alloc, used map[corev1.ResourceName]int64) map[corev1.ResourceName]int64 {
	// A node nothing uses has its allocatable free: the member shares the
	// map (read-only, as alloc is) rather than hold a copy of it.
	if !anyUsed(alloc, used) {
		return alloc
	}
	free := make(map[corev1.ResourceName]int64, len(alloc))
	for r, a := range alloc {
		free[r] = max(a-used[r], 0)
	}
	return free
}

// anyUsed tells whether used holds any of alloc's types.
func anyUsed(alloc, used map[corev1.ResourceName]int64) bool {
	for r := range alloc {
		if used[r] > 0 {
			return true
		}
	}
	return false
}

// groupKey is everything a group's members share. Values are separated by
// bytes that cannot occur in label keys, values, taint fields or resource names.
func (b *Builder) groupKey(n Node) string {
	// Sized first: a round keys every Node, and growing the builder
	// and the list of keys was most of what this allocated.
	keys := make([]string, 0, len(n.Labels))
	size := 3 + len(n.Taints)*3 + len(n.Allocatable)
	for k, v := range n.Labels {
		if !b.identity[k] {
			keys = append(keys, k)
			size += len(k) + len(v) + 2
		}
	}
	slices.Sort(keys)
	for _, t := range n.Taints {
		size += len(t.Key) + len(t.Value) + len(t.Effect) + 2
	}
	for r := range n.Allocatable {
		size += len(r)
	}
	var sb strings.Builder
	sb.Grow(size + 1)
	for _, k := range keys {
		sb.WriteString(k)
		sb.WriteByte(0)
		sb.WriteString(n.Labels[k])
		sb.WriteByte(1)
	}
	sb.WriteByte(2)
	taints := make([]string, len(n.Taints))
	for i, t := range n.Taints {
		taints[i] = t.Key + "\x00" + t.Value + "\x00" + string(t.Effect)
	}
	sort.Strings(taints)
	for _, t := range taints {
		sb.WriteString(t)
		sb.WriteByte(1)
	}
	sb.WriteByte(2)
	if n.Unschedulable {
		sb.WriteByte('u')
	}
	sb.WriteByte(2)
	for _, r := range slices.Sorted(maps.Keys(n.Allocatable)) {
		sb.WriteString(string(r))
		sb.WriteByte(1)
	}
	return sb.String()
}

func nodeEqual(a, b Node) bool {
	// A joint check reads its pool, which may change with the same
	// counts (another placement allocated).
	return a.Together == nil && b.Together == nil && a.TogetherEver == nil && b.TogetherEver == nil && a.Name == b.Name && a.Unschedulable == b.Unschedulable && a.DRA == b.DRA &&
		maps.Equal(a.Labels, b.Labels) && maps.Equal(a.Allocatable, b.Allocatable) && maps.Equal(a.Allocated, b.Allocated) &&
		slices.EqualFunc(a.Taints, b.Taints, func(x, y corev1.Taint) bool {
			return x.Key == y.Key && x.Value == y.Value && x.Effect == y.Effect
		})
}
