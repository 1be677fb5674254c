package harness

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

	fmt.Fprintf(&b, "### Cluster setup\n\n| step | objects | time | objects/s |\n|---|--:|--:|--:|\n")
	for _, s := range r.Setup {
		fmt.Fprintf(&b, "| %s | %d | %s | %.0f |\n", s.What, s.Objects, report.Duration(s.Duration), float64(s.Objects)/s.Duration.Seconds())
	}

	fmt.Fprintf(&b, "\n### What one baseline admission lists (JSON, as client-go fetches it)\n\n| resource | objects | bytes | bytes/object |\n|---|--:|--:|--:|\n")
	for _, l := range r.Lists {
		fmt.Fprintf(&b, "| %s | %d | %d | %d |\n", l.Resource, l.Objects, l.Bytes, l.Bytes/max(l.Objects, 1))
	}

	fmt.Fprintf(&b, "\n### Webhook runs (concurrency %d)\n\n", r.Concurrency)
	b.WriteString("| mode | nodes | pods | source | requests | no answer | wrong | admissions/s | p50 | p90 | p99 | max | ready after | peak RSS when ready | peak RSS | RSS after | webhook CPU/adm | apiserver+etcd CPU/adm |\n")
	b.WriteString("|---|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, run := range r.Runs {
		l := run.Load
		fmt.Fprintf(&b, "| %s | %d | %d | %s | %d | %d | %d | %.1f | %s | %s | %s | %s | %s | %d MiB | %d MiB | %d MiB | %s | %s |\n",
			run.Mode, run.Nodes, run.Pods, run.Source, l.Requests, l.NoAnswer, l.Wrong, l.Throughput,
			report.Duration(l.Latency.P50), report.Duration(l.Latency.P90), report.Duration(l.Latency.P99), report.Duration(l.Latency.Max),
			report.Duration(run.Ready), run.ReadyMemory.Peak>>20, run.WebhookMemory.Peak>>20, run.WebhookMemory.Current>>20,
			cpuPerAdmission(run.WebhookCPU, run.Sent), cpuPerAdmission(run.APIServerCPU+run.EtcdCPU, run.Sent))
	}

	b.WriteString("\n### Informer cache vs list per admission\n\n")
	b.WriteString("Throughput: informer / list. Latency: list / informer. Higher is better for the informer cache.\n\n")
	b.WriteString("| mode | nodes | pods | throughput | p50 | p90 | p99 |\n|---|--:|--:|--:|--:|--:|--:|\n")
	for _, c := range Compare(r) {
		fmt.Fprintf(&b, "| %s | %d | %d | %s | %s | %s | %s |\n", c.Mode, c.Nodes, c.Pods,
			ratio(c.Throughput), ratio(c.P50), ratio(c.P90), ratio(c.P99))
	}
	if floor := CompareFloor(r); len(floor) > 0 {
		b.WriteString("\n### Informer cache vs the floor\n\n")
		b.WriteString("The floor (floorwebhook) answers every review allowed, reading nothing but its uid: the round trip between the two processes alone. Latency: informer / floor; the difference is what the webhook itself adds.\n\n")
		b.WriteString("| mode | nodes | floor p50 | p90 | p99 | informer / floor p50 | p90 | p99 | informer - floor p99 |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, c := range floor {
			fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", c.Mode, c.Nodes,
				report.Duration(c.Floor.P50), report.Duration(c.Floor.P90), report.Duration(c.Floor.P99),
				ratio(c.P50), ratio(c.P90), ratio(c.P99), signed(c.Informer.P99-c.Floor.P99))
		}
	}
	b.WriteString("\n### Latency by kind of admission (informer and floor runs)\n\n")
	b.WriteString("| mode | nodes | pods | source | kind | n | p50 | p90 | p99 | max |\n|---|--:|--:|---|---|--:|--:|--:|--:|--:|\n")
	for _, run := range r.Runs {
		if run.Source == SourceList {
			continue
		}
		for _, name := range slices.Sorted(maps.Keys(run.Load.ByName)) {
			p := run.Load.ByName[name]
			fmt.Fprintf(&b, "| %s | %d | %d | %s | %s | %d | %s | %s | %s | %s |\n", run.Mode, run.Nodes, run.Pods, run.Source, name, p.Count,
				report.Duration(p.P50), report.Duration(p.P90), report.Duration(p.P99), report.Duration(p.Max))
		}
	}
	fmt.Fprintf(&b, "\nProblems (wrong answers, or product or floor admissions without an answer): %d. Benchmark wall time: %s.\n", len(r.Problems()), report.Duration(r.Elapsed))
	_, err := io.WriteString(w, b.String())
	return err
}

// Comparison is the informer run against the list run of one cluster.
type Comparison struct {
	Mode  string
	Nodes int
	Pods  int
	// Throughput is informer / list; the latencies are list / informer.
	Throughput, P50, P90, P99 float64
}

// Compare pairs each informer run with the list run on the same cluster.
func Compare(r *Report) []Comparison {
	var out []Comparison
	for _, inf := range r.Runs {
		if inf.Source != SourceInformer {
			continue
		}
		for _, list := range r.Runs {
			if list.Source != SourceList || list.Mode != inf.Mode || list.Nodes != inf.Nodes || list.Pods != inf.Pods {
				continue
			}
			li, ll := inf.Load, list.Load
			out = append(out, Comparison{
				Mode: inf.Mode, Nodes: inf.Nodes, Pods: inf.Pods,
				Throughput: li.Throughput / ll.Throughput,
				P50:        float64(ll.Latency.P50) / float64(li.Latency.P50),
				P90:        float64(ll.Latency.P90) / float64(li.Latency.P90),
				P99:        float64(ll.Latency.P99) / float64(li.Latency.P99),
			})
		}
	}
	return out
}

// FloorComparison is an informer run against the floor run on the same
// cluster.
type FloorComparison struct {
	Mode            string
	Nodes           int
	Informer, Floor load.Percentiles
	// P50, P90 and P99 are informer / floor.
	P50, P90, P99 float64
}

// CompareFloor pairs each informer run with the floor run of its mode and
// size; with several of either (a size measured more than once), the n-th
// informer run with the n-th floor run.
func CompareFloor(r *Report) []FloorComparison {
	type key struct {
		mode  string
		nodes int
	}
	floors := map[key][]Measurement{}
	for _, run := range r.Runs {
		if run.Source == SourceFloor {
			k := key{run.Mode, run.Nodes}
			floors[k] = append(floors[k], run)
		}
	}
	var out []FloorComparison
	seen := map[key]int{}
	for _, inf := range r.Runs {
		k := key{inf.Mode, inf.Nodes}
		if inf.Source != SourceInformer || seen[k] >= len(floors[k]) {
			continue
		}
		f := floors[k][seen[k]]
		seen[k]++
		li, lf := inf.Load.Latency, f.Load.Latency
		out = append(out, FloorComparison{Mode: inf.Mode, Nodes: inf.Nodes, Informer: li, Floor: lf,
			P50: float64(li.P50) / float64(lf.P50), P90: float64(li.P90) / float64(lf.P90), P99: float64(li.P99) / float64(lf.P99)})
	}
	return out
}

// signed writes d with its sign: report.Duration has none for a negative.
func signed(d time.Duration) string {
	if d < 0 {
		return "-" + report.Duration(-d)
	}
	return report.Duration(d)
}

// cpuPerAdmission is d/n. CPU times come in 10 ms ticks, so a total of
// zero only says "less than one tick over n admissions".
func cpuPerAdmission(d time.Duration, n int) string {
	if n == 0 {
		return "-"
	}
	if d == 0 {
		return "<" + report.Duration(10*time.Millisecond/time.Duration(n))
	}
	return report.Duration(d / time.Duration(n))
}

func ratio(f float64) string {
	switch {
	case f >= 100:
		return fmt.Sprintf("%.0fx", f)
	case f >= 10:
		return fmt.Sprintf("%.1fx", f)
	default:
		return fmt.Sprintf("%.2fx", f)
	}
}
