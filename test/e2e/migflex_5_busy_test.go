//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/test/e2e/framework"
)

// TestBusyGPU: a running pod holds a MIG device, as the real kubelet's
// pod-resources API tells the agent. A layout that keeps that device is
// applied around it; a layout that would destroy it waits (state pending,
// the pod named in the reason and a MigConfigPending Event) and changes
// nothing; once the pod is gone the layout is applied.
//
// The local overlay simulates one GPU, so "other GPUs proceed meanwhile"
// is not shown here (internal/agent's tests cover it).
func TestBusyGPU(t *testing.T) {
	migflex(t)
	ctx := t.Context()
	applyLayout(t, "1g.10gb", "1g.10gb")
	ns := cluster.Namespace(t)

	pod := gpuPod(ns, "holder", "nvidia.com/mig-1g.10gb", 1, "sleep", "3600")
	cluster.CreatePod(t, pod)
	if _, err := cluster.WaitForPodPhase(ctx, ns, pod.Name, corev1.PodRunning); err != nil {
		t.Fatal(err)
	}
	held, err := framework.KubeletPodDevices(ctx, ns, pod.Name)
	if err != nil {
		t.Fatal(err)
	}
	ids := held["nvidia.com/mig-1g.10gb"]
	if len(ids) != 1 {
		t.Fatalf("the kubelet says pod %s/%s holds %v, want one nvidia.com/mig-1g.10gb device", ns, pod.Name, held)
	}
	device := ids[0]
	podKey := ns + "/" + pod.Name

	// 1. More 1g.10gb beside it: the held device stays where it is, so the
	// change goes ahead while the pod runs.
	_, layout := applyLayout(t, "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb")
	if !slices.Contains(uuidsOf(layout, "1g.10gb"), device) {
		t.Errorf("the pod's device %s is gone from the layout %v: a busy device was destroyed", device, uuidsOf(layout, "1g.10gb"))
	}
	p, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != corev1.PodRunning {
		t.Fatalf("pod %s is %s after the change beside its device, want Running", podKey, p.Status.Phase)
	}
	before, err := cluster.Node(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// 2. A whole-GPU profile would destroy the pod's device: pending.
	start := time.Now()
	setMigConfig(t, annotationMigConfig, migConfig("7g.80gb"))
	node, err := cluster.WaitForNode(ctx, "state pending naming "+podKey, timeout, func(n *corev1.Node) error {
		if s, r := n.Labels[labelState], n.Annotations[annotationReason]; s != "pending" || !strings.Contains(r, podKey) {
			return fmt.Errorf("state %q, reason %q", s, r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.WaitForNodeEvent(ctx, corev1.EventTypeNormal, "MigConfigPending", start, podKey); err != nil {
		t.Error(err)
	}
	pending, err := nodeLayout(node)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(layout, pending); diff != "" {
		t.Errorf("layout changed while its GPU is busy (-before +pending):\n%s", diff)
	}
	kubelet, err := framework.KubeletDevices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(devices(layout), kubelet); diff != "" {
		t.Errorf("kubelet devices changed while the GPU is busy (-before +now):\n%s", diff)
	}
	if diff := cmp.Diff(gpuResources(before.Status.Allocatable), gpuResources(node.Status.Allocatable)); diff != "" {
		t.Errorf("allocatable changed while the GPU is busy (-before +pending):\n%s", diff)
	}

	// 3. The pod goes away: the agent's retry applies the layout.
	if err := cluster.Client.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = framework.WaitFor(ctx, "pod "+podKey+" to be gone", timeout, func(ctx context.Context) (bool, error) {
		_, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if err != nil {
		t.Fatal(err)
	}
	node, _ = waitForLayout(t, "7g.80gb")
	if _, ok := node.Annotations[annotationReason]; ok {
		t.Errorf("reason %q left after success", node.Annotations[annotationReason])
	}
}
