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
	// held to below saturation (first fit: every MIG pod waits one carve).
	Subject, Reference string
	// Tie is how far below the best other real policy the subject's
	// served share may be and still count as a tie (0.0005: 0.05 points).
	Tie float64
}

// DefaultScoring judges migflex against the best other real policy, to
// 0.05 points, and its wait against first fit's.
func DefaultScoring() Scoring {
	return Scoring{Subject: PolicyMigflex, Reference: PolicyFirstFit, Tie: 0.0005}
}

// notReal are the policies that are references, not something a cluster
// can run.
var notReal = map[string]bool{PolicyFluid: true}

// Scoreboard is the scoring of a set of replays.
type Scoreboard struct {
	Scoring Scoring `json:"scoring"`
	// Runs are the merged replays, by pod list then seed.
	Runs []ScoredRun `json:"runs"`
	// Wins, Ties and Losses count the points at load 1 or more: the
	// subject's served share above the best other real policy's by more
	// than Tie, within Tie, below by more.
	Wins, Ties, Losses int
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

// Score merges the reports and scores the subject.
func (sc Scoring) Score(reports []*Report) (*Scoreboard, error) {
	type key struct {
		trace string
		seed  uint64
	}
	type merged struct {
		latency float64
		loads   map[float64]map[string]Result
		fill    map[string]FGDResult
	}
	runs := map[key]*merged{}
	for _, r := range reports {
		k := key{seedSuffix.ReplaceAllString(r.Trace.File, ""), r.Settings.Seed}
		m := runs[k]
		if m == nil {
			m = &merged{latency: r.Settings.LatencySeconds, loads: map[float64]map[string]Result{}, fill: map[string]FGDResult{}}
			runs[k] = m
		}
		if m.latency != r.Settings.LatencySeconds {
			return nil, fmt.Errorf("%s seed %d: replays with change latencies %v s and %v s", k.trace, k.seed, m.latency, r.Settings.LatencySeconds)
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
	b := &Scoreboard{Scoring: sc}
	for k, m := range runs {
		run := ScoredRun{Trace: k.trace, Seed: k.seed, Latency: m.latency}
		for load, byPolicy := range m.loads {
			subj, ok := byPolicy[sc.Subject]
			if !ok {
				continue
			}
			p := ScoredPoint{Load: load, Served: subj.ServedShare, WaitP99: subj.WaitP99, Churn: subj.RepartitionsPerGPUHour, Best: -1}
			for _, name := range AllPolicies {
				res, ok := byPolicy[name]
				switch {
				case name == sc.Subject || notReal[name]:
				case !ok:
					p.Missing = append(p.Missing, name)
				case res.ServedShare > p.Best:
					p.Best, p.BestPolicy = res.ServedShare, name
				}
			}
			if p.Best >= 0 {
				p.Kind, p.KindMargin = losingKind(subj, byPolicy[p.BestPolicy])
			}
			p.RefWaitP99 = -1
			if ref, ok := byPolicy[sc.Reference]; ok {
				p.RefWaitP99 = ref.WaitP99
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
	for _, run := range b.Runs {
		for _, p := range run.Points {
			b.MaxChurn = max(b.MaxChurn, p.Churn)
			if p.Load >= 1 && p.Best >= 0 {
				switch d := p.Served - p.Best; {
				case d > sc.Tie:
					b.Wins++
				case d >= -sc.Tie:
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
	return b, nil
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

// WriteMarkdown writes the scoreboard: the totals, then per pod list the
// subject's served share against the best other real policy's at each load
// and seed, its p99 wait against the reference's below saturation, and the
// fill.
func (b *Scoreboard) WriteMarkdown(w io.Writer) error {
	var s strings.Builder
	sc := b.Scoring
	fmt.Fprintf(&s, "%s against the best other real policy at load 1 or more (a tie is within %.2f points): **%d wins, %d ties, %d losses** of %d.\n\n",
		sc.Subject, 100*sc.Tie, b.Wins, b.Ties, b.Losses, b.Wins+b.Ties+b.Losses)
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
				if p.Load >= 1 {
					switch d := p.Served - p.Best; {
					case d > sc.Tie:
						mark = " win"
					case d < -sc.Tie:
						mark = " **loss**"
						if p.Kind != "" {
							mark += fmt.Sprintf(", %s %+.2f", p.Kind, 100*p.KindMargin)
						}
					}
				}
				fmt.Fprintf(&s, " %.2f%% − %.2f%% = %+.2f (%s)%s | %s / %s |", 100*p.Served, 100*p.Best, 100*(p.Served-p.Best),
					short(p.BestPolicy), mark, seconds(p.WaitP99), refSeconds(p.RefWaitP99))
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
// list and seed, a line through each pod list's mean, and the goal's
// tolerance.
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
	tol := -100 * b.Scoring.Tie
	c.series = append(c.series, series{name: fmt.Sprintf("goal: %+.2f", tol), color: "#000000", dashed: true,
		pts: [][2]float64{{loads[0], tol}, {loads[len(loads)-1], tol}}})
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
