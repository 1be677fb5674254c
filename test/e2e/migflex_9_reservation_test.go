//go:build e2e

package e2e

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const annotationReservation = "migflex.io/reservation"

// TestPlannerReservesForMultiGPUPod: a pod asking for both of the node's
// GPUs whole, while they are all-1g and idle, gets a reservation (Events
// on the pod and the Node, the annotation on the Node); the agent
// withholds the GPUs' free devices while the planner makes them whole,
// offers both at once, the pod runs on them, and the planner removes the
// reservation once it is bound.
func TestPlannerReservesForMultiGPUPod(t *testing.T) {
	ns := planner(t)
	ctx := t.Context()
	resetTo1g(t)
	withPlannerArgs(t, "--reserve-after=0s")
	big := gpuPod(ns, "big", "nvidia.com/gpu", 2, "sleep", "3600")
	cluster.CreatePod(t, big)
	msg := podEvent(t, ns, big.Name, "GPUsReserved", "node "+cluster.NodeName+" GPUs 0, 1 reserved for pod "+ns+"/big until")
	t.Logf("GPUsReserved: %s", msg)
	podEvent(t, metav1.NamespaceDefault, cluster.NodeName, "GPUsReserved", "reserved for pod "+ns+"/big")
	if _, err := cluster.WaitForPodPhase(ctx, ns, big.Name, corev1.PodRunning); err != nil {
		n, _ := cluster.Node(ctx)
		t.Fatalf("%v; node %s", err, summary(n))
	}
	if _, err := cluster.WaitForNode(ctx, "the reservation removed", timeout, func(n *corev1.Node) error {
		if v, ok := n.Annotations[annotationReservation]; ok {
			return fmt.Errorf("reservation %s", v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	podEvent(t, metav1.NamespaceDefault, cluster.NodeName, "GPUReservationEnded", ns+"/big", "no longer pending")
	deletePodAndWait(t, ns, big.Name)
}
