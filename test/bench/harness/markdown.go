package harness

import (
	"fmt"
	"io"
	"strings"
	"time"

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
	fmt.Fprintf(&b, "\nProblems (wrong answers, or product admissions without an answer): %d. Benchmark wall time: %s.\n", len(r.Problems()), report.Duration(r.Elapsed))
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
