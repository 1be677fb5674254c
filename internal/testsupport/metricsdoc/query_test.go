package metricsdoc

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestQueryMetrics(t *testing.T) {
	for name, tc := range map[string]struct {
		expr    string
		want    []string
		wantErr bool
	}{
		"a selector":       {expr: `migflex_agent_config_state{state="failed"} == 1`, want: []string{"migflex_agent_config_state"}},
		"an aggregation":   {expr: `max by (node) (migflex_agent_config_state{state="failed"})`, want: []string{"migflex_agent_config_state"}},
		"a clause after":   {expr: `sum(migflex_x) without (pod, instance)`, want: []string{"migflex_x"}},
		"a range, a rate":  {expr: `sum(rate(migflex_webhook_admissions_total{result=~"internal_error|canceled"}[5m])) > 0`, want: []string{"migflex_webhook_admissions_total"}},
		"a quantile":       {expr: `histogram_quantile(0.99, sum by (le) (rate(migflex_webhook_request_duration_seconds_bucket[5m]))) > 2.5`, want: []string{"migflex_webhook_request_duration_seconds_bucket"}},
		"a join":           {expr: "(sum by (instance, resource) (migflex_agent_devices{health=\"unhealthy\"}) > 0)\n* on (instance) group_left (node) group by (instance, node) (migflex_agent_config_state)", want: []string{"migflex_agent_config_state", "migflex_agent_devices"}},
		"set operators":    {expr: `max(a) < 1 or absent(b) unless on () c and bool d`, want: []string{"a", "b", "c", "d"}},
		"offset, numbers":  {expr: `x offset 5m > 1e-3 + 0x1F + .5 + 2.5e+3 + Inf`, want: []string{"x"}},
		"braces in labels": {expr: `m{path="/{a}[b]", x='it\'s'}`, want: []string{"m"}},
		"a subquery":       {expr: `max_over_time(migflex_x[1h:5m])`, want: []string{"migflex_x"}},
		"a comment":        {expr: "# not_a_metric\nreal_one", want: []string{"real_one"}},
		"each name once":   {expr: `a + a`, want: []string{"a"}},
		"unbalanced":       {expr: `sum(m{a="b"]`, wantErr: true},
		"unterminated":     {expr: `m{a="b}`, wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := QueryMetrics(tc.expr)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want one: %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("QueryMetrics(%q) (-want +got):\n%s", tc.expr, diff)
			}
		})
	}
}

func TestSeries(t *testing.T) {
	got := Series(map[string]Metric{
		"h": {Name: "h", Type: "histogram"}, "s": {Name: "s", Type: "summary"}, "c": {Name: "c", Type: "counter"}, "g": {Name: "g", Type: "gauge"},
	})
	want := map[string]string{"h_bucket": "h", "h_sum": "h", "h_count": "h", "s": "s", "s_sum": "s", "s_count": "s", "c": "c", "g": "g"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Series (-want +got):\n%s", diff)
	}
}
