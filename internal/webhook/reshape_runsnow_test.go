package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/planner/plansnap"
	"github.com/migflex/migflex/internal/planner/simmodels"
	"github.com/migflex/migflex/internal/testsupport/testutil"
	"github.com/migflex/migflex/internal/webhook/fallback"
)

const mig4g40 corev1.ResourceName = "nvidia.com/mig-4g.40gb"

// h100 is an H100 of the layout annotation with instances "3g.40gb@0"
// (free) or "3g.40gb@0*" (held by a pod).
func h100(t testing.TB, node string, index int, instances ...string) nodeinfo.GPU {
	t.Helper()
	m, ok := simmodels.Get("H100-SXM5-80GB")
	if !ok {
		t.Fatal("no H100 model")
	}
	g := nodeinfo.GPU{Index: index, UUID: fmt.Sprintf("GPU-%s-%d", node, index), Model: m.Name, MigMode: nodeinfo.MigModeEnabled}
	for i, s := range instances {
		held := strings.HasSuffix(s, "*")
		name, start, _ := strings.Cut(strings.TrimSuffix(s, "*"), "@")
		at, err := strconv.Atoi(start)
		if err != nil {
			t.Fatal(err)
		}
		p := m.Profiles[slices.IndexFunc(m.Profiles, func(p mig.Profile) bool { return p.Name == name })]
		in := nodeinfo.Instance{Profile: name, Placement: nodeinfo.Placement{Start: at, Size: p.MemorySlices}, GI: uint32(i + 1),
			UUID: fmt.Sprintf("MIG-%s-%d-%d", node, index, i), Health: nodeinfo.HealthHealthy}
		if held {
			in.UsedBy = []string{"ns/holder"}
		}
		g.Instances = append(g.Instances, in)
	}
	return g
}

func seven1g() []string {
	return []string{"1g.10gb@0", "1g.10gb@1", "1g.10gb@2", "1g.10gb@3", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6"}
}

// agentNode is a Node as an agent of this release reports it: its layout
// and profiles, state success, allocatable from its instances; opted in
// to the planner when optedIn.
func agentNode(t testing.TB, name string, optedIn bool, gpus ...nodeinfo.GPU) *corev1.Node {
	t.Helper()
	m, _ := simmodels.Get("H100-SXM5-80GB")
	layout, err := json.Marshal(gpus)
	if err != nil {
		t.Fatal(err)
	}
	profiles, err := json.Marshal([]nodeinfo.Model{nodeinfo.NewModel(m.Name, m.Profiles)})
	if err != nil {
		t.Fatal(err)
	}
	n := gpuNode(name, nil)
	n.Labels[nodeinfo.LabelMigConfigState] = nodeinfo.StateSuccess
	if optedIn {
		n.Labels[nodeinfo.LabelPlanner] = nodeinfo.PlannerEnabled
	}
	n.Annotations = map[string]string{nodeinfo.AnnotationLayout: string(layout), nodeinfo.AnnotationProfiles: string(profiles)}
	for _, g := range gpus {
		for _, in := range g.Instances {
			r := corev1.ResourceName("nvidia.com/mig-" + in.Profile)
			q := n.Status.Allocatable[r]
			q.Add(*resource.NewQuantity(1, resource.DecimalSI))
			n.Status.Allocatable[r] = q
		}
	}
	return n
}

// report writes what the agent reports in n (its layout and profiles,
// its state, its allocatable) on the Node of that name, as the agent
// does.
func report(t *testing.T, client kubernetes.Interface, n *corev1.Node) {
	t.Helper()
	ctx := context.Background()
	cur, err := client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cur.Annotations == nil {
		cur.Annotations = map[string]string{}
	}
	for _, k := range []string{nodeinfo.AnnotationLayout, nodeinfo.AnnotationProfiles} {
		cur.Annotations[k] = n.Annotations[k]
	}
	cur.Labels[nodeinfo.LabelMigConfigState] = n.Labels[nodeinfo.LabelMigConfigState]
	if cur, err = client.CoreV1().Nodes().Update(ctx, cur, metav1.UpdateOptions{FieldManager: "migflex-agent"}); err != nil {
		t.Fatal(err)
	}
	cur.Status.Allocatable = n.Status.Allocatable
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{FieldManager: "migflex-agent"}); err != nil {
		t.Fatal(err)
	}
}

// byPlanner is n with nvidia.com/mig.config set to config by the planner
// at at.
func byPlanner(n *corev1.Node, config string, at time.Time) *corev1.Node {
	n = n.DeepCopy()
	n.Annotations[nodeinfo.AnnotationMigConfig] = config
	n.ManagedFields = []metav1.ManagedFieldsEntry{plansnap.ManagedTime(plansnap.DefaultFieldManager, nodeinfo.AnnotationMigConfig, at)}
	return n
}

// migConfig is a planner's document: the GPUs by index, each with its
// profile counts.
func migConfig(gpus ...string) string {
	var b strings.Builder
	b.WriteString("version: v1\nmig-configs:\n  selected:\n")
	for i, counts := range gpus {
		fmt.Fprintf(&b, "  - devices: [%d]\n    mig-enabled: true\n    mig-devices: {%s}\n", i, counts)
	}
	return b.String()
}

// reshapeSource runs the informers of a webhook in reshape-first mode
// (existence mode: the agents' reports of held devices) on client.
func reshapeSource(t *testing.T, client kubernetes.Interface) (*InformerSource, *ReshapeView) {
	t.Helper()
	s, err := NewInformerSource(client, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewReshapeView(plansnap.DefaultFieldManager, time.Minute, 2*time.Minute, time.Nanosecond)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WithReshape(v); err != nil {
		t.Fatal(err)
	}
	runSource(t, s)
	return s, v
}

// admitted is the pod the handler's patch makes, and the result label.
func admitted(t *testing.T, f *fixture, pod *corev1.Pod) (*corev1.Pod, []string) {
	t.Helper()
	resp := decodeResponse(t, f.post(http.MethodPost, "application/json", reviewFor(t, pod, nil)))
	if !resp.Allowed {
		t.Fatalf("denied: %+v", resp.Result)
	}
	return applyPatch(t, pod, resp.Patch), resp.Warnings
}

func limitOf(p *corev1.Pod) corev1.ResourceName {
	for r := range p.Spec.Containers[0].Resources.Limits {
		return r
	}
	return ""
}

// The webhook in reshape-first mode with the planner's own view of the
// Nodes: it knows which GPUs the planner changed when it saw the write in
// flight, so an idle GPU of a node the planner just changed still serves
// a pod at its size; a busy type in the planner's cooldown falls back at
// once to a free one; a pod is never rewritten to a busy type over a free
// one.
func TestReshapeFirstCountsWhatRunsNow(t *testing.T) {
	ctx := context.Background()
	t.Run("an idle GPU of a node the planner just changed serves the asked size", func(t *testing.T) {
		before := agentNode(t, "gpu", true, h100(t, "gpu", 0, seven1g()...), h100(t, "gpu", 1, seven1g()...))
		client := fake.NewClientset(before)
		src, view := reshapeSource(t, client)
		f := reshapeFixture(t, src, fallback.Options{}, view)
		// The fake clientset's watch may start after its list: an update
		// seen proves it runs, so that the next ones arrive in order.
		before.Labels["watched"] = "yes"
		if _, err := client.CoreV1().Nodes().Update(ctx, before, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, "the watch", func() bool {
			view.mu.Lock()
			defer view.mu.Unlock()
			return view.nodes["gpu"].Labels["watched"] == "yes"
		})
		// The planner changes GPU 0 for a 3g.40gb pod (server-side apply
		// under its field manager); the webhook sees the write, then the
		// agent's report of it applied.
		config := migConfig(`"3g.40gb": 1, "1g.10gb": 3`, `"1g.10gb": 7`)
		_, err := client.CoreV1().Nodes().Apply(ctx, corev1ac.Node("gpu").WithAnnotations(map[string]string{nodeinfo.AnnotationMigConfig: config}),
			metav1.ApplyOptions{FieldManager: plansnap.DefaultFieldManager, Force: true})
		if err != nil {
			t.Fatal(err)
		}
		report(t, client, agentNode(t, "gpu", true, h100(t, "gpu", 0, "3g.40gb@0*", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6"), h100(t, "gpu", 1, seven1g()...)))
		testutil.Eventually(t, "the webhook to see the agent's report", func() bool {
			snap, _ := src.Snapshot()
			return snap.Has(mig3g40)
		})
		for _, r := range []corev1.ResourceName{mig4g40, mig3g40} {
			got, warnings := admitted(t, f, gpuPod("p", r, "1"))
			if got.Annotations[AnnotationReshape] != ReshapeExpected || limitOf(got) != r {
				t.Errorf("%s: admitted as %s with annotations %v (warnings %q), want as asked for the planner", r, limitOf(got), got.Annotations, warnings)
			}
		}
	})

	for name, tc := range map[string]struct {
		node *corev1.Node
		pod  *corev1.Pod
		// want is the pod's GPU resource after admission, warning what
		// a warning must say.
		want    corev1.ResourceName
		warning string
	}{
		"a busy type in the planner's cooldown falls back at once to a free one": {
			node: byPlanner(agentNode(t, "gpu", true, h100(t, "gpu", 0, "3g.40gb@0*", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6")),
				migConfig(`"3g.40gb": 1, "1g.10gb": 3`), time.Now()),
			pod: gpuPod("p", mig3g40, "1"), want: mig1g10,
		},
		"a busy type in the planner's cooldown, nothing free: left as asked and warned": {
			node: byPlanner(agentNode(t, "gpu", true, h100(t, "gpu", 0, "3g.40gb@0*", "1g.10gb@4*", "1g.10gb@5*", "1g.10gb@6*"), h100(t, "gpu", 1)),
				migConfig(`"3g.40gb": 1, "1g.10gb": 3`, ``), time.Now()),
			pod: gpuPod("p", mig3g40, "1"), want: mig3g40, warning: "cooling down",
		},
		"every GPU busy but a 1g.10gb: rewritten to it, not to the busy 2g.20gb": {
			node: agentNode(t, "gpu", false, h100(t, "gpu", 0, "2g.20gb@0*", "2g.20gb@2*", "2g.20gb@4*", "1g.10gb@6"),
				h100(t, "gpu", 1, "2g.20gb@0*", "2g.20gb@2*", "2g.20gb@4*", "1g.10gb@6*")),
			pod: gpuPod("p", mig3g40, "1"), want: mig1g10,
		},
	} {
		t.Run(name, func(t *testing.T) {
			src, view := reshapeSource(t, fake.NewClientset(tc.node))
			f := reshapeFixture(t, src, fallback.Options{}, view)
			got, warnings := admitted(t, f, tc.pod)
			if limitOf(got) != tc.want || got.Annotations[AnnotationReshape] != "" {
				t.Errorf("admitted as %s with annotations %v (warnings %q), want %s", limitOf(got), got.Annotations, warnings, tc.want)
			}
			if tc.warning != "" && !strings.Contains(strings.Join(warnings, "\n"), tc.warning) {
				t.Errorf("warnings %q, want one saying %q", warnings, tc.warning)
			}
		})
	}
}
