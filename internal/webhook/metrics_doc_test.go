package webhook

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/migflex/migflex/internal/testsupport/metricsdoc"
)

// TestMetricsDocumented: every metric the webhook serves is in
// docs/METRICS.md with its type and labels, under the migflex_webhook_
// prefix; every webhook metric documented there exists.
func TestMetricsDocumented(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	// Vectors show once they have a child.
	m.admissions.WithLabelValues(resultIgnored).Inc()
	m.fallbacks.WithLabelValues("2g.20gb", "1g.10gb").Inc()
	m.request.WithLabelValues("200").Observe(0)

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) == 0 {
		t.Fatal("no metrics gathered")
	}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "migflex_webhook_") {
			t.Errorf("metric %s lacks the migflex_webhook_ prefix", mf.GetName())
		}
	}
	doc, err := metricsdoc.ReadDoc("../../docs/METRICS.md")
	if err != nil {
		t.Fatal(err)
	}
	documented, err := metricsdoc.Parse(doc, "migflex_webhook_")
	if err != nil {
		t.Fatal(err)
	}
	gathered, err := metricsdoc.Gathered(reg, "migflex_webhook_")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range metricsdoc.Compare(documented, gathered) {
		t.Error(d)
	}
}
