//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// envTimings turns on TestDRATimings, a measurement that costs minutes of
// cluster time and checks no threshold: the normal suite skips it.
const envTimings = "MIGFLEX_E2E_TIMINGS"

// timingRuns is how many pods each path times (issue 37 asks for 10).
const timingRuns = 10

// TestDRATimings measures, for issue 37, creation -> Running of a pod
// with an unchanged nvidia.com/mig-3g.40gb limit, one pod after another,
// on three paths in the same run:
//
//   - device plugin: node 1, the instance exists (a layout of 3g.40gb);
//   - DRA static: node 2, the instance exists and is a device of its
//     ResourceSlice;
//   - DRA dynamic: node 2 with --dra-mode=dynamic, every placement
//     offered with the GPUs' counters and the instance created at the
//     claim's Prepare (and destroyed at its Unprepare, before the next
//     run starts).
//
// Each run is timed from just before the pod's creation to the watch event
// that shows it Running; the pod goes through the webhook as any user's
// (which must leave it as asked) and the scheduler. Between runs the pod
// is deleted and, on DRA, its claim unprepared, so every run starts from
// the same free node. It is a measurement, not a check: it runs only with
// MIGFLEX_E2E_TIMINGS set, and logs each path's p50 and p90.
func TestDRATimings(t *testing.T) {
	if os.Getenv(envTimings) == "" {
		t.Skip(envTimings + " is unset: a measurement, run on request")
	}
	migflex(t)
	dra := draNode(t)
	ns := cluster.Namespace(t)
	have := gpuLayouts{0: {"3g.40gb", "3g.40gb"}, 1: {"3g.40gb", "3g.40gb"}}

	applyLayouts(t, have)
	dp := podToRunningRuns(t, dpNode(), ns, "device-plugin", timingRuns)

	layout := dra.applyDRALayout(t, have)
	static := podToRunningRuns(t, dra, ns, "dra-static", timingRuns)

	// Dynamic mode owns the instances: no layout, the static ones
	// destroyed at its start (they are idle), MIG left on.
	if err := dra.SetNodeAnnotations(t.Context(), map[string]*string{annotationMigConfig: nil, annotationRunAI: nil}); err != nil {
		t.Fatal(err)
	}
	setDRAMode(t, "dynamic")
	t.Cleanup(func() { setDRAMode(t, "") })
	dra.waitDynamicOffers(t)
	for _, g := range layout {
		for _, in := range g.Instances {
			dra.waitForSimInstance(t, in.UUID, false)
		}
	}
	dynamic := podToRunningRuns(t, dra, ns, "dra-dynamic", timingRuns)

	t.Log("nvidia.com/mig-3g.40gb, one pod after another")
	for _, p := range []struct {
		label string
		r     timedRuns
	}{
		{"device plugin (instance exists)", dp},
		{"DRA static (instance exists)", static},
		{"DRA dynamic (instance made at Prepare)", dynamic},
	} {
		t.Log("creation -> Running, " + runsSummary(p.label, p.r.running))
		t.Log("bound -> Running, " + runsSummary(p.label, p.r.boundToRunning))
	}

	// Leave node 2 as the tests after this one expect a DRA node: static
	// mode serving a layout.
	setDRAMode(t, "")
	dra.applyDRALayout(t, gpuLayouts{0: {"1g.10gb"}, 1: {"1g.10gb"}})
}

// timedRuns are the runs of one path: from just before each pod's creation
// to the watch event that shows it Running, and from the watch event that
// shows it bound to a node (spec.nodeName) to the one that shows it
// Running: the kubelet's part (on DRA the claim's Prepare, in dynamic mode
// the instance's creation), with the watch's delivery.
type timedRuns struct{ running, boundToRunning []time.Duration }

// podToRunningRuns creates runs pods asking for nvidia.com/mig-3g.40gb,
// pinned to node n, one after another, and times each (timedRuns). Each
// pod must be left as asked by the webhook; on a DRA node its claim must
// hold a 3g.40gb device of the node's slices. Each is deleted, and on a
// DRA node its claim unprepared (its CDI spec gone: in dynamic mode the
// instance destroyed), before the next is created. Before each run a dry
// run of the pod must come back as asked (waitForAnswer, untimed): the
// webhook decides from its informers' copy of the Nodes and slices, which
// can trail the layout just applied; a pod created in that window is
// rewritten to another resource, and the run would time something else or
// never run (on 1.36, after TestDRA had turned the webhook reshape-first,
// the first device-plugin pod was rewritten to nvidia.com/gpu, which node
// 1's MIG-on GPUs offer none of).
func podToRunningRuns(t *testing.T, n simNode, ns, label string, runs int) timedRuns {
	t.Helper()
	const res = "nvidia.com/mig-3g.40gb"
	var took timedRuns
	for i := range runs {
		name := fmt.Sprintf("%s-%d", label, i)
		pod := n.gpuPod(ns, name, res, 1, "sleep", "3600")
		waitForAnswer(t, pod, "leave "+name+" as asked", func(p *corev1.Pod) bool { return p.Annotations[annotationFallback] == "" })
		w, err := cluster.Client.CoreV1().Pods(ns).Watch(t.Context(), metav1.ListOptions{FieldSelector: "metadata.name=" + name})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		cluster.CreatePod(t, pod)
		bound, running, err := waitBoundAndRunning(t.Context(), w)
		w.Stop()
		if err != nil {
			p, _ := cluster.Client.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
			t.Fatalf("%s run %d: %v; pod %+v, %s=%q", label, i, err, p.Status, annotationFallback, p.Annotations[annotationFallback])
		}
		took.running = append(took.running, running.Sub(start))
		took.boundToRunning = append(took.boundToRunning, running.Sub(bound))
		t.Logf("%s run %d: %s (bound after %s)", label, i, running.Sub(start).Round(time.Millisecond), bound.Sub(start).Round(time.Millisecond))

		pod, err = cluster.Client.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if a := pod.Annotations[annotationFallback]; a != "" {
			t.Fatalf("%s run %d: the webhook rewrote the pod (%s=%s): this run timed another request", label, i, annotationFallback, a)
		}
		var claimUID string
		if n.dra {
			n.checkExtendedResourceClaim(t, ns, name, res, "3g.40gb")
			claim, err := cluster.Client.ResourceV1().ResourceClaims(ns).Get(t.Context(), extendedResourceClaim(t, pod, res), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			claimUID = string(claim.UID)
		}
		deletePodAndWait(t, ns, name)
		if claimUID != "" {
			n.waitForNoCDISpec(t, claimUID)
		}
	}
	return took
}

// waitBoundAndRunning is waitRunning that also returns when the watch
// first showed the pod bound to a node.
func waitBoundAndRunning(ctx context.Context, w watch.Interface) (bound, running time.Time, err error) {
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return bound, running, fmt.Errorf("the pod watch ended")
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			now := time.Now()
			// Running implies bound; a watch that skipped the binding
			// (it never does: two writes) would count bound -> Running as 0.
			if bound.IsZero() && (p.Spec.NodeName != "" || p.Status.Phase == corev1.PodRunning) {
				bound = now
			}
			if p.Status.Phase == corev1.PodRunning {
				return bound, now, nil
			}
		case <-deadline:
			return bound, running, fmt.Errorf("the pod was not Running within %s", timeout)
		case <-ctx.Done():
			return bound, running, ctx.Err()
		}
	}
}
