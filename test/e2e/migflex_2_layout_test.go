//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/test/e2e/framework"
)

// TestLayoutAnnotation is the main job: a user annotates the Node with a
// layout, the agent partitions the (simulated) GPUs, reports success, and
// the real kubelet puts the profiles into the Node's allocatable from the
// agent's device-plugin registrations. Then the user changes the layout,
// differently per GPU: the new profiles appear and the ones that went away
// read 0.
func TestLayoutAnnotation(t *testing.T) {
	migflex(t)
	ctx := t.Context()

	// From a known layout that differs from the next, so that the next is
	// a change (the agent records an Event for changes only).
	applyLayout(t, "7g.80gb")

	// 1. The annotation's list form, with kubectl as a user types it.
	start := time.Now()
	mixed := []string{"1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"}
	if out, err := cluster.Kubectl(ctx, "annotate", "node", cluster.NodeName, "--overwrite",
		annotationMigConfig+"="+migConfig(mixed...)); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	node, layout := waitForLayout(t, mixed...)
	// Counts are the node's: both GPUs have the layout.
	checkGFDLabels(t, node, map[string]int{"1g.10gb": 4, "2g.20gb": 2, "3g.40gb": 2})
	if r, ok := node.Annotations[annotationReason]; ok {
		t.Errorf("annotation %s=%q after success, want none", annotationReason, r)
	}
	for _, g := range layout {
		if g.MigMode != "Enabled" || g.Model != simModel {
			t.Errorf("GPU %d in the layout: model %q, MIG %q; want %s with MIG Enabled", g.Index, g.Model, g.MigMode, simModel)
		}
		for _, in := range g.Instances {
			if !strings.HasPrefix(in.UUID, "MIG-") || in.Health != "Healthy" {
				t.Errorf("GPU %d instance %+v: want a MIG- UUID and Healthy", g.Index, in)
			}
		}
	}
	want := map[string]int64{"nvidia.com/mig-1g.10gb": 4, "nvidia.com/mig-2g.20gb": 2, "nvidia.com/mig-3g.40gb": 2}
	if diff := cmp.Diff(want, counts(framework.LayoutDevices(layout))); diff != "" {
		t.Errorf("devices of the layout (-want +got):\n%s", diff)
	}
	if _, err := cluster.WaitForNodeEvent(ctx, corev1.EventTypeNormal, "MigConfigApplied", start, "annotation "+annotationMigConfig, "3g.40gb"); err != nil {
		t.Error(err)
	}
	kubelet, err := framework.KubeletDevices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(framework.LayoutDevices(layout), kubelet); diff != "" {
		t.Errorf("kubelet devices (pod-resources) vs the layout (-layout +kubelet):\n%s", diff)
	}

	// 2. A change, in mig-parted's own form (one named configuration,
	// profile -> count), with a layout for each GPU by its index.
	setMigConfig(t, annotationMigConfig, `version: v1
mig-configs:
  per-gpu:
  - devices: [0]
    mig-enabled: true
    mig-devices:
      "2g.20gb": 3
  - devices: [1]
    mig-enabled: true
    mig-devices:
      "7g.80gb": 1
`)
	node, _ = waitForLayouts(t, gpuLayouts{0: {"2g.20gb", "2g.20gb", "2g.20gb"}, 1: {"7g.80gb"}})
	checkGFDLabels(t, node, map[string]int{"2g.20gb": 3, "7g.80gb": 1})
	// Profiles that went away stay registered with no devices, so the
	// kubelet reports them as 0 at once instead of dropping them minutes
	// later; and the whole GPU, served before MIG was on, reads 0 as well.
	for _, r := range []corev1.ResourceName{"nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb", resourceGPU} {
		for what, l := range map[string]corev1.ResourceList{"allocatable": node.Status.Allocatable, "capacity": node.Status.Capacity} {
			q, ok := l[r]
			if !ok || !q.IsZero() {
				t.Errorf("%s %s = %v (present %v), want 0", what, r, q.String(), ok)
			}
		}
	}
}

// TestRunAIAnnotation: run.ai/mig.config, the key of Run:ai's
// fake-gpu-operator, works the same way, including its form with explicit
// placements; the GPU it does not name keeps its layout.
func TestRunAIAnnotation(t *testing.T) {
	migflex(t)
	ctx := t.Context()
	t.Cleanup(func() {
		// A later test sets its own layout; leave no second source behind.
		if err := cluster.SetNodeAnnotations(context.Background(), map[string]*string{annotationRunAI: nil}); err != nil {
			t.Error(err)
		}
	})

	_, before := applyLayout(t, "7g.80gb") // a change follows, with its Event
	start := time.Now()
	// Indices as strings, as Run:ai and fake-gpu-operator write them.
	setMigConfig(t, annotationRunAI, `version: v1
mig-configs:
  selected:
  - devices: ["0"]
    mig-enabled: true
    mig-devices:
    - {name: 3g.40gb, position: 0, size: 4}
    - {name: 1g.10gb, position: 6, size: 1}
`)
	_, layout := waitForLayouts(t, gpuLayouts{0: {"1g.10gb", "3g.40gb"}, 1: {"7g.80gb"}})
	got := map[string]int{}
	for _, in := range gpuOf(t, layout, 0).Instances {
		got[in.Profile] = in.Placement.Start
	}
	if diff := cmp.Diff(map[string]int{"3g.40gb": 0, "1g.10gb": 6}, got); diff != "" {
		t.Errorf("placements (profile -> start) (-want +got):\n%s", diff)
	}
	// Untouched: the same instance, not one destroyed and created again.
	if diff := cmp.Diff(gpuOf(t, before, 1), gpuOf(t, layout, 1)); diff != "" {
		t.Errorf("GPU 1, which the config does not name, changed (-before +after):\n%s", diff)
	}
	if _, err := cluster.WaitForNodeEvent(ctx, corev1.EventTypeNormal, "MigConfigApplied", start, "annotation "+annotationRunAI); err != nil {
		t.Error(err)
	}
}

// TestInvalidLayout: a layout that cannot fit, or does not parse, ends in
// state failed with the error in the reason annotation and in a Warning
// Event that kubectl describe node shows, and changes nothing: the layout,
// the kubelet's devices and the Node's allocatable stay as they were.
func TestInvalidLayout(t *testing.T) {
	migflex(t)
	before, layout := applyLayout(t, "3g.40gb", "2g.20gb")
	agent, err := cluster.AgentPod(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		doc  string
		// reason is the Event reason; message parts are expected in the
		// reason annotation and the Event.
		reason  string
		message []string
	}{{
		name:    "three 3g.40gb do not fit",
		doc:     migConfig("3g.40gb", "3g.40gb", "3g.40gb"),
		reason:  "MigConfigInvalid",
		message: []string{"GPU 0", "GPU 1", "3g.40gb x3", "memory slices"},
	}, {
		name:    "unknown profile",
		doc:     migConfig("5g.50gb"),
		reason:  "MigConfigInvalid",
		message: []string{"unknown profile 5g.50gb"},
	}, {
		name:    "malformed YAML",
		doc:     "version: v1\nmig-configs: [",
		reason:  "MigConfigInvalid",
		message: []string{"invalid YAML"},
	}, {
		// Issue 14: one placement anchored and aliased 1,500 times took
		// the agent past its memory limit into CrashLoopBackOff. Within
		// the limits since issue 29, its 1,500 overlaps are said once.
		name:    "issue 14's aliased placements",
		doc:     "version: v1\nmig-configs:\n  selected:\n  - devices: [0]\n    mig-enabled: true\n    mig-devices: [&p {name: 1g.10gb, position: 0, size: 1}," + strings.Repeat("*p,", 1499) + "*p]",
		reason:  "MigConfigInvalid",
		message: []string{"1g.10gb@0:1 overlaps 1g.10gb@0:1 (1500 times)"},
	}, {
		name:    "aliases expanding past the limit",
		doc:     "version: v1\nmig-configs:\n  selected:\n  - devices: [0]\n    mig-enabled: true\n    mig-devices: [&p {name: 1g.10gb, position: 0, size: 1}," + strings.Repeat("*p,", 2999) + "*p]",
		reason:  "MigConfigInvalid",
		message: []string{"more than 16384 YAML values", "migconfig.MaxValues"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			start := time.Now()
			setMigConfig(t, annotationMigConfig, tc.doc)
			node, err := cluster.WaitForNode(ctx, "state failed", timeout, func(n *corev1.Node) error {
				if s := n.Labels[labelState]; s != "failed" {
					return fmt.Errorf("state %q", s)
				}
				r := n.Annotations[annotationReason]
				for _, m := range tc.message {
					if !strings.Contains(r, m) {
						return fmt.Errorf("reason %q lacks %q", r, m)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			ev, err := cluster.WaitForNodeEvent(ctx, corev1.EventTypeWarning, tc.reason, start, tc.message...)
			if err != nil {
				t.Fatal(err)
			}
			// What a user sees in the Events section (the reason
			// annotation, higher up, says the same).
			out, err := cluster.Kubectl(ctx, "describe", "node", cluster.NodeName)
			if err != nil {
				t.Fatal(err)
			}
			_, events, _ := strings.Cut(out, "\nEvents:")
			if !strings.Contains(events, tc.reason) || !strings.Contains(events, tc.message[len(tc.message)-1]) {
				t.Errorf("kubectl describe node does not show the %s Event %q:\n%s", tc.reason, ev.Message, out)
			}

			// Nothing changed: the reported layout, the kubelet's devices
			// (current, not the Node's periodic status) and allocatable.
			after, err := framework.NodeLayout(node)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(layout, after); diff != "" {
				t.Errorf("layout changed by a failed mig.config (-before +after):\n%s", diff)
			}
			kubelet, err := framework.KubeletDevices(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(framework.LayoutDevices(layout), kubelet); diff != "" {
				t.Errorf("kubelet devices changed by a failed mig.config (-before +after):\n%s", diff)
			}
			if diff := cmp.Diff(gpuResources(before.Status.Allocatable), gpuResources(node.Status.Allocatable)); diff != "" {
				t.Errorf("allocatable changed by a failed mig.config (-before +after):\n%s", diff)
			}
		})
	}
	// No document took the agent down: the same pod, never restarted.
	after, err := cluster.AgentPod(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if after.UID != agent.UID || restarts(after) != restarts(agent) {
		t.Errorf("agent pod %s (%d restarts) is now %s (%d restarts)", agent.Name, restarts(agent), after.Name, restarts(after))
	}
}

func restarts(pod *corev1.Pod) int32 {
	var n int32
	for _, cs := range pod.Status.ContainerStatuses {
		n += cs.RestartCount
	}
	return n
}
