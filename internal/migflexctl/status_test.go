package migflexctl

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
)

func statusCluster(t *testing.T) []*corev1.Node {
	a := node(t, "gpu-a", nodeinfo.StateSuccess,
		gpu(0, "3g.40gb@0:4=ml/train-the-big-language-model-0-of-a-long-job", "1g.10gb@4:1", "1g.10gb@5:1=ns/infer", "1g.10gb@6:1"),
		wholeGPU(1, "ns/whole"))
	a.Labels[nodeinfo.LabelPlanner] = nodeinfo.PlannerEnabled
	a.Annotations[nodeinfo.AnnotationMigConfig] = "version: v1\n"
	b := node(t, "gpu-b", nodeinfo.StateFailed, gpu(0, "7g.80gb@0:8!"))
	b.Labels[nodeinfo.LabelServing] = nodeinfo.ServingDRA
	b.Annotations[nodeinfo.AnnotationReason] = "mig-configs.selected[0]: GPU 3 does not exist (node has GPUs 0)"
	other := &corev1.Node{}
	other.Name = "cpu-only"
	return []*corev1.Node{a, b, other}
}

func TestStatusText(t *testing.T) {
	nodes := statusCluster(t)
	code, out, errOut := run(t, fakeClient(nodes[0], nodes[1], nodes[2]), "", "status")
	want := `NODE gpu-a  serving device-plugin  config success  planner: opted in
  source: annotation nvidia.com/mig.config
  GPU 0  H100-SXM5-80GB  MIG Enabled
    PROFILE  AT   HEALTH   DEVICE         POD
    3g.40gb  0:4  Healthy  MIG-00000000…  ml/train-the-big-language-model-0-of-…
    1g.10gb  4:1  Healthy  MIG-00000004…  -
    1g.10gb  5:1  Healthy  MIG-00000005…  ns/infer
    1g.10gb  6:1  Healthy  MIG-00000006…  -
  GPU 1  H100-SXM5-80GB  MIG Disabled
    PROFILE    AT  HEALTH   DEVICE         POD
    whole GPU  -   Healthy  GPU-aaaaaaaa…  ns/whole

NODE gpu-b  serving dra  config failed
  source: no mig.config on the node
  reason: mig-configs.selected[0]: GPU 3 does not exist (node has GPUs 0)
  GPU 0  H100-SXM5-80GB  MIG Enabled
    PROFILE  AT   HEALTH     DEVICE         POD
    7g.80gb  0:8  Unhealthy  MIG-00000000…  -

FREE DEVICES (all nodes shown)
  RESOURCE                FREE  TOTAL
  nvidia.com/gpu          0     1
  nvidia.com/mig-1g.10gb  2     3
  nvidia.com/mig-3g.40gb  0     1
  nvidia.com/mig-7g.80gb  0     1
`
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	checkWidth(t, out)
	if code != ExitAttention || errOut != "" {
		t.Errorf("exit %d, stderr %q: want %d (a failed config, an unhealthy device)", code, errOut, ExitAttention)
	}
}

func TestStatusJSONMatchesNodes(t *testing.T) {
	nodes := statusCluster(t)
	for _, format := range []string{"json", "yaml"} {
		code, out, _ := run(t, fakeClient(nodes[0], nodes[1], nodes[2]), "", "status", "gpu-a", "-o", format)
		if code != ExitOK {
			t.Errorf("-o %s gpu-a: exit %d, want %d", format, code, ExitOK)
		}
		if format == "yaml" {
			if !strings.Contains(out, "name: gpu-a") || !strings.Contains(out, "resource: nvidia.com/mig-1g.10gb") {
				t.Errorf("-o yaml:\n%s", out)
			}
			continue
		}
		var got Status
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("-o json: %v\n%s", err, out)
		}
		layout, _ := nodeinfo.ParseLayout(nodes[0].Annotations[nodeinfo.AnnotationLayout])
		want := Status{
			Nodes: []NodeStatus{{Name: "gpu-a", Serving: "device-plugin", State: "success", Source: "annotation nvidia.com/mig.config", Planner: true, GPUs: layout}},
			Free:  []FreeCount{{"nvidia.com/gpu", 0, 1}, {"nvidia.com/mig-1g.10gb", 2, 3}, {"nvidia.com/mig-3g.40gb", 0, 1}},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("-o json (-want +got):\n%s", diff)
		}
	}
}

func TestStatusErrorsAndColour(t *testing.T) {
	nodes := statusCluster(t)
	client := fakeClient(nodes[0], nodes[1], nodes[2])
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string // substring of stdout
		wantErr  string // substring of stderr
		noEscape bool
	}{
		{name: "an unknown node", args: []string{"status", "nope"}, wantCode: ExitError, wantErr: `node "nope" not found`},
		{name: "an unknown output", args: []string{"status", "-o", "xml"}, wantCode: ExitUsage, wantErr: `-o "xml": status takes text, wide, json, yaml`},
		{name: "an unknown command", args: []string{"stat"}, wantCode: ExitUsage, wantErr: `unknown command "stat"`},
		{name: "no command", args: nil, wantCode: ExitUsage, wantErr: "Usage:"},
		{name: "help", args: []string{"--help"}, wantCode: ExitOK, wantOut: "Exit status: 0 good news"},
		{name: "colour on request", args: []string{"status", "gpu-b", "--color", "always"}, wantCode: ExitAttention, wantOut: "config \x1b[31mfailed\x1b[0m"},
		{name: "no colour off a terminal", args: []string{"status", "gpu-b"}, wantCode: ExitAttention, wantOut: "config failed", noEscape: true},
		{name: "wide shows whole ids", args: []string{"status", "gpu-a", "-o", "wide"}, wantCode: ExitOK, wantOut: "MIG-00000000-0000-5000-8000-000000000000  ml/train-the-big-language-model-0"},
		{name: "a bad colour", args: []string{"status", "--color", "pink"}, wantCode: ExitUsage, wantErr: "--color"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := run(t, client, "", tc.args...)
			if code != tc.wantCode || !strings.Contains(out, tc.wantOut) || !strings.Contains(errOut, tc.wantErr) {
				t.Errorf("exit %d, stdout:\n%s\nstderr:\n%s\nwant exit %d, stdout with %q, stderr with %q", code, out, errOut, tc.wantCode, tc.wantOut, tc.wantErr)
			}
			if tc.noEscape && strings.Contains(out, "\x1b[") {
				t.Errorf("colour escapes off a terminal:\n%q", out)
			}
		})
	}
}

func TestStatusNoAgent(t *testing.T) {
	other := &corev1.Node{}
	other.Name = "cpu-only"
	code, out, _ := run(t, fakeClient(other), "", "status")
	if code != ExitOK || !strings.Contains(out, "No node reports migflex's layout") {
		t.Errorf("exit %d:\n%s", code, out)
	}
}

// TestStatusColourAligned: with colour, the columns line up as without
// (tabwriter counts the escapes, so every cell of a coloured column and
// its header carry escapes of one length).
func TestStatusColourAligned(t *testing.T) {
	nodes := statusCluster(t)
	client := fakeClient(nodes[0], nodes[1], nodes[2])
	_, plain, _ := run(t, client, "", "status")
	_, colour, _ := run(t, client, "", "status", "--color", "always")
	stripped := regexp.MustCompile("\x1b\\[[0-9]+m").ReplaceAllString(colour, "")
	if diff := cmp.Diff(plain, stripped); diff != "" {
		t.Errorf("coloured output without its escapes (-plain +coloured):\n%s", diff)
	}
}
