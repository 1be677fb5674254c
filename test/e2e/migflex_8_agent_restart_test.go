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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/test/e2e/framework"
)

// TestAgentRestartChangesNothing: the agent restarts (kubectl rollout
// restart, as an upgrade does) while the Node's mig.config stays the same.
// The new agent finds the layout in place and changes nothing: the layout
// annotation (instances and MIG UUIDs) is the same, the state is still
// success, no MigConfig* Event is added, and the Node's allocatable is the
// same once the kubelet has the new agent's registrations.
func TestAgentRestartChangesNothing(t *testing.T) {
	migflex(t)
	ctx := t.Context()

	// Apply a layout the node does not have yet, so that the agent changes
	// GPUs and records MigConfigApplied, and wait for that Event: then every
	// Event of that apply is in before the snapshot below.
	want := everyGPU("3g.40gb", "2g.20gb", "1g.10gb")
	if node, err := cluster.Node(ctx); err == nil {
		if l, err := framework.NodeLayout(node); err == nil && cmp.Equal(want.sorted(), framework.LayoutProfiles(l)) {
			want = everyGPU("4g.40gb", "3g.40gb")
		}
	}
	applied := time.Now()
	node, layout := applyLayouts(t, want)
	if _, err := cluster.WaitForNodeEvent(ctx, corev1.EventTypeNormal, "MigConfigApplied", applied); err != nil {
		t.Fatal(err)
	}
	events := migConfigEvents(t)
	allocatable := gpuResources(node.Status.Allocatable)
	old, err := cluster.AgentPod(ctx)
	if err != nil {
		t.Fatal(err)
	}

	if out, err := cluster.Kubectl(ctx, "rollout", "restart", "daemonset/"+framework.AgentDaemonSet, "-n", framework.MigflexNamespace); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if err := cluster.WaitForDaemonSetRollout(ctx, framework.MigflexNamespace, framework.AgentDaemonSet); err != nil {
		t.Fatal(err)
	}
	// The new agent logs "Reconciled" once its first reconcile has reported
	// on the Node and recorded its Events, if any.
	var reconciled string
	err = framework.WaitFor(ctx, "the new agent's first reconcile", timeout, func(ctx context.Context) (bool, error) {
		pod, err := cluster.AgentPod(ctx)
		if err != nil {
			return false, err
		}
		if pod.UID == old.UID {
			return false, fmt.Errorf("pod %s is the agent from before the restart", pod.Name)
		}
		logs, err := cluster.PodLogs(ctx, pod.Namespace, pod.Name, framework.AgentContainer)
		if err != nil {
			return false, err
		}
		for _, line := range strings.Split(logs, "\n") {
			if strings.Contains(line, `"Reconciled"`) {
				reconciled = line
				return true, nil
			}
		}
		return false, fmt.Errorf("pod %s has not reconciled yet", pod.Name)
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(reconciled, `result="success"`) {
		t.Errorf("the new agent's first reconcile: %s, want result=\"success\"", reconciled)
	}

	// The kubelet updates the Node's allocatable from the new agent's
	// registrations in its own time: wait for it, and say how it differs if
	// it never matches.
	after, err := cluster.WaitForNode(ctx, "the same GPU allocatable after the restart", timeout, func(n *corev1.Node) error {
		if diff := cmp.Diff(allocatable, gpuResources(n.Status.Allocatable)); diff != "" {
			return fmt.Errorf("GPU allocatable (-before +after):\n%s", diff)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := framework.NodeLayout(after)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(layout, got); diff != "" {
		t.Errorf("layout annotation after the agent restart (-before +after):\n%s", diff)
	}
	if s := after.Labels[labelState]; s != "success" {
		t.Errorf("state %q after the agent restart, want success (%s)", s, summary(after))
	}
	if diff := cmp.Diff(events, migConfigEvents(t)); diff != "" {
		t.Errorf("MigConfig* Events on the node, by name, with their counts (-before +after):\n%s", diff)
	}
}

// migConfigEvents is every MigConfig* Event about the node (Applied,
// Invalid, Failed, Pending), by name, with its count.
func migConfigEvents(t *testing.T) map[string]int32 {
	t.Helper()
	list, err := cluster.Client.CoreV1().Events(metav1.NamespaceDefault).List(t.Context(), metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + cluster.NodeName,
	})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int32{}
	for _, e := range list.Items {
		if strings.HasPrefix(e.Reason, "MigConfig") {
			out[e.Name] = e.Count
		}
	}
	return out
}
