//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/migflex/migflex/test/e2e/framework"
)

// The DRA driver's names, as users write them in claims and selectors.
const (
	draDriver    = "gpu.migflex.io"
	labelServing = "migflex.io/serving"
)

// TestDRA: node 2 (mf-dra) serves its GPUs through DRA beside node 1,
// which serves through the device plugin, as the local overlay installs
// them: two agent DaemonSets, as the chart's agent.draNodeSelector renders
// them (migflex-agent-dra on the nodes labelled migflex.io/serve=dra, with
// --serving=dra, the kubelet plugin and CDI directories, the DRA
// permissions and the policy limiting them to the node's own
// ResourceSlices; migflex-agent, which leaves those nodes out, on the
// others). Every pod of these tests is pinned to node 2.
func TestDRA(t *testing.T) {
	migflex(t)
	n := draNode(t)

	t.Run("two pools", func(t *testing.T) { testDRATwoPools(t, n) })
	t.Run("slice-scope policy", func(t *testing.T) { waitForSlicePolicy(t, n) })
	t.Run("slice follows the layout", func(t *testing.T) { testDRASliceFollowsLayout(t, n) })
	t.Run("extended resource pod", func(t *testing.T) { testDRAExtendedResourcePod(t, n) })
	t.Run("claim by CEL", func(t *testing.T) { testDRAClaimByCEL(t, n) })
	t.Run("claim keeps its GPU", func(t *testing.T) { testDRAClaimKeepsGPU(t, n) })
	t.Run("agent restart", func(t *testing.T) { testDRAAgentRestart(t, n) })
	t.Run("planner reshape", func(t *testing.T) { testDRAPlannerReshape(t, n) })
}

// testDRATwoPools: each node is served one way, by its pool's DaemonSet:
// node 2 through DRA (its ResourceSlice lists its GPUs, its allocatable
// offers no GPU resource), node 1 through the device plugin (allocatable,
// no slice of ours).
func testDRATwoPools(t *testing.T, n simNode) {
	ctx := t.Context()
	for _, tc := range []struct {
		node      simNode
		serving   string
		daemonSet string
	}{
		{dpNode(), "device-plugin", framework.AgentDaemonSet},
		{n, "dra", framework.AgentDRADaemonSet},
	} {
		node := tc.node.waitServing(t, tc.serving)
		agent, err := tc.node.AgentPod(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if owner := metav1.GetControllerOf(agent); owner == nil || owner.Name != tc.daemonSet {
			t.Errorf("the agent on %s is pod %s of %v, want DaemonSet %s", tc.node.NodeName, agent.Name, owner, tc.daemonSet)
		}
		devs, err := tc.node.draSlices(ctx)
		if err != nil {
			t.Fatal(err)
		}
		alloc := nonZero(gpuResources(node.Status.Allocatable))
		if tc.serving == "dra" && (len(devs) == 0 || len(alloc) != 0) {
			t.Errorf("DRA node %s: slice devices %v, GPU allocatable %v; want devices in its slice, no allocatable", tc.node.NodeName, devs, alloc)
		}
		if tc.serving == "device-plugin" && (len(devs) != 0 || len(alloc) == 0) {
			t.Errorf("device-plugin node %s: slice devices %v, GPU allocatable %v; want no slice, allocatable", tc.node.NodeName, devs, alloc)
		}
	}
}

// waitForSlicePolicy checks that the policy limiting the agent to its
// node's ResourceSlices is in force for the DRA node's agent (it takes
// effect asynchronously): with a token bound to the agent's pod, as the
// kubelet mounts it, a dry run of a slice for another node is refused.
func waitForSlicePolicy(t *testing.T, n simNode) {
	t.Helper()
	ctx := t.Context()
	agent, err := n.AgentPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cluster.Client.CoreV1().ServiceAccounts(framework.MigflexNamespace).CreateToken(ctx, agent.Spec.ServiceAccountName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: agent.Name, UID: agent.UID},
			ExpirationSeconds: ptr(int64(600)),
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(cluster.Config)
	cfg.BearerToken = tr.Status.Token
	asAgent, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Node 1's name: a node the cluster has, whose slices the agent of node
	// 2 must not write.
	other := cluster.NodeName
	slice := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "policy-probe-"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: draDriver, NodeName: &other,
			Pool: resourceapi.ResourcePool{Name: other, ResourceSliceCount: 1},
		},
	}
	var last error
	if err := framework.WaitFor(ctx, "the slice-scope policy to refuse the agent a slice of another node", timeout, func(ctx context.Context) (bool, error) {
		_, last = asAgent.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return last != nil && strings.Contains(last.Error(), "may change only ResourceSlices of its own node"), nil
	}); err != nil {
		t.Fatalf("%v: last answer %v", err, last)
	}
}

// draDevices are the devices of the node's pool of our driver, by name,
// with their profile ("" for a whole GPU) and UUID.
type draDevice struct{ profile, uuid string }

func (n simNode) draSlices(ctx context.Context) (map[string]draDevice, error) {
	list, err := cluster.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]draDevice{}
	var gen int64 = -1
	for _, s := range list.Items {
		if s.Spec.Driver == draDriver && s.Spec.Pool.Name == n.NodeName {
			gen = max(gen, s.Spec.Pool.Generation)
		}
	}
	for _, s := range list.Items {
		if s.Spec.Driver != draDriver || s.Spec.Pool.Name != n.NodeName || s.Spec.Pool.Generation != gen {
			continue
		}
		for _, d := range s.Spec.Devices {
			var dev draDevice
			if a, ok := d.Attributes["profile"]; ok && a.StringValue != nil {
				dev.profile = *a.StringValue
			}
			if a, ok := d.Attributes["uuid"]; ok && a.StringValue != nil {
				dev.uuid = *a.StringValue
			}
			out[d.Name] = dev
		}
	}
	return out, nil
}

// applyDRALayout annotates the DRA node and waits until the agent reports
// success with that layout and the slice lists exactly its MIG devices.
func (n simNode) applyDRALayout(t *testing.T, l gpuLayouts) []framework.LayoutGPU {
	t.Helper()
	_, layout := n.applyLayouts(t, l)
	return layout
}

func (n simNode) waitForDRALayout(t *testing.T, l gpuLayouts) []framework.LayoutGPU {
	t.Helper()
	return n.waitForDRALayoutIn(t, l, stateSuccess)
}

// waitForDRALayoutIn is waitForDRALayout with the state the node must
// show (waitForLayoutsIn).
func (n simNode) waitForDRALayoutIn(t *testing.T, l gpuLayouts, state string) []framework.LayoutGPU {
	t.Helper()
	w := l.sorted()
	var layout []framework.LayoutGPU
	if _, err := n.WaitForNode(t.Context(), fmt.Sprintf("%s with layout %v", stateName(state), w), timeout, func(n *corev1.Node) error {
		if err := checkState(n, state); err != nil {
			return err
		}
		got, err := framework.NodeLayout(n)
		if err != nil {
			return err
		}
		if diff := cmp.Diff(w, framework.LayoutProfiles(got)); diff != "" {
			return fmt.Errorf("layout profiles (-want +got):\n%s", diff)
		}
		layout = got
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, g := range layout {
		if g.MigMode == "Disabled" {
			want[g.UUID] = ""
		}
		for _, in := range g.Instances {
			want[in.UUID] = in.Profile
		}
	}
	err := framework.WaitFor(t.Context(), "the ResourceSlice to list the layout's devices", timeout, func(ctx context.Context) (bool, error) {
		devs, err := n.draSlices(ctx)
		if err != nil {
			return false, err
		}
		got := map[string]string{}
		for _, d := range devs {
			got[d.uuid] = d.profile
		}
		return fmt.Sprint(got) == fmt.Sprint(want), nil
	})
	if err != nil {
		devs, _ := n.draSlices(t.Context())
		t.Fatalf("%v: slice devices %v, want the devices %v", err, devs, want)
	}
	return layout
}

// testDRASliceFollowsLayout: the slice lists every MIG device of the
// layout by profile and UUID, republished in place when the layout
// changes: a profile removed is gone from it.
func testDRASliceFollowsLayout(t *testing.T, n simNode) {
	n.applyDRALayout(t, gpuLayouts{0: {"1g.10gb", "1g.10gb", "2g.20gb"}, 1: {"3g.40gb", "1g.10gb"}})
	layout := n.applyDRALayout(t, gpuLayouts{0: {"1g.10gb", "1g.10gb"}, 1: {"3g.40gb"}})
	devs, err := n.draSlices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for name, d := range devs {
		if d.profile == "2g.20gb" {
			t.Errorf("device %s of the removed profile 2g.20gb is still in the slice", name)
		}
		if !strings.HasPrefix(name, "gpu-") {
			t.Errorf("device name %q is not gpu-<minor>-...", name)
		}
	}
	if len(devs) != 3 || len(uuidsOf(layout, "1g.10gb")) != 2 {
		t.Errorf("slice devices %v, want the 3 MIG devices of the layout", devs)
	}
	for _, g := range layout {
		if g.Model != n.model {
			t.Errorf("GPU %d of node %s is a %s, want the local overlay's %s", g.Index, n.NodeName, g.Model, n.model)
		}
	}
}

// testDRAExtendedResourcePod: a pod asking for nvidia.com/mig-1g.10gb as
// on the device-plugin path is served through DRA (the DeviceClass's
// extendedResourceName): the scheduler records the claim in the pod's
// status and the container sees the MIG device's UUID. The webhook, which
// reads the DRA node's supply from its slices, leaves the pod as asked.
func testDRAExtendedResourcePod(t *testing.T, n simNode) {
	layout := n.applyDRALayout(t, gpuLayouts{0: {"1g.10gb", "1g.10gb"}, 1: {"3g.40gb"}})
	ns := cluster.Namespace(t)
	pod := n.gpuPod(ns, "ext-1g", "nvidia.com/mig-1g.10gb", 1, "env")
	waitForAnswer(t, pod, "leave the pod as asked", func(p *corev1.Pod) bool { return p.Annotations[annotationFallback] == "" })
	cluster.CreatePod(t, pod)
	if _, err := cluster.WaitForPodSucceeded(t.Context(), ns, pod.Name); err != nil {
		t.Fatal(err)
	}
	got, err := cluster.Client.CoreV1().Pods(ns).Get(t.Context(), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a := got.Annotations[annotationFallback]; a != "" {
		t.Errorf("the webhook rewrote the pod (%s=%q): it does not see node %s's slice", annotationFallback, a, n.NodeName)
	}
	logs, err := cluster.PodLogs(t.Context(), ns, pod.Name, "")
	if err != nil {
		t.Fatal(err)
	}
	ids := checkAllocateEnv(t, envOf(logs), layout, "1g.10gb", 1)
	claim := extendedResourceClaim(t, got, "nvidia.com/mig-1g.10gb")
	// The claim goes with the finished pod; the device the container saw
	// is the slice's.
	devs, err := n.draSlices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for name, d := range devs {
		if len(ids) == 1 && d.uuid == ids[0] {
			found = d.profile == "1g.10gb"
			t.Logf("claim %s: device %s (%s)", claim, name, d.uuid)
		}
	}
	if !found {
		t.Errorf("the container's device %v is no 1g.10gb device of the ResourceSlice %v", ids, devs)
	}
}

// extendedResourceClaim returns the claim through which the scheduler
// served the pod's extended resource by DRA: its extendedResourceClaimStatus
// maps the container's request for resource to it.
func extendedResourceClaim(t *testing.T, pod *corev1.Pod, resource string) string {
	t.Helper()
	st := pod.Status.ExtendedResourceClaimStatus
	if st == nil || st.ResourceClaimName == "" {
		t.Fatalf("pod status has no extendedResourceClaimStatus: %+v", pod.Status)
	}
	if len(st.RequestMappings) != 1 || st.RequestMappings[0].ResourceName != resource || st.RequestMappings[0].ContainerName != pod.Spec.Containers[0].Name {
		t.Errorf("extendedResourceClaimStatus request mappings %+v, want the container's %s", st.RequestMappings, resource)
	}
	return st.ResourceClaimName
}

// checkExtendedResourceClaim checks, on a running pod (a finished pod's
// claim is deleted), that its extended resource was served by a claim
// allocated one device of our driver in the node's pool, a device of
// profile in the node's ResourceSlice. It returns that device.
func (n simNode) checkExtendedResourceClaim(t *testing.T, ns, pod, resource, profile string) draDevice {
	t.Helper()
	ctx := t.Context()
	got, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claim, err := cluster.Client.ResourceV1().ResourceClaims(ns).Get(ctx, extendedResourceClaim(t, got, resource), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the pod's extended-resource claim: %v", err)
	}
	if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 {
		t.Fatalf("claim %s allocation %+v, want one device", claim.Name, claim.Status.Allocation)
	}
	r := claim.Status.Allocation.Devices.Results[0]
	if r.Driver != draDriver || r.Pool != n.NodeName {
		t.Fatalf("claim %s got device %s of driver %s, pool %s; want driver %s, pool %s", claim.Name, r.Device, r.Driver, r.Pool, draDriver, n.NodeName)
	}
	devs, err := n.draSlices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dev, ok := devs[r.Device]
	if !ok || dev.profile != profile {
		t.Fatalf("claim %s got device %s (%+v), want a %s device of the ResourceSlice %v", claim.Name, r.Device, dev, profile, devs)
	}
	t.Logf("claim %s: device %s (%s, %s)", claim.Name, r.Device, profile, dev.uuid)
	return dev
}

// claimPod runs args on the node in a pod holding a claim made from spec.
func (n simNode) claimPod(t *testing.T, ns, name string, spec resourceapi.ResourceClaimSpec, args ...string) *corev1.Pod {
	t.Helper()
	claim, err := cluster.Client.ResourceV1().ResourceClaims(ns).Create(t.Context(), &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := cluster.TestboxPod(ns, name, args...)
	pod.Spec.NodeName = ""
	framework.PinToNode(pod, n.NodeName)
	pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &claim.Name}}
	pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	return cluster.CreatePod(t, pod)
}

func profileClaim(profile string) resourceapi.ResourceClaimSpec {
	return resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
		Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: "migflex.io",
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf(`device.attributes["gpu.migflex.io"].type == "mig" && device.attributes["gpu.migflex.io"].profile == %q`, profile),
			}}},
		},
	}}}}
}

// testDRAClaimByCEL: a ResourceClaim on the general class selecting the
// profile by CEL gets a device of that profile.
func testDRAClaimByCEL(t *testing.T, n simNode) {
	layout := n.applyDRALayout(t, gpuLayouts{0: {"1g.10gb", "1g.10gb"}, 1: {"3g.40gb"}})
	ns := cluster.Namespace(t)
	pod := n.claimPod(t, ns, "cel-3g", profileClaim("3g.40gb"), "env")
	if _, err := cluster.WaitForPodSucceeded(t.Context(), ns, pod.Name); err != nil {
		t.Fatal(err)
	}
	logs, err := cluster.PodLogs(t.Context(), ns, pod.Name, "")
	if err != nil {
		t.Fatal(err)
	}
	checkAllocateEnv(t, envOf(logs), layout, "3g.40gb", 1)
}

// testDRAClaimKeepsGPU: a GPU whose MIG device a running pod's claim
// holds is not repartitioned: the layout waits, the reason names the pod;
// once the pod is gone the GPU changes and the claim is unprepared (its
// CDI spec removed).
func testDRAClaimKeepsGPU(t *testing.T, n simNode) {
	n.applyDRALayout(t, gpuLayouts{0: {"1g.10gb", "1g.10gb"}, 1: {"3g.40gb"}})
	ns := cluster.Namespace(t)
	pod := n.claimPod(t, ns, "holder", profileClaim("3g.40gb"), "sleep", "3600")
	if _, err := cluster.WaitForPodPhase(t.Context(), ns, pod.Name, corev1.PodRunning); err != nil {
		t.Fatal(err)
	}
	n.setMigConfig(t, annotationMigConfig, migConfigPerGPU(gpuLayouts{0: {"1g.10gb", "1g.10gb"}, 1: {"1g.10gb"}}))
	holder := ns + "/" + pod.Name
	if _, err := n.WaitForNode(t.Context(), "state pending naming the claim's pod", timeout, func(n *corev1.Node) error {
		if s, r := n.Labels[labelState], n.Annotations[annotationReason]; s != "pending" || !strings.Contains(r, holder) || !strings.Contains(r, "GPU 1") {
			return fmt.Errorf("state %q, reason %q", s, r)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Still pending a while later: the wait is not a moment's.
	time.Sleep(3 * time.Second)
	node, err := n.Node(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if l, err := framework.NodeLayout(node); err != nil || fmt.Sprint(framework.LayoutProfiles(l)[1]) != "[3g.40gb]" {
		t.Fatalf("GPU 1 changed under the claim: %v (%v)", framework.LayoutProfiles(l), err)
	}
	claim, err := cluster.Client.ResourceV1().ResourceClaims(ns).Get(t.Context(), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.Client.CoreV1().Pods(ns).Delete(t.Context(), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Client.ResourceV1().ResourceClaims(ns).Delete(t.Context(), claim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	n.waitForDRALayout(t, gpuLayouts{0: {"1g.10gb", "1g.10gb"}, 1: {"1g.10gb"}})
	n.waitForNoCDISpec(t, string(claim.UID))
}

// waitForNoCDISpec waits until the claim's CDI spec is gone from the
// node's CDI directory (its /var/run/cdi): unprepared.
func (n simNode) waitForNoCDISpec(t *testing.T, uid string) {
	t.Helper()
	spec := filepath.Join(n.Local().CDIDir, "migflex.io-gpu_"+uid+".json")
	if err := framework.WaitFor(t.Context(), "the claim's CDI spec "+spec+" removed (unprepared)", timeout, func(context.Context) (bool, error) {
		_, err := os.Stat(spec)
		return os.IsNotExist(err), nil
	}); err != nil {
		t.Error(err)
	}
}

// testDRAAgentRestart: the agent killed and restarted publishes the same
// devices, a pod whose claim it prepared keeps running, and deleting the
// pod afterwards unprepares the claim from the restarted agent's
// checkpoint.
func testDRAAgentRestart(t *testing.T, n simNode) {
	n.applyDRALayout(t, gpuLayouts{0: {"1g.10gb", "1g.10gb"}, 1: {"3g.40gb"}})
	ns := cluster.Namespace(t)
	pod := n.claimPod(t, ns, "survivor", profileClaim("1g.10gb"), "sleep", "3600")
	if _, err := cluster.WaitForPodPhase(t.Context(), ns, pod.Name, corev1.PodRunning); err != nil {
		t.Fatal(err)
	}
	claim, err := cluster.Client.ResourceV1().ResourceClaims(ns).Get(t.Context(), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The claim's CDI spec is where the node's containerd reads it.
	if _, err := os.Stat(filepath.Join(n.Local().CDIDir, "migflex.io-gpu_"+string(claim.UID)+".json")); err != nil {
		t.Errorf("the prepared claim's CDI spec: %v", err)
	}
	before, err := n.draSlices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	agent, err := n.AgentPod(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.Client.CoreV1().Pods(framework.MigflexNamespace).Delete(t.Context(), agent.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitFor(t.Context(), "a new agent pod running", timeout, func(ctx context.Context) (bool, error) {
		p, err := n.AgentPod(ctx)
		return err == nil && p.UID != agent.UID && podReady(p), nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitFor(t.Context(), "the restarted agent to publish the same devices", timeout, func(ctx context.Context) (bool, error) {
		after, err := n.draSlices(ctx)
		return err == nil && fmt.Sprint(after) == fmt.Sprint(before), nil
	}); err != nil {
		after, _ := n.draSlices(t.Context())
		t.Fatalf("%v: before %v, after %v", err, before, after)
	}
	if p, err := cluster.Client.CoreV1().Pods(ns).Get(t.Context(), pod.Name, metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodRunning {
		t.Fatalf("the claim's pod after the agent restart: %v, %v", err, p.Status.Phase)
	}
	if err := cluster.Client.CoreV1().Pods(ns).Delete(t.Context(), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	n.waitForNoCDISpec(t, string(claim.UID))
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// TestDRAReshapeToRunning measures, on both paths in the same run, a pod
// created at the moment its profile is made (the annotation changed by
// hand, as the planner would write it): from just before the change to the
// watch event that shows the pod Running. The device-plugin path is node
// 1's two H100s, the DRA path node 2's two A100s (the same profiles). On
// the device-plugin path the scheduler sees the new profile when the agent
// writes the allocatable the kubelet holds (or at the kubelet's next node
// status update); on the DRA path when the agent republishes the
// ResourceSlice. It is a measurement, not a check (no threshold), and
// takes minutes: it runs only with MIGFLEX_E2E_DRA_RUNS set (runs per
// path, e.g. 10).
func TestDRAReshapeToRunning(t *testing.T) {
	runs, _ := strconv.Atoi(os.Getenv("MIGFLEX_E2E_DRA_RUNS"))
	if runs <= 0 {
		t.Skip("MIGFLEX_E2E_DRA_RUNS is unset: a measurement, run on request")
	}
	migflex(t)
	dra := draNode(t)
	ns := cluster.Namespace(t)
	from := gpuLayouts{0: all1g, 1: all1g}
	dpTook := reshapeToRunningRuns(t, dpNode(), ns, "device-plugin", runs, 10*time.Second, func() { applyLayouts(t, from) })
	draTook := reshapeToRunningRuns(t, dra, ns, "dra", runs, 10*time.Second, func() { dra.applyDRALayout(t, from) })
	t.Log("change + creation -> Running, " + runsSummary("device plugin", dpTook))
	t.Log("change + creation -> Running, " + runsSummary("DRA", draTook))
}

// reshapeToRunningRuns times runs of a hand-made reshape on node n: each
// run resets the layout (reset), waits a further fraction of period so that
// the runs sample the whole kubelet status period, then changes GPU 0 from
// seven 1g.10gb to two 3g.40gb and at once creates a pod asking for a
// 3g.40gb (opted out of the webhook, pinned to n); each result is from
// just before the change to the watch event that shows the pod Running.
func reshapeToRunningRuns(t *testing.T, n simNode, ns, label string, runs int, period time.Duration, reset func()) []time.Duration {
	t.Helper()
	to := gpuLayouts{0: {"3g.40gb", "3g.40gb"}, 1: all1g}
	var took []time.Duration
	for i := range runs {
		reset()
		time.Sleep(period * time.Duration(i) / time.Duration(runs))
		name := fmt.Sprintf("%s-%d", label, i)
		w, err := cluster.Client.CoreV1().Pods(ns).Watch(t.Context(), metav1.ListOptions{FieldSelector: "metadata.name=" + name})
		if err != nil {
			t.Fatal(err)
		}
		pod := n.gpuPod(ns, name, "nvidia.com/mig-3g.40gb", 1, "sleep", "3600")
		pod.Labels = map[string]string{labelOptOut: "disabled"}
		start := time.Now()
		n.setMigConfig(t, annotationMigConfig, migConfigPerGPU(to))
		cluster.CreatePod(t, pod)
		running, err := waitRunning(t.Context(), w)
		w.Stop()
		if err != nil {
			p, _ := cluster.Client.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
			t.Fatalf("%s run %d: %v; pod %+v", label, i, err, p.Status)
		}
		took = append(took, running.Sub(start))
		t.Logf("%s run %d: %s", label, i, running.Sub(start).Round(time.Millisecond))
		deletePodAndWait(t, ns, name)
	}
	return took
}

// runsSummary is one line of a timing's percentiles.
func runsSummary(label string, d []time.Duration) string {
	return fmt.Sprintf("%s: %d runs, p50 %s, p90 %s, min %s, max %s", label, len(d),
		percentile(d, 0.5).Round(time.Millisecond), percentile(d, 0.9).Round(time.Millisecond),
		slices.Min(d).Round(time.Millisecond), slices.Max(d).Round(time.Millisecond))
}

// testDRAPlannerReshape: the planner reshapes a DRA node for a pending
// pod, once (TestDRAPlannerReshapeToRunning times it, on request): every
// GPU seven free 1g.10gb, the node opted in, a pod with an unchanged
// nvidia.com/mig-3g.40gb limit runs after the planner's MigReshapePlanned,
// served through DRA by a 3g.40gb device the claim in its
// extendedResourceClaimStatus names.
func testDRAPlannerReshape(t *testing.T, n simNode) {
	ns := planner(t, n)
	took := plannerReshapeRuns(t, n, ns, "dra", 1, 0, n.resetTo1g, func(t *testing.T, pod string) {
		n.checkExtendedResourceClaim(t, ns, pod, "nvidia.com/mig-3g.40gb", "3g.40gb")
	})
	t.Logf("creation -> Running through the planner's reshape on DRA: %s", took[0].Round(time.Millisecond))
}

// plannerReshapeRuns creates, runs times, a pod pinned to node n asking
// for nvidia.com/mig-3g.40gb in ns (a namespace of planner(t)), each after
// reset and a wait spread over period (runs start at any phase of the
// kubelet's status period, as pods arrive), and returns each one's time
// from just before its creation to the watch event that shows it Running.
// Each run checks the planner's MigReshapePlanned Event, check (when not
// nil) on the running pod, and waits for the agent to report the pod on
// its device before the pod is deleted.
func plannerReshapeRuns(t *testing.T, n simNode, ns, path string, runs int, period time.Duration, reset func(*testing.T), check func(t *testing.T, pod string)) []time.Duration {
	t.Helper()
	var took []time.Duration
	for i := range runs {
		reset(t)
		time.Sleep(period * time.Duration(i) / time.Duration(runs))
		name := fmt.Sprintf("%s-%d", path, i)
		w, err := cluster.Client.CoreV1().Pods(ns).Watch(t.Context(), metav1.ListOptions{FieldSelector: "metadata.name=" + name})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		cluster.CreatePod(t, n.gpuPod(ns, name, "nvidia.com/mig-3g.40gb", 1, "sleep", "3600"))
		running, err := waitRunning(t.Context(), w)
		w.Stop()
		if err != nil {
			p, _ := cluster.Client.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
			node, _ := n.Node(t.Context())
			t.Fatalf("%s run %d: %v; pod %+v; node %s", path, i, err, p.Status, summary(node))
		}
		took = append(took, running.Sub(start))
		msg := podEvent(t, ns, name, reasonPlanned, "will run on node "+n.NodeName+": GPU ", "-> ")
		t.Logf("%s run %d: %s; %s", path, i, running.Sub(start).Round(time.Millisecond), msg)
		if check != nil {
			check(t, name)
		}
		if _, err := n.WaitForNode(t.Context(), "the agent reporting "+name+" on its device", timeout, func(node *corev1.Node) error {
			if !strings.Contains(node.Annotations[annotationLayout], ns+"/"+name) {
				return fmt.Errorf("layout %s", node.Annotations[annotationLayout])
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		deletePodAndWait(t, ns, name)
	}
	return took
}

// TestDRAPlannerReshapeToRunning measures what TestPlannerReshapesForAPendingPod
// measures, on both paths in the same run: every GPU seven free 1g.10gb,
// the node opted in to the planner, a pod asking for
// nvidia.com/mig-3g.40gb timed from just before its creation to the watch
// event that shows it Running, through the planner's reshape (its
// MigReshapePlanned Event is checked each run, and on DRA the device its
// claim got). The device-plugin path is node 1, the DRA path node 2, where
// the planner reads the node's supply from its ResourceSlices and the
// scheduler sees the new devices when the agent republishes them.
// TestDRA's "planner reshape" proves it once in every suite; this is a
// measurement, not a check (no threshold): it runs only with
// MIGFLEX_E2E_DRA_RUNS set (runs per path, e.g. 10).
func TestDRAPlannerReshapeToRunning(t *testing.T) {
	runs, _ := strconv.Atoi(os.Getenv("MIGFLEX_E2E_DRA_RUNS"))
	if runs <= 0 {
		t.Skip("MIGFLEX_E2E_DRA_RUNS is unset: a measurement, run on request")
	}
	dra := draNode(t)
	ns := planner(t, dpNode(), dra)
	period := 10 * time.Second
	if d, err := time.ParseDuration(os.Getenv("KUBELET_NODE_STATUS_UPDATE_FREQUENCY")); err == nil && d > 0 {
		period = d
	}
	dpTook := plannerReshapeRuns(t, dpNode(), ns, "device-plugin", runs, period, dpNode().resetTo1g, nil)
	draTook := plannerReshapeRuns(t, dra, ns, "dra", runs, period, dra.resetTo1g, func(t *testing.T, pod string) {
		dra.checkExtendedResourceClaim(t, ns, pod, "nvidia.com/mig-3g.40gb", "3g.40gb")
	})
	t.Logf("creation -> Running through the planner's reshape (kubelet status period %s, planner %q)", period, plannerArgs)
	t.Log(runsSummary("device plugin", dpTook))
	t.Log(runsSummary("DRA", draTook))
}
