package agent

import (
	"strings"
	"testing"

	"github.com/migflex/migflex/internal/deviceplugin"
	"github.com/migflex/migflex/internal/metricsdoc"
)

// onePlugin serves one healthy device.
type onePlugin struct{ nopPlugin }

func (onePlugin) Resources() []deviceplugin.ResourceStatus {
	return []deviceplugin.ResourceStatus{{Name: resource1g, Devices: []deviceplugin.DeviceStatus{{Device: deviceplugin.Device{ID: "MIG-0"}, Healthy: true}}}}
}

var _ DevicePlugin = onePlugin{}

// TestMetricsDocumented: every metric the agent serves is in
// docs/METRICS.md with its type and labels, and has migflex's prefix;
// every agent metric documented there exists.
func TestMetricsDocumented(t *testing.T) {
	reg := newRegistry()
	m, err := newMetrics(reg, onePlugin{}, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	// Vectors show once they have a child.
	m.reconciles.WithLabelValues(resultSuccess).Inc()
	m.duration.WithLabelValues(resultSuccess).Observe(0)
	m.errors.WithLabelValues(stageReport).Inc()
	m.writes.WithLabelValues(causeInUse).Inc()

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if n := mf.GetName(); !strings.HasPrefix(n, "migflex_agent_") && !strings.HasPrefix(n, "go_") && !strings.HasPrefix(n, "process_") {
			t.Errorf("metric %s lacks the migflex_agent_ prefix", n)
		}
	}
	doc, err := metricsdoc.ReadDoc("../../docs/METRICS.md")
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
