package replay

import (
	"encoding/json"
	"encoding/xml"
	"math"
	"slices"
	"strings"
	"testing"
)

// TestScore: replays of one pod list and seed are merged; each load of 1
// or more is a win, tie or loss against the best other real policy (the
// fluid pool is not one); waits are held to first fit's plus the latency
// below saturation; fills to 99% where first fit reaches it.
func TestScore(t *testing.T) {
	res := func(p string, served, p99, churn float64) Result {
		return Result{Policy: p, ServedShare: served, WaitP99: p99, RepartitionsPerGPUHour: churn}
	}
	others := &Report{Trace: TraceInfo{File: "a.csv resampled gpushare=0.5 (seed 2)"}, Settings: Settings{Seed: 2, LatencySeconds: 5},
		Loads: []LoadResult{
			{Load: 0.8, Results: []Result{res(PolicyFirstFit, 1, 5, 0), res(PolicyNos, 1, 30, 0)}},
			{Load: 1, Results: []Result{res(PolicyFirstFit, 0.99, 5, 0), res(PolicyNos, 0.995, 30, 0), res(PolicyFluid, 1, 0, 0)}},
			{Load: 1.5, Results: []Result{res(PolicyFirstFit, 0.95, 60, 0), res(PolicyHAMi, 0.96, 60, 0)}},
			{Load: 2, Results: []Result{res(PolicyFirstFit, 0.80, 60, 0), res(PolicyNos, 0.81, 60, 0)}},
		},
		FGD: &FGDResults{Results: []FGDResult{{Policy: PolicyFirstFit, AllocatedAtFirstFailure: 0.999}}},
	}
	subject := &Report{Trace: TraceInfo{File: "a.csv resampled gpushare=0.5 (seed 2)"}, Settings: Settings{Seed: 2, LatencySeconds: 5},
		Loads: []LoadResult{
			{Load: 0.8, Results: []Result{res(PolicyMigflex, 1, 10, 0.2)}},    // 10 s: within 5 + 5
			{Load: 1, Results: []Result{res(PolicyMigflex, 0.9954, 11, 0.1)}}, // tie with nos; 11 s: a miss
			{Load: 1.5, Results: []Result{res(PolicyMigflex, 0.97, 60, 0.3)}}, // win over HAMi
			{Load: 2, Results: []Result{res(PolicyMigflex, 0.80, 60, 0.1)}},   // loss to nos
		},
		FGD: &FGDResults{Results: []FGDResult{{Policy: PolicyMigflex, AllocatedAtFirstFailure: 0.98}}},
	}
	// At load 2 the subject loses 0.01 to nos: eight-GPU pods cost it 0.02
	// (half the GPU-time, served 0.90 against 0.94), one-GPU pods gain
	// it 0.01 back; a kind nos never saw counts for nothing.
	others.Loads[3].Results[1].ByKind = []KindResult{
		{Kind: "gpu x8", RequestedShare: 0.5, ServedShare: 0.94},
		{Kind: "gpu x1", RequestedShare: 0.5, ServedShare: 0.68},
	}
	subject.Loads[3].Results[0].ByKind = []KindResult{
		{Kind: "gpu x8", RequestedShare: 0.5, ServedShare: 0.90},
		{Kind: "gpu x1", RequestedShare: 0.5, ServedShare: 0.70},
		{Kind: "mig-1g.10gb x1", RequestedShare: 0, ServedShare: 0},
	}
	// Judged to the fixed tie alone, as before issue 38 (TestScoreNoise
	// has the noise band).
	fixed := DefaultScoring()
	fixed.Band = BandTie
	b, err := fixed.Score([]*Report{others, subject})
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Runs) != 1 || b.Runs[0].Trace != "a.csv resampled gpushare=0.5" || len(b.Runs[0].Points) != 4 {
		t.Fatalf("runs %+v: want the two reports merged into one of four loads", b.Runs)
	}
	if b.Wins != 1 || b.Ties != 1 || b.Losses != 1 {
		t.Errorf("%d wins, %d ties, %d losses; want 1, 1, 1", b.Wins, b.Ties, b.Losses)
	}
	if b.WaitPoints != 2 || b.WaitMisses != 1 {
		t.Errorf("%d wait misses of %d points, want 1 of 2", b.WaitMisses, b.WaitPoints)
	}
	if b.MaxChurn != 0.3 || b.FillPoints != 1 || b.FillMisses != 1 {
		t.Errorf("churn %v, fill misses %d of %d; want 0.3, 1 of 1", b.MaxChurn, b.FillMisses, b.FillPoints)
	}
	if p := b.Runs[0].Points[3]; p.BestPolicy != PolicyNos || p.Best != 0.81 {
		t.Errorf("load 2: best %s %v, want nos 0.81", p.BestPolicy, p.Best)
	}
	if p := b.Runs[0].Points[3]; p.Kind != "gpu x8" || math.Abs(p.KindMargin+0.02) > 1e-9 {
		t.Errorf("load 2: losing kind %q %v, want gpu x8 -0.02", p.Kind, p.KindMargin)
	}
	if p := b.Runs[0].Points[2]; p.Kind != "" {
		t.Errorf("load 1.5: losing kind %q, want none (no kinds replayed)", p.Kind)
	}
	if len(b.LossesByKind) != 1 || b.LossesByKind["gpu x8"] != 1 {
		t.Errorf("losses by kind %v, want gpu x8: 1", b.LossesByKind)
	}
	var md strings.Builder
	if err := b.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "**1 wins, 1 ties, 1 losses** of 3") || !strings.Contains(md.String(), "**loss**, gpu x8 -2.00") ||
		!strings.Contains(md.String(), "Losses by the request kind that loses most there: gpu x8 1.") {
		t.Errorf("markdown:\n%s", md.String())
	}
	svg := b.MarginChart("t")
	if err := xml.Unmarshal([]byte(svg), new(struct{})); err != nil || strings.Count(svg, "<polyline") != 2 {
		t.Errorf("margin plot: %v, %d lines, want one for the pod list and the goal:\n%s", err, strings.Count(svg, "<polyline"), svg)
	}
	// Judged against first fit alone, load 2 is a tie (0.80 each) and load
	// 1.5 still a win.
	vsFirstFit := fixed
	vsFirstFit.Against = []string{PolicyFirstFit}
	bf, err := vsFirstFit.Score([]*Report{others, subject})
	if err != nil {
		t.Fatal(err)
	}
	if p := bf.Runs[0].Points[3]; bf.Wins != 2 || bf.Ties != 1 || bf.Losses != 0 || p.BestPolicy != PolicyFirstFit {
		t.Errorf("against first fit: %d wins, %d ties, %d losses, best at load 2 %s; want 2, 1, 0, first fit", bf.Wins, bf.Ties, bf.Losses, p.BestPolicy)
	}
	md.Reset()
	if err := bf.WriteMarkdown(&md); err != nil || !strings.Contains(md.String(), "migflex against dra-first-fit at load 1") {
		t.Errorf("markdown against first fit (%v):\n%s", err, md.String())
	}
	// migflex's own dynamic mode is not its peer: a migflex-dynamic result
	// far ahead at load 2 changes nothing, unless Against names it.
	withOurs := *others
	withOurs.Loads = slices.Clone(others.Loads)
	withOurs.Loads[3].Results = append(slices.Clone(others.Loads[3].Results), res(PolicyMigflexDynamic, 0.99, 60, 0))
	bo, err := fixed.Score([]*Report{&withOurs, subject})
	if err != nil {
		t.Fatal(err)
	}
	if p := bo.Runs[0].Points[3]; bo.Losses != 1 || p.BestPolicy != PolicyNos {
		t.Errorf("with migflex-dynamic replayed: %d losses, best at load 2 %s; want 1, nos", bo.Losses, p.BestPolicy)
	}
	vsOurs := fixed
	vsOurs.Against = []string{PolicyMigflexDynamic}
	if bo, err = vsOurs.Score([]*Report{&withOurs, subject}); err != nil || bo.Runs[0].Points[3].BestPolicy != PolicyMigflexDynamic {
		t.Errorf("against migflex-dynamic (%v): best at load 2 %s", err, bo.Runs[0].Points[3].BestPolicy)
	}
	// A pod list only the subject was replayed on scores no point and
	// waits for no reference, and the scoreboard still encodes.
	alone := &Report{Trace: TraceInfo{File: "b.csv"}, Settings: Settings{Seed: 2, LatencySeconds: 5},
		Loads: []LoadResult{{Load: 1, Results: []Result{res(PolicyMigflex, 1, 7, 0)}}}}
	b2, err := fixed.Score([]*Report{others, subject, alone})
	if err != nil {
		t.Fatal(err)
	}
	if b2.Wins+b2.Ties+b2.Losses != 3 || b2.WaitPoints != 2 {
		t.Errorf("with a pod list no other policy ran: %d points, %d wait points; want 3 and 2", b2.Wins+b2.Ties+b2.Losses, b2.WaitPoints)
	}
	if _, err := json.Marshal(b2); err != nil {
		t.Errorf("scoreboard with a pod list no reference ran: %v", err)
	}
	other := *subject
	other.Settings.LatencySeconds = 1
	if _, err := DefaultScoring().Score([]*Report{others, &other}); err == nil {
		t.Error("replays of one pod list with different latencies merged")
	}
	other = *subject
	other.Trace.AvgDemand, other.Trace.Hours = 3, 1
	if _, err := DefaultScoring().Score([]*Report{others, &other}); err == nil {
		t.Error("replays of one pod list and seed asking for different GPU-time merged")
	}
	bad := DefaultScoring()
	bad.Band = "wide"
	if _, err := bad.Score([]*Report{others}); err == nil {
		t.Error("scored with an unknown band")
	}
}

// TestScoreNoise: each point is judged outside its noise band: by
// default the most first fit and HAMi are apart at the pod list and load
// over the seeds; with BandSeeds the larger of first fit's spread over
// the seeds there and its gap to HAMi at the point; at least the fixed
// tie.
func TestScoreNoise(t *testing.T) {
	res := func(p string, served float64) Result { return Result{Policy: p, ServedShare: served} }
	// One pod list at one load, first fit's served share at each seed
	// (its spread is the seeds' band), then the other policies.
	type seedRun struct {
		seed    uint64
		results []Result
	}
	cases := []struct {
		name string
		mode string
		runs []seedRun
		// per seed, in order: the band, what set it, the outcome.
		band     []float64
		from     []string
		outcomes []string
	}{
		{
			name: "twins: their largest gap over the seeds, at every seed",
			mode: BandTwins,
			runs: []seedRun{
				{1, []Result{res(PolicyFirstFit, 0.95), res(PolicyHAMi, 0.951), res(PolicyMigflex, 0.965)}}, // +1.4 points outside 1
				{2, []Result{res(PolicyFirstFit, 0.96), res(PolicyHAMi, 0.97), res(PolicyMigflex, 0.965)}},  // -0.5 within
				{3, []Result{res(PolicyFirstFit, 0.97), res(PolicyHAMi, 0.97), res(PolicyMigflex, 0.955)}},  // -1.5 outside
			},
			band:     []float64{0.01, 0.01, 0.01},
			from:     []string{BandTwins, BandTwins, BandTwins},
			outcomes: []string{OutcomeWin, OutcomeTie, OutcomeLoss},
		},
		{
			name: "twins: alike everywhere, the least band",
			mode: BandTwins,
			runs: []seedRun{
				{1, []Result{res(PolicyFirstFit, 0.9), res(PolicyHAMi, 0.9), res(PolicyMigflex, 0.9004)}},
				{2, []Result{res(PolicyFirstFit, 0.8), res(PolicyHAMi, 0.8), res(PolicyMigflex, 0.799)}},
			},
			band:     []float64{0.0005, 0.0005},
			from:     []string{BandTie, BandTie},
			outcomes: []string{OutcomeTie, OutcomeLoss},
		},
		{
			name: "the seeds' spread",
			mode: BandSeeds,
			runs: []seedRun{
				{1, []Result{res(PolicyFirstFit, 0.95), res(PolicyHAMi, 0.951), res(PolicyMigflex, 0.965)}}, // +1.4 points within 2
				{2, []Result{res(PolicyFirstFit, 0.96), res(PolicyHAMi, 0.96), res(PolicyMigflex, 0.93)}},   // -3 outside
				{3, []Result{res(PolicyFirstFit, 0.97), res(PolicyHAMi, 0.97), res(PolicyMigflex, 0.995)}},  // +2.5 outside
			},
			band:     []float64{0.02, 0.02, 0.02},
			from:     []string{BandSeeds, BandSeeds, BandSeeds},
			outcomes: []string{OutcomeTie, OutcomeLoss, OutcomeWin},
		},
		{
			name: "the twins' gap, wider than the seeds' spread at one seed",
			mode: BandSeeds,
			runs: []seedRun{
				{1, []Result{res(PolicyFirstFit, 0.90), res(PolicyHAMi, 0.94), res(PolicyMigflex, 0.91)}}, // best HAMi: -3 within 4
				{2, []Result{res(PolicyFirstFit, 0.91), res(PolicyHAMi, 0.91), res(PolicyMigflex, 0.89)}}, // -2 outside 1
			},
			band:     []float64{0.04, 0.01},
			from:     []string{BandFromTwin, BandSeeds},
			outcomes: []string{OutcomeTie, OutcomeLoss},
		},
		{
			name: "one seed: no spread, the twins' gap",
			mode: BandSeeds,
			runs: []seedRun{
				{1, []Result{res(PolicyFirstFit, 0.90), res(PolicyHAMi, 0.905), res(PolicyNos, 0.92), res(PolicyMigflex, 0.93)}},
			},
			band:     []float64{0.005},
			from:     []string{BandFromTwin},
			outcomes: []string{OutcomeWin},
		},
		{
			name: "every policy serves all: the least band",
			mode: BandSeeds,
			runs: []seedRun{
				{1, []Result{res(PolicyFirstFit, 1), res(PolicyHAMi, 1), res(PolicyMigflex, 0.9996)}},
				{2, []Result{res(PolicyFirstFit, 1), res(PolicyHAMi, 1), res(PolicyMigflex, 0.999)}},
			},
			band:     []float64{0.0005, 0.0005},
			from:     []string{BandTie, BandTie},
			outcomes: []string{OutcomeTie, OutcomeLoss},
		},
		{
			name: "no twin replayed, one seed: the least band",
			mode: BandSeeds,
			runs: []seedRun{
				{1, []Result{res(PolicyFirstFit, 0.9), res(PolicyMigflex, 0.9004)}},
			},
			band:     []float64{0.0005},
			from:     []string{BandTie},
			outcomes: []string{OutcomeTie},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var reports []*Report
			for _, r := range tc.runs {
				reports = append(reports, &Report{Trace: TraceInfo{File: "a.csv", AvgDemand: 10, Hours: 10}, Settings: Settings{Seed: r.seed, LatencySeconds: 5},
					Loads: []LoadResult{{Load: 1.5, Results: r.results}}})
			}
			sc := DefaultScoring()
			sc.Band = tc.mode
			b, err := sc.Score(reports)
			if err != nil {
				t.Fatal(err)
			}
			for i, run := range b.Runs {
				p := run.Points[0]
				if math.Abs(p.Band-tc.band[i]) > 1e-12 || p.BandFrom != tc.from[i] || p.Outcome != tc.outcomes[i] {
					t.Errorf("seed %d: band %v (%s), %s; want %v (%s), %s", run.Seed, p.Band, p.BandFrom, p.Outcome, tc.band[i], tc.from[i], tc.outcomes[i])
				}
			}
		})
	}
}

// TestScoreGPUTime: served GPU-time is each point's served share times the
// GPU-time its pods asked for, summed over the points at load 1 or more
// that the subject and the policy both ran; the eight-GPU pods' likewise,
// per load, against the reference, with the points where the subject falls
// short by more than the band.
func TestScoreGPUTime(t *testing.T) {
	eight := func(share, served float64) []KindResult {
		return []KindResult{{Kind: "gpu x8", RequestedShare: share, ServedShare: served}, {Kind: "gpu x1", RequestedShare: 1 - share, ServedShare: 1}}
	}
	r := func(p string, served float64, kinds []KindResult) Result {
		return Result{Policy: p, ServedShare: served, ByKind: kinds}
	}
	// Pod list a asks for 100 GPU-hours, b for 300.
	a := &Report{Trace: TraceInfo{File: "a.csv", AvgDemand: 10, Hours: 10}, Settings: Settings{Seed: 1},
		Loads: []LoadResult{
			{Load: 0.8, Results: []Result{r(PolicyFirstFit, 1, nil), r(PolicyMigflex, 1, nil)}}, // below load 1: not summed
			{Load: 1.5, Results: []Result{r(PolicyFirstFit, 0.9, eight(0.5, 0.8)), r(PolicyNos, 0.95, nil), r(PolicyMigflex, 0.92, eight(0.5, 0.7))}},
		}}
	b := &Report{Trace: TraceInfo{File: "b.csv", AvgDemand: 30, Hours: 10}, Settings: Settings{Seed: 1},
		Loads: []LoadResult{
			{Load: 1.5, Results: []Result{r(PolicyFirstFit, 0.8, eight(0.2, 0.5)), r(PolicyMigflex, 0.85, eight(0.2, 0.6))}},
		}}
	sb, err := DefaultScoring().Score([]*Report{a, b})
	if err != nil {
		t.Fatal(err)
	}
	want := []PeerGPUTime{
		{Policy: PolicyFirstFit, Points: 2, Requested: 400, Subject: 92 + 255, Peer: 90 + 240},
		{Policy: PolicyNos, Points: 1, Requested: 100, Subject: 92, Peer: 95},
	}
	if len(sb.GPUTime) != len(want) {
		t.Fatalf("GPU-time %+v, want %+v", sb.GPUTime, want)
	}
	for i, w := range want {
		g := sb.GPUTime[i]
		if g.Policy != w.Policy || g.Points != w.Points || math.Abs(g.Requested-w.Requested) > 1e-9 ||
			math.Abs(g.Subject-w.Subject) > 1e-9 || math.Abs(g.Peer-w.Peer) > 1e-9 {
			t.Errorf("GPU-time against %s: %+v, want %+v", w.Policy, g, w)
		}
	}
	// Eight-GPU pods at 1.5: a asks 50 GPU-hours of them (served 35
	// against 40: 5 points of a's 100 short, outside its 0.05 band), b 60
	// (served 36 against 30).
	if len(sb.Eight) != 1 {
		t.Fatalf("eight-GPU pods %+v, want one load", sb.Eight)
	}
	e := sb.Eight[0]
	if e.Load != 1.5 || e.Points != 2 || math.Abs(e.Requested-110) > 1e-9 || math.Abs(e.Subject-71) > 1e-9 || math.Abs(e.Reference-70) > 1e-9 ||
		e.Below != 1 || math.Abs(e.Short-0.05) > 1e-9 {
		t.Errorf("eight-GPU pods %+v, want load 1.5, 2 points, 110 requested, 71 against 70, 1 point short by 0.05", e)
	}
	var md strings.Builder
	if err := sb.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"| dra-first-fit | 2 | 400 | 347 | 330 | +17 GPU-h (+4.250 points) |", "| 1.5 | 2 | 64.55% | 63.64% | 1 | 5.00 |"} {
		if !strings.Contains(md.String(), s) {
			t.Errorf("markdown lacks %q:\n%s", s, md.String())
		}
	}
}
