//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/migflex/migflex/test/e2e/framework"
)

// TestSuccessMeansAllocatable: what a user types, annotate, `kubectl wait`
// for state success, create a pod for the new profile, does not race the
// kubelet: success waits until the Node's allocatable shows the layout
// (the kubelet publishes it at its next status update, seconds after the
// devices changed), so the pod is neither rewritten by the fallback
// webhook, which reads the Node, nor refused by the scheduler.
func TestSuccessMeansAllocatable(t *testing.T) {
	migflex(t)
	ctx := t.Context()
	// From a layout without 3g.40gb, through state failed, so that the
	// success waited for below can only be the new layout's.
	applyLayout(t, "7g.80gb")
	setMigConfig(t, annotationMigConfig, migConfig("3g.40gb", "3g.40gb", "3g.40gb"))
	if _, err := cluster.WaitForNode(ctx, "state failed", timeout, func(n *corev1.Node) error {
		if s := n.Labels[labelState]; s != "failed" {
			return fmt.Errorf("state %q", s)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	if out, err := cluster.Kubectl(ctx, "annotate", "node", cluster.NodeName, "--overwrite",
		annotationMigConfig+"="+migConfig("3g.40gb", "3g.40gb")); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, err := cluster.Kubectl(ctx, "wait", "--for=jsonpath={.metadata.labels.nvidia\\.com/mig\\.config\\.state}=success",
		"node/"+cluster.NodeName, fmt.Sprintf("--timeout=%ds", int(timeout.Seconds()))); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	waited := time.Since(start)
	node, err := cluster.Node(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := gpuResources(node.Status.Allocatable)["nvidia.com/mig-3g.40gb"]; got != 2*simGPUs {
		t.Errorf("state success while allocatable nvidia.com/mig-3g.40gb = %d, want %d; %s", got, 2*simGPUs, summary(node))
	}
	t.Logf("annotate to state success (kubectl wait): %v", waited.Round(time.Millisecond))

	ns := cluster.Namespace(t)
	pod := gpuPod(ns, "right-after-success", "nvidia.com/mig-3g.40gb", 1, "env")
	stored := cluster.CreatePod(t, pod)
	if got, ok := stored.Annotations[annotationFallback]; ok {
		t.Errorf("the webhook rewrote the pod (%s=%q): it did not see the new layout yet", annotationFallback, got)
	}
	checkResources(t, stored, map[corev1.ResourceName]string{"nvidia.com/mig-3g.40gb": "1"})
	if _, err := cluster.WaitForPodSucceeded(ctx, ns, pod.Name); err != nil {
		t.Fatal(err)
	}
	evs, err := cluster.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
		"involvedObject.kind": "Pod", "involvedObject.name": pod.Name, "reason": "FailedScheduling",
	}.AsSelector().String()})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		t.Errorf("the scheduler refused the pod first: %s", e.Message)
	}
}

// TestConfigRemoved: removing the last mig.config keeps the layout, served,
// and says so on the Node (state success, a reason, a Normal Event) rather
// than dropping the state without a word.
func TestConfigRemoved(t *testing.T) {
	migflex(t)
	ctx := t.Context()
	_, layout := applyLayout(t, "2g.20gb", "2g.20gb", "2g.20gb")
	start := time.Now()
	if out, err := cluster.Kubectl(ctx, "annotate", "node", cluster.NodeName, annotationMigConfig+"-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	node, err := cluster.WaitForNode(ctx, "state success with the no-config reason", timeout, func(n *corev1.Node) error {
		if s, r := n.Labels[labelState], n.Annotations[annotationReason]; s != "success" || !strings.HasPrefix(r, "no mig.config on the node") {
			return fmt.Errorf("state %q, reason %q", s, r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.WaitForNodeEvent(ctx, corev1.EventTypeNormal, "MigConfigRemoved", start, "annotation "+annotationMigConfig+" was removed", "keep their layout"); err != nil {
		t.Error(err)
	}
	after, err := framework.NodeLayout(node)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(framework.LayoutProfiles(after)) != fmt.Sprint(framework.LayoutProfiles(layout)) {
		t.Errorf("layout %v after the source went, want %v kept", framework.LayoutProfiles(after), framework.LayoutProfiles(layout))
	}
	if err := checkAllocatable(node, counts(framework.LayoutDevices(layout))); err != nil {
		t.Error(err)
	}
}
