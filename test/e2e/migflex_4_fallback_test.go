//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/migflex/migflex/test/e2e/framework"
)

// TestWebhookFallback: with only 1g.10gb devices on the node, the fallback
// webhook (installed from the manifests, reached by the real API server)
// rewrites a pod asking for the missing 2g.20gb down to 1g.10gb, and the pod
// runs on it; a pod that nothing fits is denied with a message naming its
// resource; pods that opt out are left alone.
func TestWebhookFallback(t *testing.T) {
	migflex(t)
	_, layout := applyLayout(t, "1g.10gb", "1g.10gb")
	ns := cluster.Namespace(t)

	// The webhook decides from its informer's copy of the Node, which
	// follows the API server closely but not instantly: wait until a dry
	// run (stored nowhere; the webhook has no side effects) shows it has
	// seen this layout.
	probe := gpuPod(ns, "probe", "nvidia.com/mig-2g.20gb", 1, "env")
	var last string
	err := framework.WaitFor(t.Context(), "the webhook to see only 1g.10gb on the node", timeout, func(ctx context.Context) (bool, error) {
		p, err := cluster.Client.CoreV1().Pods(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err
		}
		last = fmt.Sprintf("annotations %v, resources %v", p.Annotations, p.Spec.Containers[0].Resources)
		return p.Annotations[annotationFallback] == "2g.20gb->1g.10gb", nil
	})
	if err != nil {
		t.Fatalf("%v; last dry run: %s", err, last)
	}

	t.Run("missing profile is rewritten down and the pod runs", func(t *testing.T) {
		pod := gpuPod(ns, "wants-2g", "nvidia.com/mig-2g.20gb", 1, "env")
		stored := cluster.CreatePod(t, pod)
		if got := stored.Annotations[annotationFallback]; got != "2g.20gb->1g.10gb" {
			t.Errorf("annotation %s=%q, want %q", annotationFallback, got, "2g.20gb->1g.10gb")
		}
		checkResources(t, stored, map[corev1.ResourceName]string{"nvidia.com/mig-1g.10gb": "1"})
		var orig any
		if err := json.Unmarshal([]byte(stored.Annotations[annotationOriginal]), &orig); err != nil ||
			!strings.Contains(stored.Annotations[annotationOriginal], "nvidia.com/mig-2g.20gb") {
			t.Errorf("annotation %s=%q: want JSON recording nvidia.com/mig-2g.20gb (%v)", annotationOriginal, stored.Annotations[annotationOriginal], err)
		}
		if _, err := cluster.WaitForPodSucceeded(t.Context(), ns, pod.Name); err != nil {
			t.Fatal(err)
		}
		logs, err := cluster.PodLogs(t.Context(), ns, pod.Name, "")
		if err != nil {
			t.Fatal(err)
		}
		checkAllocateEnv(t, envOf(logs), layout, "1g.10gb", 1)
	})

	t.Run("quantity is kept", func(t *testing.T) {
		pod := gpuPod(ns, "wants-two-2g", "nvidia.com/mig-2g.20gb", 2, "env")
		stored, err := cluster.Client.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			t.Fatal(err)
		}
		if got := stored.Annotations[annotationFallback]; got != "2g.20gb->1g.10gb" {
			t.Errorf("annotation %s=%q, want %q", annotationFallback, got, "2g.20gb->1g.10gb")
		}
		checkResources(t, stored, map[corev1.ResourceName]string{"nvidia.com/mig-1g.10gb": "2"})
	})

	// Nothing fits when the pod's own fallback policy rules out what
	// exists: the API server returns the webhook's denial.
	for _, tc := range []struct {
		name, resource, policy string
		message                []string
	}{
		{"no fallback allowed", "nvidia.com/mig-2g.20gb", "none", []string{"nvidia.com/mig-2g.20gb", "fallback disabled"}},
		{"only larger allowed", "nvidia.com/mig-4g.40gb", "up", []string{"nvidia.com/mig-4g.40gb", "nvidia.com/mig-1g.10gb"}},
	} {
		t.Run("denied: "+tc.name, func(t *testing.T) {
			pod := gpuPod(ns, "denied-"+tc.policy, tc.resource, 1, "env")
			pod.Annotations = map[string]string{annotationPolicy: tc.policy}
			_, err := cluster.Client.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{})
			if err == nil {
				t.Fatalf("pod asking for %s with %s=%s was admitted; want a denial", tc.resource, annotationPolicy, tc.policy)
			}
			msg := err.Error()
			for _, want := range append([]string{`admission webhook "gpu-fallback.migflex.io" denied the request`}, tc.message...) {
				if !strings.Contains(msg, want) {
					t.Errorf("denial %q lacks %q", msg, want)
				}
			}
			if _, err := cluster.Client.CoreV1().Pods(ns).Get(t.Context(), pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("denied pod: get = %v, want NotFound", err)
			}
		})
	}

	t.Run("opt-out label leaves the pod alone", func(t *testing.T) {
		pod := gpuPod(ns, "opted-out", "nvidia.com/mig-2g.20gb", 1, "env")
		pod.Labels = map[string]string{labelOptOut: "disabled"}
		checkUntouched(t, cluster.CreatePod(t, pod))
	})

	t.Run("opt-out namespace leaves the pod alone", func(t *testing.T) {
		optNS := cluster.Namespace(t)
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"disabled"}}}`, labelOptOut)
		if _, err := cluster.Client.CoreV1().Namespaces().Patch(t.Context(), optNS, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		checkUntouched(t, cluster.CreatePod(t, gpuPod(optNS, "opted-out", "nvidia.com/mig-2g.20gb", 1, "env")))
	})
}

// checkResources checks that every container's GPU requests and limits
// are exactly want (the API server requires them equal for extended
// resources).
func checkResources(t *testing.T, pod *corev1.Pod, want map[corev1.ResourceName]string) {
	t.Helper()
	for _, c := range pod.Spec.Containers {
		for what, l := range map[string]corev1.ResourceList{"requests": c.Resources.Requests, "limits": c.Resources.Limits} {
			got := map[corev1.ResourceName]string{}
			for name, q := range l {
				if strings.HasPrefix(string(name), "nvidia.com/") {
					got[name] = q.String()
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("container %s GPU %s (-want +got):\n%s", c.Name, what, diff)
			}
		}
	}
}

// checkUntouched checks that the webhook left a pod asking for the missing
// 2g.20gb as it was, so that it waits for a 2g.20gb the scheduler cannot
// find.
func checkUntouched(t *testing.T, stored *corev1.Pod) {
	t.Helper()
	for _, k := range []string{annotationFallback, annotationOriginal} {
		if v, ok := stored.Annotations[k]; ok {
			t.Errorf("opted-out pod has annotation %s=%q", k, v)
		}
	}
	checkResources(t, stored, map[corev1.ResourceName]string{"nvidia.com/mig-2g.20gb": "1"})
	var cond *corev1.PodCondition
	err := framework.WaitFor(t.Context(), "the scheduler to find no node for "+stored.Name, timeout, func(ctx context.Context) (bool, error) {
		p, err := cluster.Client.CoreV1().Pods(stored.Namespace).Get(ctx, stored.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for i := range p.Status.Conditions {
			if c := &p.Status.Conditions[i]; c.Type == corev1.PodScheduled {
				cond = c
				return c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%v; last PodScheduled condition %+v", err, cond)
	}
	if !strings.Contains(cond.Message, "Insufficient nvidia.com/mig-2g.20gb") {
		t.Errorf("PodScheduled message %q, want Insufficient nvidia.com/mig-2g.20gb", cond.Message)
	}
}
