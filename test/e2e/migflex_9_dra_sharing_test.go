//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/test/e2e/framework"
)

// TestDRASharedClaim: a pod pair shares one 1g.10gb on the DRA node
// (mf-dra) through one ResourceClaim both pods name, as the API offers it
// on every supported minor. Both pods run at once, and each container
// has the instance's UUID in its environment (the claim's one CDI spec:
// the pods' init containers print it); the claim is
// reserved for both and its status.devices names the MIG UUID; the
// kubelet's pod-resources API lists the claim's device for each pod,
// which the ResourceSlice and status.devices both map to the UUID, as an
// exporter reads them; the layout annotation and the agent's
// migflex_agent_instance_info name both pods. The GPU is not repartitioned
// while either pod runs: a layout without the instance waits, naming the
// pod left once the first is gone, the claim still prepared; it is
// applied, and the claim unprepared, once the second pod and the claim
// are gone.
func TestDRASharedClaim(t *testing.T) {
	migflex(t)
	n := draNode(t)
	ctx := t.Context()
	// One 1g.10gb on the whole node: the pods can only share it.
	layout := n.applyDRALayout(t, gpuLayouts{0: {"1g.10gb", "3g.40gb"}, 1: {"7g.80gb"}})
	uuids := uuidsOf(layout, "1g.10gb")
	if len(uuids) != 1 {
		t.Fatalf("layout has 1g.10gb devices %v, want one", uuids)
	}
	shared := uuids[0]

	ns := cluster.Namespace(t)
	claim, err := cluster.Client.ResourceV1().ResourceClaims(ns).Create(ctx, &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "pair"}, Spec: profileClaim("1g.10gb"),
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods := []string{"share-a", "share-b"}
	for _, name := range pods {
		n.sharedClaimPod(t, ns, name, claim.Name)
	}
	for _, name := range pods {
		if _, err := cluster.WaitForPodPhase(ctx, ns, name, corev1.PodRunning); err != nil {
			t.Fatal(err)
		}
		out, err := cluster.PodLogs(ctx, ns, name, "env")
		if err != nil {
			t.Fatal(err)
		}
		if got := envOf(out)["NVIDIA_VISIBLE_DEVICES"]; got != shared {
			t.Errorf("pod %s has NVIDIA_VISIBLE_DEVICES=%q, want the shared instance %s", name, got, shared)
		}
	}
	holders := []string{ns + "/share-a", ns + "/share-b"}

	// The claim: reserved for both, one device, its UUID in status.devices.
	var device string
	if err := framework.WaitFor(ctx, "the claim reserved for both pods, its status.devices naming "+shared, timeout, func(ctx context.Context) (bool, error) {
		c, err := cluster.Client.ResourceV1().ResourceClaims(ns).Get(ctx, claim.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		var reserved []string
		for _, r := range c.Status.ReservedFor {
			reserved = append(reserved, ns+"/"+r.Name)
		}
		slices.Sort(reserved)
		if !slices.Equal(reserved, holders) || c.Status.Allocation == nil || len(c.Status.Allocation.Devices.Results) != 1 {
			return false, nil
		}
		device = c.Status.Allocation.Devices.Results[0].Device
		return statusUUIDs(c)[device] == shared, nil
	}); err != nil {
		c, _ := cluster.Client.ResourceV1().ResourceClaims(ns).Get(ctx, claim.Name, metav1.GetOptions{})
		t.Fatalf("%v: claim status %+v", err, c.Status)
	}

	// An exporter reading the kubelet's pod-resources API finds the
	// claim's device for each pod; the slice and status.devices map it to
	// the instance.
	byPod, err := n.Local().KubeletPodClaimDevices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	devs, err := n.draSlices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, pod := range holders {
		want := []framework.ClaimDevice{{Claim: ns + "/" + claim.Name, Driver: draDriver, Pool: n.NodeName, Device: device}}
		if got := byPod[pod]; !slices.Equal(got, want) {
			t.Errorf("pod-resources says pod %s holds %+v, want %+v", pod, got, want)
			continue
		}
		if got := devs[device].uuid; got != shared {
			t.Errorf("pod %s's device %s is %q in the ResourceSlice, want %s", pod, device, got, shared)
		}
	}

	// The layout annotation and the agent's info series name both pods.
	if _, err := n.WaitForNode(ctx, "both pods as the instance's users", timeout, func(node *corev1.Node) error {
		in := instanceOf(node, shared)
		if !slices.Equal(in.UsedBy, holders) {
			return fmt.Errorf("usedBy %v", in.UsedBy)
		}
		if in.Shared != nil {
			return fmt.Errorf("shared %+v, want none: a shared claim is one device, not replicas", in.Shared)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitFor(ctx, "migflex_agent_instance_info naming both pods", timeout, func(ctx context.Context) (bool, error) {
		got, err := n.instanceInfoPods(ctx, shared)
		return err == nil && slices.Equal(got, holders), err
	}); err != nil {
		got, _ := n.instanceInfoPods(ctx, shared)
		t.Fatalf("%v: the series name %v", err, got)
	}

	// A layout without the instance waits for both pods.
	next := gpuLayouts{0: {"7g.80gb"}, 1: {"7g.80gb"}}
	n.setMigConfig(t, annotationMigConfig, migConfigPerGPU(next))
	n.waitPendingFor(t, shared, holders, ns+"/share-a")

	// The first pod ends: the kubelet keeps the claim prepared for the
	// second, and the GPU still waits, for it alone.
	if err := cluster.Client.CoreV1().Pods(ns).Delete(ctx, "share-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ns, "share-a", n.NodeName)
	n.waitPendingFor(t, shared, holders[1:], ns+"/share-b")
	spec := filepath.Join(n.Local().CDIDir, "migflex.io-gpu_"+string(claim.UID)+".json")
	if _, err := os.Stat(spec); err != nil {
		t.Errorf("the claim's CDI spec while share-b runs: %v (unprepared under it?)", err)
	}

	// The second pod and the claim go: the layout is applied and the
	// claim unprepared.
	if err := cluster.Client.CoreV1().Pods(ns).Delete(ctx, "share-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Client.ResourceV1().ResourceClaims(ns).Delete(ctx, claim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	n.waitForDRALayout(t, next)
	n.waitForNoCDISpec(t, string(claim.UID))
}

// sharedClaimPod runs a sleeping pod on the node that names the existing
// ResourceClaim claim, so that every such pod shares its devices; its
// init container "env", which has the claim too, prints its environment.
func (n simNode) sharedClaimPod(t *testing.T, ns, name, claim string) *corev1.Pod {
	t.Helper()
	pod := cluster.TestboxPod(ns, name, "sleep", "3600")
	pod.Spec.NodeName = ""
	framework.PinToNode(pod, n.NodeName)
	pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &claim}}
	pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	env := *pod.Spec.Containers[0].DeepCopy()
	env.Name, env.Args = "env", []string{"env"}
	pod.Spec.InitContainers = []corev1.Container{env}
	return cluster.CreatePod(t, pod)
}

// statusUUIDs maps each device of the claim's status.devices to the UUID
// in its data (the driver's DeviceStatusData).
func statusUUIDs(c *resourceapi.ResourceClaim) map[string]string {
	out := map[string]string{}
	for _, d := range c.Status.Devices {
		var data struct{ UUID string }
		if d.Driver == draDriver && d.Data != nil && json.Unmarshal(d.Data.Raw, &data) == nil {
			out[d.Device] = data.UUID
		}
	}
	return out
}

// waitPendingFor waits until the node is pending with its reason naming
// pod, the instance uuid used by exactly holders, and the layout still
// holding it: the GPU is not repartitioned under them.
func (n simNode) waitPendingFor(t *testing.T, uuid string, holders []string, pod string) {
	t.Helper()
	if _, err := n.WaitForNode(t.Context(), fmt.Sprintf("pending naming %s, %s used by %v", pod, uuid, holders), timeout, func(node *corev1.Node) error {
		if s, r := node.Labels[labelState], node.Annotations[annotationReason]; s != "pending" || !strings.Contains(r, pod) {
			return fmt.Errorf("state %q, reason %q", s, r)
		}
		in := instanceOf(node, uuid)
		if in.UUID != uuid {
			return fmt.Errorf("instance %s is gone from the layout", uuid)
		}
		if !slices.Equal(in.UsedBy, holders) {
			return fmt.Errorf("usedBy %v", in.UsedBy)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// instanceInfoPods are the pods ("namespace/name", sorted) that the node's
// agent's migflex_agent_instance_info names for the instance uuid, read
// from its /metrics in the node's network namespace, where the local
// overlay has it listen on the loopback.
func (n simNode) instanceInfoPods(ctx context.Context, uuid string) ([]string, error) {
	token, err := metricsReaderToken(ctx)
	if err != nil {
		return nil, err
	}
	var args []string
	if netns := n.Local().NetNS; netns != "" {
		args = append(args, "nsenter", "--net="+netns, "--")
	}
	args = append(args, "curl", "-sSk", "--max-time", "10", "-H", "Authorization: Bearer "+token, framework.AgentMetricsURL+"/metrics")
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).Output()
	if err != nil {
		return nil, fmt.Errorf("%s's agent /metrics: %w", n.NodeName, err)
	}
	var pods []string
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(line, "migflex_agent_instance_info{") || !strings.Contains(line, `uuid="`+uuid+`"`) {
			continue
		}
		l := promLabels(line)
		if l["node"] != n.NodeName || l["serving"] != "dra" {
			return nil, fmt.Errorf("series %s: want node %s, serving dra", line, n.NodeName)
		}
		if l["pod"] != "" {
			pods = append(pods, l["namespace"]+"/"+l["pod"])
		}
	}
	slices.Sort(pods)
	return pods, nil
}

// promLabels are the labels of one line of the Prometheus text format
// (values without quotes, escapes or commas, as migflex's are).
func promLabels(line string) map[string]string {
	out := map[string]string{}
	_, rest, _ := strings.Cut(line, "{")
	rest, _, _ = strings.Cut(rest, "}")
	for _, kv := range strings.Split(rest, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			out[k] = strings.Trim(v, `"`)
		}
	}
	return out
}
