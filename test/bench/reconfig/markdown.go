package reconfig

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/migflex/migflex/test/bench/load"
	"github.com/migflex/migflex/test/bench/report"
)

// WriteMarkdown writes the report as the tables docs/BENCHMARKS.md quotes.
func WriteMarkdown(w io.Writer, r *Report) error {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "### Machine\n\n| CPUs | CPU model | memory | kernel | Go | load average before | after |\n|---|---|---|---|---|---|---|\n")
	fmt.Fprintf(&b, "| %d | %s | %d GiB | %s | %s | %s | %s |\n\n", m.CPUs, m.CPUModel, m.MemoryGB, m.Kernel, m.Go, m.LoadBefore, m.LoadAfter)

	fmt.Fprintf(&b, "### Reconfiguration, %d x %s (simulated, no operation delay)\n\n", r.GPUs, r.Model)
	b.WriteString("| pause between changes | changes | measured to | n | p50 | p90 | p99 | max | mean |\n|--:|---|---|--:|--:|--:|--:|--:|--:|\n")
	for _, ph := range r.Phases {
		row := func(what, to string, p load.Percentiles) {
			fmt.Fprintf(&b, "| %s | %s | %s | %d | %s | %s | %s | %s | %s |\n", report.Duration(ph.Interval), what, to, p.Count,
				report.Duration(p.P50), report.Duration(p.P90), report.Duration(p.P99), report.Duration(p.Max), report.Duration(p.Mean))
		}
		row("all", "ListAndWatch at the kubelet", ph.ToListAndWatch)
		row("all", "state=success on the Node", ph.ToSuccess)
		for _, dir := range slices.Sorted(maps.Keys(ph.ByDirection)) {
			row(dir, "ListAndWatch at the kubelet", ph.ByDirection[dir][0])
			row(dir, "state=success on the Node", ph.ByDirection[dir][1])
		}
	}
	fmt.Fprintf(&b, "\n### Agent process\n\n| start to first success | peak RSS (VmHWM) | RSS after |\n|--:|--:|--:|\n")
	fmt.Fprintf(&b, "| %s | %d MiB | %d MiB |\n", report.Duration(r.Startup), r.AgentMemory.Peak>>20, r.AgentMemory.Current>>20)
	b.WriteString("\n| pause between changes | agent CPU per change (pauses included) |\n|--:|--:|\n")
	for _, ph := range r.Phases {
		if len(ph.Changes) > 0 {
			fmt.Fprintf(&b, "| %s | %s |\n", report.Duration(ph.Interval), report.Duration(ph.AgentCPU/time.Duration(len(ph.Changes))))
		}
	}
	fmt.Fprintf(&b, "\nBenchmark wall time: %s.\n", report.Duration(r.Elapsed))
	_, err := io.WriteString(w, b.String())
	return err
}
