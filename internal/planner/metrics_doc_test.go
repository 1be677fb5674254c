package planner

import (
	"strings"
	"testing"

	"github.com/migflex/migflex/internal/testsupport/metricsdoc"
)

// TestMetricsDocumented: every metric the planner serves is in
// docs/METRICS.md with its type and labels, and has migflex's prefix;
// every planner metric documented there exists.
func TestMetricsDocumented(t *testing.T) {
	reg := newRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	// Vectors show once they have a child.
	m.rounds.WithLabelValues(resultChanged).Inc()
	m.duration.WithLabelValues(resultChanged).Observe(0)
	m.demand.WithLabelValues(mig3g).Set(1)
	m.reshapes.WithLabelValues(modeApplied).Inc()
	m.served.WithLabelValues(modeApplied).Inc()
	m.writes.WithLabelValues(writeSuccess).Inc()

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if n := mf.GetName(); !strings.HasPrefix(n, "migflex_planner_") && !strings.HasPrefix(n, "go_") && !strings.HasPrefix(n, "process_") {
			t.Errorf("metric %s lacks the migflex_planner_ prefix", n)
		}
	}
	doc, err := metricsdoc.ReadDoc("../../docs/METRICS.md")
	if err != nil {
		t.Fatal(err)
	}
	documented, err := metricsdoc.Parse(doc, "migflex_planner_")
	if err != nil {
		t.Fatal(err)
	}
	gathered, err := metricsdoc.Gathered(reg, "migflex_planner_")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range metricsdoc.Compare(documented, gathered) {
		t.Error(d)
	}
}
