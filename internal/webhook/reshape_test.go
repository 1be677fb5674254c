package webhook

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/planner/plansnap"
	"github.com/migflex/migflex/internal/planner/simmodels"
	"github.com/migflex/migflex/internal/planner/solver"
	"github.com/migflex/migflex/internal/webhook/fallback"
)

const mig3g40 corev1.ResourceName = "nvidia.com/mig-3g.40gb"

// fakeReshaper answers every pod the same, or, for a need of a type in
// byType, that type's plan.
type fakeReshaper struct {
	plan   solver.PodPlan
	byType map[corev1.ResourceName]solver.PodPlan
	ready  bool
	asked  int
}

func (f *fakeReshaper) Planner() (fallback.Planner, bool) { return f, f.ready }

func (f *fakeReshaper) Serve(_ *corev1.Pod, need map[corev1.ResourceName]int64) fallback.Served {
	f.asked++
	plan := f.plan
	for r, p := range f.byType {
		if need[r] > 0 {
			plan = p
		}
	}
	return fallback.Served{Now: plan.Action != solver.ActionNone, Node: plan.Node, Reshape: plan.Action == solver.ActionReshape,
		Later: plan.Later, Reason: plan.Reason}
}

// reshapeFixture is newFixture with a Reshaper.
func reshapeFixture(t *testing.T, src SnapshotSource, o fallback.Options, r Reshaper) *fixture {
	t.Helper()
	f := newFixture(t, src, o)
	f.h.opts.Reshaper = r
	return f
}

// A request the planner can serve as asked is left alone and annotated;
// one it cannot falls back as before; without the planner's answer (not
// synced) the webhook falls back too.
func TestReshapeFirst(t *testing.T) {
	only1g := StaticSource{snapshotOf(gpuNode("n1", map[corev1.ResourceName]int64{mig1g10: 7}))}
	reshape := solver.PodPlan{Action: solver.ActionReshape, Node: "n1", Devices: []solver.Device{{GPU: 0, Resource: mig3g40}}}
	// A 2g.20gb held, a 1g.10gb free: the planner can make another
	// 2g.20gb, not a 3g.40gb.
	held := schedview.NewBuilder(nil)
	held.SetNode(schedview.NodeFromAPI(gpuNode("n1", map[corev1.ResourceName]int64{mig2g20: 1, mig1g10: 4})))
	held.SetPod(heldKey("n1"), "n1", map[corev1.ResourceName]int64{mig2g20: 1})
	type reshapeCase struct {
		name       string
		src        SnapshotSource
		opts       fallback.Options
		pod        *corev1.Pod
		reshaper   *fakeReshaper
		wantResult string
		// wantAnnotations are checked on the patched pod; wantRequest is
		// its first container's GPU resource after the patch.
		wantAnnotations map[string]string
		wantRequest     corev1.ResourceName
		wantWarning     string
		wantAllowed     bool
	}
	tests := []reshapeCase{
		{
			name: "the planner can reshape: left as asked", src: only1g, pod: gpuPod("p", mig3g40, "1"),
			reshaper:        &fakeReshaper{plan: reshape, ready: true},
			wantResult:      resultReshapeExpected,
			wantAnnotations: map[string]string{AnnotationReshape: ReshapeExpected},
			wantRequest:     mig3g40, wantAllowed: true,
			wantWarning: "migflex GPU webhook: the GPU request nvidia.com/mig-3g.40gb left as asked: the planner can reshape free capacity for it on node n1 (migflex.io/reshape=expected); without the planner it would have become 3g.40gb->1g.10gb",
		},
		{
			name: "the pod has annotations already", src: only1g,
			pod:             withAnnotations(gpuPod("p", mig3g40, "1"), map[string]string{"team": "ml"}),
			reshaper:        &fakeReshaper{plan: reshape, ready: true},
			wantResult:      resultReshapeExpected,
			wantAnnotations: map[string]string{"team": "ml", AnnotationReshape: ReshapeExpected},
			wantRequest:     mig3g40, wantAllowed: true,
		},
		{
			name: "the planner cannot: falls back as today", src: only1g, pod: gpuPod("p", mig3g40, "1"),
			reshaper:        &fakeReshaper{plan: solver.PodPlan{Action: solver.ActionNone, Reason: "busy"}, ready: true},
			wantResult:      string(fallback.OutcomeRewritten),
			wantAnnotations: map[string]string{fallback.AnnotationFallback: "3g.40gb->1g.10gb"},
			wantRequest:     mig1g10, wantAllowed: true,
		},
		{
			name: "no answer yet: falls back", src: only1g, pod: gpuPod("p", mig3g40, "1"),
			reshaper:        &fakeReshaper{plan: reshape},
			wantResult:      string(fallback.OutcomeRewritten),
			wantAnnotations: map[string]string{fallback.AnnotationFallback: "3g.40gb->1g.10gb"},
			wantRequest:     mig1g10, wantAllowed: true,
		},
		{
			name: "no GPU type fits, let through: the planner's word in the annotation",
			src:  StaticSource{snapshotOf(gpuNode("n1", nil))}, pod: gpuPod("p", mig3g40, "1"),
			opts:            fallback.Options{OnUnsatisfiable: fallback.UnsatisfiableAllow},
			reshaper:        &fakeReshaper{plan: reshape, ready: true},
			wantResult:      resultReshapeExpected,
			wantWarning:     "migflex GPU webhook: the GPU request nvidia.com/mig-3g.40gb left as asked: the planner can reshape free capacity for it on node n1 (migflex.io/reshape=expected); without the planner it would have been admitted with no GPU type fitting it",
			wantAnnotations: map[string]string{AnnotationReshape: ReshapeExpected},
			wantRequest:     mig3g40, wantAllowed: true,
		},
		{
			// The pod's own mistake: the planner is not asked.
			name: "a denial stands", src: only1g,
			pod:        withAnnotations(gpuPod("p", mig3g40, "1"), map[string]string{fallback.AnnotationPolicy: "not-a-policy"}),
			reshaper:   &fakeReshaper{plan: reshape, ready: true},
			wantResult: string(fallback.OutcomeDenied), wantRequest: mig3g40,
		},
		{
			name: "a reinvocation after the planner's expectation is left alone", src: only1g,
			pod:        withAnnotations(gpuPod("p", mig3g40, "1"), map[string]string{AnnotationReshape: ReshapeExpected}),
			reshaper:   &fakeReshaper{plan: solver.PodPlan{Action: solver.ActionNone}, ready: true},
			wantResult: string(fallback.OutcomeAlreadyProcessed), wantAllowed: true,
			wantAnnotations: map[string]string{AnnotationReshape: ReshapeExpected},
			wantRequest:     mig3g40,
		},
		{
			// Nothing to fall back from: the planner is not asked.
			name: "the profile exists", src: StaticSource{snapshotOf(gpuNode("n1", map[corev1.ResourceName]int64{mig3g40: 1}))}, pod: gpuPod("p", mig3g40, "1"),
			reshaper:   &fakeReshaper{plan: reshape, ready: true},
			wantResult: string(fallback.OutcomeUnchanged), wantAllowed: true, wantRequest: mig3g40,
		},
		{
			name: "the planner makes a nearer type than the free one: rewritten to it, for the planner",
			src:  StaticSource{held.Snapshot()}, pod: gpuPod("p", mig3g40, "1"),
			reshaper: &fakeReshaper{plan: solver.PodPlan{Action: solver.ActionNone}, byType: map[corev1.ResourceName]solver.PodPlan{
				mig2g20: {Action: solver.ActionReshape, Node: "n1"}, mig3g40: {Action: solver.ActionNone}}, ready: true},
			wantResult:      resultReshapeExpected,
			wantAnnotations: map[string]string{fallback.AnnotationFallback: "3g.40gb->2g.20gb", AnnotationReshape: ReshapeExpected},
			wantRequest:     mig2g20, wantAllowed: true,
			wantWarning: "migflex GPU webhook: the GPU request nvidia.com/mig-3g.40gb rewritten (3g.40gb->2g.20gb): the planner can reshape free capacity for it on node n1 (migflex.io/reshape=expected); without the planner it would have become 3g.40gb->1g.10gb",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := reshapeFixture(t, tc.src, tc.opts, tc.reshaper)
			resp := decodeResponse(t, f.post(http.MethodPost, "application/json", reviewFor(t, tc.pod, nil)))
			if resp.Allowed != tc.wantAllowed {
				t.Fatalf("allowed %v, want %v (%+v)", resp.Allowed, tc.wantAllowed, resp.Result)
			}
			if !tc.wantAllowed && tc.reshaper.asked != 0 {
				t.Errorf("the planner was asked %d times about a denied pod", tc.reshaper.asked)
			}
			patched := applyPatch(t, tc.pod, resp.Patch)
			for k, v := range tc.wantAnnotations {
				if patched.Annotations[k] != v {
					t.Errorf("annotation %s = %q, want %q (all: %v)", k, patched.Annotations[k], v, patched.Annotations)
				}
			}
			if _, ok := patched.Spec.Containers[0].Resources.Limits[tc.wantRequest]; !ok {
				t.Errorf("container limits %v, want %s", patched.Spec.Containers[0].Resources.Limits, tc.wantRequest)
			}
			if tc.wantWarning != "" && (len(resp.Warnings) != 1 || resp.Warnings[0] != tc.wantWarning) {
				t.Errorf("warnings %q, want %q", resp.Warnings, tc.wantWarning)
			}
			if got := counterValue(t, f.m.admissions.WithLabelValues(tc.wantResult)); got != 1 {
				t.Errorf("admissions{result=%q} = %v, want 1", tc.wantResult, got)
			}
		})
	}
}

func withAnnotations(p *corev1.Pod, a map[string]string) *corev1.Pod {
	p.Annotations = a
	return p
}

func applyPatch(t *testing.T, pod *corev1.Pod, patch []byte) *corev1.Pod {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	if len(patch) > 0 {
		p, err := jsonpatch.DecodePatch(patch)
		if err != nil {
			t.Fatal(err)
		}
		if raw, err = p.Apply(raw); err != nil {
			t.Fatalf("applying %s: %v", patch, err)
		}
	}
	var out corev1.Pod
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

// The view answers from Nodes as the agent reports them, with the
// planner's own function: an opted-in all-1g GPU can become a 3g.40gb, a
// busy one or one not opted in cannot.
func TestReshapeView(t *testing.T) {
	h100, ok := simmodels.Get("H100-SXM5-80GB")
	if !ok {
		t.Fatal("no H100 model")
	}
	node := func(name string, optedIn bool, busy bool) *corev1.Node {
		g := nodeinfo.GPU{Index: 0, UUID: "GPU-" + name, Model: h100.Name, MigMode: nodeinfo.MigModeEnabled}
		for i := range 7 {
			in := nodeinfo.Instance{Profile: "1g.10gb", Placement: nodeinfo.Placement{Start: i, Size: 1}, UUID: "MIG-" + name + string(rune('0'+i)), Health: nodeinfo.HealthHealthy}
			if busy && (i == 0 || i == 4) {
				in.UsedBy = []string{"ns/busy"}
			}
			g.Instances = append(g.Instances, in)
		}
		layout, _ := json.Marshal([]nodeinfo.GPU{g})
		profiles, _ := json.Marshal([]nodeinfo.Model{nodeinfo.NewModel(h100.Name, h100.Profiles)})
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels:      map[string]string{corev1.LabelHostname: name, nodeinfo.LabelMigConfigState: nodeinfo.StateSuccess},
			Annotations: map[string]string{nodeinfo.AnnotationLayout: string(layout), nodeinfo.AnnotationProfiles: string(profiles)},
		}}
		if optedIn {
			n.Labels[nodeinfo.LabelPlanner] = nodeinfo.PlannerEnabled
		}
		return n
	}
	pinned := func(to string) *corev1.Pod {
		p := gpuPod("p", mig3g40, "1")
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: to}
		return p
	}
	now := time.Now()
	// changed is a node whose nvidia.com/mig.config (its layout as it is)
	// the planner wrote at t.
	changed := func(name string, t time.Time) *corev1.Node {
		n := node(name, true, false)
		n.Annotations[nodeinfo.AnnotationMigConfig] = "version: v1\nmig-configs:\n  selected:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {\"1g.10gb\": 7}\n"
		n.ManagedFields = []metav1.ManagedFieldsEntry{plansnap.ManagedTime("migflex-planner", nodeinfo.AnnotationMigConfig, t)}
		return n
	}
	for _, tc := range []struct {
		name string
		node *corev1.Node
		want solver.Action
	}{
		{"opted in and free", node("a", true, false), solver.ActionReshape},
		{"not opted in", node("b", false, false), solver.ActionNone},
		{"busy where a 3g.40gb would go", node("c", true, true), solver.ActionNone},
		// The planner will not change it again before its cooldown ends:
		// a pod left for it would wait where a fallback runs at once.
		{"changed by the planner within its cooldown", changed("d", now.Add(-time.Minute)), solver.ActionNone},
		{"changed by the planner before its cooldown", changed("e", now.Add(-3*time.Minute)), solver.ActionReshape},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := NewReshapeView("migflex-planner", time.Minute, 2*time.Minute, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := v.CanSupply(pinned(tc.node.Name)); ok {
				// An empty view answers; the informer source gates it
				// until synced.
				t.Log("answered before any node (no informer gate in this test)")
			}
			slim, err := transformReshapeNode(tc.node)
			if err != nil {
				t.Fatal(err)
			}
			v.SetNode(slim.(*corev1.Node))
			v.now = func() time.Time { return now }
			v.built = time.Time{} // a change at once, not within the refresh
			plan, ok := v.CanSupply(pinned(tc.node.Name))
			if !ok || plan.Action != tc.want {
				t.Errorf("CanSupply = %+v (%v), want %s", plan, ok, tc.want)
			}
		})
	}
}

// The view holds, for the planner's cooldown, the GPUs a write of the
// planner changed when it saw the write in flight, and every GPU of the
// node when it did not; once the cooldown has passed, none.
func TestReshapeViewHoldsTheGPUsAWriteChanged(t *testing.T) {
	at := time.Now().Truncate(time.Second)
	before := agentNode(t, "gpu", true, h100(t, "gpu", 0, seven1g()...), h100(t, "gpu", 1, seven1g()...))
	config := migConfig(`"3g.40gb": 1, "1g.10gb": 3`, `"1g.10gb": 7`)
	written := byPlanner(before, config, at)
	applied := byPlanner(agentNode(t, "gpu", true, h100(t, "gpu", 0, "3g.40gb@0*", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6"),
		h100(t, "gpu", 1, seven1g()...)), config, at)
	for _, tc := range []struct {
		name  string
		seen  []*corev1.Node
		after time.Duration
		want  string
	}{
		{"the write seen in flight: only GPU 0 cools down", []*corev1.Node{before, written, applied}, time.Minute, "reshape GPU 1"},
		{"the write not seen: every GPU cools down", []*corev1.Node{applied}, time.Minute, "none"},
		{"the cooldown over", []*corev1.Node{applied}, 3 * time.Minute, "reshape"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := NewReshapeView(plansnap.DefaultFieldManager, time.Minute, 2*time.Minute, time.Nanosecond)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range tc.seen {
				slim, err := transformReshapeNode(n)
				if err != nil {
					t.Fatal(err)
				}
				v.SetNode(slim.(*corev1.Node))
			}
			v.now = func() time.Time { return at.Add(tc.after) }
			plan, ok := v.CanSupply(gpuPod("p", mig4g40, "1"))
			got := string(plan.Action)
			if plan.Action == solver.ActionReshape && strings.HasSuffix(tc.want, "GPU 1") {
				got = fmt.Sprintf("reshape GPU %d", plan.Devices[0].GPU)
			}
			if !ok || got != tc.want {
				t.Errorf("CanSupply = %+v (%v), want %s", plan, ok, tc.want)
			}
		})
	}
}

// A Supplier past its age, which supplier would rebuild before using it,
// is let go without waiting for the next admission; the next builds one.
func TestReshapeViewDropsAnOldSupplier(t *testing.T) {
	v, err := NewReshapeView("migflex-planner", time.Minute, 2*time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	v.maxAge = 50 * time.Millisecond
	slim, err := transformReshapeNode(agentNode(t, "gpu", true, h100(t, "gpu", 0, seven1g()...)))
	if err != nil {
		t.Fatal(err)
	}
	v.SetNode(slim.(*corev1.Node))
	held := func() bool {
		v.mu.Lock()
		defer v.mu.Unlock()
		return v.sup != nil
	}
	for round := range 2 {
		if _, ok := v.Planner(); !ok || !held() {
			t.Fatalf("round %d: no Supplier built (answered %v)", round, ok)
		}
		deadline := time.Now().Add(10 * time.Second)
		for held() && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if held() {
			t.Fatalf("round %d: the Supplier is kept past its age", round)
		}
	}
}
