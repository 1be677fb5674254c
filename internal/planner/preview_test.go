package planner

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/domain/schedview"
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
