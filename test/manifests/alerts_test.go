package manifests

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/migflex/migflex/internal/testsupport/metricsdoc"
)

// promtoolPath is $PROMTOOL, else the pinned promtool that
// install-promtool.sh puts in .cache/tools.
func promtoolPath(t testing.TB) string {
	t.Helper()
	p := os.Getenv("PROMTOOL")
	if p == "" {
		p = filepath.Join(repoRoot(t), ".cache/tools/promtool")
	}
	return requireTool(t, "promtool", p, "run deployments/hack/install-promtool.sh (or set PROMTOOL)")
}

// rule is one alerting rule of a PrometheusRule.
type rule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

type ruleGroups struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []rule `json:"rules"`
	} `json:"groups"`
}

// writeRuleFiles writes the spec of each PrometheusRule in objs into dir as
// <name>.rules.yaml, a Prometheus rule file, and returns their paths and
// the rules.
func writeRuleFiles(t *testing.T, objs objects, dir string) ([]string, []rule) {
	t.Helper()
	var files []string
	var rules []rule
	for _, o := range objs.ofKind("PrometheusRule") {
		spec, _, err := unstructured.NestedMap(o.Object, "spec")
		if err != nil {
			t.Fatal(err)
		}
		data, err := yaml.Marshal(spec)
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, o.GetName()+".rules.yaml")
		if err := os.WriteFile(f, data, 0o600); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
		var g ruleGroups
		if err := yaml.UnmarshalStrict(data, &g); err != nil {
			t.Fatalf("%s: %v", key(o), err)
		}
		for _, grp := range g.Groups {
			rules = append(rules, grp.Rules...)
		}
	}
	return files, rules
}

// The alerts the chart ships (and the kustomize components, which
// TestKustomizeMatchesHelm keeps equal to them) are valid Prometheus rules
// (`promtool check rules`), pass their unit tests (`promtool test rules`,
// testdata/prometheus/alerts_test.yaml, which has a case for each), name
// only metrics docs/METRICS.md documents, and each links its runbook there.
func TestAlertRules(t *testing.T) {
	promtool := promtoolPath(t)
	dir := t.TempDir()
	files, rules := writeRuleFiles(t, helmTemplate(t, scenarioNamed(t, "prometheus-rules")), dir)
	if len(files) != 2 {
		t.Fatalf("rule files %q, want migflex and migflex-planner", files)
	}
	if out, err := run(t, promtool, append([]string{"check", "rules"}, files...)...); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}

	tests, err := os.ReadFile(filepath.Join(repoRoot(t), "test/manifests/testdata/prometheus/alerts_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts_test.yaml"), tests, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, promtool, "test", "rules", filepath.Join(dir, "alerts_test.yaml")); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
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
	runbooks := regexp.MustCompile(`(?m)^### (Migflex\w+)$`).FindAllStringSubmatch(string(doc), -1)
	const base = "https://github.com/migflex/migflex/blob/main/docs/METRICS.md#"
	var alerts []string
	for _, r := range rules {
		alerts = append(alerts, r.Alert)
		names, err := metricsdoc.QueryMetrics(r.Expr)
		if err != nil {
			t.Errorf("%s: %v", r.Alert, err)
		}
		if len(names) == 0 {
			t.Errorf("%s names no metric: %s", r.Alert, r.Expr)
		}
		for _, n := range names {
			if _, ok := series[n]; !ok {
				t.Errorf("%s: %s is not a metric docs/METRICS.md documents", r.Alert, n)
			}
		}
		if !slices.ContainsFunc(runbooks, func(m []string) bool { return m[1] == r.Alert }) {
			t.Errorf("%s: docs/METRICS.md has no runbook (### %s)", r.Alert, r.Alert)
		}
		if got, want := r.Annotations["runbook_url"], base+strings.ToLower(r.Alert); got != want {
			t.Errorf("%s: runbook_url %q, want %q", r.Alert, got, want)
		}
		if r.Annotations["summary"] == "" || r.Annotations["description"] == "" || r.Labels["severity"] == "" || r.For == "" {
			t.Errorf("%s: want a summary, a description, a severity and a for: %+v", r.Alert, r)
		}
		if !strings.Contains(string(tests), "alertname: "+r.Alert+"\n") {
			t.Errorf("%s has no case in testdata/prometheus/alerts_test.yaml", r.Alert)
		}
	}
	for _, m := range runbooks {
		if !slices.Contains(alerts, m[1]) {
			t.Errorf("docs/METRICS.md has a runbook for %s, which no rule defines", m[1])
		}
	}
}

// The values that shape the rules: the components installed, the
// webhook's timeout (MigflexWebhookSlow fires at half of it), the runbook
// address and how long pods may wait.
func TestAlertRulesFollowTheValues(t *testing.T) {
	alertsOf := func(objs objects) map[string]rule {
		t.Helper()
		_, rules := writeRuleFiles(t, objs, t.TempDir())
		out := map[string]rule{}
		for _, r := range rules {
			out[r.Alert] = r
		}
		return out
	}
	keys := func(m map[string]rule) []string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	if got := alertsOf(helmTemplate(t, scenarioNamed(t, "default"))); len(got) != 0 {
		t.Errorf("rules without metrics.prometheusRule.enabled: %v", keys(got))
	}
	for _, tc := range []struct {
		name string
		set  []string
		want []string
	}{
		{"no planner", nil, []string{"MigflexConfigFailed", "MigflexConfigPendingTooLong", "MigflexGPUUnhealthy", "MigflexWebhookErrors", "MigflexWebhookSlow"}},
		{"webhook only", []string{"agent.enabled=false"}, []string{"MigflexWebhookErrors", "MigflexWebhookSlow"}},
		{"agent only", []string{"webhook.enabled=false", "nodeScopePolicy.enabled=false"}, []string{"MigflexConfigFailed", "MigflexConfigPendingTooLong", "MigflexGPUUnhealthy"}},
		{"planner only", []string{"agent.enabled=false", "webhook.enabled=false", "planner.enabled=true", "nodeScopePolicy.enabled=false"}, []string{"MigflexMigPodsPendingNoReshape", "MigflexPlannerNoLeader"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := alertsOf(helmTemplate(t, scenario{name: tc.name, set: append(tc.set, "metrics.prometheusRule.enabled=true")}))
			if !slices.Equal(keys(got), tc.want) {
				t.Errorf("alerts %v, want %v", keys(got), tc.want)
			}
		})
	}
	got := alertsOf(helmTemplate(t, scenario{name: "custom", set: []string{"planner.enabled=true", "metrics.prometheusRule.enabled=true",
		"webhook.timeoutSeconds=9", "metrics.prometheusRule.runbookBaseURL=https://wiki.example/migflex/", "metrics.prometheusRule.pendingFor=1h"}}))
	if e := got["MigflexWebhookSlow"].Expr; !strings.Contains(e, "> 4.5") {
		t.Errorf("MigflexWebhookSlow with a 9 s timeout: %s, want > 4.5", e)
	}
	if u := got["MigflexConfigFailed"].Annotations["runbook_url"]; u != "https://wiki.example/migflex#migflexconfigfailed" {
		t.Errorf("runbook_url %q", u)
	}
	if r := got["MigflexMigPodsPendingNoReshape"]; r.For != "1h" || !strings.Contains(r.Expr, "[1h]") {
		t.Errorf("MigflexMigPodsPendingNoReshape with pendingFor 1h: for %s, expr %s", r.For, r.Expr)
	}
}
