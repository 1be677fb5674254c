//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/test/e2e/framework"
)

// migflexPlugin runs bin/kubectl-migflex (make build) against the cluster
// and returns its exit code and output.
func migflexPlugin(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), filepath.Join(root, "bin", "kubectl-migflex"), append(args, "--kubeconfig", cluster.Kubeconfig)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode(), stdout.String(), stderr.String()
	case err != nil:
		t.Fatalf("kubectl-migflex %s: %v", strings.Join(args, " "), err)
	}
	return 0, stdout.String(), stderr.String()
}

// pluginStatus is the part of `status -o json` this suite checks,
// decoded with the suite's own types.
type pluginStatus struct {
	Nodes []struct {
		Name    string `json:"name"`
		Serving string `json:"serving"`
		State   string `json:"state"`
		Source  string `json:"source"`
		GPUs    []struct {
			framework.LayoutGPU
			Instances []struct {
				framework.LayoutInstance
				UsedBy []string `json:"usedBy"`
			} `json:"instances"`
		} `json:"gpus"`
	} `json:"nodes"`
	Free []struct {
		Resource    string `json:"resource"`
		Free, Total int
	} `json:"free"`
}

// TestKubectlMigflexStatus: the plugin's status is the Node's: the same
// GPUs, instances and holders as the agent's layout annotation, the state
// label, and free counts that add up; its text fits 80 columns and names
// the pod holding a device.
func TestKubectlMigflexStatus(t *testing.T) {
	migflex(t)
	ctx := t.Context()
	applyLayout(t, "1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb")
	ns := cluster.Namespace(t)
	cluster.CreatePod(t, gpuPod(ns, "holder", "nvidia.com/mig-1g.10gb", 1, "sleep", "3600"))
	holder := ns + "/holder"
	if _, err := cluster.WaitForNode(ctx, "the layout to show the holder", timeout, func(n *corev1.Node) error {
		if !strings.Contains(n.Annotations[annotationLayout], holder) {
			return fmt.Errorf("layout without %s", holder)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// The Node may change under the plugin (the agent's next report):
	// compare with the Node as it was both before and after the run.
	var got pluginStatus
	var node *corev1.Node
	err := framework.WaitFor(ctx, "status -o json between two equal reads of the Node", timeout, func(ctx context.Context) (bool, error) {
		before, err := cluster.Node(ctx)
		if err != nil {
			return false, err
		}
		code, out, errOut := migflexPlugin(t, "status", cluster.NodeName, "-o", "json")
		if code != 0 {
			return false, fmt.Errorf("status -o json: exit %d: %s", code, errOut)
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			return false, fmt.Errorf("status -o json: %w\n%s", err, out)
		}
		after, err := cluster.Node(ctx)
		node = after
		return err == nil && before.ResourceVersion == after.ResourceVersion, err
	})
	if err != nil {
		t.Fatal(err)
	}
	var layout []struct {
		framework.LayoutGPU
		Instances []struct {
			framework.LayoutInstance
			UsedBy []string `json:"usedBy"`
		} `json:"instances"`
	}
	if err := json.Unmarshal([]byte(node.Annotations[annotationLayout]), &layout); err != nil {
		t.Fatal(err)
	}
	if len(got.Nodes) != 1 {
		t.Fatalf("status of %s: %d nodes", cluster.NodeName, len(got.Nodes))
	}
	n := got.Nodes[0]
	if n.Name != cluster.NodeName || n.State != node.Labels[labelState] || n.State != "success" ||
		n.Serving != "device-plugin" || n.Source != "annotation "+annotationMigConfig {
		t.Errorf("node %+v; the Node: state %q", n, node.Labels[labelState])
	}
	gpus, _ := json.Marshal(n.GPUs)
	want, _ := json.Marshal(layout)
	if string(gpus) != string(want) {
		t.Errorf("status GPUs differ from the Node's layout:\n%s\nlayout:\n%s", gpus, want)
	}
	// Free counts from the layout, computed here.
	wantFree := map[string][2]int{}
	for _, g := range layout {
		for _, in := range g.Instances {
			c := wantFree["nvidia.com/mig-"+in.Profile]
			c[1]++
			if len(in.UsedBy) == 0 && in.Health == "Healthy" {
				c[0]++
			}
			wantFree["nvidia.com/mig-"+in.Profile] = c
		}
	}
	gotFree := map[string][2]int{}
	for _, f := range got.Free {
		gotFree[f.Resource] = [2]int{f.Free, f.Total}
	}
	if diff := cmp.Diff(wantFree, gotFree); diff != "" {
		t.Errorf("free devices (-layout +status):\n%s", diff)
	}
	if wantFree["nvidia.com/mig-1g.10gb"] != [2]int{3, 4} {
		t.Errorf("1g.10gb free/total %v, want 3 of 4 with the holder running", wantFree["nvidia.com/mig-1g.10gb"])
	}

	code, out, errOut := migflexPlugin(t, "status")
	t.Logf("kubectl migflex status:\n%s", out)
	if code != 0 || errOut != "" {
		t.Errorf("status: exit %d, stderr %s", code, errOut)
	}
	for _, l := range strings.Split(out, "\n") {
		if len([]rune(l)) > 80 {
			t.Errorf("status line over 80 columns: %q", l)
		}
	}
	// The POD column is cut to fit 80 columns; the test's namespace is
	// long, so only its start is sure to show. The other nodes have their
	// own sections, and layouts of other tests.
	mine := nodeSection(out, cluster.NodeName)
	if !strings.HasPrefix(mine, "NODE "+cluster.NodeName+"  serving device-plugin  config success") || !strings.Contains(mine, holder[:24]) ||
		strings.Count(mine, "  1g.10gb  ") != 4 || strings.Contains(out, "\x1b[") {
		t.Errorf("status:\n%s", out)
	}
	for _, n := range cluster.Nodes {
		if nodeSection(out, n.Name) == "" {
			t.Errorf("status has no section for node %s:\n%s", n.Name, out)
		}
	}

	code, out, _ = migflexPlugin(t, "explain", "holder", "-n", ns)
	if code != 0 || !strings.Contains(out, "holds:       1g.10gb on "+cluster.NodeName+" GPU") {
		t.Errorf("explain holder: exit %d\n%s", code, out)
	}
	if code, _, errOut := migflexPlugin(t, "status", "no-such-node"); code != 4 || !strings.Contains(errOut, "not found") {
		t.Errorf("status no-such-node: exit %d, %s", code, errOut)
	}
}

// nodeSection is the part of the plugin's status text about node name:
// from its NODE line to the next node's or the free counts.
func nodeSection(status, name string) string {
	_, rest, ok := strings.Cut(status, "NODE "+name+"  ")
	if !ok {
		return ""
	}
	rest = "NODE " + name + "  " + rest
	for _, end := range []string{"\nNODE ", "\nFREE DEVICES"} {
		if i := strings.Index(rest, end); i >= 0 {
			rest = rest[:i]
		}
	}
	return rest
}

// TestKubectlMigflexApply: a mig.config over the 128 KiB a command-line
// argument may carry (so `kubectl annotate` cannot set it) is checked
// against the node's GPUs and written by the plugin, and the agent
// applies it; an invalid one is refused before it reaches the Node.
func TestKubectlMigflexApply(t *testing.T) {
	migflex(t)
	ctx := t.Context()
	applyLayout(t, "7g.80gb")

	var b strings.Builder
	b.WriteString("version: v1\nmig-configs:\n  selected:\n    - devices: all\n      mig-enabled: true\n      mig-devices:\n        \"3g.40gb\": 2\n")
	for i := 0; b.Len() < 200<<10; i++ {
		fmt.Fprintf(&b, "  # a configuration of the fleet's shared file, kept for the racks using it\n  # owned by the platform team; changes go through the change process\n  rack-%04d:\n    - devices: all\n      mig-enabled: true\n      mig-devices:\n        \"1g.10gb\": 7\n", i)
	}
	doc := b.String()
	dir := t.TempDir()
	file := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}

	if code, out, errOut := migflexPlugin(t, "validate", "-f", file, "--node", cluster.NodeName, "--config-name", "selected"); code != 0 || !strings.Contains(out, `config "selected" on node `+cluster.NodeName+" (2 x "+simModel+"): ok") {
		t.Fatalf("validate: exit %d\n%s%s", code, out, errOut)
	}
	start := time.Now()
	code, out, errOut := migflexPlugin(t, "apply", "-f", file, cluster.NodeName)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("(%d bytes)", len(doc))) {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
	}
	node, _ := waitForLayout(t, "3g.40gb", "3g.40gb")
	if node.Annotations[annotationMigConfig] != doc {
		t.Errorf("the Node's %s is %d bytes, want the file's %d", annotationMigConfig, len(node.Annotations[annotationMigConfig]), len(doc))
	}
	if _, err := cluster.WaitForNodeEvent(ctx, corev1.EventTypeNormal, "MigConfigApplied", start, "3g.40gb"); err != nil {
		t.Error(err)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte(strings.Replace(doc, `"3g.40gb": 2`, `"3g.40gb": 3`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = migflexPlugin(t, "apply", "-f", bad, cluster.NodeName)
	if code != 1 || !strings.Contains(errOut, "needs 12 of 8 memory slices") {
		t.Errorf("apply of an impossible layout: exit %d, stderr:\n%s", code, errOut)
	}
	got, err := cluster.Client.CoreV1().Nodes().Get(ctx, cluster.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Annotations[annotationMigConfig] != doc {
		t.Errorf("the refused file reached the Node")
	}

	// The dry run runs against the live cluster (exit 1 if a pod of
	// another test waits that no change serves).
	if code, out, errOut := migflexPlugin(t, "plan"); code > 1 || !strings.Contains(out, "Dry run of the planner's next round") {
		t.Errorf("plan: exit %d\n%s%s", code, out, errOut)
	}
}
