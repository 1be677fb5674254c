package replay

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"
)

// Scoring compares one policy (the subject, migflex) with the other real
// policies over many replays: every file, resampling and seed. Reports of
// the same pod list and seed are merged, so the other policies, which do
// not change with the planner, can be replayed once and the subject again.
type Scoring struct {
	// Subject is the policy judged; Reference is the one whose wait it is
	// held to below saturation (first fit: every MIG pod waits one carve),
	// whose fill it is held to and whose eight-GPU pods it is compared
	// with.
	Subject, Reference string
	// Twin is a policy that differs from Reference only in details that
	// should not matter (HAMi: which GPU and start an instance is carved
	// at): how far apart the two are measures the replay's noise.
	Twin string
	// Tie is the least band: how far from the best other real policy's
	// the subject's served share may be and count as a tie (0.0005: 0.05
	// points).
	Tie float64
	// Band is how each point's band is set (BandTwins, BandSeeds, BandTie;
	// see ScoredPoint.Band).
	Band string
	// Against, when not empty, are the only policies the subject is judged
	// against (migflex-dynamic against dra-first-fit alone); the others
	// still set the band.
	Against []string `json:"against,omitempty"`
}

// Band modes, and where a point's band came from (ScoredPoint.BandFrom).
const (
	// BandTwins: the most the reference and its twin are apart at the
	// pod list and load over the seeds scored (its resamplings), at least
	// Tie: the noise of a difference between two policies that should
	// serve the same. The default.
	BandTwins = "twins"
	// BandSeeds: the spread of the reference's served share over the
	// seeds at the pod list and load, or its gap to the twin at the point,
	// whichever is larger, at least Tie. The spread is mostly what the
	// resampling moves every policy by alike (a different fleet, other
	// pods), which a comparison at one seed does not see: a wide band.
	BandSeeds = "seeds"
	// BandTie: Tie alone, as the scoreboard was before issue 38.
	BandTie = "tie"
	// BandFromTwin: set by the twins' gap at the point (BandSeeds).
	BandFromTwin = "twin"
)

// DefaultScoring judges migflex against the best other real policy
// outside the twins' band, and its wait against first fit's.
func DefaultScoring() Scoring {
	return Scoring{Subject: PolicyMigflex, Reference: PolicyFirstFit, Twin: PolicyHAMi, Tie: 0.0005, Band: BandTwins}
}

// others names what the subject is judged against.
func (sc Scoring) others() string {
	switch len(sc.Against) {
	case 0:
		return "the best other real policy"
	case 1:
		return sc.Against[0]
	}
	return "the best of " + strings.Join(sc.Against, ", ")
}

// notReal are the policies that are references, not something a cluster
// can run.
var notReal = map[string]bool{PolicyFluid: true}

// ours are migflex's own policies: one is never judged against another
// (migflex-dynamic is the DRA driver's mode beside the planner, not a peer
// of it), unless Against names it.
var ours = map[string]bool{PolicyMigflex: true, PolicyMigflexDynamic: true}

// eightGPUKind is the request kind the scoreboard follows on its own: the
// pods that lose most where the subject loses (docs/PLANNER.md).
const eightGPUKind = "gpu x8"

// Outcomes of a point against the best other real policy.
const (
	OutcomeWin  = "win"
	OutcomeTie  = "tie"
	OutcomeLoss = "loss"
)

// Scoreboard is the scoring of a set of replays.
type Scoreboard struct {
	Scoring Scoring `json:"scoring"`
	// Runs are the merged replays, by pod list then seed.
	Runs []ScoredRun `json:"runs"`
	// Wins, Ties and Losses count the points at load 1 or more: the
	// subject's served share above the best other real policy's by more
	// than the point's band, within it, below by more.
	Wins, Ties, Losses int
	// TieWins, TieTies and TieLosses count them against Tie alone (the
	// scoreboard before issue 38), for comparison.
	TieWins, TieTies, TieLosses int
	// BandFrom counts the points by what set their band.
	BandFrom map[string]int `json:"bandFrom,omitempty"`
	// GPUTime sums the served GPU-time at those points, the subject's
	// against each other real policy's, over the points both ran.
	GPUTime []PeerGPUTime `json:"gpuTime,omitempty"`
	// Eight compares, per load, the subject's eight-GPU pods with the
	// reference's.
	Eight []EightAtLoad `json:"eight,omitempty"`
	// WaitMisses counts the points below saturation (load up to 1) where
	// the subject's p99 wait exceeds the reference's plus the change
	// latency.
	WaitMisses, WaitPoints int
	// MaxChurn is the subject's most repartitions per GPU-hour.
	MaxChurn float64
	// FillMisses counts the fills where the reference reached 99% of the
	// fleet before its first failure and the subject did not.
	FillMisses, FillPoints int
	// LossesByKind counts the losses by the request kind that loses most
	// there (ScoredPoint.Kind).
	LossesByKind map[string]int `json:"lossesByKind,omitempty"`
}

// PeerGPUTime is the served GPU-time, in GPU-hours, of the subject and of
// one other real policy over the points at load 1 or more where both ran.
type PeerGPUTime struct {
	Policy    string  `json:"policy"`
	Points    int     `json:"points"`
	Requested float64 `json:"requestedGPUHours"`
	Subject   float64 `json:"subjectGPUHours"`
	Peer      float64 `json:"peerGPUHours"`
}

// EightAtLoad is the eight-GPU pods' served GPU-time at one load, summed
// over the points where both the subject and the reference ran them, and
// the points where the subject's falls short of the reference's by more
// than the point's band (in points of the whole requested GPU-time).
type EightAtLoad struct {
	Load      float64 `json:"load"`
	Points    int     `json:"points"`
	Requested float64 `json:"requestedGPUHours"`
	Subject   float64 `json:"subjectGPUHours"`
	Reference float64 `json:"referenceGPUHours"`
	Below     int     `json:"pointsBelow"`
	// Short is how many points the subject's falls short of the
	// reference's at Below's points, summed.
	Short float64 `json:"short"`
}

// ScoredRun is one pod list and seed.
type ScoredRun struct {
	Trace   string        `json:"trace"`
	Seed    uint64        `json:"seed"`
	Latency float64       `json:"latencySeconds"`
	Points  []ScoredPoint `json:"points"`
	// Fill is the subject's and the reference's fill, when it ran.
	Fill *ScoredFill `json:"fill,omitempty"`
}

// ScoredPoint is one load of one run.
type ScoredPoint struct {
	Load float64 `json:"load"`
	// Served is the subject's served share; Best the best other real
	// policy's (BestPolicy).
	Served     float64 `json:"served"`
	Best       float64 `json:"best"`
	BestPolicy string  `json:"bestPolicy"`
	// Band is the noise band at the point (see Scoring.Band) and BandFrom
	// what set it: BandTwins, BandSeeds, BandFromTwin or BandTie. Outcome
	// is the subject's against Best, outside the band, at load 1 or more.
	Band     float64 `json:"band"`
	BandFrom string  `json:"bandFrom"`
	Outcome  string  `json:"outcome,omitempty"`
	// Requested is the GPU-time the pods asked for, in GPU-hours (cut at
	// the replay's end, as the served share is); Peers the other real
	// policies' served shares.
	Requested float64            `json:"requestedGPUHours"`
	Peers     map[string]float64 `json:"peers,omitempty"`
	// Eight and RefEight are the eight-GPU pods' served GPU-hours under
	// the subject and the reference, and EightRequested what they asked
	// for; -1 where not replayed.
	Eight          float64 `json:"eightGPUHours"`
	RefEight       float64 `json:"refEightGPUHours"`
	EightRequested float64 `json:"eightRequestedGPUHours"`
	// WaitP99 is the subject's; RefWaitP99 the reference's, -1 where the
	// reference was not replayed (JSON has no NaN).
	WaitP99    float64 `json:"waitP99"`
	RefWaitP99 float64 `json:"refWaitP99"`
	Churn      float64 `json:"churn"`
	// Kind is the request kind that loses most against the best other
	// policy, and KindMargin what it costs there: the kind's share of the
	// requested GPU-time times the difference of its served shares (the
	// kinds' margins add up to the point's). Empty where no kind loses.
	Kind       string  `json:"kind,omitempty"`
	KindMargin float64 `json:"kindMargin,omitempty"`
	// Missing names policies absent from this point's replays.
	Missing []string `json:"missing,omitempty"`
}

// ScoredFill is the fill experiment's first failure and end.
type ScoredFill struct {
	Subject, Reference FGDResult
}

var seedSuffix = regexp.MustCompile(` \(seed \d+\)$`)

// requestedGPUHours is the GPU-time a replay's pods asked for, cut at its
// end: the average demand over its hours.
func requestedGPUHours(t TraceInfo) float64 { return t.AvgDemand * t.Hours }

// Score merges the reports and scores the subject.
func (sc Scoring) Score(reports []*Report) (*Scoreboard, error) {
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	type key struct {
		trace string
		seed  uint64
	}
	type merged struct {
		latency   float64
		requested float64
		loads     map[float64]map[string]Result
		fill      map[string]FGDResult
	}
	runs := map[key]*merged{}
	for _, r := range reports {
		k := key{seedSuffix.ReplaceAllString(r.Trace.File, ""), r.Settings.Seed}
		m := runs[k]
		if m == nil {
			m = &merged{latency: r.Settings.LatencySeconds, requested: -1, loads: map[float64]map[string]Result{}, fill: map[string]FGDResult{}}
			runs[k] = m
		}
		if m.latency != r.Settings.LatencySeconds {
			return nil, fmt.Errorf("%s seed %d: replays with change latencies %v s and %v s", k.trace, k.seed, m.latency, r.Settings.LatencySeconds)
		}
		// A fill alone has no times, so no GPU-time requested.
		if req := requestedGPUHours(r.Trace); len(r.Loads) > 0 {
			if m.requested >= 0 && math.Abs(req-m.requested) > 1e-9*max(req, m.requested) {
				return nil, fmt.Errorf("%s seed %d: replays of different pods (%.6g and %.6g GPU-hours requested)", k.trace, k.seed, m.requested, req)
			}
			m.requested = req
		}
		for _, l := range r.Loads {
			if m.loads[l.Load] == nil {
				m.loads[l.Load] = map[string]Result{}
			}
			for _, res := range l.Results {
				m.loads[l.Load][res.Policy] = res
			}
		}
		if r.FGD != nil {
			for _, res := range r.FGD.Results {
				m.fill[res.Policy] = res
			}
		}
	}
	// Over the seeds at each pod list and load (its resamplings): the
	// reference's served share, and the most it and its twin are apart.
	type traceLoad struct {
		trace string
		load  float64
	}
	refRange := map[traceLoad][2]float64{}
	refSeen := map[traceLoad]int{}
	twinMax := map[traceLoad]float64{}
	for k, m := range runs {
		for load, byPolicy := range m.loads {
			ref, ok := byPolicy[sc.Reference]
			if !ok {
				continue
			}
			tl := traceLoad{k.trace, load}
			r, n := refRange[tl], refSeen[tl]
			if n == 0 {
				r = [2]float64{ref.ServedShare, ref.ServedShare}
			}
			refRange[tl] = [2]float64{min(r[0], ref.ServedShare), max(r[1], ref.ServedShare)}
			refSeen[tl] = n + 1
			if twin, ok := byPolicy[sc.Twin]; ok {
				twinMax[tl] = max(twinMax[tl], math.Abs(ref.ServedShare-twin.ServedShare))
			}
		}
	}
	b := &Scoreboard{Scoring: sc}
	for k, m := range runs {
		run := ScoredRun{Trace: k.trace, Seed: k.seed, Latency: m.latency}
		for load, byPolicy := range m.loads {
			subj, ok := byPolicy[sc.Subject]
			if !ok {
				continue
			}
			p := ScoredPoint{Load: load, Served: subj.ServedShare, WaitP99: subj.WaitP99, Churn: subj.RepartitionsPerGPUHour, Best: -1,
				Requested: m.requested, Eight: -1, RefEight: -1}
			for _, name := range AllPolicies {
				res, ok := byPolicy[name]
				switch {
				case name == sc.Subject || notReal[name]:
				case len(sc.Against) == 0 && ours[sc.Subject] && ours[name]:
				case len(sc.Against) > 0 && !slices.Contains(sc.Against, name):
				case !ok:
					p.Missing = append(p.Missing, name)
				default:
					if p.Peers == nil {
						p.Peers = map[string]float64{}
					}
					p.Peers[name] = res.ServedShare
					if res.ServedShare > p.Best {
						p.Best, p.BestPolicy = res.ServedShare, name
					}
				}
			}
			if p.Best >= 0 {
				p.Kind, p.KindMargin = losingKind(subj, byPolicy[p.BestPolicy])
			}
			p.RefWaitP99 = -1
			ref, hasRef := byPolicy[sc.Reference]
			if hasRef {
				p.RefWaitP99 = ref.WaitP99
				if e, req, ok := kindGPUHours(subj, eightGPUKind, m.requested); ok {
					if re, _, ok := kindGPUHours(ref, eightGPUKind, m.requested); ok {
						p.Eight, p.RefEight, p.EightRequested = e, re, req
					}
				}
			}
			tl := traceLoad{k.trace, load}
			spread := -1.0
			if refSeen[tl] >= 2 {
				spread = refRange[tl][1] - refRange[tl][0]
			}
			twinGap := -1.0
			if twin, ok := byPolicy[sc.Twin]; hasRef && ok {
				twinGap = math.Abs(ref.ServedShare - twin.ServedShare)
			}
			p.Band, p.BandFrom = sc.band(spread, twinGap, twinMax[tl])
			if p.Load >= 1 && p.Best >= 0 {
				p.Outcome = outcome(p.Served-p.Best, p.Band)
			}
			run.Points = append(run.Points, p)
		}
		slices.SortFunc(run.Points, func(a, b ScoredPoint) int { return cmp.Compare(a.Load, b.Load) })
		if s, ok := m.fill[sc.Subject]; ok {
			if ref, ok := m.fill[sc.Reference]; ok {
				run.Fill = &ScoredFill{Subject: s, Reference: ref}
			}
		}
		if len(run.Points) > 0 || run.Fill != nil {
			b.Runs = append(b.Runs, run)
		}
	}
	slices.SortFunc(b.Runs, func(x, y ScoredRun) int { return cmp.Or(cmp.Compare(x.Trace, y.Trace), cmp.Compare(x.Seed, y.Seed)) })
	b.tally()
	return b, nil
}

// band is a point's noise band and what set it, from the reference's
// spread over the seeds at the pod list and load and its gap to its twin
// at the point (-1: unknown), and the most the twins are apart over those
// seeds.
func (sc Scoring) band(spread, twinGap, twinMax float64) (float64, string) {
	band, from := sc.Tie, BandTie
	switch sc.Band {
	case BandTwins:
		if twinMax > band {
			band, from = twinMax, BandTwins
		}
	case BandSeeds:
		if spread > band {
			band, from = spread, BandSeeds
		}
		if twinGap > band {
			band, from = twinGap, BandFromTwin
		}
	}
	return band, from
}

// Validate rejects a scoring Score cannot run.
func (sc Scoring) Validate() error {
	switch sc.Band {
	case BandTwins, BandSeeds, BandTie:
	default:
		return fmt.Errorf("band %q: want %s, %s or %s", sc.Band, BandTwins, BandSeeds, BandTie)
	}
	if sc.Tie < 0 {
		return fmt.Errorf("tie %v is negative", sc.Tie)
	}
	return nil
}

// outcome is a margin judged outside a band.
func outcome(d, band float64) string {
	switch {
	case d > band:
		return OutcomeWin
	case d < -band:
		return OutcomeLoss
	}
	return OutcomeTie
}

// kindGPUHours is a request kind's served GPU-hours under a result, and
// what it asked for, out of requested GPU-hours in all; false when the
// result has no such kind.
func kindGPUHours(r Result, kind string, requested float64) (served, asked float64, ok bool) {
	for _, k := range r.ByKind {
		if k.Kind == kind {
			return k.RequestedShare * k.ServedShare * requested, k.RequestedShare * requested, true
		}
	}
	return 0, 0, false
}

// tally counts the runs' points into the scoreboard's totals.
func (b *Scoreboard) tally() {
	sc := b.Scoring
	peers := map[string]*PeerGPUTime{}
	eight := map[float64]*EightAtLoad{}
	for _, run := range b.Runs {
		for _, p := range run.Points {
			b.MaxChurn = max(b.MaxChurn, p.Churn)
			if p.Load >= 1 && p.Best >= 0 {
				if b.BandFrom == nil {
					b.BandFrom = map[string]int{}
				}
				b.BandFrom[p.BandFrom]++
				switch p.Outcome {
				case OutcomeWin:
					b.Wins++
				case OutcomeTie:
					b.Ties++
				default:
					b.Losses++
					if p.Kind != "" {
						if b.LossesByKind == nil {
							b.LossesByKind = map[string]int{}
						}
						b.LossesByKind[p.Kind]++
					}
				}
				switch outcome(p.Served-p.Best, sc.Tie) {
				case OutcomeWin:
					b.TieWins++
				case OutcomeTie:
					b.TieTies++
				default:
					b.TieLosses++
				}
				for name, served := range p.Peers {
					g := peers[name]
					if g == nil {
						g = &PeerGPUTime{Policy: name}
						peers[name] = g
					}
					g.Points++
					g.Requested += p.Requested
					g.Subject += p.Served * p.Requested
					g.Peer += served * p.Requested
				}
			}
			if p.Load >= 1 && p.Eight >= 0 {
				e := eight[p.Load]
				if e == nil {
					e = &EightAtLoad{Load: p.Load}
					eight[p.Load] = e
				}
				e.Points++
				e.Requested += p.EightRequested
				e.Subject += p.Eight
				e.Reference += p.RefEight
				if short := (p.RefEight - p.Eight) / p.Requested; p.Requested > 0 && short > p.Band {
					e.Below++
					e.Short += short
				}
			}
			if p.Load <= 1 && p.RefWaitP99 >= 0 {
				b.WaitPoints++
				if p.WaitP99 > p.RefWaitP99+run.Latency {
					b.WaitMisses++
				}
			}
		}
		if f := run.Fill; f != nil && f.Reference.AllocatedAtFirstFailure >= 0.99 {
			b.FillPoints++
			if f.Subject.AllocatedAtFirstFailure >= 0 && f.Subject.AllocatedAtFirstFailure < 0.99 {
				b.FillMisses++
			}
		}
	}
	for _, name := range AllPolicies {
		if g := peers[name]; g != nil {
			b.GPUTime = append(b.GPUTime, *g)
		}
	}
	for _, e := range eight {
		b.Eight = append(b.Eight, *e)
	}
	slices.SortFunc(b.Eight, func(x, y EightAtLoad) int { return cmp.Compare(x.Load, y.Load) })
}

// losingKind is the request kind whose served GPU-time the subject loses
// most of against best, by its share of the requested GPU-time, and that
// loss; empty when no kind loses.
func losingKind(subj, best Result) (string, float64) {
	bestBy := map[string]KindResult{}
	for _, k := range best.ByKind {
		bestBy[k.Kind] = k
	}
	kind, margin := "", 0.0
	for _, k := range subj.ByKind {
		o, ok := bestBy[k.Kind]
		if !ok {
			continue
		}
		if m := k.RequestedShare*k.ServedShare - o.RequestedShare*o.ServedShare; m < margin {
			kind, margin = k.Kind, m
		}
	}
	return kind, margin
}

// WriteMarkdown writes the scoreboard: the totals (wins, ties and losses
// outside the noise band and within the fixed tie, the served GPU-time
// against each other real policy's, the eight-GPU pods against the
// reference's), then per pod list the subject's served share against the
// best other real policy's at each load and seed with the point's band,
// its p99 wait against the reference's below saturation, and the fill.
func (b *Scoreboard) WriteMarkdown(w io.Writer) error {
	var s strings.Builder
	sc := b.Scoring
	n := b.Wins + b.Ties + b.Losses
	if sc.Band != BandTie {
		fmt.Fprintf(&s, "%s against %s at load 1 or more, outside each point's noise band: **%d wins, %d ties, %d losses** of %d "+
			"(the band: %s, at least %.2f points; set by %s). Within %.2f points alone: %d wins, %d ties, %d losses.\n\n",
			sc.Subject, sc.others(), b.Wins, b.Ties, b.Losses, n, bandText(sc), 100*sc.Tie, bandSources(b.BandFrom),
			100*sc.Tie, b.TieWins, b.TieTies, b.TieLosses)
	} else {
		fmt.Fprintf(&s, "%s against %s at load 1 or more (a tie is within %.2f points): **%d wins, %d ties, %d losses** of %d.\n\n",
			sc.Subject, sc.others(), 100*sc.Tie, b.Wins, b.Ties, b.Losses, n)
	}
	if len(b.GPUTime) > 0 {
		s.WriteString("Served GPU-time at load 1 or more, summed over the points both ran:\n\n")
		fmt.Fprintf(&s, "| policy | points | requested GPU-h | %s GPU-h | policy's GPU-h | %s ahead by |\n| --- | ---: | ---: | ---: | ---: | ---: |\n", sc.Subject, sc.Subject)
		for _, g := range b.GPUTime {
			fmt.Fprintf(&s, "| %s | %d | %.0f | %.0f | %.0f | %+.0f GPU-h (%+.3f points) |\n", g.Policy, g.Points, g.Requested, g.Subject, g.Peer,
				g.Subject-g.Peer, 100*(g.Subject-g.Peer)/g.Requested)
		}
		s.WriteString("\n")
	}
	if len(b.Eight) > 0 {
		fmt.Fprintf(&s, "Eight-GPU pods' served share, %s against %s, summed over the points both ran; points where %s's falls short by more than the band (in points of all requested GPU-time):\n\n", sc.Subject, sc.Reference, sc.Subject)
		fmt.Fprintf(&s, "| load | points | %s | %s | points short | short by (sum) |\n| ---: | ---: | ---: | ---: | ---: | ---: |\n", sc.Subject, sc.Reference)
		for _, e := range b.Eight {
			fmt.Fprintf(&s, "| %g | %d | %s | %s | %d | %.2f |\n", e.Load, e.Points, ratio(e.Subject, e.Requested), ratio(e.Reference, e.Requested), e.Below, 100*e.Short)
		}
		s.WriteString("\n")
	}
	fmt.Fprintf(&s, "p99 wait at load up to 1 above %s's plus the change latency: %d of %d points. Most repartitions per GPU-hour: %.3f. ",
		sc.Reference, b.WaitMisses, b.WaitPoints, b.MaxChurn)
	fmt.Fprintf(&s, "Fill at the first failure under 99%% where %s reaches it: %d of %d.\n\n", sc.Reference, b.FillMisses, b.FillPoints)
	if len(b.LossesByKind) > 0 {
		kinds := slices.Collect(maps.Keys(b.LossesByKind))
		slices.SortFunc(kinds, func(x, y string) int {
			return cmp.Or(cmp.Compare(b.LossesByKind[y], b.LossesByKind[x]), cmp.Compare(x, y))
		})
		parts := make([]string, len(kinds))
		for i, k := range kinds {
			parts[i] = fmt.Sprintf("%s %d", k, b.LossesByKind[k])
		}
		fmt.Fprintf(&s, "Losses by the request kind that loses most there: %s.\n\n", strings.Join(parts, ", "))
	}
	traces := []string{}
	for _, r := range b.Runs {
		if !slices.Contains(traces, r.Trace) {
			traces = append(traces, r.Trace)
		}
	}
	for _, tr := range traces {
		var runs []ScoredRun
		for _, r := range b.Runs {
			if r.Trace == tr {
				runs = append(runs, r)
			}
		}
		fmt.Fprintf(&s, "**%s**\n\n| load |", tr)
		for _, r := range runs {
			fmt.Fprintf(&s, " seed %d: %s − best (who) | p99 / %s's |", r.Seed, sc.Subject, sc.Reference)
		}
		s.WriteString("\n| ---: |")
		for range runs {
			s.WriteString(" ---: | ---: |")
		}
		s.WriteString("\n")
		var loads []float64
		for _, r := range runs {
			for _, p := range r.Points {
				if !slices.Contains(loads, p.Load) {
					loads = append(loads, p.Load)
				}
			}
		}
		slices.Sort(loads)
		for _, l := range loads {
			fmt.Fprintf(&s, "| %g |", l)
			for _, r := range runs {
				i := slices.IndexFunc(r.Points, func(p ScoredPoint) bool { return p.Load == l })
				if i < 0 {
					s.WriteString(" | |")
					continue
				}
				p := r.Points[i]
				mark := ""
				switch p.Outcome {
				case OutcomeWin:
					mark = " win"
				case OutcomeLoss:
					mark = " **loss**"
					if p.Kind != "" {
						mark += fmt.Sprintf(", %s %+.2f", p.Kind, 100*p.KindMargin)
					}
				}
				band := ""
				if sc.Band != BandTie && p.Load >= 1 {
					band = fmt.Sprintf(" ±%.2f %s", 100*p.Band, p.BandFrom)
				}
				fmt.Fprintf(&s, " %.2f%% − %.2f%% = %+.2f (%s)%s%s | %s / %s |", 100*p.Served, 100*p.Best, 100*(p.Served-p.Best),
					short(p.BestPolicy), band, mark, seconds(p.WaitP99), refSeconds(p.RefWaitP99))
			}
			s.WriteString("\n")
		}
		fills := []string{}
		for _, r := range runs {
			if f := r.Fill; f != nil {
				fills = append(fills, fmt.Sprintf("seed %d: %s %s / %.1f%%, %s %s / %.1f%%", r.Seed,
					sc.Subject, pct(f.Subject.AllocatedAtFirstFailure), 100*f.Subject.AllocatedAtEnd,
					sc.Reference, pct(f.Reference.AllocatedAtFirstFailure), 100*f.Reference.AllocatedAtEnd))
			}
		}
		if len(fills) > 0 {
			fmt.Fprintf(&s, "\nFill, allocated at the first failure / at the end: %s.\n", strings.Join(fills, "; "))
		}
		s.WriteString("\n")
	}
	_, err := io.WriteString(w, s.String())
	return err
}

// bandText says how a scoring sets each point's band.
func bandText(sc Scoring) string {
	if sc.Band == BandSeeds {
		return fmt.Sprintf("the larger of %s's spread over the seeds at the pod list and load and its gap to %s at the point", sc.Reference, sc.Twin)
	}
	return fmt.Sprintf("the most %s and %s are apart at the pod list and load over the seeds", sc.Reference, sc.Twin)
}

// bandSources says how many points each source set the band at.
func bandSources(from map[string]int) string {
	var parts []string
	for _, f := range []string{BandTwins, BandSeeds, BandFromTwin, BandTie} {
		if from[f] > 0 {
			parts = append(parts, fmt.Sprintf("%s at %d", bandSourceText[f], from[f]))
		}
	}
	if len(parts) == 0 {
		return "no point"
	}
	return strings.Join(parts, ", ")
}

var bandSourceText = map[string]string{BandTwins: "the twins' gap", BandSeeds: "the seeds' spread", BandFromTwin: "the twins' gap at the point", BandTie: "the least band"}

// ratio is a share in percent, "-" when there is nothing to share.
func ratio(part, whole float64) string {
	if whole <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f%%", 100*part/whole)
}

// refSeconds is a reference's wait, "-" where it was not replayed.
func refSeconds(v float64) string {
	if v < 0 {
		return "-"
	}
	return seconds(v)
}

func pct(v float64) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*v)
}

// short names a policy in a cramped table.
func short(p string) string {
	switch p {
	case PolicyFirstFit:
		return "first fit"
	case PolicyHAMi:
		return "HAMi"
	case PolicyNos:
		return "nos"
	}
	return p
}

// traceColors tell the pod lists apart in the margin plot.
var traceColors = []string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#999999", "#8C510A", "#01665E", "#762A83", "#B2182B"}

// shortTrace names a pod list briefly: "default", "gpushare40",
// "multigpu=0.5".
func shortTrace(t string) string {
	t = strings.TrimPrefix(t, "openb_pod_list_")
	t = strings.Replace(t, ".csv", "", 1)
	return strings.TrimPrefix(t, "default resampled ")
}

// MarginChart is an SVG plot of the subject's served share minus the best
// other real policy's, in points, against load (1 or more): a dot per pod
// list and seed, a line through each pod list's mean, and the mean noise
// band below zero (or the fixed tie, with BandTie).
func (b *Scoreboard) MarginChart(title string) string {
	c := &chart{title: title, xLabel: "load (peak demand / fleet GPUs)", yLabel: "served share − best other real policy's (points)"}
	c.xFormat = func(v float64) string { return fmt.Sprintf("%g", v) }
	c.yFormat = func(v float64) string { return fmt.Sprintf("%+.2f", v) }
	lo, hi := -0.1, 0.1
	var loads []float64
	traces := []string{}
	for _, r := range b.Runs {
		if !slices.Contains(traces, r.Trace) {
			traces = append(traces, r.Trace)
		}
		for _, p := range r.Points {
			if p.Load >= 1 && p.Best >= 0 && !slices.Contains(loads, p.Load) {
				loads = append(loads, p.Load)
			}
		}
	}
	slices.Sort(loads)
	if len(loads) == 0 {
		return ""
	}
	for i, tr := range traces {
		s := series{name: shortTrace(tr), color: traceColors[i%len(traceColors)]}
		for _, l := range loads {
			sum, n := 0.0, 0
			for _, r := range b.Runs {
				if r.Trace != tr {
					continue
				}
				for _, p := range r.Points {
					if p.Load == l && p.Best >= 0 {
						d := 100 * (p.Served - p.Best)
						s.marks = append(s.marks, [2]float64{l, d})
						sum += d
						n++
						lo, hi = min(lo, d), max(hi, d)
					}
				}
			}
			if n > 0 {
				s.pts = append(s.pts, [2]float64{l, sum / float64(n)})
			}
		}
		c.series = append(c.series, s)
	}
	if b.Scoring.Band != BandTie {
		// Each point is judged outside its own band; the line is their
		// mean at each load, below zero (a loss lies under it).
		band := series{name: "noise band (mean)", color: "#000000", dashed: true}
		for _, l := range loads {
			sum, n := 0.0, 0
			for _, r := range b.Runs {
				for _, p := range r.Points {
					if p.Load == l && p.Best >= 0 {
						sum += p.Band
						n++
					}
				}
			}
			d := -100 * sum / float64(n)
			band.pts = append(band.pts, [2]float64{l, d})
			lo = min(lo, d)
		}
		c.series = append(c.series, band)
	} else {
		tol := -100 * b.Scoring.Tie
		c.series = append(c.series, series{name: fmt.Sprintf("goal: %+.2f", tol), color: "#000000", dashed: true,
			pts: [][2]float64{{loads[0], tol}, {loads[len(loads)-1], tol}}})
	}
	c.xMin, c.xMax = loads[0]-0.05, loads[len(loads)-1]+0.05
	c.xTicks = loads
	c.yMin, c.yMax = math.Floor(lo*4)/4, math.Ceil(hi*4)/4
	step := 0.25
	if c.yMax-c.yMin > 3 {
		step = 0.5
	}
	for t := c.yMin; t <= c.yMax+1e-9; t += step {
		c.yTicks = append(c.yTicks, t)
	}
	c.note = "a dot per pod list and seed, a line through each pod list's mean"
	return c.svg()
}
