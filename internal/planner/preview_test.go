package planner

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
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

	p, err := PreviewRound(Options{Policy: solver.DefaultPolicy()}, c.now, nodes, pods)
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
	if _, err := PreviewRound(Options{Policy: solver.Policy{MaxGPUsPerRound: -1}}, c.now, nodes, pods); err == nil {
		t.Errorf("an invalid policy was accepted")
	}
}
