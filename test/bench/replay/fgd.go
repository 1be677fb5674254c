package replay

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// FGDResults is the fill experiment of the FGD paper (Weng et al., ATC'23):
// tasks offered in trace order (the list repeated as needed), none ever
// leaving, each placed at once or dropped, until the tasks offered ask for
// Offered times the fleet's GPUs.
type FGDResults struct {
	Nodes   int         `json:"nodes"`
	GPUs    int         `json:"gpus"`
	Offered float64     `json:"offered"`
	Results []FGDResult `json:"results"`
}

// FGDResult is one policy's fill.
type FGDResult struct {
	Policy string `json:"policy"`
	Tasks  int    `json:"tasks"`
	Failed int    `json:"failed"`
	// AllocatedAtFirstFailure is the share of the fleet's GPU capacity
	// (memory slices) held when the first task could not be placed;
	// AllocatedAtEnd when every task was offered.
	AllocatedAtFirstFailure float64 `json:"allocatedAtFirstFailure"`
	AllocatedAtEnd          float64 `json:"allocatedAtEnd"`
	// FragmentationAtEnd is the capacity left free at the end, when tasks
	// of every kind in the trace have kept failing: free capacity the
	// demand could not use.
	FragmentationAtEnd float64 `json:"fragmentationAtEnd"`
	Repartitions       int     `json:"repartitions"`
	Seconds            float64 `json:"seconds"`
	// Curve is the allocated share as the demand offered grows, every
	// hundredth of the fleet offered (the fill plot); FirstFailure is
	// where the first task failed.
	Curve        []FillPoint `json:"curve,omitempty"`
	FirstFailure *FillPoint  `json:"firstFailure,omitempty"`
}

// FillPoint is the fill after some demand was offered: both as shares of
// the fleet's GPU capacity.
type FillPoint struct {
	Offered   float64 `json:"offered"`
	Allocated float64 `json:"allocated"`
}

// fillCurve samples a fill every hundredth of the fleet offered.
type fillCurve struct {
	capacity, next float64
	r              *FGDResult
}

// note records the fill after a task, when offered passed the next sample,
// and the first failure.
func (c *fillCurve) note(offered, allocated float64, failed bool) {
	p := FillPoint{Offered: offered / c.capacity, Allocated: allocated / c.capacity}
	if failed && c.r.FirstFailure == nil {
		c.r.FirstFailure = &p
	}
	if p.Offered >= c.next {
		c.r.Curve = append(c.r.Curve, p)
		c.next = math.Floor(p.Offered*100+1) / 100
	}
}

// end records the last fill, if no sample did.
func (c *fillCurve) end(offered, allocated float64) {
	p := FillPoint{Offered: offered / c.capacity, Allocated: allocated / c.capacity}
	if n := len(c.r.Curve); n == 0 || c.r.Curve[n-1] != p {
		c.r.Curve = append(c.r.Curve, p)
	}
}

func runFGD(o Options, templates []podTemplate) (*FGDResults, error) {
	nodes := sampleNodes(o.Nodes, o.FGDFraction, o.Seed)
	f, err := newFleet(nodes, o.Models)
	if err != nil {
		return nil, err
	}
	out := &FGDResults{Nodes: len(nodes), GPUs: int(f.capacity), Offered: o.FGDOffered, Results: make([]FGDResult, len(o.Policies))}
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	sem := make(chan struct{}, o.Parallel)
	for i, name := range o.Policies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			began := time.Now()
			r, err := fillOne(o, name, nodes, templates)
			r.Seconds = time.Since(began).Seconds()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("fill %s: %w", name, err))
			}
			out.Results[i] = r
			if o.Progress != nil {
				o.Progress(fmt.Sprintf("fill %s: %.1fs", name, r.Seconds))
			}
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

func fillOne(o Options, name string, nodes []TraceNode, templates []podTemplate) (FGDResult, error) {
	r := FGDResult{Policy: name, AllocatedAtFirstFailure: -1}
	f, err := newFleet(nodes, o.Models)
	if err != nil {
		return r, err
	}
	target := o.FGDOffered * f.capacity
	curve := &fillCurve{capacity: f.capacity, r: &r}
	if name == PolicyFluid {
		free, offered := f.capacity, 0.0
		for i := 0; offered < target; i++ {
			t := templates[i%len(templates)]
			offered += t.req.total()
			r.Tasks++
			if t.req.total() <= free+1e-9 {
				free -= t.req.total()
				curve.note(offered, f.capacity-free, false)
				continue
			}
			r.Failed++
			if r.AllocatedAtFirstFailure < 0 {
				r.AllocatedAtFirstFailure = 1 - free/f.capacity
			}
			curve.note(offered, f.capacity-free, true)
		}
		r.AllocatedAtEnd = 1 - free/f.capacity
		r.FragmentationAtEnd = free / f.capacity
		curve.end(offered, f.capacity-free)
		return r, nil
	}
	// The fill has no clock, so a GPU the planner changed would stay in
	// its cooldown (a time) to the end: the fill would measure the
	// cooldown, not how the policy packs. It runs without; the timed
	// replays keep it.
	pol := o.Planner
	pol.Cooldown = 0
	cfg := &runConfig{start: 0, horizon: math.Inf(1), latency: 0, planner: pol, mixHalfLife: o.MixHalfLife, cadence: o.Cadence,
		migflexPreset: o.MigflexPreset}
	// The static layouts are sized as for the timed replay: by the whole
	// trace's request mix (no times: by size alone).
	var whole, all float64
	for _, t := range templates {
		all += t.req.total()
		if t.req.res == "nvidia.com/gpu" {
			whole += t.req.total()
		}
	}
	cfg.wholeShare = whole / all
	sp, err := newPolicy(name, cfg)
	if err != nil {
		return r, err
	}
	s := newSim(cfg, sp, f, nil)
	if err := sp.setup(s); err != nil {
		return r, err
	}
	_, batches := sp.batching()
	// Nothing leaves, so what a round could not serve once it never will:
	// later pods of that kind skip the round.
	hopeless := map[classKey]bool{}
	offered := 0.0
	for i := 0; offered < target; i++ {
		t := templates[i%len(templates)]
		offered += t.req.total()
		r.Tasks++
		p := &simPod{id: i, name: fmt.Sprintf("%s-%d", t.name, i), req: t.req, asked: t.req.total(), prio: t.prio,
			duration: math.Inf(1), start: -1}
		p.k8s = k8sPod(p.name, t.req, t.prio, 0, t.spec)
		p.elig = s.eligs.of(p.k8s)
		s.pods = append(s.pods, p)
		sp.arrive(s, p)
		s.enqueue(p)
		s.dirtyAll = true
		s.pass()
		kind := classKey{res: p.req.res, count: p.req.count, elig: p.elig}
		if p.start < 0 && batches && !hopeless[kind] {
			sp.round(s)
			// Changes apply at once: the fill has no time.
			for s.events.Len() > 0 {
				if e := heap.Pop(&s.events).(event); e.kind == evChanged {
					s.f.finishChange(e.gpu)
				}
			}
			s.dirtyAll = true
			s.pass()
			if p.start < 0 {
				hopeless[kind] = true
			}
		}
		if p.start >= 0 {
			curve.note(offered, s.f.allocated, false)
			continue
		}
		r.Failed++
		if r.AllocatedAtFirstFailure < 0 {
			r.AllocatedAtFirstFailure = s.f.allocated / s.f.capacity
		}
		s.drop(p)
		curve.note(offered, s.f.allocated, true)
	}
	r.AllocatedAtEnd = s.f.allocated / s.f.capacity
	r.FragmentationAtEnd = 1 - r.AllocatedAtEnd
	curve.end(offered, s.f.allocated)
	r.Repartitions = s.m.repartitions
	return r, nil
}

// drop takes a pod out of the queue for good.
func (s *sim) drop(p *simPod) {
	c := s.classes[classKey{res: p.req.res, count: p.req.count, elig: p.elig}]
	if i := slices.Index(c.q, p); i >= 0 {
		c.q = slices.Delete(c.q, i, i+1)
		s.pending--
		s.pendingDemand -= p.req.total()
	}
	p.done = true
}
