package solver_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/planner/simmodels"
	"github.com/migflex/migflex/internal/planner/solver"
)

// Fixture builders, so that each table case states only what it is about.
// The models are the simulator's, the tables the agent validates against.

const (
	h100Name  = "H100-SXM5-80GB"
	a100Name  = "A100-SXM4-40GB"
	mig1g     = "nvidia.com/mig-1g.10gb"
	mig2g     = "nvidia.com/mig-2g.20gb"
	mig3g     = "nvidia.com/mig-3g.40gb"
	mig4g     = "nvidia.com/mig-4g.40gb"
	mig7g     = "nvidia.com/mig-7g.80gb"
	mig1g5    = "nvidia.com/mig-1g.5gb"
	mig1g20   = "nvidia.com/mig-1g.20gb"
	wholeGPU  = "nvidia.com/gpu"
	optedIn   = true
	optedOut  = false
	inUse     = true
	notInUse  = false
	secondsIn = time.Second
)

var t0 = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

func models() []solver.Model { return simmodels.Models() }

// inst parses "1g.10gb@3" (free) or "1g.10gb@3*" (in use).
func inst(s string) solver.Instance {
	busy := strings.HasSuffix(s, "*")
	s = strings.TrimSuffix(s, "*")
	name, start, ok := strings.Cut(s, "@")
	if !ok {
		panic("instance " + s + " has no @start")
	}
	n, err := strconv.Atoi(start)
	if err != nil {
		panic(err)
	}
	return solver.Instance{Profile: name, Start: n, InUse: busy}
}

// migGPU is an H100 with MIG enabled and the given instances.
func migGPU(index int, instances ...string) solver.GPU {
	return modelGPU(h100Name, index, instances...)
}

func modelGPU(model string, index int, instances ...string) solver.GPU {
	g := solver.GPU{Index: index, Model: model, MigEnabled: true}
	for _, s := range instances {
		g.Instances = append(g.Instances, inst(s))
	}
	return g
}

// wholeGPUOf is an H100 with MIG disabled.
func wholeGPUOf(index int, busy bool) solver.GPU {
	return solver.GPU{Index: index, Model: h100Name, InUse: busy}
}

type nodeOpt func(*solver.Node)

func node(name string, opted bool, gpus []solver.GPU, opts ...nodeOpt) solver.Node {
	n := solver.Node{
		Node:    schedview.Node{Name: name, Labels: map[string]string{corev1.LabelHostname: name}},
		OptedIn: opted,
		GPUs:    gpus,
	}
	for _, o := range opts {
		o(&n)
	}
	return n
}

func labeled(k, v string) nodeOpt { return func(n *solver.Node) { n.Labels[k] = v } }

func frozen(why string) nodeOpt { return func(n *solver.Node) { n.Frozen = why } }

func tainted(key string) nodeOpt {
	return func(n *solver.Node) {
		n.Taints = append(n.Taints, corev1.Taint{Key: key, Value: "x", Effect: corev1.TaintEffectNoSchedule})
	}
}

func gpus(g ...solver.GPU) []solver.GPU { return g }

type podOpt func(*corev1.Pod)

// pod asks for resource/count pairs in one container, created age before t0.
func pod(name string, kv ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", CreationTimestamp: metav1.NewTime(t0.Add(-time.Minute))}}
	l := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	p.Spec.Containers = []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Requests: l, Limits: l}}}
	return p
}

func with(p *corev1.Pod, opts ...podOpt) *corev1.Pod {
	for _, o := range opts {
		o(p)
	}
	return p
}

func priority(v int32) podOpt { return func(p *corev1.Pod) { p.Spec.Priority = &v } }

func age(d time.Duration) podOpt {
	return func(p *corev1.Pod) { p.CreationTimestamp = metav1.NewTime(t0.Add(-d)) }
}

func selector(k, v string) podOpt {
	return func(p *corev1.Pod) {
		if p.Spec.NodeSelector == nil {
			p.Spec.NodeSelector = map[string]string{}
		}
		p.Spec.NodeSelector[k] = v
	}
}

func snapshot(nodes []solver.Node, pending ...*corev1.Pod) solver.Snapshot {
	return solver.Snapshot{Now: t0, Models: models(), Nodes: nodes, Pending: pending}
}

// fleetLayouts are layouts an operator or an earlier round could have left,
// as instance lists on H100 / A100-80GB names.
var fleetLayouts = [][]string{
	{"1g.10gb@0", "1g.10gb@1", "1g.10gb@2", "1g.10gb@3", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6"},
	{"4g.40gb@0", "2g.20gb@4", "1g.10gb@6"},
	{"3g.40gb@0", "3g.40gb@4"},
	{"3g.40gb@4", "2g.20gb@0", "1g.10gb@2", "1g.10gb@3"},
	{"2g.20gb@0", "2g.20gb@2", "2g.20gb@4", "1g.10gb@6"},
	{"7g.80gb@0"},
	{"1g.20gb@0", "1g.20gb@2", "1g.20gb@4", "1g.20gb@6"},
	{"3g.40gb@0", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6"},
	{},
}

var fleetLayouts40 = [][]string{
	{"1g.5gb@0", "1g.5gb@1", "1g.5gb@2", "1g.5gb@3", "1g.5gb@4", "1g.5gb@5", "1g.5gb@6"},
	{"3g.20gb@0", "3g.20gb@4"},
	{"4g.20gb@0", "2g.10gb@4", "1g.5gb@6"},
	{},
}

// bigScenario is a seeded fleet of nodes x 8 GPUs (H100, A100-80GB and
// A100-40GB) in mixed states, and pending pods of a mixed demand.
func bigScenario(seed uint64, nodes, pending int) solver.Snapshot {
	return bigScenarioBusy(seed, nodes, pending, 0.6)
}

// bigScenarioBusy is bigScenario with each instance in use with
// probability busy.
func bigScenarioBusy(seed uint64, nodes, pending int, busy float64) solver.Snapshot {
	rng := rand.New(rand.NewPCG(seed, 1))
	snap := solver.Snapshot{Now: t0, Models: models()}
	for i := range nodes {
		name := fmt.Sprintf("node-%05d", i)
		opts := []nodeOpt{labeled("pool", fmt.Sprintf("p%d", i%3))}
		if rng.Float64() < 0.05 {
			opts = append(opts, tainted("dedicated"))
		}
		if rng.Float64() < 0.01 {
			opts = append(opts, frozen("agent state pending"))
		}
		model, layouts := h100Name, fleetLayouts
		switch r := rng.Float64(); {
		case r < 0.1:
			model, layouts = a100Name, fleetLayouts40
		case r < 0.35:
			model = "A100-SXM4-80GB"
		}
		var gs []solver.GPU
		for g := range 8 {
			if rng.Float64() < 0.2 {
				gs = append(gs, solver.GPU{Index: g, Model: model, InUse: rng.Float64() < 0.5})
				continue
			}
			gpu := solver.GPU{Index: g, Model: model, MigEnabled: true}
			for _, s := range layouts[rng.IntN(len(layouts))] {
				in := inst(s)
				in.InUse = rng.Float64() < busy
				gpu.Instances = append(gpu.Instances, in)
			}
			if rng.Float64() < 0.1 {
				gpu.LastChanged = t0.Add(-30 * time.Second)
			}
			gs = append(gs, gpu)
		}
		snap.Nodes = append(snap.Nodes, node(name, rng.Float64() < 0.9, gs, opts...))
	}
	demand := []struct {
		res   string
		count string
		w     float64
	}{
		{mig1g, "1", 30}, {mig2g, "1", 20}, {mig3g, "1", 20}, {mig7g, "1", 5}, {mig1g5, "1", 5},
		{wholeGPU, "1", 12}, {wholeGPU, "2", 3}, {wholeGPU, "4", 2}, {wholeGPU, "8", 1}, {mig1g, "2", 2},
	}
	total := 0.0
	for _, d := range demand {
		total += d.w
	}
	for i := range pending {
		x := rng.Float64() * total
		d := demand[0]
		for _, c := range demand {
			if x < c.w {
				d = c
				break
			}
			x -= c.w
		}
		p := pod(fmt.Sprintf("pod-%05d", i), d.res, d.count)
		opts := []podOpt{priority([]int32{0, 100, 1000}[rng.IntN(3)]), age(time.Duration(rng.IntN(3600)) * time.Second)}
		if rng.Float64() < 0.3 {
			opts = append(opts, selector("pool", fmt.Sprintf("p%d", rng.IntN(3))))
		}
		snap.Pending = append(snap.Pending, with(p, opts...))
	}
	return snap
}
