//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/migflex/migflex/test/e2e/framework"
)

// taintReserved is the device taint a DRA node's agent puts on the free
// devices of the GPUs its Node's reservation holds.
const taintReserved = "migflex.io/reserved"

// TestDRAReservationKeepsGPU: on node 2 (mf-dra, DRA, static mode), with
// both GPUs whole, one held by a pod, a reservation of both GPUs for a pod
// waiting for two (written as the planner writes it) keeps the free GPU
// from a one-GPU pod: its device carries the reserved taint (or, where the
// API server drops taints, is left out of the slice), and the pod stays
// unscheduled. When the holder goes, both GPUs are free and whole and the
// taint is lifted: the one-GPU pod runs there (no toleration reaches a
// pod asking by extended resource, so the reserved pod too would need the
// lift); the GPU it leaves is kept again while the reservation stands.
func TestDRAReservationKeepsGPU(t *testing.T) {
	migflex(t)
	n := draNode(t)
	ctx := t.Context()
	ns := cluster.Namespace(t)
	n.wholeGPUs(t)

	optOut := func(p *corev1.Pod) *corev1.Pod {
		p.Labels = map[string]string{labelOptOut: "disabled"}
		return p
	}
	holder := optOut(n.gpuPod(ns, "holder", "nvidia.com/gpu", 1, "sleep", "3600"))
	cluster.CreatePod(t, holder)
	if _, err := cluster.WaitForPodPhase(ctx, ns, holder.Name, corev1.PodRunning); err != nil {
		t.Fatal(err)
	}

	n.setReservation(t, fmt.Sprintf(`{"pod":%q,"uid":"e2e-big","gpus":[0,1],"since":%q,"ready":%q,"deadline":%q}`,
		ns+"/big", time.Now().UTC().Format(time.RFC3339), time.Now().UTC().Format(time.RFC3339), time.Now().Add(10*time.Minute).UTC().Format(time.RFC3339)))
	t.Cleanup(func() { n.setReservation(t, "") })
	n.waitKept(t, "the free GPU kept from new claims, the holder's left alone", 1)

	small := optOut(n.gpuPod(ns, "small", "nvidia.com/gpu", 1, "sleep", "3600"))
	cluster.CreatePod(t, small)
	err := framework.WaitFor(ctx, "the one-GPU pod found unschedulable", timeout, func(ctx context.Context) (bool, error) {
		p, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, small.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Spec.NodeName != "" {
			return false, fmt.Errorf("the one-GPU pod was bound to %s while the free GPU is reserved", p.Spec.NodeName)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				t.Logf("unschedulable: %s", c.Message)
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A while longer: a scheduler retry must not place it either.
	time.Sleep(10 * time.Second)
	if node, err := podNode(ctx, ns, small.Name); err != nil || node != "" {
		t.Fatalf("the one-GPU pod is on %q (%v) while the free GPU is reserved", node, err)
	}

	deletePodAndWait(t, ns, holder.Name)
	if _, err := cluster.WaitForPodPhase(ctx, ns, small.Name, corev1.PodRunning); err != nil {
		t.Fatalf("the one-GPU pod after the reserved GPUs were all free: %v", err)
	}
	n.waitKept(t, "the GPU the one-GPU pod left kept again", 1)
	n.setReservation(t, "")
	n.waitKept(t, "nothing kept once the reservation is gone", 0)
	deletePodAndWait(t, ns, small.Name)
}

// setReservation writes the node's migflex.io/reservation, "" removing it.
func (n simNode) setReservation(t *testing.T, value string) {
	t.Helper()
	v := "null"
	if value != "" {
		v = strconv.Quote(value)
	}
	patch := []byte(`{"metadata":{"annotations":{"` + annotationReservation + `":` + v + `}}}`)
	// Not t.Context(): this also runs in cleanup.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cluster.Client.CoreV1().Nodes().Patch(ctx, n.NodeName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("annotating node %s %s: %v", n.NodeName, annotationReservation, err)
	}
}

// waitKept waits until want of the node's GPUs are kept from new claims:
// their whole device carries the reserved taint, or is missing from the
// slice (an API server that drops taints), of the node's n.gpus whole
// GPUs.
func (n simNode) waitKept(t *testing.T, what string, want int) {
	t.Helper()
	var got int
	var shown []string
	err := framework.WaitFor(t.Context(), what, timeout, func(ctx context.Context) (bool, error) {
		list, err := cluster.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		var gen int64 = -1
		for _, s := range list.Items {
			if s.Spec.Driver == draDriver && s.Spec.Pool.Name == n.NodeName {
				gen = max(gen, s.Spec.Pool.Generation)
			}
		}
		offered := 0
		shown = nil
		for _, s := range list.Items {
			if s.Spec.Driver != draDriver || s.Spec.Pool.Name != n.NodeName || s.Spec.Pool.Generation != gen {
				continue
			}
			for _, d := range s.Spec.Devices {
				key := d.Name
				kept := false
				for _, tn := range d.Taints {
					if tn.Key == taintReserved && tn.Effect == "NoSchedule" {
						kept = true
						key += " " + tn.Key + "=" + tn.Value
					}
				}
				if !kept {
					offered++
				}
				shown = append(shown, key)
			}
		}
		got = n.gpus - offered
		return got == want, nil
	})
	if err != nil {
		t.Fatalf("%v: %d GPUs kept, want %d; slice devices %v", err, got, want, shown)
	}
	t.Logf("%s: %v", what, shown)
}
