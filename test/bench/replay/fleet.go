package replay

import (
	"fmt"
	"math"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/migconfig"
	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/planner/simmodels"
	"github.com/migflex/migflex/internal/planner/solver"
)

// modelInfo is one simulator model with what the replay needs of it.
type modelInfo struct {
	m      solver.Model
	lay    *solver.Layouts
	slices int
	geoms  []map[string]int
}

func newModelInfo(name string) (*modelInfo, error) {
	m, ok := simmodels.Get(name)
	if !ok {
		return nil, fmt.Errorf("no simulator model %q", name)
	}
	lay, err := solver.NewLayouts(m)
	if err != nil {
		return nil, err
	}
	return &modelInfo{m: m, lay: lay, slices: memorySlices(m), geoms: lay.Geometries()}, nil
}

func (mi *modelInfo) profile(name string) (mig.Profile, bool) {
	for _, p := range mi.m.Profiles {
		if p.Name == name {
			return p, true
		}
	}
	return mig.Profile{}, false
}

// share is one instance of profile's share of the GPU's memory.
func (mi *modelInfo) share(profile string) float64 {
	p, _ := mi.profile(profile)
	return float64(p.MemorySlices) / float64(mi.slices)
}

// layoutFor places counts on an empty GPU of the model the way the agent
// would (migconfig's planning).
func (mi *modelInfo) layoutFor(counts map[string]int) ([]inst, error) {
	g := mig.GPU{Model: mi.m.Name, MigCapable: true, MigEnabled: true, MigPending: true, Profiles: mi.m.Profiles}
	plan, err := migconfig.MakePlan([]mig.GPU{g}, []migconfig.Desired{{GPU: 0, MigEnabled: true, Profiles: counts}})
	if err != nil {
		return nil, err
	}
	var out []inst
	for _, p := range plan.GPUs[0].After() {
		out = append(out, inst{profile: p.Profile, start: p.Start, res: resourcename.MIG(p.Profile), pod: -1})
	}
	return out, nil
}

// node is one simulated node.
type node struct {
	idx    int
	name   string
	trace  string
	labels map[string]string
	gpus   []*gpu
	// free counts the devices the scheduler can bind now, by resource;
	// withheld those free on GPUs reserved for the pod resvPod (-1: none),
	// which only it can bind.
	free     map[corev1.ResourceName]int
	withheld map[corev1.ResourceName]int
	resvPod  int
	// changing counts GPUs being reconfigured: the agent reports the node
	// pending until they are done.
	changing int
}

type inst struct {
	profile string
	start   int
	res     corev1.ResourceName
	pod     int // -1 when free
}

// gpu is one simulated GPU.
type gpu struct {
	node  *node
	index int
	model *modelInfo
	mig   bool
	// whole is the pod holding the GPU with MIG disabled (or, carving,
	// holding it undivided), -1 if none.
	whole int
	insts []inst
	// changing: a new layout is being applied; its free devices are gone
	// and target appears when it is done.
	changing    bool
	targetMig   bool
	target      []inst
	lastChanged float64
	// reserved: a reservation withholds the GPU's free devices from every
	// pod but its own (internal/planner/reserve).
	reserved bool
}

func (g *gpu) share(in inst) float64 { return g.model.share(in.profile) }

// fleet is the simulated cluster.
type fleet struct {
	nodes  []*node
	gpus   []*gpu
	models map[string]*modelInfo
	// primary is the model most GPUs are.
	primary *modelInfo
	// capacity is the number of GPUs; allocated the GPUs' worth held by
	// pods (memory share).
	capacity  float64
	allocated float64
	// withheld is the GPUs' worth of free devices reservations withhold;
	// reservedFor the node reserved for each pod (by id).
	withheld    float64
	reservedFor map[int]*node
}

func newFleet(nodes []TraceNode, models ModelMap) (*fleet, error) {
	f := &fleet{models: map[string]*modelInfo{}}
	count := map[string]int{}
	for i, tn := range nodes {
		name := models.of(tn.Model)
		mi := f.models[name]
		if mi == nil {
			var err error
			if mi, err = newModelInfo(name); err != nil {
				return nil, fmt.Errorf("node %s (%s): %w", tn.Name, tn.Model, err)
			}
			f.models[name] = mi
		}
		n := &node{idx: i, name: tn.Name, trace: tn.Model, free: map[corev1.ResourceName]int{}, withheld: map[corev1.ResourceName]int{}, resvPod: -1,
			labels: map[string]string{corev1.LabelHostname: tn.Name, LabelTraceModel: tn.Model}}
		for g := range tn.GPUs {
			gp := &gpu{node: n, index: g, model: mi, whole: -1, lastChanged: math.Inf(-1)}
			n.gpus = append(n.gpus, gp)
			f.gpus = append(f.gpus, gp)
			// GPUs come up with MIG disabled, each one free device.
			f.addFree(gp)
		}
		f.nodes = append(f.nodes, n)
		count[name] += tn.GPUs
		f.capacity += float64(tn.GPUs)
	}
	best := -1
	for name, c := range count {
		if c > best || c == best && name < f.primary.m.Name {
			best, f.primary = c, f.models[name]
		}
	}
	if f.primary == nil {
		return nil, fmt.Errorf("the node list has no GPU nodes")
	}
	return f, nil
}

// setLayout gives an idle GPU a layout at once (initial layouts).
func (f *fleet) setLayout(g *gpu, enabled bool, insts []inst) {
	f.dropFree(g)
	g.mig, g.insts = enabled, insts
	f.addFree(g)
}

// dropFree and addFree keep node.free in step with a GPU's free devices.
func (f *fleet) dropFree(g *gpu) { f.countFree(g, -1) }
func (f *fleet) addFree(g *gpu)  { f.countFree(g, 1) }

func (f *fleet) countFree(g *gpu, sign int) {
	if g.changing {
		return
	}
	if !g.mig {
		if g.whole < 0 {
			f.bump(g, resourcename.GPU, 1, sign)
		}
		return
	}
	for _, in := range g.insts {
		if in.pod < 0 {
			f.bump(g, in.res, g.share(in), sign)
		}
	}
}

// bump counts one free device of res (share GPUs' worth) on g in or out:
// free for every pod, or withheld for a reservation's.
func (f *fleet) bump(g *gpu, res corev1.ResourceName, share float64, d int) {
	if g.reserved {
		g.node.withheld[res] += d
		f.withheld += float64(d) * share
		return
	}
	g.node.free[res] += d
}

// available is how many devices of res pod may bind on the node: the free
// ones, and those withheld for it.
func (n *node) available(res corev1.ResourceName, pod int) int {
	if n.resvPod == pod {
		return n.free[res] + n.withheld[res]
	}
	return n.free[res]
}

// reserve withholds the GPUs' free devices, now and as they free, from
// every pod but pod.
func (f *fleet) reserve(n *node, gpus []int, pod int) {
	f.unreserve(n)
	for _, i := range gpus {
		g := n.gpus[i]
		f.dropFree(g)
		g.reserved = true
		f.addFree(g)
	}
	n.resvPod = pod
	if f.reservedFor == nil {
		f.reservedFor = map[int]*node{}
	}
	f.reservedFor[pod] = n
}

// unreserve offers the node's withheld devices to every pod again.
func (f *fleet) unreserve(n *node) {
	if n.resvPod >= 0 {
		delete(f.reservedFor, n.resvPod)
	}
	for _, g := range n.gpus {
		if g.reserved {
			f.dropFree(g)
			g.reserved = false
			f.addFree(g)
		}
	}
	n.resvPod = -1
}

// startChange begins applying a layout: the GPU's free devices go at once
// (the agent drains them), its busy instances stay, and the new ones come
// when finishChange runs.
func (f *fleet) startChange(g *gpu, enabled bool, target []inst, now float64) error {
	if g.changing {
		return fmt.Errorf("%s GPU %d: already changing", g.node.name, g.index)
	}
	if !enabled && (g.whole >= 0 || busy(g)) || !g.mig && g.whole >= 0 {
		return fmt.Errorf("%s GPU %d: a MIG mode change under a pod", g.node.name, g.index)
	}
	for _, in := range g.insts {
		if in.pod >= 0 && !containsInst(target, in) {
			return fmt.Errorf("%s GPU %d: the new layout drops %s@%d, in use", g.node.name, g.index, in.profile, in.start)
		}
	}
	f.dropFree(g)
	kept := g.insts[:0]
	for _, in := range g.insts {
		if in.pod >= 0 {
			kept = append(kept, in)
		}
	}
	g.insts = kept
	g.changing, g.targetMig, g.target, g.lastChanged = true, enabled, target, now
	g.node.changing++
	return nil
}

func (f *fleet) finishChange(g *gpu) {
	g.changing = false
	g.node.changing--
	g.mig = g.targetMig
	if g.mig {
		for _, t := range g.target {
			if !containsInst(g.insts, t) {
				t.pod = -1
				g.insts = append(g.insts, t)
			}
		}
	} else {
		g.insts = nil
	}
	g.target = nil
	f.addFree(g)
}

// freeCapacity is the node's GPU capacity (memory share) no pod holds.
func (n *node) freeCapacity() float64 {
	free := 0.0
	for _, g := range n.gpus {
		if g.whole >= 0 {
			continue
		}
		free++
		for _, in := range g.insts {
			if in.pod >= 0 {
				free -= g.share(in)
			}
		}
	}
	return free
}

func busy(g *gpu) bool {
	for _, in := range g.insts {
		if in.pod >= 0 {
			return true
		}
	}
	return false
}

func containsInst(list []inst, in inst) bool {
	for _, x := range list {
		if x.profile == in.profile && x.start == in.start {
			return true
		}
	}
	return false
}

// devRef is one device a pod holds: the instance at start, or the whole
// GPU (start -1). Instances move in a GPU's list as layouts change, so they
// are found by place.
type devRef struct {
	g     *gpu
	start int
}

// instAt returns the index of the instance at start held by pod, or -1.
func (g *gpu) instAt(start, pod int) int {
	for i, in := range g.insts {
		if in.start == start && in.pod == pod {
			return i
		}
	}
	return -1
}
