package agent

import (
	"strings"
	"testing"

	"github.com/migflex/migflex/internal/testsupport/metricsdoc"
)

// oneDevice serves one healthy device, and says what a dynamic node can
// still make.
type oneDevice struct{ nopServer }

func (oneDevice) Makeable() (map[string]int64, bool) {
	return map[string]int64{resource1g: 6}, true
}

func (oneDevice) Served() map[string]map[string]bool {
	return map[string]map[string]bool{resource1g: {"MIG-0": true}}
}

// TestMetricsDocumented: every metric the agent serves is in
// docs/METRICS.md with its type and labels, and has migflex's prefix;
// every agent metric documented there exists.
func TestMetricsDocumented(t *testing.T) {
	reg := newRegistry()
	m, err := newMetrics(reg, oneDevice{}, "node-a", "device-plugin")
	if err != nil {
		t.Fatal(err)
	}
	// Vectors show once they have a child.
	m.reconciles.WithLabelValues(resultSuccess).Inc()
	m.duration.WithLabelValues(resultSuccess).Observe(0)
	m.errors.WithLabelValues(stageReport).Inc()
	m.writes.WithLabelValues(causeInUse).Inc()
	m.allocatable.WithLabelValues("written").Inc()
	m.callTimeouts.WithLabelValues(callCreate).Inc()
	m.instances.setLayout(instanceGPUs())

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if n := mf.GetName(); !strings.HasPrefix(n, "migflex_agent_") && !strings.HasPrefix(n, "go_") && !strings.HasPrefix(n, "process_") {
			t.Errorf("metric %s lacks the migflex_agent_ prefix", n)
		}
	}
	doc, err := metricsdoc.ReadDoc("../../../docs/METRICS.md")
	if err != nil {
		t.Fatal(err)
	}
	documented, err := metricsdoc.Parse(doc, "migflex_agent_")
	if err != nil {
		t.Fatal(err)
	}
	gathered, err := metricsdoc.Gathered(reg, "migflex_agent_")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range metricsdoc.Compare(documented, gathered) {
		t.Error(d)
	}
}
