// Package metricsdoc checks, in tests, that a binary's Prometheus metrics
// and docs/METRICS.md agree: every metric with a prefix is documented with
// its type and labels, and every documented one exists. QueryMetrics names
// the metrics a query selects, so that the alerts and the dashboard the
// chart ships are checked against the page too (test/manifests).
package metricsdoc

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Metric is one row of a METRICS.md table.
type Metric struct {
	Name   string
	Type   string
	Labels []string
}

// Parse reads the rows of doc's tables whose first cell is a metric name
// in backquotes starting with prefix: "| `name` | type | `a`, `b` | meaning |".
// A labels cell without backquotes ("none") means no labels.
func Parse(doc, prefix string) (map[string]Metric, error) {
	out := map[string]Metric{}
	for i, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(line, "| `"+prefix) {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 5 {
			return nil, fmt.Errorf("line %d: want | name | type | labels | meaning |: %s", i+1, line)
		}
		m := Metric{Name: strings.Trim(strings.TrimSpace(cells[1]), "`"), Type: strings.TrimSpace(cells[2])}
		for _, l := range strings.Split(cells[3], ",") {
			if l = strings.TrimSpace(l); strings.HasPrefix(l, "`") {
				m.Labels = append(m.Labels, strings.Trim(l, "`"))
			}
		}
		slices.Sort(m.Labels)
		if _, dup := out[m.Name]; dup {
			return nil, fmt.Errorf("line %d: %s documented twice", i+1, m.Name)
		}
		out[m.Name] = m
	}
	return out, nil
}

// Gathered is what g exposes with the prefix, as Metrics. Metric vectors
// show only once they have a child: the caller sets one of each.
func Gathered(g prometheus.Gatherer, prefix string) (map[string]Metric, error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, err
	}
	out := map[string]Metric{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), prefix) {
			continue
		}
		m := Metric{Name: mf.GetName(), Type: typeName(mf.GetType())}
		if len(mf.GetMetric()) > 0 {
			for _, l := range mf.GetMetric()[0].GetLabel() {
				m.Labels = append(m.Labels, l.GetName())
			}
		}
		slices.Sort(m.Labels)
		out[m.Name] = m
	}
	return out, nil
}

// Compare returns one line per disagreement between the documented and
// the gathered metrics, sorted; none when they agree.
func Compare(documented, gathered map[string]Metric) []string {
	var out []string
	for name, g := range gathered {
		d, ok := documented[name]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s (%s, labels %v) is not documented", name, g.Type, g.Labels))
		case d.Type != g.Type || !slices.Equal(d.Labels, g.Labels):
			out = append(out, fmt.Sprintf("%s: documented as %s with labels %v, is %s with labels %v", name, d.Type, d.Labels, g.Type, g.Labels))
		}
	}
	for name := range documented {
		if _, ok := gathered[name]; !ok {
			out = append(out, fmt.Sprintf("%s is documented but not exposed", name))
		}
	}
	slices.Sort(out)
	return out
}

// ReadDoc reads the file at path.
func ReadDoc(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}

func typeName(t dto.MetricType) string {
	switch t {
	case dto.MetricType_COUNTER:
		return "counter"
	case dto.MetricType_GAUGE:
		return "gauge"
	case dto.MetricType_HISTOGRAM:
		return "histogram"
	case dto.MetricType_SUMMARY:
		return "summary"
	}
	return strings.ToLower(t.String())
}
