package webhook

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/planner/plansnap"
	"github.com/migflex/migflex/internal/planner/solver"
)

// The reshape view reads a Node again only when it changed, or when its
// reading depends on time: one view kept through a series of changes
// answers, at each step, what a view built afresh from the same Nodes at
// the same time answers, and what the planner would do.
func TestReshapeViewReadsAgainWhatChanged(t *testing.T) {
	t0 := time.Now().Truncate(time.Second)
	free := func(name string) *corev1.Node {
		return agentNode(t, name, true, h100(t, name, 0, seven1g()...), h100(t, name, 1, seven1g()...))
	}
	// busy has an instance in use on each GPU where a 4g.40gb would go.
	busy := func(name string) *corev1.Node {
		in := []string{"1g.10gb@0*", "1g.10gb@1", "1g.10gb@2", "1g.10gb@3", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6"}
		return agentNode(t, name, true, h100(t, name, 0, in...), h100(t, name, 1, in...))
	}
	// oneGPU is a node of one free GPU; inFlight is it with a planner's
	// nvidia.com/mig.config for another layout, not applied yet.
	oneGPU := agentNode(t, "single", true, h100(t, "single", 0, seven1g()...))
	inFlight := byPlanner(oneGPU, migConfig(`"3g.40gb": 1, "1g.10gb": 3`), t0)
	// held is a node whose nvidia.com/mig.config a human set at t0: the
	// planner leaves it alone for the manual hold (1 minute here).
	held := free("held").DeepCopy()
	held.Annotations[nodeinfo.AnnotationMigConfig] = migConfig(`"1g.10gb": 7`, `"1g.10gb": 7`)
	held.ManagedFields = []metav1.ManagedFieldsEntry{plansnap.ManagedTime("kubectl-edit", nodeinfo.AnnotationMigConfig, t0)}

	type step struct {
		name   string
		at     time.Duration
		set    []*corev1.Node
		delete []string
		// want is each node's answer to a 4g.40gb pod pinned to it.
		want map[string]solver.Action
	}
	steps := []step{
		{name: "first reading", at: 0, set: []*corev1.Node{free("a"), free("b"), held, oneGPU},
			want: map[string]solver.Action{"a": solver.ActionReshape, "b": solver.ActionReshape, "held": solver.ActionNone, "single": solver.ActionReshape}},
		{name: "a write in flight holds its GPU", at: time.Second, set: []*corev1.Node{inFlight},
			want: map[string]solver.Action{"a": solver.ActionReshape, "b": solver.ActionReshape, "held": solver.ActionNone, "single": solver.ActionNone}},
		// The write's cooldown (2 minutes) is over, the human's hold (1
		// minute) too; the write's layout is still not in place, so
		// its node stays frozen.
		{name: "in flight past the write's cooldown", at: 3 * time.Minute,
			want: map[string]solver.Action{"a": solver.ActionReshape, "b": solver.ActionReshape, "held": solver.ActionReshape, "single": solver.ActionNone}},
		{name: "a node changes, its twin does not", at: 3*time.Minute + time.Second, set: []*corev1.Node{busy("a")},
			want: map[string]solver.Action{"a": solver.ActionNone, "b": solver.ActionReshape, "held": solver.ActionReshape, "single": solver.ActionNone}},
		{name: "a node goes", at: 3*time.Minute + 2*time.Second, delete: []string{"b"},
			want: map[string]solver.Action{"a": solver.ActionNone, "b": solver.ActionNone, "held": solver.ActionReshape, "single": solver.ActionNone}},
		{name: "the layout applied", at: 3*time.Minute + 3*time.Second,
			set: []*corev1.Node{byPlanner(agentNode(t, "single", true, h100(t, "single", 0, "3g.40gb@0", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6")),
				migConfig(`"3g.40gb": 1, "1g.10gb": 3`), t0)},
			want: map[string]solver.Action{"a": solver.ActionNone, "b": solver.ActionNone, "held": solver.ActionReshape, "single": solver.ActionReshape}},
	}

	newView := func() *ReshapeView {
		v, err := NewReshapeView(plansnap.DefaultFieldManager, time.Minute, 2*time.Minute, time.Nanosecond)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	slim := func(n *corev1.Node) *corev1.Node {
		out, err := transformReshapeNode(n.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		return out.(*corev1.Node)
	}
	answers := func(v *ReshapeView, now time.Time, names []string) map[string]solver.Action {
		v.now = func() time.Time { return now }
		got := map[string]solver.Action{}
		for _, name := range names {
			p := gpuPod("p", mig4g40, "1")
			p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: name}
			plan, ok := v.CanSupply(p)
			if !ok {
				t.Fatalf("no answer for a pod pinned to %s", name)
			}
			got[name] = plan.Action
		}
		return got
	}

	kept := newView()
	// seen is every version of each node the kept view was handed, in
	// order: a fresh view is handed the same, so that it sees the same
	// writes in flight.
	var seen []*corev1.Node
	for _, s := range steps {
		for _, n := range s.set {
			sn := slim(n)
			kept.SetNode(sn)
			seen = append(seen, sn)
		}
		for _, name := range s.delete {
			kept.DeleteNode(name)
		}
		now := t0.Add(s.at)
		names := []string{"a", "b", "held", "single"}
		got := answers(kept, now, names)
		if diff := cmp.Diff(s.want, got); diff != "" {
			t.Errorf("%s: the kept view's answers (-want,+got):\n%s", s.name, diff)
		}
		fresh := newView()
		for _, n := range seen {
			fresh.SetNode(n)
		}
		for _, prev := range steps {
			for _, name := range prev.delete {
				fresh.DeleteNode(name)
			}
			if prev.name == s.name {
				break
			}
		}
		if diff := cmp.Diff(answers(fresh, now, names), got); diff != "" {
			t.Errorf("%s: the kept view's answers differ from a fresh view's (-fresh,+kept):\n%s", s.name, diff)
		}
	}
}

// Nodes of the same shape share one copy of their GPUs; a change to one
// node's reading (a cooldown) copies its GPUs first.
func TestReshapeViewSharesShapes(t *testing.T) {
	v, err := NewReshapeView(plansnap.DefaultFieldManager, time.Minute, 2*time.Minute, time.Nanosecond)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Truncate(time.Second)
	node := func(name string) *corev1.Node {
		return agentNode(t, name, true, h100(t, name, 0, seven1g()...), h100(t, name, 1, "3g.40gb@0*", "1g.10gb@4"))
	}
	// n1's layout is the one the planner wrote a moment ago, a write the
	// view did not see in flight: every GPU of n1 cools down, n0's and
	// n2's do not, though all three read the same.
	nodes := []*corev1.Node{node("n0"), byPlanner(node("n1"), migConfig(`"1g.10gb": 7`, `"3g.40gb": 1, "1g.10gb": 1`), at), node("n2"),
		agentNode(t, "other", true, h100(t, "other", 0, "7g.80gb@0"))}
	for _, n := range nodes {
		slim, err := transformReshapeNode(n)
		if err != nil {
			t.Fatal(err)
		}
		v.SetNode(slim.(*corev1.Node))
	}
	v.now = func() time.Time { return at.Add(time.Second) }
	for name, want := range map[string]solver.Action{"n0": solver.ActionReshape, "n1": solver.ActionNone, "n2": solver.ActionReshape} {
		p := gpuPod("p", mig4g40, "1")
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: name}
		if plan, ok := v.CanSupply(p); !ok || plan.Action != want {
			t.Errorf("a 4g.40gb pod pinned to %s: %+v (%v), want %s", name, plan, ok, want)
		}
	}
	gpus := func(name string) []solver.GPU { return v.read[name].nv.GPUs }
	if &gpus("n0")[0] != &gpus("n1")[0] || &gpus("n0")[0] != &gpus("n2")[0] {
		t.Error("nodes of the same shape do not share their GPUs")
	}
	if &gpus("n0")[0] == &gpus("other")[0] {
		t.Error("nodes of different shapes share their GPUs")
	}
	// What they share is each node's reading, unchanged by n1's cooldown.
	want := []solver.GPU{
		{Index: 0, Model: "H100-SXM5-80GB", MigEnabled: true, Instances: []solver.Instance{
			{Profile: "1g.10gb", Start: 0}, {Profile: "1g.10gb", Start: 1}, {Profile: "1g.10gb", Start: 2}, {Profile: "1g.10gb", Start: 3},
			{Profile: "1g.10gb", Start: 4}, {Profile: "1g.10gb", Start: 5}, {Profile: "1g.10gb", Start: 6}}},
		{Index: 1, Model: "H100-SXM5-80GB", MigEnabled: true, Instances: []solver.Instance{
			{Profile: "3g.40gb", Start: 0, InUse: true}, {Profile: "1g.10gb", Start: 4}}},
	}
	if diff := cmp.Diff(want, gpus("n0")); diff != "" {
		t.Errorf("shared GPUs (-want,+got):\n%s", diff)
	}
}

// A reading kept from an earlier rebuild shows the GPUs whose layout is in
// flight as changing now, as plansnap.FromAPI at now does, and leaves the
// kept reading as it is.
func TestViewNodeAt(t *testing.T) {
	then, now := time.Unix(1000, 0), time.Unix(2000, 0)
	gpus := []solver.GPU{{Index: 0, LastChanged: then}, {Index: 1}, {Index: 2, LastChanged: then}}
	for _, tc := range []struct {
		name     string
		inFlight []int
		want     []time.Time
	}{
		{"none in flight", nil, []time.Time{then, {}, then}},
		{"GPUs 0 and 1 in flight", []int{0, 1}, []time.Time{now, now, then}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &viewNode{nv: plansnap.Node{Node: solver.Node{GPUs: slices.Clone(gpus)}, InFlight: tc.inFlight}, keep: true}
			var got []time.Time
			for _, g := range r.at(now).GPUs {
				got = append(got, g.LastChanged)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("LastChanged (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(gpus, r.nv.GPUs); diff != "" {
				t.Errorf("the kept reading changed (-was,+now):\n%s", diff)
			}
		})
	}
}

// shapeKey must tell apart two GPU lists that differ in any field, or
// refuse to key them: a field added to solver.GPU or solver.Instance that
// it ignores would let nodes of different shapes share one reading. Each
// field is changed in turn, by reflection, so a new field is covered
// without this test knowing it.
func TestShapeKeyCoversEveryField(t *testing.T) {
	base := func() []solver.GPU {
		return []solver.GPU{{Index: 0, Model: "H100", MigEnabled: true,
			Instances: []solver.Instance{{Profile: "1g.10gb", Start: 0}}}}
	}
	key0, ok := shapeKey(base())
	if !ok {
		t.Fatal("shapeKey refused a plain reading")
	}
	differs := func(t *testing.T, gpus []solver.GPU) {
		t.Helper()
		if key, ok := shapeKey(gpus); ok && key == key0 {
			t.Error("a changed GPU list has the same key")
		}
	}
	gt := reflect.TypeOf(solver.GPU{})
	for i := range gt.NumField() {
		f := gt.Field(i)
		t.Run("GPU."+f.Name, func(t *testing.T) {
			gpus := base()
			if f.Name == "Instances" {
				gpus[0].Instances = nil
			} else {
				setOther(t, reflect.ValueOf(&gpus[0]).Elem().Field(i))
			}
			differs(t, gpus)
		})
	}
	it := reflect.TypeOf(solver.Instance{})
	for i := range it.NumField() {
		f := it.Field(i)
		t.Run("Instance."+f.Name, func(t *testing.T) {
			gpus := base()
			setOther(t, reflect.ValueOf(&gpus[0].Instances[0]).Elem().Field(i))
			differs(t, gpus)
		})
	}
}

// setOther sets v to a value other than the one it holds.
func setOther(t *testing.T, v reflect.Value) {
	t.Helper()
	switch {
	case v.Type() == reflect.TypeOf(time.Time{}):
		v.Set(reflect.ValueOf(time.Unix(1e9, 0)))
	case v.Kind() == reflect.Bool:
		v.SetBool(!v.Bool())
	case v.Kind() == reflect.Int:
		v.SetInt(v.Int() + 1)
	case v.Kind() == reflect.String:
		v.SetString(v.String() + "x")
	case v.Kind() == reflect.Pointer && v.IsNil():
		v.Set(reflect.New(v.Type().Elem()))
	default:
		t.Fatalf("no way to change a field of kind %s: teach setOther and check shapeKey covers it", v.Kind())
	}
}
