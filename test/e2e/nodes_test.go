//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/test/e2e/framework"
)

// simNode is a node of the local cluster, the simulated GPUs the local
// overlay gives it by name (overlays/local/sim-config-local.yaml) and how
// it serves them, with the framework's node helpers addressed to it
// (framework.Cluster.OnNode): n.Node, n.WaitForNode, n.AgentPod, ...
type simNode struct {
	*framework.Cluster
	model string
	gpus  int
	// dra: the node serves through DRA (the overlay's DRA pool).
	dra bool
}

// dpNode is node 1, this host: two H100-SXM5-80GB, the device plugin. The
// package's layout helpers without a node (applyLayout, gpuPod, ...) are
// its.
func dpNode() simNode {
	return simNode{Cluster: cluster, model: simModel, gpus: simGPUs}
}

// draNode is node 2, mf-dra: two A100-SXM4-80GB (the H100's profiles, on
// another model), served through DRA. It skips t on a cluster without it.
func draNode(t testing.TB) simNode {
	t.Helper()
	return simNode{Cluster: cluster.NodeNumber(t, framework.DRANode), model: "A100-SXM4-80GB", gpus: 2, dra: true}
}

// b200Node is node 3, mf-b200: one B200-180GB, whose MIG profiles no other
// node's model has (1g.23gb, 2g.45gb, 3g.90gb, ...), served through the
// device plugin. It skips t on a cluster without it.
func b200Node(t testing.TB) simNode {
	t.Helper()
	return simNode{Cluster: cluster.NodeNumber(t, framework.ThirdNode), model: "B200-180GB", gpus: 1}
}

// podNode is the node a pod was bound to, "" while it is not.
func podNode(ctx context.Context, ns, name string) (string, error) {
	p, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return p.Spec.NodeName, nil
}

// migConfigOf is the node's nvidia.com/mig.config annotation now.
func (n simNode) migConfigOf(t *testing.T) string {
	t.Helper()
	node, err := n.Node(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return node.Annotations[annotationMigConfig]
}

// wholeGPUs puts every GPU of the node back to MIG disabled, as a fresh
// agent finds them, and waits for it.
func (n simNode) wholeGPUs(t *testing.T) {
	t.Helper()
	n.setMigConfig(t, annotationMigConfig, "version: v1\nmig-configs:\n  selected:\n  - devices: all\n    mig-enabled: false\n")
	l := gpuLayouts{}
	for i := range n.gpus {
		l[i] = nil
	}
	n.waitForLayouts(t, l)
}

// waitGone waits until the pod is gone and its node's agent no longer
// reports it holding a device.
func waitGone(t *testing.T, ns, name, node string) {
	t.Helper()
	err := framework.WaitFor(t.Context(), "pod "+ns+"/"+name+" gone and its devices free", timeout, func(ctx context.Context) (bool, error) {
		_, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, err
		}
		if node == "" {
			return true, nil
		}
		n, err := cluster.OnNode(node).Node(ctx)
		if err != nil {
			return false, err
		}
		return !strings.Contains(n.Annotations[annotationLayout], ns+"/"+name), nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitServing waits until the node's agent has reported its GPUs (the
// layout annotation), labels the node as serving through want
// (device-plugin or dra), and reports state success, or no state: a fresh
// agent on a node without a mig.config source sets none.
func (n simNode) waitServing(t *testing.T, want string) *corev1.Node {
	t.Helper()
	node, err := n.WaitForNode(t.Context(), fmt.Sprintf("node %s serving through %s, state success or none", n.NodeName, want), timeout, func(node *corev1.Node) error {
		if v := node.Labels[labelServing]; v != want {
			return fmt.Errorf("%s=%q", labelServing, v)
		}
		if _, ok := node.Annotations[annotationLayout]; !ok {
			return fmt.Errorf("no %s annotation", annotationLayout)
		}
		if s := node.Labels[labelState]; s != "success" && s != "" {
			return fmt.Errorf("state %q, reason %q", s, node.Annotations[annotationReason])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return node
}
