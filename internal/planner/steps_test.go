package planner

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/planner/plansnap"
	"github.com/migflex/migflex/internal/planner/solver"
)

// The steps of decide, each on its own; TestRound runs them together.

func TestCollectPending(t *testing.T) {
	c := newCluster(t)
	late := c.pod("b-late", mig3g, 1)
	late.CreationTimestamp.Time = t0.Add(time.Minute)
	c.pod("a-early", mig1g, 2)
	c.pod("c-early", mig1g, 1)
	urgent := c.pod("d-urgent", mig3g, 1)
	prio := int32(100)
	urgent.Spec.Priority = &prio
	bound := c.pod("e-bound", mig3g, 1)
	bound.Spec.NodeName = "n1"
	c.pod("f-cpu", "cpu", 1)
	c.pod("g-held", mig3g, 1)
	var view plansnap.Node
	view.Name = "n2"
	view.Layout = []nodeinfo.GPU{{Index: 0, Instances: []nodeinfo.Instance{{Profile: "3g.40gb", UsedBy: []string{"ns/g-held"}}}}}
	views := []plansnap.Node{view}

	m := newMemory(time.Hour)
	m.told[types.UID("uid-a-early")] = "kept"
	m.told[types.UID("uid-gone")] = "forgotten"
	var d decision
	d.demand = map[corev1.ResourceName]float64{}
	var names []string
	for _, p := range d.collectPending(m, c.podList(), views) {
		names = append(names, p.Name)
	}
	// Priority first, then age, then name; bound and CPU pods do not
	// wait, nor one a node's layout lists holding a device.
	if want := []string{"d-urgent", "a-early", "c-early", "b-late"}; !cmp.Equal(want, names) {
		t.Errorf("pending %v, want %v", names, want)
	}
	if want := map[corev1.ResourceName]float64{mig3g: 2, mig1g: 3}; !cmp.Equal(want, d.demand) {
		t.Errorf("demand %v, want %v", d.demand, want)
	}
	if want := map[types.UID]string{"uid-a-early": "kept"}; !cmp.Equal(want, m.told) {
		t.Errorf("told %v, want only the waiting pods' %v", m.told, want)
	}
	if len(d.warnings) != 1 || !strings.Contains(d.warnings[0], "ns/g-held") {
		t.Errorf("warnings %q, want one naming ns/g-held", d.warnings)
	}
}

func TestNodeOrder(t *testing.T) {
	res := solver.Result{Pods: []solver.PodPlan{
		{Pod: "ns/a", Action: solver.ActionReshape, Node: "n2"},
		{Pod: "ns/b", Action: solver.ActionNone},
		{Pod: "ns/c", Action: solver.ActionReshape, Node: "n1"},
		{Pod: "ns/d", Action: solver.ActionReshape, Node: "n2"},
		{Pod: "ns/e", Action: solver.ActionExisting, Node: "n4"},
		{Pod: "ns/f", Action: solver.ActionReshape, Node: "n3"},
	}}
	for _, tc := range []struct {
		cap         int
		want        []string
		wantWaiting bool
	}{
		{cap: 0, want: []string{"n2", "n1", "n3"}},
		{cap: 3, want: []string{"n2", "n1", "n3"}},
		{cap: 2, want: []string{"n2", "n1"}, wantWaiting: true},
	} {
		var d decision
		got := d.nodeOrder(testOptions(func(o *Options) { o.MaxNodesPerRound = tc.cap }), res, nil)
		if !cmp.Equal(tc.want, got) || d.waiting != tc.wantWaiting {
			t.Errorf("cap %d: order %v, waiting %v; want %v, %v", tc.cap, got, d.waiting, tc.want, tc.wantWaiting)
		}
	}
}

func TestNewWritesAndAddWrites(t *testing.T) {
	c := newCluster(t)
	n1 := c.addNode("n1", simGPU(0, all1g...))
	n2 := c.addNode("n2", simGPU(0, all1g...))
	n2.Annotations[nodeinfo.AnnotationProposed] = "proposed before"
	changes := map[string]solver.NodeChange{
		"n1":   {Node: "n1", Config: "layout 1", GPUs: []solver.GPUChange{{Index: 0}, {Index: 2}}},
		"n2":   {Node: "n2", Config: "proposed before", GPUs: []solver.GPUChange{{Index: 1}}},
		"gone": {Node: "gone", Config: "x"},
	}
	order := []string{"n2", "gone", "n1"}
	ev := podEvent{reason: ReasonPlanned, message: "on n2"}
	for _, dryRun := range []bool{false, true} {
		o := testOptions(func(o *Options) { o.DryRun = dryRun })
		writes := newWrites(o, order, changes, []*corev1.Node{n1, n2})
		if _, ok := writes["gone"]; ok || len(writes) != 2 {
			t.Fatalf("dry run %v: writes %v, want n1 and n2 only", dryRun, writes)
		}
		key := nodeinfo.AnnotationMigConfig
		if dryRun {
			key = nodeinfo.AnnotationProposed
		}
		if w := writes["n1"]; w.key != key || w.value != "layout 1" || !cmp.Equal(w.gpus, []int{0, 2}) {
			t.Errorf("dry run %v: n1's write %+v", dryRun, *w)
		}
		writes["n2"].eventsAfterward = []podEvent{ev}
		var d decision
		d.addWrites(order, writes)
		// In dry run n2 carries the proposal already: no write, and its
		// Event is recorded at once.
		var sent []string
		for _, w := range d.writes {
			sent = append(sent, w.node.Name)
		}
		wantSent, wantEvents := []string{"n2", "n1"}, 0
		if dryRun {
			wantSent, wantEvents = []string{"n1"}, 1
		}
		if !cmp.Equal(wantSent, sent) || len(d.events) != wantEvents {
			t.Errorf("dry run %v: writes %v and %d Events, want %v and %d", dryRun, sent, len(d.events), wantSent, wantEvents)
		}
	}
}
