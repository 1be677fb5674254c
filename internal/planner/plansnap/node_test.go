package plansnap

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/planner/simmodels"
	"github.com/migflex/migflex/internal/planner/solver"
	"github.com/migflex/migflex/internal/testsupport/draslices"
)

const (
	manager = "migflex-planner"
	h100    = "H100-SXM5-80GB"
)

var now = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// gpu is an H100 in the layout annotation; instances are "1g.10gb@3", with
// a trailing "=ns/pod" for one a pod holds.
func gpu(index int, instances ...string) nodeinfo.GPU {
	g := nodeinfo.GPU{Index: index, UUID: "GPU-" + string(rune('a'+index)), Model: h100, MigMode: nodeinfo.MigModeEnabled}
	m, _ := simmodels.Get(h100)
	for i, s := range instances {
		s, user, _ := strings.Cut(s, "=")
		name, start, _ := strings.Cut(s, "@")
		in := nodeinfo.Instance{Profile: name, GI: uint32(i + 1), UUID: "MIG-" + s, Health: nodeinfo.HealthHealthy}
		in.Placement.Start = int(start[0] - '0')
		for _, p := range m.Profiles {
			if p.Name == name {
				in.Placement.Size = p.MemorySlices
			}
		}
		if user != "" {
			in.UsedBy = []string{user}
		}
		g.Instances = append(g.Instances, in)
	}
	return g
}

var all1g = []string{"1g.10gb@0", "1g.10gb@1", "1g.10gb@2", "1g.10gb@3", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6"}

type nodeMod func(*corev1.Node)

func withLabel(k, v string) nodeMod { return func(n *corev1.Node) { n.Labels[k] = v } }
func withAnnotation(k, v string) nodeMod {
	return func(n *corev1.Node) { n.Annotations[k] = v }
}
func withOwner(mgr string, at time.Time) nodeMod {
	return func(n *corev1.Node) {
		n.ManagedFields = append(n.ManagedFields, ManagedTime(mgr, nodeinfo.AnnotationMigConfig, at))
	}
}

// apiNode is an opted-in node whose agent reports success with the GPUs.
func apiNode(gpus []nodeinfo.GPU, mods ...nodeMod) *corev1.Node {
	layout, _ := json.Marshal(gpus)
	m, _ := simmodels.Get(h100)
	profiles, _ := json.Marshal([]nodeinfo.Model{nodeinfo.NewModel(h100, m.Profiles)})
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        "n1",
		Labels:      map[string]string{nodeinfo.LabelPlanner: nodeinfo.PlannerEnabled, nodeinfo.LabelMigConfigState: nodeinfo.StateSuccess},
		Annotations: map[string]string{nodeinfo.AnnotationLayout: string(layout), nodeinfo.AnnotationProfiles: string(profiles)},
	}}
	for _, mod := range mods {
		mod(n)
	}
	return n
}

func migConfig(profiles ...string) string {
	return "version: v1\nmig-configs:\n  selected:\n  - devices: [0]\n    mig-enabled: true\n    mig-devices: [" + strings.Join(profiles, ", ") + "]\n"
}

func TestFromAPI(t *testing.T) {
	opts := Options{FieldManager: manager, ManualHold: 10 * time.Minute, Now: now}
	tests := []struct {
		name       string
		node       *corev1.Node
		wantOptIn  bool
		wantFrozen string // substring; empty: not frozen
		wantGPUs   []solver.GPU
		inFlight   []int
	}{
		{
			name:      "opted in, success, a pod on one instance",
			node:      apiNode([]nodeinfo.GPU{gpu(0, "3g.40gb@0=ml/train", "1g.10gb@4")}),
			wantOptIn: true,
			wantGPUs: []solver.GPU{{Index: 0, Model: h100, MigEnabled: true, Instances: []solver.Instance{
				{Profile: "3g.40gb", Start: 0, InUse: true}, {Profile: "1g.10gb", Start: 4},
			}}},
		},
		{
			name:     "not opted in",
			node:     apiNode([]nodeinfo.GPU{gpu(0)}, withLabel(nodeinfo.LabelPlanner, "disabled")),
			wantGPUs: []solver.GPU{{Index: 0, Model: h100, MigEnabled: true}},
		},
		{
			name:       "the agent is applying a layout",
			node:       apiNode([]nodeinfo.GPU{gpu(0)}, withLabel(nodeinfo.LabelMigConfigState, nodeinfo.StatePending), withAnnotation(nodeinfo.AnnotationReason, "GPU 0: ns/p")),
			wantOptIn:  true,
			wantFrozen: "its agent is changing its layout (state pending: GPU 0: ns/p)",
			wantGPUs:   []solver.GPU{{Index: 0, Model: h100, MigEnabled: true}},
		},
		{
			name: "the agent refused the layout: shown as it is",
			node: apiNode([]nodeinfo.GPU{gpu(0, all1g...)}, withLabel(nodeinfo.LabelMigConfigState, nodeinfo.StateFailed), withAnnotation(nodeinfo.AnnotationReason, "bad"),
				withAnnotation(nodeinfo.AnnotationMigConfig, migConfig("3g.40gb"))),
			wantOptIn:  true,
			wantFrozen: "state failed: bad",
			wantGPUs:   []solver.GPU{{Index: 0, Model: h100, MigEnabled: true, Instances: instances(all1g...)}},
		},
		{
			name: "a human changed mig.config within the hold",
			node: apiNode([]nodeinfo.GPU{gpu(0, "3g.40gb@0")}, withAnnotation(nodeinfo.AnnotationMigConfig, migConfig("3g.40gb")),
				withOwner("kubectl-annotate", now.Add(-time.Minute))),
			wantOptIn:  true,
			wantFrozen: "nvidia.com/mig.config was changed by kubectl-annotate at 2025-03-01T11:59:00Z: the planner leaves the node alone until 2025-03-01T12:09:00Z",
			wantGPUs:   []solver.GPU{{Index: 0, Model: h100, MigEnabled: true, Instances: instances("3g.40gb@0")}},
		},
		{
			name: "a human change after the hold",
			node: apiNode([]nodeinfo.GPU{gpu(0, "3g.40gb@0")}, withAnnotation(nodeinfo.AnnotationMigConfig, migConfig("3g.40gb")),
				withOwner("kubectl-annotate", now.Add(-11*time.Minute))),
			wantOptIn: true,
			wantGPUs:  []solver.GPU{{Index: 0, Model: h100, MigEnabled: true, Instances: instances("3g.40gb@0")}},
		},
		{
			name: "the planner's own change",
			node: apiNode([]nodeinfo.GPU{gpu(0, "3g.40gb@0")}, withAnnotation(nodeinfo.AnnotationMigConfig, migConfig("3g.40gb")),
				withOwner(manager, now.Add(-time.Second))),
			wantOptIn: true,
			wantGPUs:  []solver.GPU{{Index: 0, Model: h100, MigEnabled: true, Instances: instances("3g.40gb@0")}},
		},
		{
			// Written, not seen by the agent yet: shown at the new layout,
			// which is where pods will find their devices.
			name: "a change in flight",
			node: apiNode([]nodeinfo.GPU{gpu(0, all1g...), gpu(1)}, withAnnotation(nodeinfo.AnnotationMigConfig, migConfig("3g.40gb", "1g.10gb")),
				withOwner(manager, now)),
			wantOptIn:  true,
			wantFrozen: "the layout its nvidia.com/mig.config asks for is not in place yet (GPUs [0])",
			wantGPUs: []solver.GPU{
				{Index: 0, Model: h100, MigEnabled: true, LastChanged: now, Instances: instances("3g.40gb@0", "1g.10gb@4")},
				{Index: 1, Model: h100, MigEnabled: true},
			},
			inFlight: []int{0},
		},
		{
			// The agent waits for the pod: the change is not counted.
			name: "a change in flight that would destroy an instance in use",
			node: apiNode([]nodeinfo.GPU{gpu(0, "1g.10gb@0=a/b", "1g.10gb@1")}, withLabel(nodeinfo.LabelMigConfigState, nodeinfo.StatePending),
				withAnnotation(nodeinfo.AnnotationMigConfig, migConfig("7g.80gb"))),
			wantOptIn:  true,
			wantFrozen: "state pending",
			wantGPUs:   []solver.GPU{{Index: 0, Model: h100, MigEnabled: true, Instances: instances("1g.10gb@0*", "1g.10gb@1")}},
		},
		{
			name: "no report from the agent",
			node: func() *corev1.Node {
				n := apiNode(nil)
				delete(n.Annotations, nodeinfo.AnnotationLayout)
				return n
			}(),
			wantOptIn:  true,
			wantFrozen: "its agent has not reported its GPUs",
		},
		{
			name:       "an unreadable report",
			node:       apiNode(nil, withAnnotation(nodeinfo.AnnotationLayout, "{")),
			wantOptIn:  true,
			wantFrozen: "its agent's report is unreadable",
		},
		{
			name: "a MIG mode change waiting for a reset",
			node: apiNode([]nodeinfo.GPU{func() nodeinfo.GPU {
				g := gpu(0)
				g.MigMode = "Disabled (pending Enabled)"
				return g
			}()}),
			wantOptIn:  true,
			wantFrozen: "GPU 0's MIG mode change waits for a GPU reset (Disabled (pending Enabled))",
			wantGPUs:   []solver.GPU{{Index: 0, Model: h100}},
		},
		{
			name:       "a layout asked for but not reported on yet",
			node:       apiNode([]nodeinfo.GPU{gpu(0, "3g.40gb@0")}, withLabel(nodeinfo.LabelMigConfigState, ""), withLabel("nvidia.com/mig.config", "all-3g")),
			wantOptIn:  true,
			wantFrozen: "its agent has not reported on its layout yet",
			wantGPUs:   []solver.GPU{{Index: 0, Model: h100, MigEnabled: true, Instances: instances("3g.40gb@0")}},
		},
		{
			// The agent reads a blank value as no source and never reports
			// a state for it; the planner reads the Node the same way.
			name:      "no state, and only a blank mig.config: no source",
			node:      apiNode([]nodeinfo.GPU{gpu(0, "3g.40gb@0")}, withLabel(nodeinfo.LabelMigConfigState, ""), withAnnotation(nodeinfo.AnnotationRunAIConfig, " "), withLabel(nodeinfo.LabelMigConfig, "")),
			wantOptIn: true,
			wantGPUs:  []solver.GPU{{Index: 0, Model: h100, MigEnabled: true, Instances: instances("3g.40gb@0")}},
		},
		{
			name: "a whole GPU a pod holds, and one that is not MIG capable",
			node: apiNode([]nodeinfo.GPU{
				{Index: 0, Model: h100, MigMode: nodeinfo.MigModeDisabled, UsedBy: []string{"a/b"}},
				{Index: 1, Model: "Tesla T4", MigMode: nodeinfo.MigModeNA},
			}),
			wantOptIn: true,
			wantGPUs:  []solver.GPU{{Index: 0, Model: h100, InUse: true}, {Index: 1}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.node.Labels[nodeinfo.LabelMigConfigState] == "" {
				delete(tc.node.Labels, nodeinfo.LabelMigConfigState)
			}
			got := FromAPI(tc.node, opts)
			if got.OptedIn != tc.wantOptIn {
				t.Errorf("OptedIn = %v, want %v", got.OptedIn, tc.wantOptIn)
			}
			if tc.wantFrozen == "" && got.Frozen != "" || !strings.Contains(got.Frozen, tc.wantFrozen) {
				t.Errorf("Frozen = %q, want %q", got.Frozen, tc.wantFrozen)
			}
			if diff := cmp.Diff(tc.wantGPUs, got.GPUs); diff != "" {
				t.Errorf("GPUs (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.inFlight, got.InFlight); diff != "" {
				t.Errorf("InFlight (-want +got):\n%s", diff)
			}
			if tc.node.Annotations[nodeinfo.AnnotationProfiles] != "" && (len(got.Models) != 1 || got.Models[0].Name != h100) {
				t.Errorf("Models %v, want the H100's", got.Models)
			}
		})
	}
}

// instances parses "1g.10gb@3" (free) or "1g.10gb@3*" (in use).
func instances(specs ...string) []solver.Instance {
	var out []solver.Instance
	for _, s := range specs {
		busy := strings.HasSuffix(s, "*")
		name, start, _ := strings.Cut(strings.TrimSuffix(s, "*"), "@")
		out = append(out, solver.Instance{Profile: name, Start: int(start[0] - '0'), InUse: busy})
	}
	return out
}

// TestMergeModels: a model's table is the one most nodes publish (ties:
// the first node by name); nodes publishing another keep theirs, under an
// alias their GPUs of that model take, and only those GPUs.
func TestMergeModels(t *testing.T) {
	m, _ := simmodels.Get(h100)
	a100, _ := simmodels.Get("A100-SXM4-40GB")
	other := m
	other.Profiles = m.Profiles[:1]
	alias := h100 + " (table 2)"
	node := func(name string, tables ...solver.Model) Node {
		n := Node{Node: solver.Node{Node: nodeNamed(name)}, Models: tables}
		for i, tb := range tables {
			n.GPUs = append(n.GPUs, solver.GPU{Index: i, Model: tb.Name, MigEnabled: true})
		}
		return n
	}
	for name, tc := range map[string]struct {
		nodes []Node
		// want: each returned model's name and profile count; gpus: each
		// node's GPU models after the merge.
		want    map[string]int
		gpus    map[string][]string
		warning string
	}{
		"the same table everywhere": {
			nodes: []Node{node("b", m, a100), node("a", m)},
			want:  map[string]int{h100: len(m.Profiles), a100.Name: len(a100.Profiles)},
			gpus:  map[string][]string{"a": {h100}, "b": {h100, a100.Name}},
		},
		"most nodes win, the others keep theirs": {
			nodes:   []Node{node("b", other, a100), node("a", m), node("c", m)},
			want:    map[string]int{h100: len(m.Profiles), alias: 1, a100.Name: len(a100.Profiles)},
			gpus:    map[string][]string{"a": {h100}, "b": {alias, a100.Name}, "c": {h100}},
			warning: `node(s) b publish another profile table for H100-SXM5-80GB than 2 other node(s); they are planned with their own, as "H100-SXM5-80GB (table 2)"`,
		},
		"a tie goes to the first node by name": {
			nodes:   []Node{node("b", m), node("a", other)},
			want:    map[string]int{h100: 1, alias: len(m.Profiles)},
			gpus:    map[string][]string{"a": {h100}, "b": {alias}},
			warning: "node(s) b publish another profile table",
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, warnings := MergeModels(tc.nodes)
			have := map[string]int{}
			for _, gm := range got {
				have[gm.Name] = len(gm.Profiles)
			}
			if diff := cmp.Diff(tc.want, have); diff != "" {
				t.Errorf("models (-want +got):\n%s", diff)
			}
			gpus := map[string][]string{}
			for _, n := range tc.nodes {
				for _, g := range n.GPUs {
					gpus[n.Name] = append(gpus[n.Name], g.Model)
				}
			}
			if diff := cmp.Diff(tc.gpus, gpus); diff != "" {
				t.Errorf("GPU models (-want +got):\n%s", diff)
			}
			if tc.warning == "" && len(warnings) != 0 || tc.warning != "" && (len(warnings) != 1 || !strings.Contains(warnings[0], tc.warning)) {
				t.Errorf("warnings %q, want one containing %q", warnings, tc.warning)
			}
		})
	}
}

func nodeNamed(name string) schedview.Node { return schedview.Node{Name: name} }

// HeldUntil is the manual hold FromAPI freezes a node for, and what
// kubectl migflex status shows.
func TestHeldUntil(t *testing.T) {
	hold := Options{FieldManager: manager, ManualHold: 10 * time.Minute, Now: now}
	tests := []struct {
		name  string
		o     Options
		owner string
		at    time.Time
		until time.Time
		held  bool
	}{
		{"a hand edit a minute ago", hold, "kubectl-annotate", now.Add(-time.Minute), now.Add(9 * time.Minute), true},
		{"the hold ends at until", hold, "kubectl-annotate", now.Add(-10 * time.Minute), now, false},
		{"the planner's own write", hold, manager, now.Add(-time.Minute), time.Time{}, false},
		{"no writer known", hold, "", now.Add(-time.Minute), time.Time{}, false},
		{"no hold", Options{FieldManager: manager, ManualHold: -1, Now: now}, "kubectl-annotate", now, time.Time{}, false},
	}
	for _, tt := range tests {
		until, held := tt.o.HeldUntil(tt.owner, tt.at)
		if !until.Equal(tt.until) || held != tt.held {
			t.Errorf("%s: %v, %v; want %v, %v", tt.name, until, held, tt.until, tt.held)
		}
	}
}

// A node its agent labels dynamic (served through DRA) is read as one:
// a mig.config there is nothing in flight (the agent refuses it).
func TestFromAPIDynamic(t *testing.T) {
	opts := Options{FieldManager: manager, ManualHold: DefaultManualHold, Now: now}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   bool
	}{
		{name: "DRA, dynamic", labels: map[string]string{nodeinfo.LabelServing: nodeinfo.ServingDRA, nodeinfo.LabelDRAMode: nodeinfo.DRAModeDynamic}, want: true},
		{name: "DRA, static", labels: map[string]string{nodeinfo.LabelServing: nodeinfo.ServingDRA, nodeinfo.LabelDRAMode: nodeinfo.DRAModeStatic}},
		{name: "device plugin with a stray label", labels: map[string]string{nodeinfo.LabelDRAMode: nodeinfo.DRAModeDynamic}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mods := []nodeMod{withAnnotation(nodeinfo.AnnotationMigConfig, migConfig("3g.40gb", "3g.40gb")), withOwner(manager, now.Add(-time.Hour))}
			for k, v := range tc.labels {
				mods = append(mods, withLabel(k, v))
			}
			got := FromAPI(apiNode([]nodeinfo.GPU{gpu(0)}, mods...), opts)
			if got.Dynamic != tc.want {
				t.Errorf("Dynamic = %v, want %v", got.Dynamic, tc.want)
			}
			if inFlight := len(got.InFlight) > 0; inFlight == tc.want {
				t.Errorf("in flight: GPUs %v; a mig.config is in flight on a node unless it is dynamic", got.InFlight)
			}
		})
	}
}

// A dynamic node's placements the scheduler allocated and the kubelet has
// not prepared yet are in use, from its pool, though its agent's layout
// has no instance there yet; one the agent reports is not counted twice.
func TestFromAPIDynamicAllocated(t *testing.T) {
	sl := draslices.Pointers(draslices.Dynamic(t, "n1", h100, true))
	claims := []*resourceapi.ResourceClaim{
		draslices.Claim("ns", "made", "n1", "gpu-0-mig-1g10gb-19-0"),
		draslices.Claim("ns", "allocated", "n1", "gpu-0-mig-3g40gb-9-4"),
	}
	g := gpu(0, "1g.10gb@0=ns/made")
	g.UUID = "GPU-0" // the slices'
	n := apiNode([]nodeinfo.GPU{g}, withLabel(nodeinfo.LabelServing, nodeinfo.ServingDRA), withLabel(nodeinfo.LabelDRAMode, nodeinfo.DRAModeDynamic))
	opts := Options{FieldManager: manager, Now: now, Pools: func(node string) *schedview.Pool { return schedview.NewPool(node, sl, claims) }}
	got := FromAPI(n, opts)
	want := []solver.Instance{{Profile: "1g.10gb", Start: 0, InUse: true}, {Profile: "3g.40gb", Start: 4, InUse: true}}
	if diff := cmp.Diff(want, got.GPUs[0].Instances); diff != "" {
		t.Errorf("instances (-want,+got):\n%s", diff)
	}
	// Without the pool, only what the agent reports.
	opts.Pools = nil
	if got := FromAPI(n, opts); len(got.GPUs[0].Instances) != 1 {
		t.Errorf("instances without the pool: %+v", got.GPUs[0].Instances)
	}
}

// A shared device lists its free replicas, under the resource they are
// served as; one with none free lists none, and each pod named holds a
// replica. The instance pods use stays in use, one no pod uses free.
func TestFromAPIReplicas(t *testing.T) {
	share := func(g nodeinfo.GPU, i int, res string, replicas, inUse int, usedBy ...string) nodeinfo.GPU {
		g.Instances[i].Shared = &nodeinfo.Shared{Resource: res, Replicas: replicas, InUse: inUse}
		g.Instances[i].UsedBy = usedBy
		return g
	}
	const mig1g = "nvidia.com/mig-1g.10gb"
	for _, tc := range []struct {
		name string
		gpus []nodeinfo.GPU
		want []solver.Replicas
	}{
		{"not shared", []nodeinfo.GPU{gpu(0, "1g.10gb@6=ns/a")}, nil},
		{"one of two in use", []nodeinfo.GPU{share(gpu(0, "1g.10gb@6"), 0, mig1g, 2, 1, "ns/a")},
			[]solver.Replicas{{GPU: 0, Profile: "1g.10gb", Start: 6, Resource: mig1g, Free: 1}}},
		{"renamed", []nodeinfo.GPU{share(gpu(1, "3g.40gb@0", "1g.10gb@6"), 1, "nvidia.com/small", 4, 1, "ns/a")},
			[]solver.Replicas{{GPU: 1, Profile: "1g.10gb", Start: 6, Resource: "nvidia.com/small", Free: 3}}},
		{"renamed, idle", []nodeinfo.GPU{share(gpu(0, "1g.10gb@6"), 0, "nvidia.com/mig-1g.10gb.shared", 2, 0)},
			[]solver.Replicas{{GPU: 0, Profile: "1g.10gb", Start: 6, Resource: "nvidia.com/mig-1g.10gb.shared", Free: 2}}},
		{"no pod on it", []nodeinfo.GPU{share(gpu(0, "1g.10gb@6"), 0, mig1g, 2, 0)},
			[]solver.Replicas{{GPU: 0, Profile: "1g.10gb", Start: 6, Resource: mig1g, Free: 2}}},
		{"all in use", []nodeinfo.GPU{share(gpu(0, "1g.10gb@6"), 0, mig1g, 2, 2, "ns/a", "ns/b")}, nil},
		{"a pod named the count has not seen yet", []nodeinfo.GPU{share(gpu(0, "1g.10gb@6"), 0, mig1g, 2, 1, "ns/a", "ns/b")}, nil},
		{"a whole GPU", []nodeinfo.GPU{{Index: 2, UUID: "GPU-c", Model: h100, MigMode: nodeinfo.MigModeDisabled, Health: nodeinfo.HealthHealthy,
			UsedBy: []string{"ns/a"}, Shared: &nodeinfo.Shared{Resource: "nvidia.com/gpu", Replicas: 4, InUse: 1}}},
			[]solver.Replicas{{GPU: 2, Start: -1, Resource: "nvidia.com/gpu", Free: 3}}},
		{"a whole GPU, renamed, idle", []nodeinfo.GPU{{Index: 2, UUID: "GPU-c", Model: h100, MigMode: nodeinfo.MigModeDisabled, Health: nodeinfo.HealthHealthy,
			Shared: &nodeinfo.Shared{Resource: "nvidia.com/gpu.shared", Replicas: 2}}},
			[]solver.Replicas{{GPU: 2, Start: -1, Resource: "nvidia.com/gpu.shared", Free: 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := FromAPI(apiNode(tc.gpus), Options{FieldManager: manager, Now: now})
			if diff := cmp.Diff(tc.want, got.Replicas); diff != "" {
				t.Errorf("Replicas (-want +got):\n%s", diff)
			}
			// In use to the planner: what pods use, and a device
			// renamed, which is no free device of its profile.
			for _, g := range got.GPUs {
				if !g.MigEnabled && !g.InUse {
					t.Errorf("whole GPU %d not in use", g.Index)
				}
				for _, in := range g.Instances {
					if in.Profile == "1g.10gb" && in.InUse != (tc.name != "no pod on it") {
						t.Errorf("GPU %d's shared %s in use: %v", g.Index, in.Profile, in.InUse)
					}
				}
			}
		})
	}
}
