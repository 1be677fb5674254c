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

	fmt.Fprintf(&b, "### Reconfiguration, %d x %s (simulated, no operation delay; the kubelet stand-in publishes allocatable %s after a device change)\n\n",
		r.GPUs, r.Model, delayText(r.StatusDelay))
	b.WriteString("| agent | pause between changes | changes | measured to | n | p50 | p90 | p99 | max | mean |\n|---|--:|---|---|--:|--:|--:|--:|--:|--:|\n")
	for _, vr := range r.Runs {
		for _, ph := range vr.Phases {
			row := func(what, to string, p load.Percentiles) {
				fmt.Fprintf(&b, "| %s | %s | %s | %s | %d | %s | %s | %s | %s | %s |\n", vr.Variant.Name, report.Duration(ph.Interval), what, to, p.Count,
					report.Duration(p.P50), report.Duration(p.P90), report.Duration(p.P99), report.Duration(p.Max), report.Duration(p.Mean))
			}
			row("all", "ListAndWatch at the kubelet", ph.ToListAndWatch)
			row("all", "allocatable on the Node", ph.ToAllocatable)
			row("all", "state=success on the Node", ph.ToSuccess)
			for _, dir := range slices.Sorted(maps.Keys(ph.ByDirection)) {
				row(dir, "ListAndWatch at the kubelet", ph.ByDirection[dir][0])
				row(dir, "allocatable on the Node", ph.ByDirection[dir][1])
				row(dir, "state=success on the Node", ph.ByDirection[dir][2])
			}
		}
	}
	b.WriteString("\n### state=success after allocatable (negative: success came first)\n\n")
	b.WriteString("| agent | pause between changes | n | p50 | p90 | p99 | max | mean |\n|---|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, vr := range r.Runs {
		for _, ph := range vr.Phases {
			p := ph.SuccessAfterAllocatable
			fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s | %s | %s |\n", vr.Variant.Name, report.Duration(ph.Interval), p.Count,
				signed(p.P50), signed(p.P90), signed(p.P99), signed(p.Max), signed(p.Mean))
		}
	}
	b.WriteString("\n### Agent process\n\n| agent | flags | start to first success | peak RSS (VmHWM) | RSS after |\n|---|---|--:|--:|--:|\n")
	for _, vr := range r.Runs {
		fmt.Fprintf(&b, "| %s | %s | %s | %d MiB | %d MiB |\n", vr.Variant.Name, strings.Join(vr.Variant.Args, " "), report.Duration(vr.Startup), vr.AgentMemory.Peak>>20, vr.AgentMemory.Current>>20)
	}
	b.WriteString("\n| agent | pause between changes | agent CPU per change (pauses included) |\n|---|--:|--:|\n")
	for _, vr := range r.Runs {
		for _, ph := range vr.Phases {
			if len(ph.Changes) > 0 {
				fmt.Fprintf(&b, "| %s | %s | %s |\n", vr.Variant.Name, report.Duration(ph.Interval), report.Duration(ph.AgentCPU/time.Duration(len(ph.Changes))))
			}
		}
	}
	fmt.Fprintf(&b, "\nBenchmark wall time: %s.\n", report.Duration(r.Elapsed))
	_, err := io.WriteString(w, b.String())
	return err
}

// signed formats d, which may be negative.
func signed(d time.Duration) string {
	if d < 0 {
		return "-" + report.Duration(-d)
	}
	return report.Duration(d)
}

func delayText(d time.Duration) string {
	if d <= 0 {
		return "at once"
	}
	return report.Duration(d)
}
