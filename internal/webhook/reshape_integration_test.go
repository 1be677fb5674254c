package webhook

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/planner/plansnap"
	"github.com/migflex/migflex/internal/testsupport/testenv"
	"github.com/migflex/migflex/internal/testsupport/testutil"
	"github.com/migflex/migflex/internal/webhook/fallback"
)

// Reshape-first against a real API server: the planner's writes come by
// server-side apply under its field manager, the agent's reports by
// updates of its own, and the webhook tells from its Node informer which
// GPUs the planner changed. An idle GPU of a node the planner just changed
// still serves a pod at its size; once every GPU of the node is cooling
// down, a busy type falls back at once to a free one.
func TestReshapeFirstAgainstAPIServer(t *testing.T) {
	cfg := testenv.Start(t)
	_, ctx := ktesting.NewTestContext(t)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, ctx: ctx, client: client}
	c.node("gpu", map[string]string{nodeinfo.LabelPlanner: nodeinfo.PlannerEnabled}, nil, false)
	report(t, client, agentNode(t, "gpu", true, h100(t, "gpu", 0, seven1g()...), h100(t, "gpu", 1, seven1g()...)))
	c.namespaces()
	d, err := fallback.NewDecider(fallback.Options{Policy: fallback.DefaultPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	c.serve(Options{Decider: d, Client: client, ReshapeFirst: true, PlannerFieldManager: plansnap.DefaultFieldManager,
		PlannerManualHold: time.Minute, PlannerCooldown: 2 * time.Minute}, nil)
	answer := func(r corev1.ResourceName) *corev1.Pod {
		p, err := c.create("team", gpuPod("probe", r, "1"), true)
		if err != nil {
			t.Fatalf("dry-run create: %v", err)
		}
		return p
	}
	testutil.Eventually(t, "the webhook to leave a 4g.40gb for the planner", func() bool {
		return answer(mig4g40).Annotations[AnnotationReshape] == ReshapeExpected
	})

	plannerWrites := func(config string) {
		t.Helper()
		_, err := client.CoreV1().Nodes().Apply(ctx, corev1ac.Node("gpu").WithAnnotations(map[string]string{nodeinfo.AnnotationMigConfig: config}),
			metav1.ApplyOptions{FieldManager: plansnap.DefaultFieldManager, Force: true})
		if err != nil {
			t.Fatal(err)
		}
	}
	// The planner makes a 3g.40gb on GPU 0 for a pod, which takes it.
	plannerWrites(migConfig(`"3g.40gb": 1, "1g.10gb": 3`, `"1g.10gb": 7`))
	report(t, client, agentNode(t, "gpu", true, h100(t, "gpu", 0, "3g.40gb@0*", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6"), h100(t, "gpu", 1, seven1g()...)))
	testutil.Eventually(t, "the webhook to see GPU 0's 3g.40gb held", func() bool {
		return answer(mig3g40).Annotations[AnnotationReshape] == ReshapeExpected
	})
	// GPU 1 is idle and not cooling down: a 4g.40gb pod is not cut.
	if p := answer(mig4g40); p.Annotations[AnnotationReshape] != ReshapeExpected || limitOf(p) != mig4g40 {
		t.Errorf("4g.40gb admitted as %s with annotations %v, want as asked for the planner", limitOf(p), p.Annotations)
	}

	// The planner then changes GPU 1 too, and its 4g.40gb is taken: every
	// GPU cools down; a 3g.40gb pod falls back at once to a free 1g.10gb.
	plannerWrites(migConfig(`"3g.40gb": 1, "1g.10gb": 3`, `"4g.40gb": 1, "1g.10gb": 3`))
	report(t, client, agentNode(t, "gpu", true, h100(t, "gpu", 0, "3g.40gb@0*", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6"),
		h100(t, "gpu", 1, "4g.40gb@0*", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6")))
	testutil.Eventually(t, "a 3g.40gb to fall back at once", func() bool {
		p := answer(mig3g40)
		return p.Annotations[fallback.AnnotationReason] == "3g.40gb->1g.10gb=exhausted" && p.Annotations[AnnotationReshape] == ""
	})
}
