package planner

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/planner/plansnap"
	"github.com/migflex/migflex/internal/planner/reserve"
	"github.com/migflex/migflex/internal/planner/solver"
)

// TestPreviewRound: the preview is the round the controller would run,
// what it would write and tell, and touches nothing it is given.
func TestPreviewRound(t *testing.T) {
	c := newCluster(t)
	c.addNode("n1", simGPU(0, all1g...))
	c.addNode("n2", simGPU(0, all1g...))
	c.nodes["n2"].Labels[nodeinfo.LabelPlanner] = "disabled"
	c.pod("p", mig3g, 1)
	nodes, pods := c.nodeList(), c.podList()
	before := []string{nodes[0].Annotations[nodeinfo.AnnotationMigConfig], nodes[1].Annotations[nodeinfo.AnnotationMigConfig]}

	p, err := PreviewRound(Options{Policy: solver.DefaultPolicy()}, c.now, nodes, pods, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Pending) != 1 || p.Pending[0].Name != "p" || len(p.Result.Pods) != 1 || p.Result.Pods[0].Action != solver.ActionReshape {
		t.Fatalf("pending %v, pods %+v: want p reshaped", p.Pending, p.Result.Pods)
	}
	if len(p.Writes) != 1 || p.Writes[0].Node != "n1" || p.Writes[0].Key != nodeinfo.AnnotationMigConfig ||
		!strings.Contains(p.Writes[0].Value, `"3g.40gb": 1`) || !cmp.Equal(p.Writes[0].GPUs, []int{0}) {
		t.Errorf("writes %+v, want n1's mig.config with a 3g.40gb on GPU 0", p.Writes)
	}
	want := []PreviewEvent{{Pod: "ns/p", Type: "Normal", Reason: ReasonPlanned,
		Message: "will run on node n1: GPU 0 repartitioned 7x1g.10gb -> 4x1g.10gb + 3g.40gb"}}
	if diff := cmp.Diff(want, p.Events); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	after := []string{nodes[0].Annotations[nodeinfo.AnnotationMigConfig], nodes[1].Annotations[nodeinfo.AnnotationMigConfig]}
	if !cmp.Equal(before, after) {
		t.Errorf("the preview changed the nodes it was given")
	}
	if _, err := PreviewRound(Options{Policy: solver.Policy{MaxGPUsPerRound: -1}}, c.now, nodes, pods, nil); err == nil {
		t.Errorf("an invalid policy was accepted")
	}
}

// TestPreviewRoundClaims: with the cluster's DRA objects, the preview
// reads pods as the controller does: a claim naming one profile is
// planned for on a DRA node, and one the planner does not read gets the
// MigReshapeClaimUnread Event, first, with what the scheduler's CEL finds
// (issue 35: profile == 3 is false on every device).
func TestPreviewRoundClaims(t *testing.T) {
	c := newCluster(t)
	c.addNode("n1", simGPU(0, all1g...)).Labels[nodeinfo.LabelServing] = nodeinfo.ServingDRA
	dcs, err := dra.DeviceClasses([]string{"1g.10gb", "3g.40gb"})
	if err != nil {
		t.Fatal(err)
	}
	var classes []*resourceapi.DeviceClass
	for i := range dcs {
		classes = append(classes, &dcs[i])
	}
	claim := func(name, expr string) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: resourceapi.ResourceClaimSpec{
			Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "r", Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: dra.ClassMIG, Count: 1, AllocationMode: resourceapi.DeviceAllocationModeExactCount,
				Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}}}}}}}}
	}
	dv := fakeDRA{classes: schedview.NewDRAClasses(classes), claims: map[string]*resourceapi.ResourceClaim{
		"ns/good": claim("good", `device.attributes["gpu.migflex.io"].profile == "3g.40gb"`),
		"ns/int":  claim("int", `device.attributes["gpu.migflex.io"].profile == 3`),
	}}
	for _, name := range []string{"good", "int"} {
		p := c.pod(name, "cpu", 1)
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(name)}}
	}
	p, err := PreviewRound(Options{Policy: solver.DefaultPolicy()}, c.now, c.nodeList(), c.podList(), dv)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Pending) != 1 || p.Pending[0].Name != "good" || p.Result.Pods[0].Action != solver.ActionReshape {
		t.Fatalf("pending %v, pods %+v: want good reshaped for", p.Pending, p.Result.Pods)
	}
	want := []PreviewEvent{
		{Pod: "ns/int", Type: "Warning", Reason: ReasonClaimUnread, Message: "the planner does not read part of the pod's ResourceClaims and leaves it to the scheduler: " +
			"claim gpu request r: `device.attributes[\"gpu.migflex.io\"].profile == 3`: profile == 3 is false on every device: profile is a string, 3 an int, and CEL finds values of two types unequal"},
		{Pod: "ns/good", Type: "Normal", Reason: ReasonPlanned, Message: "will run on node n1: GPU 0 repartitioned 7x1g.10gb -> 4x1g.10gb + 3g.40gb"},
	}
	if diff := cmp.Diff(want, p.Events); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// TestPreviewRoundReservations: the preview reserves as the controller's
// round does (reserve.Decide, through the same decide): a reservation the
// Node carries is kept and not written again, its GPUs go to no other
// pod, one past its deadline ends, a new one is written with its Events;
// and what the preview would write is what a round on a fresh memory
// writes.
func TestPreviewRoundReservations(t *testing.T) {
	at := t0.Add(6 * time.Minute)
	// carried puts the planner's reservation for ns/big on n, made at t0.
	carried := func(t *testing.T, n *corev1.Node, gpus []int, deadline time.Time, manager string) {
		t.Helper()
		v, err := nodeinfo.Reservation{Pod: "ns/big", UID: "uid-big", GPUs: gpus, Since: t0, Ready: t0, Deadline: deadline}.Encode()
		if err != nil {
			t.Fatal(err)
		}
		n.Annotations[nodeinfo.AnnotationReservation] = v
		n.ManagedFields = append(n.ManagedFields, plansnap.ManagedTime(manager, nodeinfo.AnnotationReservation, t0))
	}
	resvManager := DefaultFieldManager + "-reservation"
	held := func(node string, gpus []int, since, ready time.Time, written bool) PreviewReservation {
		return PreviewReservation{Reservation: reserve.Reservation{Node: node, GPUs: gpus, Pod: "ns/big", Since: since, Ready: ready, Deadline: ready.Add(2 * time.Minute)}, Written: written}
	}
	tests := []struct {
		name    string
		reserve reserve.Policy
		setup   func(t *testing.T, c *cluster)
		// want are the reservations held; ended, why each ended; writes,
		// "node key" ("node -key" for a removal); events, "pod reason"
		// of the Events, in order.
		want            []PreviewReservation
		ended           []string
		writes, events  []string
		smallAction     solver.Action
		warningContains string
	}{
		{
			name:    "a new reservation is written, and its idle MIG GPU made whole",
			reserve: reserve.DefaultPolicy(),
			setup: func(t *testing.T, c *cluster) {
				gpus := wholeGPUs(2)
				gpus[1] = simGPU(1, all1g...)
				c.addNode("n1", gpus...)
			},
			want:   []PreviewReservation{held("n1", []int{0, 1}, at, at, true)},
			writes: []string{"n1 " + nodeinfo.AnnotationMigConfig, "n1 " + nodeinfo.AnnotationReservation},
			events: []string{"ns/small " + ReasonImpossible, "ns/big " + ReasonReserved},
			// The reserved GPU's free 1g.10gb go to no other pod.
			smallAction: solver.ActionNone,
		},
		{
			name:    "a reservation the Node carries is kept, not written again, and its GPUs go to no other pod",
			reserve: reserve.DefaultPolicy(),
			setup: func(t *testing.T, c *cluster) {
				gpus := wholeGPUs(2, "ns/a")
				gpus[1] = simGPU(1, all1g...)
				carried(t, c.addNode("n1", gpus...), []int{1}, t0.Add(8*time.Minute), resvManager)
			},
			want: []PreviewReservation{{Reservation: reserve.Reservation{Node: "n1", GPUs: []int{1}, Pod: "ns/big", Since: t0, Ready: t0, Deadline: t0.Add(8 * time.Minute)}}},
			// The reserved idle MIG GPU made whole; ns/big told nothing new.
			writes:      []string{"n1 " + nodeinfo.AnnotationMigConfig},
			events:      []string{"ns/small " + ReasonImpossible},
			smallAction: solver.ActionNone,
		},
		{
			name:    "one past its deadline ends, its node left to others",
			reserve: reserve.DefaultPolicy(),
			setup: func(t *testing.T, c *cluster) {
				gpus := wholeGPUs(2, "ns/a")
				gpus[1] = simGPU(1, all1g...)
				carried(t, c.addNode("n1", gpus...), []int{1}, t0.Add(5*time.Minute), resvManager)
			},
			ended:       []string{reserve.EndedLapsed},
			writes:      []string{"n1 -" + nodeinfo.AnnotationReservation},
			events:      []string{"ns/big " + ReasonImpossible, "ns/big " + ReasonReservationEnded},
			smallAction: solver.ActionExisting,
		},
		{
			name:    "someone else's is left as it is",
			reserve: reserve.DefaultPolicy(),
			setup: func(t *testing.T, c *cluster) {
				gpus := wholeGPUs(2, "ns/a")
				gpus[1] = simGPU(1, all1g...)
				carried(t, c.addNode("n1", gpus...), []int{1}, t0.Add(8*time.Minute), "admin")
			},
			events:          []string{"ns/big " + ReasonImpossible},
			smallAction:     solver.ActionExisting,
			warningContains: "a reservation the planner did not make",
		},
		{
			name:    "reservations off (Options.Reserve zero) end the planner's",
			reserve: reserve.Policy{},
			setup: func(t *testing.T, c *cluster) {
				gpus := wholeGPUs(2, "ns/a")
				gpus[1] = simGPU(1, all1g...)
				carried(t, c.addNode("n1", gpus...), []int{1}, t0.Add(8*time.Minute), resvManager)
			},
			ended:       []string{"reservations are off"},
			writes:      []string{"n1 -" + nodeinfo.AnnotationReservation},
			events:      []string{"ns/big " + ReasonImpossible, "ns/big " + ReasonReservationEnded},
			smallAction: solver.ActionExisting,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			tc.setup(t, c)
			c.pod("big", resourcename.GPU, 2)
			c.now = t0.Add(time.Minute)
			c.pod("small", mig1g, 1)
			c.now = at
			nodes, pods := c.nodeList(), c.podList()
			p, err := PreviewRound(Options{Policy: solver.DefaultPolicy(), Reserve: tc.reserve}, at, nodes, pods, nil)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, p.Reservations); diff != "" {
				t.Errorf("reservations held (-want +got):\n%s", diff)
			}
			var ended []string
			for _, e := range p.ReservationsEnded {
				ended = append(ended, e.Why)
			}
			if !slices.Equal(ended, tc.ended) {
				t.Errorf("reservations ended: %q, want %q", ended, tc.ended)
			}
			var writes, events []string
			for _, w := range p.Writes {
				k := w.Key
				if w.Value == "" {
					k = "-" + k
				}
				writes = append(writes, w.Node+" "+k)
			}
			for _, e := range p.Events {
				events = append(events, e.Pod+" "+e.Reason)
			}
			if !slices.Equal(writes, tc.writes) || !slices.Equal(events, tc.events) {
				t.Errorf("writes %q, events %q; want %q, %q", writes, events, tc.writes, tc.events)
			}
			i := slices.IndexFunc(p.Pending, func(q *corev1.Pod) bool { return q.Name == "small" })
			if i < 0 || p.Result.Pods[i].Action != tc.smallAction {
				t.Errorf("pods %+v: want ns/small's action %q", p.Result.Pods, tc.smallAction)
			}
			if tc.warningContains != "" && !slices.ContainsFunc(p.Warnings, func(w string) bool { return strings.Contains(w, tc.warningContains) }) {
				t.Errorf("warnings %q, want one with %q", p.Warnings, tc.warningContains)
			}
			// What a round on a fresh memory writes: the same.
			o := testOptions(func(o *Options) { o.Reserve = tc.reserve })
			d, err := decide(o, mustPlanner(t, o), newMemory(o.MixHalfLife), at, nodes, pods)
			if err != nil {
				t.Fatal(err)
			}
			var round []PreviewWrite
			for _, w := range d.writes {
				round = append(round, PreviewWrite{Node: w.node.Name, Key: w.key, Value: w.value, GPUs: w.gpus})
			}
			if diff := cmp.Diff(round, p.Writes); diff != "" {
				t.Errorf("the preview's writes differ from the round's (-round +preview):\n%s", diff)
			}
		})
	}
}
