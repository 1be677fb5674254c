package manifests

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// metricsDocExample is the first ```promql block after heading in
// docs/METRICS.md.
func metricsDocExample(t *testing.T, heading string) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs/METRICS.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("docs/METRICS.md has no heading %q", heading)
	}
	_, block, ok := strings.Cut(section, "```promql\n")
	if !ok {
		t.Fatalf("docs/METRICS.md has no promql block under %q", heading)
	}
	expr, _, ok := strings.Cut(block, "```")
	if !ok {
		t.Fatalf("docs/METRICS.md: the promql block under %q does not end", heading)
	}
	return expr
}

// TestMetricsDocJoin: the "DCGM join" of docs/METRICS.md, as the page
// prints it, gives each pod the dcgm-exporter series of the MIG instance it
// holds, on made-up series of both serving paths
// (testdata/prometheus/metrics_join_test.yaml, `promtool test rules`).
func TestMetricsDocJoin(t *testing.T) {
	promtool := promtoolPath(t)
	expr := metricsDocExample(t, "### Mapping instances to pods")
	tmpl, err := os.ReadFile(filepath.Join(repoRoot(t), "test/manifests/testdata/prometheus/metrics_join_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	q, _ := json.Marshal(expr) // a JSON string is a YAML string
	tests := strings.ReplaceAll(string(tmpl), "${dcgm-join}", string(q))
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "empty.rules.yaml"), []byte("groups: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "metrics_join_test.yaml")
	if err := os.WriteFile(f, []byte(tests), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, promtool, "test", "rules", f); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}
