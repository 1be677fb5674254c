package metricsdoc

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

func TestParse(t *testing.T) {
	doc := "# x\n\n| name | type | labels | meaning |\n|---|---|---|---|\n" +
		"| `p_a_total` | counter | `result` | what |\n" +
		"| `p_b` | gauge | `node`, `state` | 1 or 0 |\n" +
		"| `p_c_seconds` | histogram | none | time |\n" +
		"| `other_x` | gauge | none | not ours |\n"
	got, err := Parse(doc, "p_")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Metric{
		"p_a_total":   {Name: "p_a_total", Type: "counter", Labels: []string{"result"}},
		"p_b":         {Name: "p_b", Type: "gauge", Labels: []string{"node", "state"}},
		"p_c_seconds": {Name: "p_c_seconds", Type: "histogram"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Parse (-want +got):\n%s", diff)
	}
	if _, err := Parse("| `p_a` | counter | none | x |\n| `p_a` | counter | none | y |\n", "p_"); err == nil {
		t.Error("a metric documented twice was accepted")
	}
	if _, err := Parse("| `p_a` | counter |\n", "p_"); err == nil {
		t.Error("a short row was accepted")
	}
}

func TestGatheredAndCompare(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "p_a_total", Help: "h"}, []string{"result"})
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "p_b", Help: "h"})
	o := prometheus.NewGauge(prometheus.GaugeOpts{Name: "other", Help: "h"})
	reg.MustRegister(c, g, o)
	c.WithLabelValues("ok").Inc()
	got, err := Gathered(reg, "p_")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Metric{
		"p_a_total": {Name: "p_a_total", Type: "counter", Labels: []string{"result"}},
		"p_b":       {Name: "p_b", Type: "gauge"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Gathered (-want +got):\n%s", diff)
	}
	if d := Compare(want, got); len(d) != 0 {
		t.Errorf("Compare of equal sets: %q", d)
	}
	documented := map[string]Metric{
		"p_a_total": {Name: "p_a_total", Type: "gauge", Labels: []string{"result"}},
		"p_z":       {Name: "p_z", Type: "gauge"},
	}
	wantDiff := []string{
		"p_a_total: documented as gauge with labels [result], is counter with labels [result]",
		"p_b (gauge, labels []) is not documented",
		"p_z is documented but not exposed",
	}
	if diff := cmp.Diff(wantDiff, Compare(documented, got)); diff != "" {
		t.Errorf("Compare (-want +got):\n%s", diff)
	}
}
