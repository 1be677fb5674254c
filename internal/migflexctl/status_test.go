package migflexctl

import (
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/planner/plansnap"
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

// TestStatusManualHold: issue 35 (5a). A node whose nvidia.com/mig.config
// someone other than the planner wrote less than the planner's
// --manual-hold ago is held: status says so, until when and who wrote
// it, as the planner reads it (plansnap).
func TestStatusManualHold(t *testing.T) {
	edited := func(manager string, ago time.Duration, optedIn bool) *corev1.Node {
		n := node(t, "gpu-a", nodeinfo.StateSuccess, gpu(0, "7g.80gb@0:8"))
		n.Annotations[nodeinfo.AnnotationMigConfig] = "version: v1\n"
		if optedIn {
			n.Labels[nodeinfo.LabelPlanner] = nodeinfo.PlannerEnabled
		}
		n.ManagedFields = []metav1.ManagedFieldsEntry{plansnap.ManagedTime(manager, nodeinfo.AnnotationMigConfig, now.Add(-ago))}
		return n
	}
	at := func(d time.Duration) *time.Time {
		t := now.Add(d)
		return &t
	}
	tests := []struct {
		name   string
		node   *corev1.Node
		args   []string
		head   string // the first line
		lines  []string
		writer string
		held   *time.Time
	}{
		{
			name: "a hand edit two minutes ago", node: edited("kubectl-annotate", 2*time.Minute, true),
			head: "NODE gpu-a  serving device-plugin  config success  planner: opted in, held",
			lines: []string{
				"  source: annotation nvidia.com/mig.config, last written by kubectl-annotate at",
				"          2026-11-27T07:58:00Z",
				"  planner: held until 2026-11-27T08:08:00Z: kubectl-annotate changed it less",
				"           than 10m0s (--manual-hold) ago, and the planner leaves a node alone",
				"           that long after a change not its own",
			},
			writer: "kubectl-annotate", held: at(8 * time.Minute),
		},
		{
			name: "the planner's own write", node: edited("migflex-planner", time.Minute, true),
			head:   "NODE gpu-a  serving device-plugin  config success  planner: opted in",
			lines:  []string{"  source: annotation nvidia.com/mig.config, last written by migflex-planner at"},
			writer: "migflex-planner",
		},
		{
			name: "a hand edit past the hold", node: edited("kubectl-migflex", 20*time.Minute, true),
			head: "NODE gpu-a  serving device-plugin  config success  planner: opted in", writer: "kubectl-migflex",
		},
		{
			name: "a longer --manual-hold", node: edited("kubectl-migflex", 20*time.Minute, true), args: []string{"--manual-hold", "30m"},
			head: "NODE gpu-a  serving device-plugin  config success  planner: opted in, held", writer: "kubectl-migflex", held: at(10 * time.Minute),
			lines: []string{"  planner: held until 2026-11-27T08:10:00Z: kubectl-migflex changed it less than"},
		},
		{
			name: "not opted in: nothing to hold", node: edited("kubectl-annotate", time.Minute, false),
			head: "NODE gpu-a  serving device-plugin  config success", writer: "kubectl-annotate",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fakeClient(tt.node)
			code, out, errOut := run(t, client, "", append([]string{"status"}, tt.args...)...)
			if code != ExitOK || errOut != "" {
				t.Errorf("exit %d, stderr %q", code, errOut)
			}
			if head, _, _ := strings.Cut(out, "\n"); head != tt.head {
				t.Errorf("first line %q, want %q", head, tt.head)
			}
			for _, l := range tt.lines {
				if !strings.Contains(out, l+"\n") {
					t.Errorf("no line %q in:\n%s", l, out)
				}
			}
			if held := strings.Contains(out, "planner: held"); held != (tt.held != nil) {
				t.Errorf("a held line: %v, want %v:\n%s", held, tt.held != nil, out)
			}
			checkWidth(t, out)
			_, js, _ := run(t, client, "", append([]string{"status", "-o", "json"}, tt.args...)...)
			var st Status
			if err := json.Unmarshal([]byte(js), &st); err != nil || len(st.Nodes) != 1 {
				t.Fatalf("-o json: %v\n%s", err, js)
			}
			n := st.Nodes[0]
			if n.ConfigWriter != tt.writer || n.ConfigWritten == nil || !cmp.Equal(tt.held, n.PlannerHeldUntil) {
				t.Errorf("-o json: writer %q at %v, held until %v; want %q, held until %v", n.ConfigWriter, n.ConfigWritten, n.PlannerHeldUntil, tt.writer, tt.held)
			}
		})
	}
}

// A dynamic node's status: what its GPUs' counters still let be made,
// each GPU free, partly used or full, and the free devices counted from
// that, not from its instances (each a claim's).
func TestStatusDynamic(t *testing.T) {
	objs := dynamicCluster(t, "gpu-0-mig-3g40gb-9-4")
	n := objs[0].(*corev1.Node)
	g := gpu(0, "3g.40gb@4:4=ns/runs")
	g.UUID = "GPU-0" // the slices'
	layout, err := json.Marshal([]nodeinfo.GPU{g})
	if err != nil {
		t.Fatal(err)
	}
	n.Annotations[nodeinfo.AnnotationLayout] = string(layout)
	code, out, errOut := run(t, fakeClient(objs...), "", "status")
	want := `NODE gpu-d  serving dra (dynamic)  config success
  source: no mig.config on the node
  dynamic: instances are made at Prepare; can make now (each alone): 1g.10gb x4,
           1g.10gb+me x1, 1g.20gb x2, 2g.20gb x2, 3g.40gb x1, 4g.40gb x1
  GPU 0  H100-SXM5-80GB  MIG Enabled  partly used
    PROFILE  AT   HEALTH   DEVICE         POD
    3g.40gb  4:4  Healthy  MIG-00000004…  ns/runs

FREE DEVICES (all nodes shown)
  RESOURCE                   FREE  TOTAL
  nvidia.com/mig-1g.10gb     4     4
  nvidia.com/mig-1g.10gb.me  1     1
  nvidia.com/mig-1g.20gb     2     2
  nvidia.com/mig-2g.20gb     2     2
  nvidia.com/mig-3g.40gb     1     2
  nvidia.com/mig-4g.40gb     1     1
`
	if code != ExitOK || errOut != "" {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("status (-want,+got):\n%s", diff)
	}
	checkWidth(t, out)
}

// A user who may not list ResourceSlices still gets the Nodes' status,
// warned that a dynamic node's supply is not shown.
func TestStatusWithoutSliceAccess(t *testing.T) {
	client := fakeClient(dynamicCluster(t)...)
	client.PrependReactor("list", "resourceslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceslices"}, "", errors.New("no"))
	})
	code, out, errOut := run(t, client, "", "status")
	if code != ExitOK || !strings.Contains(out, "NODE gpu-d  serving dra (dynamic)") || strings.Contains(out, "dynamic:") {
		t.Errorf("exit %d, out:\n%s", code, out)
	}
	if !strings.Contains(errOut, "warning:") || !strings.Contains(errOut, "dynamic DRA node's supply is not shown") {
		t.Errorf("stderr %q does not warn", errOut)
	}
}

// shared makes g's instance i a shared device: replicas of res, inUse of
// them held by usedBy.
func shared(g nodeinfo.GPU, i int, res string, replicas, inUse int, usedBy ...string) nodeinfo.GPU {
	g.Instances[i].Shared = &nodeinfo.Shared{Resource: res, Replicas: replicas, InUse: inUse}
	g.Instances[i].UsedBy = usedBy
	return g
}

// TestStatusFreeReplicas: a shared device counts for its replicas, under
// the resource they are served as, as the allocatable does; those in use
// are not free.
func TestStatusFreeReplicas(t *testing.T) {
	const res1g = "nvidia.com/mig-1g.10gb"
	two1g := func() nodeinfo.GPU { return gpu(0, "1g.10gb@4:1", "1g.10gb@5:1") }
	for _, tc := range []struct {
		name string
		gpus []nodeinfo.GPU
		want []FreeCount
	}{
		{"one of two replicas in use", []nodeinfo.GPU{shared(two1g(), 0, res1g, 2, 1, "ns/a")},
			[]FreeCount{{Resource: res1g, Free: 2, Total: 3}}},
		{"both in use", []nodeinfo.GPU{shared(two1g(), 0, res1g, 2, 2, "ns/a", "ns/b")},
			[]FreeCount{{Resource: res1g, Free: 1, Total: 3}}},
		{"renamed", []nodeinfo.GPU{shared(two1g(), 0, "nvidia.com/small", 4, 1, "ns/a")},
			[]FreeCount{{Resource: res1g, Free: 1, Total: 1}, {Resource: "nvidia.com/small", Free: 3, Total: 4}}},
		{"unhealthy", []nodeinfo.GPU{shared(gpu(0, "1g.10gb@4:1!"), 0, res1g, 2, 0)},
			[]FreeCount{{Resource: res1g, Free: 0, Total: 2}}},
		{"a whole GPU", []nodeinfo.GPU{func() nodeinfo.GPU {
			g := wholeGPU(1, "ns/a")
			g.Shared = &nodeinfo.Shared{Resource: "nvidia.com/gpu", Replicas: 3, InUse: 1}
			return g
		}()}, []FreeCount{{Resource: "nvidia.com/gpu", Free: 2, Total: 3}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := node(t, "gpu-a", nodeinfo.StateSuccess, tc.gpus...)
			st, err := BuildStatus([]corev1.Node{*n}, nil, plansnap.Options{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, st.Free); diff != "" {
				t.Errorf("free (-want +got):\n%s", diff)
			}
		})
	}

	n := node(t, "gpu-a", nodeinfo.StateSuccess, shared(shared(two1g(), 0, res1g, 2, 2, "ns/a", "ns/b"), 1, "nvidia.com/small", 4, 1, "ns/c"))
	_, out, _ := run(t, fakeClient(n), "", "status")
	for _, want := range []string{
		"1g.10gb  4:1  Healthy  MIG-00000004…  2/2 replicas: ns/a,ns/b\n",
		"1g.10gb  5:1  Healthy  MIG-00000005…  1/4 replicas of nvidia.com/small: ns/c\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status does not show %q:\n%s", want, out)
		}
	}
	checkWidth(t, out)
}
