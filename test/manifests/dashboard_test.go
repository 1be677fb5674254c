package manifests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/migflex/migflex/internal/testsupport/metricsdoc"
)

// dashboard is what the tests read of a Grafana dashboard.
type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name, Type, Query string
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
}

// grafanaVars are Grafana's interval variables, as a query would be run.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// renderedDashboard is the dashboard the chart renders with
// metrics.dashboard.enabled, read from its ConfigMap.
func renderedDashboard(t *testing.T) (*corev1.ConfigMap, dashboard) {
	t.Helper()
	objs := helmTemplate(t, scenario{name: "dashboard", set: []string{"metrics.dashboard.enabled=true"}})
	cm := get[corev1.ConfigMap](t, objs, "ConfigMap", "migflex-dashboard")
	var d dashboard
	if err := json.Unmarshal([]byte(cm.Data["migflex.json"]), &d); err != nil {
		t.Fatalf("the dashboard is no JSON: %v", err)
	}
	return cm, d
}

// The chart's Grafana dashboard is found by the sidecar (its label), takes
// its Prometheus from a data source variable, and every query is valid
// PromQL (promtool, as recording rules) that names only metrics
// docs/METRICS.md documents, which the binaries' tests keep in step with
// their registries. Off by default.
func TestDashboard(t *testing.T) {
	if objs := helmTemplate(t, scenarioNamed(t, "default")); objs.find("ConfigMap", "migflex-dashboard") != nil {
		t.Error("a dashboard without metrics.dashboard.enabled")
	}
	cm, d := renderedDashboard(t)
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("ConfigMap labels %v, want the sidecar's grafana_dashboard: \"1\"", cm.Labels)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q title %q", d.UID, d.Title)
	}
	if !slices.ContainsFunc(d.Templating.List, func(v struct{ Name, Type, Query string }) bool {
		return v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus"
	}) {
		t.Errorf("no Prometheus data source variable: %+v", d.Templating.List)
	}

	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs/METRICS.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented, err := metricsdoc.Parse(string(doc), "migflex_")
	if err != nil {
		t.Fatal(err)
	}
	series := metricsdoc.Series(documented)
	used := map[string]bool{}
	ids := map[int]bool{}
	var rules []map[string]string
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("panel %q: data source %q, %d queries; want ${datasource} and a query", p.Title, p.Datasource.UID, len(p.Targets))
		}
		for _, q := range p.Targets {
			expr := grafanaVars.Replace(q.Expr)
			names, err := metricsdoc.QueryMetrics(expr)
			if err != nil || len(names) == 0 {
				t.Errorf("panel %q query %s: %v, names %v", p.Title, q.RefID, err, names)
			}
			for _, n := range names {
				if m, ok := series[n]; ok {
					used[m] = true
				} else {
					t.Errorf("panel %q query %s names %s, which docs/METRICS.md does not document", p.Title, q.RefID, n)
				}
			}
			rules = append(rules, map[string]string{"record": fmt.Sprintf("dashboard:panel_%d_%s", p.ID, q.RefID), "expr": expr})
		}
	}
	t.Logf("the dashboard uses %d of the %d documented metrics", len(used), len(documented))

	// Valid PromQL, by Prometheus's own parser.
	promtool := promtoolPath(t)
	data, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "dashboard.rules.yaml")
	if err := os.WriteFile(f, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, promtool, "check", "rules", f); err != nil {
		t.Fatalf("promtool check rules on the dashboard's queries: %v\n%s", err, out)
	}
}

// The panels that join or subtract series answer what their titles say,
// evaluated by promtool on made-up series: testdata/prometheus/
// dashboard_test.yaml names each query as ${<panel title>/<refId>}, which
// this test replaces with the dashboard's query.
func TestDashboardQueries(t *testing.T) {
	promtool := promtoolPath(t)
	_, d := renderedDashboard(t)
	exprs := map[string]string{}
	for _, p := range d.Panels {
		for _, q := range p.Targets {
			exprs[p.Title+"/"+q.RefID] = grafanaVars.Replace(q.Expr)
		}
	}
	tmpl, err := os.ReadFile(filepath.Join(repoRoot(t), "test/manifests/testdata/prometheus/dashboard_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	tests := regexp.MustCompile(`\$\{([^}<>]+/[A-Z])\}`).ReplaceAllStringFunc(string(tmpl), func(ref string) string {
		e, ok := exprs[ref[2:len(ref)-1]]
		if !ok {
			missing = append(missing, ref)
		}
		q, _ := json.Marshal(e) // a JSON string is a YAML string
		return string(q)
	})
	if len(missing) > 0 {
		t.Fatalf("dashboard_test.yaml names queries the dashboard lacks: %q", missing)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "empty.rules.yaml"), []byte("groups: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "dashboard_test.yaml")
	if err := os.WriteFile(f, []byte(tests), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, promtool, "test", "rules", f); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}
