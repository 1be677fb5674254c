package manifests

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

// sections are the values.yaml maps whose keys are values of their own;
// every other map (resources, nodeSelector, policy, ...) is one value.
var sections = []string{"", "image", "agent", "agent.hostPaths", "simulator", "nodeScopePolicy", "webhook",
	"webhook.podDisruptionBudget", "planner", "metrics", "metrics.serviceMonitor", "metrics.prometheusRule", "metrics.dashboard", "certificates", "certificates.certgen", "certificates.certManager"}

// docs/INSTALL.md's values table lists every value of the chart, and
// nothing else.
func TestInstallDocListsEveryValue(t *testing.T) {
	root := repoRoot(t)
	data, err := os.ReadFile(filepath.Join(root, chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	var want []string
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			path := strings.TrimPrefix(prefix+"."+k, ".")
			if sub, ok := v.(map[string]any); ok && slices.Contains(sections, path) {
				walk(path, sub)
				continue
			}
			want = append(want, path)
		}
	}
	walk("", values)
	sort.Strings(want)

	doc, err := os.ReadFile(filepath.Join(root, "docs/INSTALL.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "\n## Values\n")
	if !ok {
		t.Fatal("docs/INSTALL.md has no Values section")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	var got []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([^`]+)` \\|").FindAllStringSubmatch(table, -1) {
		got = append(got, m[1])
	}
	sort.Strings(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("values.yaml (-) and the docs/INSTALL.md table (+) differ:\n%s", diff)
	}
}

// helmInstall finds a command that installs the chart.
var helmInstall = regexp.MustCompile(`(?i)helm"?\s+(install|upgrade --install)\s+migflex`)

// Every documented Helm install labels the namespace for Pod Security
// first, as the agent needs it; none suggests --create-namespace, which
// makes the namespace without the label.
func TestHelmInstallDocsLabelTheNamespace(t *testing.T) {
	root := repoRoot(t)
	const label = "pod-security.kubernetes.io/enforce=privileged"
	installs := 0
	for _, f := range []string{"README.md", "docs/INSTALL.md", chartDir + "/README.md", chartDir + "/values.yaml", "hack/kind-up.sh"} {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		labelled := false
		for i, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, label) && strings.Contains(line, "label") {
				labelled = true
			}
			if strings.Contains(line, "--create-namespace") && strings.Contains(line, "helm ") {
				t.Errorf("%s:%d suggests --create-namespace, which skips the Pod Security label: %s", f, i+1, strings.TrimSpace(line))
			}
			if helmInstall.MatchString(line) {
				installs++
				if !labelled {
					t.Errorf("%s:%d installs the chart without labelling the namespace %s before: %s", f, i+1, label, strings.TrimSpace(line))
				}
			}
		}
	}
	if installs == 0 {
		t.Fatal("found no documented helm install")
	}
}
