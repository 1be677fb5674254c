package testutil

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestMetricSum(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total", Help: "c"}, []string{"result"})
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h_seconds", Help: "h"})
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "g", Help: "g"})
	reg.MustRegister(c, h, g)
	c.WithLabelValues("ok").Add(2)
	c.WithLabelValues("error").Add(3)
	h.Observe(1)
	h.Observe(2)
	g.Set(7)
	for _, tc := range []struct {
		name, label, value string
		want               float64
	}{
		{"c_total", "result", "ok", 2},
		{"c_total", "result", "error", 3},
		{"c_total", "", "", 5},
		{"c_total", "result", "missing", 0},
		{"h_seconds", "", "", 2},
		{"g", "", "", 7},
		{"absent", "", "", 0},
	} {
		got, err := MetricSum(reg, tc.name, tc.label, tc.value)
		if err != nil || got != tc.want {
			t.Errorf("MetricSum(%s, %s=%s) = %v, %v; want %v", tc.name, tc.label, tc.value, got, err, tc.want)
		}
	}
}
