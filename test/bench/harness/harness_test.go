package harness

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/migflex/migflex/test/bench/load"
	"github.com/migflex/migflex/test/bench/proc"
	"github.com/migflex/migflex/test/bench/report"
)

func measurement(source, mode string, nodes int, throughput float64, p50, p99 time.Duration, noAnswer, wrong int) Measurement {
	return Measurement{
		Source: source, Mode: mode, Nodes: nodes,
		Load: load.Result{
			Requests: 100, Failures: noAnswer + wrong, NoAnswer: noAnswer, Wrong: wrong, Throughput: throughput,
			Latency: load.Percentiles{Count: 100, P50: p50, P90: p50 * 2, P99: p99, Max: p99},
		},
		Sent:          108,
		ReadyMemory:   proc.Memory{Peak: 32 << 20, Current: 30 << 20},
		WebhookMemory: proc.Memory{Peak: 64 << 20, Current: 48 << 20},
		WebhookCPU:    108 * time.Millisecond,
	}
}

func TestCompare(t *testing.T) {
	r := &Report{Runs: []Measurement{
		measurement(SourceInformer, "existence", 100, 4000, time.Millisecond, 4*time.Millisecond, 0, 0),
		measurement(SourceList, "existence", 100, 100, 40*time.Millisecond, 200*time.Millisecond, 0, 0),
		measurement(SourceInformer, "existence", 1000, 3000, time.Millisecond, 5*time.Millisecond, 0, 0),
		// No list run at 1000 nodes: no comparison.
		measurement(SourceList, "capacity", 100, 1, time.Second, time.Second, 0, 0),
	}}
	want := []Comparison{{Mode: "existence", Nodes: 100, Throughput: 40, P50: 40, P90: 40, P99: 50}}
	if diff := cmp.Diff(want, Compare(r)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestCompareFloor(t *testing.T) {
	ms := time.Millisecond
	r := &Report{Runs: []Measurement{
		measurement(SourceInformer, "existence", 5000, 1, 2*ms, 8*ms, 0, 0),
		measurement(SourceList, "existence", 5000, 1, 40*ms, 200*ms, 0, 0),
		measurement(SourceFloor, "existence", 5000, 1, ms, 2*ms, 0, 0),
		// A size measured twice: the second informer run with the second floor run.
		measurement(SourceInformer, "existence", 5000, 1, 3*ms, 6*ms, 0, 0),
		measurement(SourceFloor, "existence", 5000, 1, ms, 3*ms, 0, 0),
		// No floor at 100 nodes: no comparison.
		measurement(SourceInformer, "existence", 100, 1, ms, ms, 0, 0),
	}}
	got := CompareFloor(r)
	type row struct{ P50, P90, P99 float64 }
	var rows []row
	for _, c := range got {
		rows = append(rows, row{c.P50, c.P90, c.P99})
	}
	want := []row{{2, 2, 4}, {3, 3, 2}}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("informer / floor (-want +got):\n%s", diff)
	}
}

func TestProblems(t *testing.T) {
	for name, tc := range map[string]struct {
		run  Measurement
		want int
	}{
		"clean informer":          {measurement(SourceInformer, "existence", 100, 1, 1, 1, 0, 0), 0},
		"informer without answer": {measurement(SourceInformer, "existence", 100, 1, 1, 1, 1, 0), 1},
		"informer wrong":          {measurement(SourceInformer, "existence", 100, 1, 1, 1, 0, 1), 1},
		// The baseline timing out is what is measured, not a problem.
		"list without answer": {measurement(SourceList, "capacity", 100, 1, 1, 1, 3, 0), 0},
		"list wrong":          {measurement(SourceList, "capacity", 100, 1, 1, 1, 0, 2), 1},
		// Without every answer the floor measures nothing.
		"floor without answer": {measurement(SourceFloor, "existence", 100, 1, 1, 1, 1, 0), 1},
	} {
		t.Run(name, func(t *testing.T) {
			r := &Report{Runs: []Measurement{tc.run}}
			if got := r.Problems(); len(got) != tc.want {
				t.Errorf("problems %q, want %d", got, tc.want)
			}
		})
	}
}

func TestWriteMarkdown(t *testing.T) {
	r := &Report{
		Machine:     report.Machine{CPUs: 2, CPUModel: "AMD EPYC", MemoryGB: 23, LoadBefore: "1.00 2.00 3.00", LoadAfter: "4.00 5.00 6.00"},
		Concurrency: 8,
		Setup:       []SetupStep{{What: "create nodes 0..99", Objects: 100, Duration: 500 * time.Millisecond}},
		Lists:       []ListSize{{Resource: "nodes", Objects: 100, Bytes: 618000}},
		Runs: []Measurement{
			measurement(SourceInformer, "existence", 100, 4000, time.Millisecond, 4*time.Millisecond, 0, 0),
			measurement(SourceList, "existence", 100, 100, 40*time.Millisecond, 200*time.Millisecond, 2, 0),
			measurement(SourceFloor, "existence", 100, 8000, 500*time.Microsecond, time.Millisecond, 0, 0),
			// A second measurement where the floor's p99 is the higher.
			measurement(SourceInformer, "existence", 100, 4000, time.Millisecond, 2*time.Millisecond, 0, 0),
			measurement(SourceFloor, "existence", 100, 8000, 500*time.Microsecond, 3*time.Millisecond, 0, 0),
		},
	}
	r.Runs[1].WebhookCPU = 0
	r.Runs[0].Load.ByName = map[string]load.Percentiles{
		"no-gpu": {Count: 20, P50: time.Millisecond, P90: time.Millisecond, P99: time.Millisecond, Max: time.Millisecond},
		"denied": {Count: 80, P50: time.Millisecond, P90: 2 * time.Millisecond, P99: 4 * time.Millisecond, Max: 4 * time.Millisecond},
	}
	var b strings.Builder
	if err := WriteMarkdown(&b, r); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| 2 | AMD EPYC | 23 GiB |",
		"| create nodes 0..99 | 100 | 500ms | 200 |",
		"| nodes | 100 | 618000 | 6180 |",
		"| existence | 100 | 0 | informer | 100 | 0 | 0 | 4000.0 | 1.00ms | 2.00ms | 4.00ms | 4.00ms | 0 | 32 MiB | 64 MiB | 48 MiB | 1.00ms |",
		"| existence | 100 | 0 | list | 100 | 2 | 0 | 100.0 | 40.0ms |",
		"| <93µs |", // no CPU tick in 108 admissions
		"| existence | 100 | 0 | 40.0x | 40.0x | 40.0x | 50.0x |",
		"| existence | 100 | 500µs | 1.00ms | 1.00ms | 2.00x | 2.00x | 4.00x | 3.00ms |",
		"| existence | 100 | 500µs | 1.00ms | 3.00ms | 2.00x | 2.00x | 0.67x | -1.00ms |",
		"| existence | 100 | 0 | informer | denied | 80 | 1.00ms | 2.00ms | 4.00ms | 4.00ms |\n| existence | 100 | 0 | informer | no-gpu | 20 |",
		"Problems (wrong answers, or product or floor admissions without an answer): 0.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("markdown lacks %q:\n%s", want, out)
		}
	}
}
