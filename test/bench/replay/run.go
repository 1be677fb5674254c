// Package replay replays a task trace of the Alibaba openb format on a
// simulated MIG fleet, once per policy, through one scheduler model, and
// compares the policies side by side: static layouts, static with the real
// fallback webhook, first fit at allocation (DRA DynamicMIG), HAMi's
// dynamic MIG with its placement scoring, nos-style greedy batches, the
// migflex planner, and a fluid reference. See docs/PLANNER.md for the
// mapping and the model, and cmd/replay for the command.
package replay

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/planner/reserve"
	"github.com/migflex/migflex/internal/planner/solver"
	"github.com/migflex/migflex/test/bench/report"
)

// Options configure a replay.
type Options struct {
	// TraceName names the pod list in the report.
	TraceName string
	Tasks     []Task
	Columns   Columns
	// TimesFrom, when the pod list has no times, lends its inter-arrival
	// gaps and durations (resampled with the seed).
	TimesFrom []Task
	Nodes     []TraceNode
	Models    ModelMap
	// Speedup divides the trace's inter-arrival times.
	Speedup float64
	// Loads are the offered loads to replay at: the fleet is shrunk (about
	// the same share of each trace model's nodes) so that its GPUs are
	// the peak demand divided by the load. The peak demand is the most
	// GPUs' worth the tasks would hold at once if each ran from its
	// arrival: at load 1 a fleet without slices (the fluid bound) serves
	// every task at once; above 1 no fleet can.
	Loads []float64
	// Drain is how long the replay runs after the last arrival.
	Drain time.Duration
	// Latency is how long a layout change (or a carved instance) takes to
	// be usable.
	Latency  time.Duration
	Seed     uint64
	Policies []string
	Planner  solver.Policy
	// Reserve is when migflex reserves nodes for pods waiting for several
	// whole GPUs (internal/planner/reserve, called as the controller
	// calls it); Max 0 reserves none.
	Reserve reserve.Policy
	// Cadence is when migflex's rounds run (zero: solver.DefaultCadence,
	// what the controller runs with).
	Cadence     solver.Cadence
	MixHalfLife time.Duration
	// MigflexPreset starts migflex's fleet from the static policies'
	// preset (whole GPUs for the whole-GPU share of the demand, the rest
	// balanced) that nos starts from too, instead of every GPU whole (MIG
	// disabled), as GPUs ship and as a cluster adopting the planner is.
	MigflexPreset bool
	// MigflexIgnoresDepartures runs migflex's rounds only for pods that
	// cannot be scheduled and every Cadence.Resync while pods wait, not
	// also when a pod leaves its devices as the controller's do (the
	// agent's layout annotation names the pods holding each device, so a
	// pod leaving changes the Node, which starts a batch): the replay
	// before issue 38, to measure the difference.
	MigflexIgnoresDepartures bool
	// FGD runs the fill experiment on FGDFraction of the nodes.
	FGD         bool
	FGDFraction float64
	// FGDOffered is how much demand the fill experiment offers, as a
	// multiple of the fleet's GPUs.
	FGDOffered float64
	// FillOnly skips the timed replays, which take minutes where the fill
	// takes seconds.
	FillOnly bool
	Parallel int
	// Progress, when set, is called after each policy's run.
	Progress func(string)
}

// Report is everything a replay measured.
type Report struct {
	Machine  report.Machine `json:"machine"`
	Trace    TraceInfo      `json:"trace"`
	Settings Settings       `json:"settings"`
	Loads    []LoadResult   `json:"loads,omitempty"`
	// NoTimes explains why the timed replay did not run.
	NoTimes string      `json:"noTimes,omitempty"`
	FGD     *FGDResults `json:"fgd,omitempty"`
	Seconds float64     `json:"seconds"`
}

// TraceInfo describes the replayed trace.
type TraceInfo struct {
	File     string  `json:"file"`
	Columns  Columns `json:"columns"`
	Tasks    int     `json:"tasks"`
	GPUTasks int     `json:"gpuTasks"`
	// TimesFrom is set when times were lent by another file.
	TimesFrom string `json:"timesFrom,omitempty"`
	// Requests counts the GPU tasks by what they ask for.
	Requests map[string]int `json:"requests"`
	// WholeShare is the share of requested GPU-time asking for whole GPUs:
	// the share of GPUs the static layouts leave whole.
	WholeShare float64 `json:"wholeShare"`
	// AvgDemand is the average GPUs' worth requested over the replay;
	// PeakDemand the most at once (tasks run from their arrival).
	AvgDemand  float64 `json:"avgDemandGPUs"`
	PeakDemand float64 `json:"peakDemandGPUs"`
	Hours      float64 `json:"hours"`
	FullGPUs   int     `json:"fullFleetGPUs"`
}

// Settings are the knobs of the run.
type Settings struct {
	Models         ModelMap       `json:"models"`
	Speedup        float64        `json:"speedup"`
	DrainSeconds   float64        `json:"drainSeconds"`
	LatencySeconds float64        `json:"latencySeconds"`
	Seed           uint64         `json:"seed"`
	Planner        solver.Policy  `json:"planner"`
	Reserve        reserve.Policy `json:"reserve"`
	MixHalfLife    string         `json:"mixHalfLife"`
	MigflexCadence solver.Cadence `json:"migflexCadence"`
	MigflexPreset  bool           `json:"migflexStartsFromPreset"`
	// MigflexDepartureRounds: a pod leaving its devices starts a batch.
	MigflexDepartureRounds bool           `json:"migflexDepartureRounds"`
	NosCadence             solver.Cadence `json:"nosCadence"`
}

// LoadResult is every policy at one load.
type LoadResult struct {
	Load        float64 `json:"load"`
	OfferedLoad float64 `json:"offeredLoad"`
	Nodes       int     `json:"nodes"`
	GPUs        int     `json:"gpus"`
	// Bound is a served share no policy can beat on this fleet (see
	// upperBound): the reference of "% of bound".
	Bound   float64  `json:"bound"`
	Results []Result `json:"results"`
}

// runConfig is what one simulation needs besides its policy.
type runConfig struct {
	start, horizon float64
	latency        float64
	wholeShare     float64
	planner        solver.Policy
	reserve        reserve.Policy
	cadence        solver.Cadence
	mixHalfLife    time.Duration
	migflexPreset  bool
	// migflexDepartures: a pod leaving starts a batch of migflex's.
	migflexDepartures bool
}

// podTemplate is a task as every policy's replay starts it.
type podTemplate struct {
	name     string
	req      request
	prio     int32
	arrival  float64
	duration float64
	spec     []string
}

// Run replays the trace for every policy at every load, and the fill
// experiment.
func Run(o Options) (*Report, error) {
	began := time.Now()
	if err := o.defaults(); err != nil {
		return nil, err
	}
	rep := &Report{Machine: report.DescribeMachine()}
	rep.Settings = Settings{
		Models: o.Models, Speedup: o.Speedup, DrainSeconds: o.Drain.Seconds(), LatencySeconds: o.Latency.Seconds(),
		Seed: o.Seed, Planner: o.Planner, Reserve: o.Reserve, MixHalfLife: o.MixHalfLife.String(),
		MigflexCadence: o.Cadence, NosCadence: nosCadence, MigflexPreset: o.MigflexPreset, MigflexDepartureRounds: !o.MigflexIgnoresDepartures,
	}
	full, err := newFleet(o.Nodes, o.Models)
	if err != nil {
		return nil, err
	}
	rep.Trace = TraceInfo{File: o.TraceName, Columns: o.Columns, Tasks: len(o.Tasks), FullGPUs: int(full.capacity), Requests: map[string]int{}}
	timed, err := o.times()
	if err != nil {
		rep.NoTimes = err.Error()
	}
	if o.FillOnly {
		timed, rep.NoTimes = nil, "only the fill experiment was asked for"
	}
	templates := buildTemplates(o, full, timed)
	rep.Trace.GPUTasks = len(templates)
	for _, t := range templates {
		rep.Trace.Requests[fmt.Sprintf("%s x%d", t.req.res, t.req.count)]++
	}
	if len(templates) == 0 {
		return nil, errors.New("the trace has no GPU tasks")
	}
	if timed != nil {
		cfg := baseConfig(o, templates)
		rep.Trace.WholeShare = cfg.wholeShare
		rep.Trace.AvgDemand = avgDemand(templates, cfg)
		rep.Trace.PeakDemand = peakDemand(templates, cfg)
		rep.Trace.Hours = (cfg.horizon - cfg.start) / 3600
		if len(o.Loads) > 0 && o.TimesFrom != nil && !o.Columns.Times {
			rep.Trace.TimesFrom = "lent"
		}
		rep.Loads, err = runLoads(o, full, templates, cfg, rep.Trace.PeakDemand)
		if err != nil {
			return nil, err
		}
	}
	if o.FGD {
		fgd, err := runFGD(o, templates)
		if err != nil {
			return nil, err
		}
		rep.FGD = fgd
	}
	rep.Machine.LoadAfter = report.LoadAverage()
	rep.Seconds = time.Since(began).Seconds()
	return rep, nil
}

func (o *Options) defaults() error {
	if o.Models == nil {
		o.Models = ModelMap{"*": DefaultModel}
	}
	if o.Speedup <= 0 {
		return fmt.Errorf("speedup %v must be positive", o.Speedup)
	}
	if o.Parallel <= 0 {
		o.Parallel = runtime.NumCPU()
	}
	if len(o.Policies) == 0 {
		o.Policies = AllPolicies
	}
	for _, p := range o.Policies {
		if !slices.Contains(AllPolicies, p) {
			return fmt.Errorf("unknown policy %q (known: %v)", p, AllPolicies)
		}
	}
	for _, l := range o.Loads {
		if l <= 0 || math.IsInf(l, 0) || math.IsNaN(l) {
			return fmt.Errorf("load %v must be positive", l)
		}
	}
	if o.FGDFraction <= 0 || o.FGDFraction > 1 {
		o.FGDFraction = 1
	}
	if o.FGDOffered <= 0 {
		o.FGDOffered = 1.3
	}
	if o.FillOnly && !o.FGD {
		return errors.New("the fill experiment alone was asked for (-fill-only) but it is off (-fgd=false): nothing to run")
	}
	if o.Cadence == (solver.Cadence{}) {
		o.Cadence = solver.DefaultCadence()
	}
	if err := o.Cadence.Validate(); err != nil {
		return fmt.Errorf("migflex cadence: %w", err)
	}
	if err := o.Reserve.Validate(); err != nil {
		return fmt.Errorf("migflex reservations: %w", err)
	}
	return o.Planner.Validate()
}

// timing is a task's arrival and duration, in replay seconds.
type timing struct{ arrival, duration float64 }

// times gives every task its arrival (compressed by the speedup) and
// duration: the file's own, or resampled from TimesFrom.
func (o *Options) times() ([]timing, error) {
	out := make([]timing, len(o.Tasks))
	if o.Columns.Times {
		t0 := math.Inf(1)
		for _, t := range o.Tasks {
			t0 = min(t0, t.Created)
		}
		for i, t := range o.Tasks {
			out[i] = timing{(t.Created - t0) / o.Speedup, t.Duration}
		}
		return out, nil
	}
	if len(o.TimesFrom) == 0 {
		return nil, errors.New("the pod list has no creation_time, deletion_time and scheduled_time columns: only the fill experiment runs (give -times-from a pod list that has them to lend its arrival gaps and durations)")
	}
	var created, durations []float64
	for _, t := range o.TimesFrom {
		if t.NumGPU > 0 {
			created = append(created, t.Created)
			durations = append(durations, t.Duration)
		}
	}
	if len(created) < 2 {
		return nil, errors.New("-times-from has fewer than two GPU tasks with times")
	}
	slices.Sort(created)
	gaps := make([]float64, len(created)-1)
	for i := range gaps {
		gaps[i] = created[i+1] - created[i]
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x74696d6573))
	at := 0.0
	for i := range out {
		if i > 0 {
			at += gaps[rng.IntN(len(gaps))] / o.Speedup
		}
		out[i] = timing{at, durations[rng.IntN(len(durations))]}
	}
	return out, nil
}

// buildTemplates maps the GPU tasks to pods. Without times (timed nil)
// every arrival is zero: the fill experiment uses only the order.
func buildTemplates(o Options, full *fleet, timed []timing) []podTemplate {
	var out []podTemplate
	for i, t := range o.Tasks {
		model := full.primary
		if ms := specModels(o.Models, t.Spec); len(ms) == 1 {
			if mi, ok := full.models[ms[0]]; ok {
				model = mi
			}
		}
		req, ok := requestFor(t, model.m)
		if !ok {
			continue
		}
		pt := podTemplate{name: fmt.Sprintf("%s-%d", t.Name, i), req: req, prio: priorityOf(t.QoS), spec: t.Spec}
		if timed != nil {
			pt.arrival, pt.duration = timed[i].arrival, timed[i].duration
		}
		out = append(out, pt)
	}
	return out
}

func specModels(m ModelMap, spec []string) []string {
	var out []string
	for _, s := range spec {
		if v := m.of(s); !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

func baseConfig(o Options, templates []podTemplate) *runConfig {
	cfg := &runConfig{start: math.Inf(1), horizon: 0, latency: o.Latency.Seconds(), planner: o.Planner, reserve: o.Reserve, mixHalfLife: o.MixHalfLife, cadence: o.Cadence,
		migflexPreset: o.MigflexPreset, migflexDepartures: !o.MigflexIgnoresDepartures}
	for _, t := range templates {
		cfg.start = min(cfg.start, t.arrival)
		cfg.horizon = max(cfg.horizon, t.arrival)
	}
	cfg.horizon += o.Drain.Seconds()
	var whole, all float64
	for _, t := range templates {
		w := t.req.total() * max(0, min(t.duration, cfg.horizon-t.arrival))
		all += w
		if t.req.res == resourcename.GPU {
			whole += w
		}
	}
	if all > 0 {
		cfg.wholeShare = whole / all
	}
	return cfg
}

// peakDemand is the most GPUs' worth the tasks hold at once when each runs
// from its arrival.
func peakDemand(templates []podTemplate, cfg *runConfig) float64 {
	type step struct{ t, d float64 }
	steps := make([]step, 0, 2*len(templates))
	for _, t := range templates {
		steps = append(steps, step{t.arrival, t.req.total()}, step{t.arrival + t.duration, -t.req.total()})
	}
	slices.SortFunc(steps, func(a, b step) int {
		// Departures first at equal times: a task ending as another
		// arrives does not overlap it.
		return cmp.Or(cmp.Compare(a.t, b.t), cmp.Compare(a.d, b.d))
	})
	cur, peak := 0.0, 0.0
	for _, s := range steps {
		if s.t > cfg.horizon {
			break
		}
		cur += s.d
		peak = max(peak, cur)
	}
	return peak
}

// avgDemand is the GPUs' worth requested on average over the replay, as if
// every task ran from its arrival.
func avgDemand(templates []podTemplate, cfg *runConfig) float64 {
	total := 0.0
	for _, t := range templates {
		total += t.req.total() * max(0, min(t.duration, cfg.horizon-t.arrival))
	}
	return total / (cfg.horizon - cfg.start)
}

func runLoads(o Options, full *fleet, templates []podTemplate, cfg *runConfig, demand float64) ([]LoadResult, error) {
	loads := o.Loads
	if len(loads) == 0 {
		loads = []float64{demand / full.capacity}
	}
	type job struct {
		load   int
		policy string
		nodes  []TraceNode
	}
	results := make([]LoadResult, len(loads))
	var jobs []job
	for li, load := range loads {
		frac := demand / (load * full.capacity)
		nodes := sampleNodes(o.Nodes, frac, o.Seed)
		gpus := 0
		for _, n := range nodes {
			gpus += n.GPUs
		}
		results[li] = LoadResult{Load: load, OfferedLoad: demand / float64(gpus), Nodes: len(nodes), GPUs: gpus,
			Bound: upperBound(templates, float64(gpus), cfg), Results: make([]Result, len(o.Policies))}
		for _, p := range o.Policies {
			jobs = append(jobs, job{li, p, nodes})
		}
	}
	var mu sync.Mutex
	var errs []error
	work := make(chan job)
	var wg sync.WaitGroup
	for range o.Parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range work {
				began := time.Now()
				r, err := runOne(o, j.policy, j.nodes, templates, cfg)
				r.Seconds = time.Since(began).Seconds()
				mu.Lock()
				if err != nil {
					errs = append(errs, fmt.Errorf("load %g %s: %w", loads[j.load], j.policy, err))
				}
				results[j.load].Results[slices.Index(o.Policies, j.policy)] = r
				mu.Unlock()
				if o.Progress != nil {
					o.Progress(fmt.Sprintf("load %g %s: %.1fs", loads[j.load], j.policy, r.Seconds))
				}
			}
		}()
	}
	for _, j := range jobs {
		work <- j
	}
	close(work)
	wg.Wait()
	return results, errors.Join(errs...)
}

// runOne replays one policy on one fleet.
func runOne(o Options, policyName string, nodes []TraceNode, templates []podTemplate, cfg *runConfig) (Result, error) {
	f, err := newFleet(nodes, o.Models)
	if err != nil {
		return Result{}, err
	}
	if policyName == PolicyFluid {
		return fluid(templates, f.capacity, cfg), nil
	}
	pol, err := newPolicy(policyName, cfg)
	if err != nil {
		return Result{}, err
	}
	s := newSim(cfg, pol, f, templates)
	if err := s.run(); err != nil {
		return Result{}, err
	}
	return s.result(), nil
}

func newSim(cfg *runConfig, pol policy, f *fleet, templates []podTemplate) *sim {
	s := &sim{cfg: cfg, pol: pol, f: f, classes: map[classKey]*podClass{}, dirty: map[corev1.ResourceName]bool{}, now: cfg.start}
	for i, t := range templates {
		p := &simPod{id: i, name: t.name, req: t.req, asked: t.req.total(), askedKind: t.req.kind(), wholeAsk: t.req.res == resourcename.GPU, prio: t.prio, arrival: t.arrival,
			duration: t.duration, start: -1}
		p.k8s = k8sPod(t.name, t.req, t.prio, t.arrival, t.spec)
		s.pods = append(s.pods, p)
	}
	s.eligs = newEligCache(f)
	for _, p := range s.pods {
		p.elig = s.eligs.of(p.k8s)
	}
	return s
}
