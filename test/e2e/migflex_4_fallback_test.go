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

// TestWebhookFallback: with only 1g.10gb devices on node 1, the fallback
// webhook (installed from the manifests, reached by the real API server)
// rewrites a pod pinned there asking for the missing 2g.20gb down to
// 1g.10gb, and the pod runs on it; a pod that nothing on the node fits is
// denied with a message naming its resource; pods that opt out are left
// alone. The webhook judges a pod by the nodes it may land on: pinned to
// node 1, as on a cluster of node 1 alone (TestWebhookFallbackSeesEveryNode
// has the other nodes; there "only larger" would take a whole GPU of
// theirs).
func TestWebhookFallback(t *testing.T) {
	migflex(t)
	_, layout := applyLayout(t, "1g.10gb", "1g.10gb")
	ns := cluster.Namespace(t)

	// The webhook decides from its informer's copy of the Node: wait until
	// it has seen this layout.
	probe := gpuPod(ns, "probe", "nvidia.com/mig-2g.20gb", 1, "env")
	waitForAnswer(t, probe, "see only 1g.10gb on the node", func(p *corev1.Pod) bool {
		return p.Annotations[annotationFallback] == "2g.20gb->1g.10gb"
	})

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

// waitForAnswer waits until a dry run of pod (stored nowhere; the webhook
// has no side effects) comes back as answered says: the webhook decides
// from its informers' copy of the Nodes and ResourceSlices, which follows
// the API server closely but not instantly, however busy the machine.
func waitForAnswer(t *testing.T, pod *corev1.Pod, what string, answered func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	err := framework.WaitFor(t.Context(), "the webhook to "+what, timeout, func(ctx context.Context) (bool, error) {
		p, err := cluster.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err
		}
		last = p
		return answered(p), nil
	})
	if err != nil {
		if last != nil {
			t.Fatalf("%v; last dry run: annotations %v, resources %v", err, last.Annotations, last.Spec.Containers[0].Resources)
		}
		t.Fatal(err)
	}
	return last
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
	// With the DRA pool's DeviceClasses installed, the scheduler hands a
	// resource a node's allocatable lacks to DRA and says "cannot allocate
	// all claims" there instead (docs/DRA.md, "cannot allocate all claims
	// on a device-plugin node"); either way it found no 2g.20gb.
	if !strings.Contains(cond.Message, "Insufficient nvidia.com/mig-2g.20gb") && !strings.Contains(cond.Message, "cannot allocate all claims") {
		t.Errorf("PodScheduled message %q, want Insufficient nvidia.com/mig-2g.20gb or cannot allocate all claims", cond.Message)
	}
}

// TestWebhookFallbackSeesEveryNode: the webhook decides for a pod by every
// node it may land on, however each serves its GPUs: node 1 (H100) through
// the device plugin, all 1g.10gb; node 2 (A100) through DRA, a 4g.40gb on
// each GPU, which the webhook reads from its ResourceSlice; node 3 (B200)
// through the device plugin, a 2g.45gb and a 1g.23gb. So, cluster-wide:
//   - a pod asking for nvidia.com/mig-4g.40gb, which only node 2 has, is
//     left as asked and runs there, through DRA;
//   - one asking for nvidia.com/mig-2g.45gb, which only node 3 has, is
//     left as asked and runs there;
//   - one asking for nvidia.com/mig-3g.90gb, a B200 profile no node has,
//     is rewritten to the nearest smaller profile any node has: node 3's
//     2g.45gb (two slices; the 1g.23gb and 1g.10gb have one, the 4g.40gb
//     is larger), and runs there;
//   - the 4g.40gb pod pinned to node 1 gets node 1's answer, 1g.10gb, as
//     TestWebhookFallback's pods do.
func TestWebhookFallbackSeesEveryNode(t *testing.T) {
	migflex(t)
	dra, b200 := draNode(t), b200Node(t)
	applyLayout(t, "1g.10gb", "1g.10gb")
	dra.applyLayout(t, "4g.40gb")
	b200.applyLayout(t, "2g.45gb", "1g.23gb")
	ns := cluster.Namespace(t)

	for _, tc := range []struct {
		name, asked, fallback string
		pinned                bool
		runsOn                simNode
	}{
		{name: "only the DRA node has it", asked: "4g.40gb", runsOn: dra},
		{name: "only the B200 node has it", asked: "2g.45gb", runsOn: b200},
		{name: "no node has it", asked: "3g.90gb", fallback: "3g.90gb->2g.45gb", runsOn: b200},
		{name: "pinned to node 1", asked: "4g.40gb", fallback: "4g.40gb->1g.10gb", pinned: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "wants-" + strings.ReplaceAll(tc.asked, ".", "-")
			pod := anyNodeGPUPod(ns, name, "nvidia.com/mig-"+tc.asked, 1, "env")
			if tc.pinned {
				name += "-pinned"
				pod = gpuPod(ns, name, "nvidia.com/mig-"+tc.asked, 1, "env")
			}
			stored := waitForAnswer(t, pod, fmt.Sprintf("answer %q", tc.fallback), func(p *corev1.Pod) bool {
				return p.Annotations[annotationFallback] == tc.fallback
			})
			if tc.runsOn.Cluster == nil {
				checkResources(t, stored, map[corev1.ResourceName]string{"nvidia.com/mig-1g.10gb": "1"})
				return
			}
			cluster.CreatePod(t, pod)
			if _, err := cluster.WaitForPodSucceeded(t.Context(), ns, name); err != nil {
				t.Fatal(err)
			}
			node, err := podNode(t.Context(), ns, name)
			if err != nil {
				t.Fatal(err)
			}
			if node != tc.runsOn.NodeName {
				t.Errorf("pod %s ran on node %s, want %s", name, node, tc.runsOn.NodeName)
			}
		})
	}
}
