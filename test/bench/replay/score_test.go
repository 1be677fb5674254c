package replay

import (
	"encoding/json"
	"encoding/xml"
	"math"
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
	b, err := DefaultScoring().Score([]*Report{others, subject})
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
	// A pod list only the subject was replayed on scores no point and
	// waits for no reference, and the scoreboard still encodes.
	alone := &Report{Trace: TraceInfo{File: "b.csv"}, Settings: Settings{Seed: 2, LatencySeconds: 5},
		Loads: []LoadResult{{Load: 1, Results: []Result{res(PolicyMigflex, 1, 7, 0)}}}}
	b2, err := DefaultScoring().Score([]*Report{others, subject, alone})
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
}
