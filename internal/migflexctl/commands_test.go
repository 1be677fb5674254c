package migflexctl

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stesting "k8s.io/client-go/testing"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
)

func all1g(index int) nodeinfo.GPU {
	return gpu(index, "1g.10gb@0:1", "1g.10gb@1:1", "1g.10gb@2:1", "1g.10gb@3:1", "1g.10gb@4:1", "1g.10gb@5:1", "1g.10gb@6:1")
}

// TestPlan: the dry run says what the planner's round would write and
// record, and writes nothing.
func TestPlan(t *testing.T) {
	n := node(t, "gpu-a", nodeinfo.StateSuccess, all1g(0))
	n.Labels[nodeinfo.LabelPlanner] = nodeinfo.PlannerEnabled
	out1 := node(t, "gpu-b", nodeinfo.StateSuccess, gpu(0, "7g.80gb@0:8=ns/holder"))
	client := fakeClient(n, out1, pendingPod("p", mig3g, 1), pendingPod("q", mig7g, 1))
	code, out, errOut := run(t, client, "", "plan")
	want := `Dry run of the planner's next round with the planner's defaults (cooldown 2m0s,
at most 64 GPUs per round, at most 4 reservations); nothing is written.

PENDING PODS (2)
  ns/p asks 1 x nvidia.com/mig-3g.40gb: reshape on gpu-a
  ns/q asks 1 x nvidia.com/mig-7g.80gb: none: no GPU can take
  nvidia.com/mig-7g.80gb: of the 2 GPUs on the 2 nodes it may be scheduled to, 2
  have no room for it next to instances in use

NODE WRITES (1)
  gpu-a: nvidia.com/mig.config
    GPU 0 (H100-SXM5-80GB) -> 1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 3g.40gb@4
    for ns/p

EVENTS IT WOULD RECORD
  ns/q Warning MigReshapeImpossible: no change the planner may make serves it:
  no GPU can take nvidia.com/mig-7g.80gb: of the 2 GPUs on the 2 nodes it may be
  scheduled to, 2 have no room for it next to instances in use
  ns/p Normal MigReshapePlanned: will run on node gpu-a: GPU 0 repartitioned
  7x1g.10gb -> 4x1g.10gb + 3g.40gb
`
	if out != want {
		t.Errorf("plan (-want +got):\n%s", cmp.Diff(want, out))
	}
	checkWidth(t, out)
	if code != ExitAttention || errOut != "" {
		t.Errorf("exit %d, stderr %q; want %d (a pod no change serves)", code, errOut, ExitAttention)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() != "list" && a.GetVerb() != "get" {
			t.Errorf("plan wrote: %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
	code, out, _ = run(t, client, "", "plan", "-o", "json")
	var v PlanView
	if err := json.Unmarshal([]byte(out), &v); err != nil || code != ExitAttention {
		t.Fatalf("-o json: exit %d, %v\n%s", code, err, out)
	}
	if len(v.Nodes) != 1 || v.Nodes[0].Node != "gpu-a" || !strings.Contains(v.Nodes[0].Config, "3g.40gb") || len(v.Pods) != 2 {
		t.Errorf("-o json: %+v", v)
	}
}

func TestPlanNothingWaits(t *testing.T) {
	code, out, _ := run(t, fakeClient(node(t, "gpu-a", nodeinfo.StateSuccess, all1g(0))), "", "plan")
	if code != ExitOK || !strings.Contains(out, "No pod waits for GPUs") {
		t.Errorf("exit %d:\n%s", code, out)
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const twoGPUs = `version: v1
mig-configs:
  selected:
    - devices: all
      mig-enabled: true
      mig-devices:
        "3g.40gb": 2
`

// TestValidate: the agent's check against the node's published GPUs, as
// device-plugin validate prints it for simulated ones.
func TestValidate(t *testing.T) {
	n := node(t, "gpu-a", nodeinfo.StateSuccess, all1g(0), gpu(1))
	client := fakeClient(n)
	good := writeFile(t, "good.yaml", twoGPUs)
	code, out, _ := run(t, client, "", "validate", "-f", good, "--node", "gpu-a")
	want := `config "selected" on node gpu-a (2 x H100-SXM5-80GB): ok

GPU  MODEL           MIG  PROFILE  PLACEMENT
0    H100-SXM5-80GB  on   3g.40gb  0:4
0    H100-SXM5-80GB  on   3g.40gb  4:4
1    H100-SXM5-80GB  on   3g.40gb  0:4
1    H100-SXM5-80GB  on   3g.40gb  4:4
`
	if code != ExitOK || !strings.HasPrefix(out, want) {
		t.Errorf("exit %d (-want +got):\n%s", code, cmp.Diff(want, out))
	}
	bad := writeFile(t, "bad.yaml", strings.Replace(twoGPUs, `"3g.40gb": 2`, `"3g.40gb": 3`, 1))
	code, out, _ = run(t, client, "", "validate", "-f", bad, "--node", "gpu-a")
	if code != ExitAttention || !strings.Contains(out, "GPU 0 (H100-SXM5-80GB): 3g.40gb x3 needs 12 of 8 memory slices") {
		t.Errorf("an impossible layout: exit %d:\n%s", code, out)
	}
	// A device-filter matches the node's GPUs by the built-in model's PCI id.
	filtered := writeFile(t, "filter.yaml", strings.Replace(twoGPUs, "- devices: all", "- devices: all\n      device-filter: \"0x233010DE\"", 1))
	if code, out, _ := run(t, client, "", "validate", "-f", filtered, "--node", "gpu-a"); code != ExitOK {
		t.Errorf("a device-filter for H100s: exit %d:\n%s", code, out)
	}
	for name, args := range map[string][]string{
		"no node":        {"validate", "-f", good},
		"no file":        {"validate", "--node", "gpu-a"},
		"a stray word":   {"validate", "-f", good, "--node", "gpu-a", "extra"},
		"a wrong source": {"validate", "-f", good, "--node", "gpu-a", "--source", "label"},
	} {
		if code, _, _ := run(t, client, "", args...); code != ExitUsage {
			t.Errorf("%s: exit %d, want %d", name, code, ExitUsage)
		}
	}
	if code, _, errOut := run(t, client, "", "validate", "-f", good, "--node", "nope"); code != ExitError || !strings.Contains(errOut, "node nope") {
		t.Errorf("an unknown node: exit %d, %s", code, errOut)
	}
}

// bigDocument is a valid mig.config of about size bytes: a fleet file of
// many commented configurations.
func bigDocument(size int) string {
	var b strings.Builder
	b.WriteString("version: v1\nmig-configs:\n")
	b.WriteString("  selected:\n    - devices: all\n      mig-enabled: true\n      mig-devices:\n        \"3g.40gb\": 2\n")
	for i := 0; b.Len() < size-600; i++ {
		fmt.Fprintf(&b, "  # configuration %d of the fleet's shared file, kept for the racks that use it\n  # owned by the platform team; changes go through the fleet's change process\n  rack-%04d:\n    - devices: all\n      mig-enabled: true\n      mig-devices:\n        \"1g.10gb\": 7\n", i, i)
	}
	return b.String()
}

// TestApply: a document far over the 128 KiB an argument may carry goes
// to the node's annotation by patch; one the agent would refuse does not,
// unless forced.
func TestApply(t *testing.T) {
	n := node(t, "gpu-a", nodeinfo.StateSuccess, all1g(0))
	client := fakeClient(n)
	doc := bigDocument(200 << 10)
	file := writeFile(t, "big.yaml", doc)
	code, out, errOut := run(t, client, "", "apply", "-f", file, "gpu-a")
	if code != ExitOK || !strings.Contains(out, fmt.Sprintf("node/gpu-a annotated: nvidia.com/mig.config (%d bytes)", len(doc))) {
		t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	got, err := client.CoreV1().Nodes().Get(context.Background(), "gpu-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Annotations[nodeinfo.AnnotationMigConfig] != doc || got.Annotations[nodeinfo.AnnotationLayout] == "" {
		t.Errorf("the node's annotations after apply: mig.config %d bytes (want %d), layout kept: %v",
			len(got.Annotations[nodeinfo.AnnotationMigConfig]), len(doc), got.Annotations[nodeinfo.AnnotationLayout] != "")
	}
	var patched bool
	for _, a := range client.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok {
			patched = p.GetPatchType() == "application/merge-patch+json"
		}
	}
	if !patched {
		t.Errorf("apply did not send a merge patch: %v", client.Actions())
	}

	bad := writeFile(t, "bad.yaml", strings.Replace(twoGPUs, `"3g.40gb": 2`, `"3g.40gb": 3`, 1))
	code, _, errOut = run(t, client, "", "set-config", "-f", bad, "gpu-a")
	if code != ExitAttention || !strings.Contains(errOut, "the agent would refuse") || !strings.Contains(errOut, "needs 12 of 8 memory slices") {
		t.Errorf("an invalid file: exit %d, stderr:\n%s", code, errOut)
	}
	if got, _ := client.CoreV1().Nodes().Get(context.Background(), "gpu-a", metav1.GetOptions{}); got.Annotations[nodeinfo.AnnotationMigConfig] != doc {
		t.Errorf("an invalid file was written")
	}
	if code, _, _ := run(t, client, "", "apply", "-f", bad, "gpu-a", "--force", "--key", nodeinfo.AnnotationRunAIConfig); code != ExitOK {
		t.Errorf("--force: exit %d", code)
	}
	if got, _ := client.CoreV1().Nodes().Get(context.Background(), "gpu-a", metav1.GetOptions{}); !strings.Contains(got.Annotations[nodeinfo.AnnotationRunAIConfig], `"3g.40gb": 3`) {
		t.Errorf("--force --key run.ai/mig.config did not write it")
	}

	huge := writeFile(t, "huge.yaml", bigDocument(300<<10))
	code, _, errOut = run(t, client, "", "apply", "-f", huge, "gpu-a")
	if code != ExitAttention || !strings.Contains(errOut, "more than 262144 bytes") {
		t.Errorf("a file past the limit: exit %d, stderr %s", code, errOut)
	}
	if code, _, _ := run(t, client, "", "apply", "-f", file, "gpu-a", "--key", "foo"); code != ExitUsage {
		t.Errorf("--key foo: exit %d, want %d", code, ExitUsage)
	}
}
