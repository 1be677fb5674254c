package scale

import (
	"fmt"
	"io"
	"strings"

	"github.com/migflex/migflex/test/bench/load"
	"github.com/migflex/migflex/test/bench/report"
)

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

func pct(p load.Percentiles) string {
	if p.Count == 0 {
		return "none"
	}
	return fmt.Sprintf("p50 %s, p99 %s, max %s (%d)", report.Duration(p.P50), report.Duration(p.P99), report.Duration(p.Max), p.Count)
}

// WriteMarkdown writes the report as the tables docs/BENCHMARKS.md quotes.
func WriteMarkdown(w io.Writer, r *Report) error {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "Machine: %d CPUs (%s), %d GiB, %s, %s; load %s before, %s after. Run took %s (nodes created in %s).\n\n",
		m.CPUs, m.CPUModel, m.MemoryGB, m.Kernel, m.Go, m.LoadBefore, m.LoadAfter, report.Duration(r.Elapsed), report.Duration(r.Setup))
	fmt.Fprintf(&b, "%d opted-in nodes of 8 H100s, %d pending pods in bursts of %d every %s; planner flags: `%s`.\n\n",
		r.Nodes, r.Pods, r.Burst, report.Duration(r.BurstGap), strings.Join(r.PlannerArgs, " "))
	b.WriteString("| | |\n|---|---|\n")
	row := func(k, v string) { fmt.Fprintf(&b, "| %s | %s |\n", k, v) }
	row("mark → planner's write seen", pct(r.WriteLatency))
	row("mark → MigReshapePlanned seen", pct(r.EventLatency))
	row("pods planned / impossible / untold", fmt.Sprintf("%d / %d / %d", r.Planned, r.Impossible, r.Untold))
	row("rounds (with a write)", fmt.Sprintf("%d (%d)", r.Rounds, r.RoundsWithWrite))
	row("round time (decide + write)", pct(r.RoundTime))
	row("decide time", pct(r.DecideTime))
	row("Node writes / nodes changed / changes seen / failed", fmt.Sprintf("%d / %d / %d / %d", r.NodeWrites, r.NodesChanged, r.PlannerUpdates, r.WriteFailures))
	row("most Node writes in a round", fmt.Sprint(r.MaxWritesRound))
	row("pod Events seen", fmt.Sprint(r.Events))
	row("planner RSS: empty / nodes / pods / peak", fmt.Sprintf("%s / %s / %s / %s", mib(r.Planner.RSSEmpty), mib(r.Planner.RSSNodes), mib(r.Planner.RSSPods), mib(r.Planner.Peak)))
	row("webhook RSS: empty / nodes / pods / peak", fmt.Sprintf("%s / %s / %s / %s", mib(r.Webhook.RSSEmpty), mib(r.Webhook.RSSNodes), mib(r.Webhook.RSSPods), mib(r.Webhook.Peak)))
	row("CPU: planner / webhook", fmt.Sprintf("%s / %s", report.Duration(r.Planner.CPU), report.Duration(r.Webhook.CPU)))
	row("admissions (reshape expected / rewritten)", fmt.Sprintf("%d (%d / %d), %s", r.Admissions, r.ReshapeExpected, r.Rewritten, pct(r.AdmissionTime)))
	if c := r.Churn; c != nil {
		row("churn: nodes changed at once (updates took)", fmt.Sprintf("%d (%s)", c.Nodes, report.Duration(c.Updates)))
		row("churn: rounds, their time", fmt.Sprintf("%d, %s", c.Rounds, pct(c.RoundTime)))
		row("churn: Node writes", fmt.Sprint(c.NodeWrites))
		row("churn: CPU planner / webhook", fmt.Sprintf("%s / %s", report.Duration(c.PlannerCPU), report.Duration(c.WebhookCPU)))
		row("churn: RSS after, planner / webhook", fmt.Sprintf("%s / %s", mib(c.PlannerRSS), mib(c.WebhookRSS)))
	}
	if p := r.Problems(); len(p) > 0 {
		fmt.Fprintf(&b, "\nInvalid run:\n- %s\n", strings.Join(p, "\n- "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
