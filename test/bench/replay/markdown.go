package replay

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// WriteMarkdown writes the report's tables.
func WriteMarkdown(w io.Writer, r *Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Trace replay: %s\n\n", r.Trace.File)
	fmt.Fprintf(&b, "%d tasks, %d asking for GPUs; full fleet %d GPUs; models %s; speedup %g; drain %gs; change latency %gs; seed %d.\n",
		r.Trace.Tasks, r.Trace.GPUTasks, r.Trace.FullGPUs, modelMapString(r.Settings.Models), r.Settings.Speedup,
		r.Settings.DrainSeconds, r.Settings.LatencySeconds, r.Settings.Seed)
	fmt.Fprintf(&b, "Machine: %d CPUs, %s; load average %s before, %s after; %.0f s in all.\n\n",
		r.Machine.CPUs, r.Machine.CPUModel, r.Machine.LoadBefore, r.Machine.LoadAfter, r.Seconds)
	if r.Trace.TimesFrom != "" {
		b.WriteString("The pod list has no times: arrival gaps and durations are resampled from another pod list.\n\n")
	}
	if r.NoTimes != "" {
		fmt.Fprintf(&b, "No timed replay: %s\n\n", r.NoTimes)
	}
	if len(r.Loads) > 0 {
		fmt.Fprintf(&b, "Peak demand %.0f GPUs, average %.1f, over %.1f h; static layouts leave %.0f%% of GPUs whole.\n\n",
			r.Trace.PeakDemand, r.Trace.AvgDemand, r.Trace.Hours, 100*r.Trace.WholeShare)
	}
	for _, l := range r.Loads {
		fmt.Fprintf(&b, "## Load %g (peak demand / GPUs = %.2f): %d nodes, %d GPUs\n\n", l.Load, l.OfferedLoad, l.Nodes, l.GPUs)
		bound := l.Bound
		fmt.Fprintf(&b, "Upper bound on served: %.1f%%.\n\n", 100*bound)
		b.WriteString("| policy | served | % of bound | whole / MIG | ≤1 min | ≤10 min | wait p50 | wait p99 | wait mean | never served | downgraded | repartitions | per GPU-hour | stranded when saturated | rounds | round p50/p99 ms |\n")
		b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		for _, res := range l.Results {
			ofBound := "-"
			if bound > 0 {
				ofBound = fmt.Sprintf("%.1f%%", 100*res.ServedShare/bound)
			}
			rounds := "-"
			if res.Rounds > 0 {
				rounds = fmt.Sprintf("%.1f / %.1f", res.RoundP50, res.RoundP99)
			}
			fmt.Fprintf(&b, "| %s | %.1f%% | %s | %.0f%% / %.0f%% | %.1f%% | %.1f%% | %s | %s | %s | %d | %d | %d | %.3f | %.1f%% | %d | %s |\n",
				res.Policy, 100*res.ServedShare, ofBound, 100*res.ServedWhole, 100*res.ServedMIG, 100*res.Within1m, 100*res.Within10m,
				seconds(res.WaitP50), seconds(res.WaitP99), seconds(res.WaitMean), res.NeverServed, res.Downgraded,
				res.Repartitions, res.RepartitionsPerGPUHour, 100*res.Stranded, res.Rounds, rounds)
		}
		b.WriteString("\n")
	}
	if r.FGD != nil {
		fmt.Fprintf(&b, "## Fill (FGD experiment): %d nodes, %d GPUs, tasks in trace order until %g x capacity offered, no departures, no clock (migflex without its cooldown)\n\n",
			r.FGD.Nodes, r.FGD.GPUs, r.FGD.Offered)
		b.WriteString("| policy | tasks | failed | allocated at first failure | allocated at end | free at end (fragmentation) | repartitions |\n")
		b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		for _, res := range r.FGD.Results {
			first := "-"
			if res.AllocatedAtFirstFailure >= 0 {
				first = fmt.Sprintf("%.1f%%", 100*res.AllocatedAtFirstFailure)
			}
			fmt.Fprintf(&b, "| %s | %d | %d | %s | %.1f%% | %.1f%% | %d |\n", res.Policy, res.Tasks, res.Failed, first,
				100*res.AllocatedAtEnd, 100*res.FragmentationAtEnd, res.Repartitions)
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func seconds(s float64) string {
	switch {
	case s < 60:
		return fmt.Sprintf("%.0fs", s)
	case s < 3600:
		return fmt.Sprintf("%.1fm", s/60)
	default:
		return fmt.Sprintf("%.1fh", s/3600)
	}
}

func modelMapString(m ModelMap) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ",")
}
