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
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/migflex/migflex/test/e2e/framework"
)

// The DRA driver's names, as users write them in claims and selectors.
const (
	draDriver     = "gpu.migflex.io"
	labelServing  = "migflex.io/serving"
	draClassesDir = "deployments/dra/deviceclasses.yaml"
)

// draAgentManifests are the agent's DRA permissions and the policy that
// limits them, as kustomize's components/dra installs them (the chart's
// agent.serving=dra renders the same objects; test/manifests checks it).
var draAgentManifests = []string{
	"deployments/kustomize/components/dra/dra-rbac.yaml",
	"deployments/kustomize/components/dra/agent-slice-scope-policy.yaml",
}

// TestDRA switches the node's agent to --serving=dra and back. The harness
// runs one node (one kubelet, one containerd), so a device-plugin node and
// a DRA node cannot run side by side: the test switches that node, as an
// operator would (the agent restarted with another --serving), and
// restores the device plugin afterwards so the other tests are unaffected.
// The DaemonSet is changed as the chart's agent.serving=dra renders it
// (the flag, the kubelet plugin and CDI directories), with the cluster's
// CDI directory; the DRA permissions and the policy limiting them to the
// node's own ResourceSlices are the chart's too.
func TestDRA(t *testing.T) {
	migflex(t)
	// For "planner reshape": installing the planner applies the agent's
	// DaemonSet of the overlay again, which would undo the switch.
	installPlanner(t)
	switchToDRA(t)

	t.Run("slice follows the layout", testDRASliceFollowsLayout)
	t.Run("extended resource pod", testDRAExtendedResourcePod)
	t.Run("claim by CEL", testDRAClaimByCEL)
	t.Run("claim keeps its GPU", testDRAClaimKeepsGPU)
	t.Run("agent restart", testDRAAgentRestart)
	t.Run("planner reshape", testDRAPlannerReshape)
}

// switchToDRA installs the DeviceClasses, the DRA permissions and their
// policy, restarts the agent with --serving=dra, and undoes it all at
// cleanup.
func switchToDRA(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cdiDir, err := framework.CDIDir()
	if err != nil {
		t.Fatal(err)
	}
	// The chart's DRA objects as kustomize's components/dra has them: the
	// DeviceClasses, the agent's DRA permissions and the policy limiting
	// them to the node's own ResourceSlices, under which the agent must
	// publish, republish and withdraw.
	manifests := []string{"-f", filepath.Join(root, draClassesDir)}
	for _, f := range draAgentManifests {
		manifests = append(manifests, "-f", filepath.Join(root, f))
	}
	if out, err := cluster.Kubectl(ctx, append([]string{"apply"}, manifests...)...); err != nil {
		t.Fatalf("the DRA manifests: %v\n%s", err, out)
	}
	waitForSlicePolicy(t)
	dss := cluster.Client.AppsV1().DaemonSets(framework.MigflexNamespace)
	ds, err := dss.Get(ctx, framework.AgentDaemonSet, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	original := ds.Spec.Template.DeepCopy()
	// The layout the device plugin served before the switch: restored
	// afterwards, it registers the same resources with the same counts,
	// so the capacity the kubelet keeps for them meanwhile is right again.
	before, err := cluster.Client.CoreV1().Nodes().Get(ctx, cluster.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]*string{annotationMigConfig: nil, annotationRunAI: nil}
	for k := range served {
		if v, ok := before.Annotations[k]; ok {
			served[k] = &v
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*timeout)
		defer cancel()
		restoreDevicePlugin(t, ctx, original, served)
		if out, err := cluster.Kubectl(ctx, append([]string{"delete", "--ignore-not-found"}, manifests...)...); err != nil {
			t.Errorf("deleting the DRA manifests: %v\n%s", err, out)
		}
	})

	dir := corev1.HostPathDirectoryOrCreate
	spec := &ds.Spec.Template.Spec
	c := &spec.Containers[0]
	c.Args = append(c.Args, "--serving=dra", "--cdi-dir="+cdiDir)
	for name, path := range map[string]string{"kubelet-plugins": "/var/lib/kubelet/plugins", "plugins-registry": "/var/lib/kubelet/plugins_registry", "cdi": cdiDir} {
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &dir}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: path})
	}
	if _, err := dss.Update(ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitForDaemonSetRollout(ctx, framework.MigflexNamespace, framework.AgentDaemonSet); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.WaitForNode(ctx, "the serving label dra", timeout, func(n *corev1.Node) error {
		if v := n.Labels[labelServing]; v != "dra" {
			return fmt.Errorf("%s=%q", labelServing, v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// waitForSlicePolicy waits until the policy limiting the agent to its
// node's ResourceSlices is in force (it takes effect asynchronously), so
// that the agent publishes under it from its first write: with a token
// bound to the agent's pod, as the kubelet mounts it, a dry run of a slice
// for another node is refused.
func waitForSlicePolicy(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	agent, err := cluster.AgentPod(ctx)
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
	other := "not-" + cluster.NodeName
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

// restoreDevicePlugin puts the agent's pod template back and waits until
// the DRA driver's slices are gone (the device-plugin agent deletes them)
// and the device plugin serves the layout again (state success with its
// allocatable).
func restoreDevicePlugin(t *testing.T, ctx context.Context, original *corev1.PodTemplateSpec, served map[string]*string) {
	dss := cluster.Client.AppsV1().DaemonSets(framework.MigflexNamespace)
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		ds, err := dss.Get(ctx, framework.AgentDaemonSet, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ds.Spec.Template = *original
		_, err = dss.Update(ctx, ds, metav1.UpdateOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Errorf("restoring the agent's DaemonSet: %v", err)
		return
	}
	if err := cluster.WaitForDaemonSetRollout(ctx, framework.MigflexNamespace, framework.AgentDaemonSet); err != nil {
		t.Error(err)
	}
	// The kubelet keeps the capacity of a device-plugin resource whose
	// plugin went away until its grace period ends (five minutes): the
	// layout served before the switch makes the restarted device plugin
	// register those resources again with their counts, so the other tests
	// find allocatable and capacity equal. Without an annotation to
	// restore, whole GPUs at least register nvidia.com/gpu again.
	if served[annotationMigConfig] == nil && served[annotationRunAI] == nil {
		whole := "version: v1\nmig-configs:\n  selected:\n  - devices: all\n    mig-enabled: false\n"
		served = map[string]*string{annotationMigConfig: &whole, annotationRunAI: nil}
	}
	if err := cluster.SetNodeAnnotations(ctx, served); err != nil {
		t.Error(err)
	}
	// The agent serving through the device plugin deletes the slices the
	// DRA agent left (the kubelet would, some 30 s after the plugin went).
	if err := framework.WaitFor(ctx, "the device-plugin agent to withdraw the DRA slices", timeout, func(ctx context.Context) (bool, error) {
		list, err := cluster.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + draDriver + ",spec.nodeName=" + cluster.NodeName})
		return err == nil && len(list.Items) == 0, err
	}); err != nil {
		t.Error(err)
	}
	if _, err := cluster.WaitForNode(ctx, "the device plugin serving again", timeout, func(n *corev1.Node) error {
		if v := n.Labels[labelServing]; v != "device-plugin" {
			return fmt.Errorf("%s=%q", labelServing, v)
		}
		if s := n.Labels[labelState]; s != "success" {
			return fmt.Errorf("state %q, reason %q", s, n.Annotations[annotationReason])
		}
		l, err := nodeLayout(n)
		if err != nil {
			return err
		}
		return checkAllocatableAfterSwitch(n, counts(devices(l)))
	}); err != nil {
		t.Error(err)
	}
}

// checkAllocatableAfterSwitch is checkAllocatable on a node whose device
// plugin came back after DRA served it: a resource the plugin served
// before the switch and does not register now stays in capacity, with 0
// allocatable, until the kubelet's grace period for its gone plugin ends
// (five minutes; docs/INSTALL.md). Those entries alone may differ.
func checkAllocatableAfterSwitch(n *corev1.Node, want map[string]int64) error {
	fresh := n.DeepCopy()
	alloc := gpuResources(n.Status.Allocatable)
	for r, q := range n.Status.Capacity {
		if v, ok := alloc[string(r)]; ok && v == 0 && !q.IsZero() {
			fresh.Status.Capacity[r] = n.Status.Allocatable[r]
		}
	}
	return checkAllocatable(fresh, want)
}

// draDevices are the devices of the node's pool of our driver, by name,
// with their profile ("" for a whole GPU) and UUID.
type draDevice struct{ profile, uuid string }

func draSlices(ctx context.Context) (map[string]draDevice, error) {
	list, err := cluster.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]draDevice{}
	var gen int64 = -1
	for _, s := range list.Items {
		if s.Spec.Driver == draDriver && s.Spec.Pool.Name == cluster.NodeName {
			gen = max(gen, s.Spec.Pool.Generation)
		}
	}
	for _, s := range list.Items {
		if s.Spec.Driver != draDriver || s.Spec.Pool.Name != cluster.NodeName || s.Spec.Pool.Generation != gen {
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

// applyDRALayout annotates the node and waits until the agent reports
// success with that layout and the slice lists exactly its MIG devices.
func applyDRALayout(t *testing.T, l gpuLayouts) []layoutGPU {
	t.Helper()
	setMigConfig(t, annotationMigConfig, migConfigPerGPU(l))
	return waitForDRALayout(t, l)
}

func waitForDRALayout(t *testing.T, l gpuLayouts) []layoutGPU {
	t.Helper()
	w := l.sorted()
	var layout []layoutGPU
	if _, err := cluster.WaitForNode(t.Context(), fmt.Sprintf("state success with layout %v", w), timeout, func(n *corev1.Node) error {
		if s := n.Labels[labelState]; s != "success" {
			return fmt.Errorf("state %q, reason %q", s, n.Annotations[annotationReason])
		}
		got, err := nodeLayout(n)
		if err != nil {
			return err
		}
		if diff := cmp.Diff(w, profiles(got)); diff != "" {
			return fmt.Errorf("layout profiles (-want +got):\n%s", diff)
		}
		layout = got
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, g := range layout {
		for _, in := range g.Instances {
			want[in.UUID] = in.Profile
		}
	}
	err := framework.WaitFor(t.Context(), "the ResourceSlice to list the layout's devices", timeout, func(ctx context.Context) (bool, error) {
		devs, err := draSlices(ctx)
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
		devs, _ := draSlices(t.Context())
		t.Fatalf("%v: slice devices %v, want the MIG devices %v", err, devs, want)
	}
	return layout
}

// testDRASliceFollowsLayout: the slice lists every MIG device of the
// layout by profile and UUID, republished in place when the layout
// changes: a profile removed is gone from it.
func testDRASliceFollowsLayout(t *testing.T) {
	applyDRALayout(t, gpuLayouts{0: {"1g.10gb", "1g.10gb", "2g.20gb"}, 1: {"3g.40gb", "1g.10gb"}})
	layout := applyDRALayout(t, gpuLayouts{0: {"1g.10gb", "1g.10gb"}, 1: {"3g.40gb"}})
	devs, err := draSlices(t.Context())
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
}

// testDRAExtendedResourcePod: a pod asking for nvidia.com/mig-1g.10gb as
// on the device-plugin path is served through DRA (the DeviceClass's
// extendedResourceName): the scheduler records the claim in the pod's
// status and the container sees the MIG device's UUID.
func testDRAExtendedResourcePod(t *testing.T) {
	layout := applyDRALayout(t, gpuLayouts{0: {"1g.10gb", "1g.10gb"}, 1: {"3g.40gb"}})
	ns := cluster.Namespace(t)
	pod := gpuPod(ns, "ext-1g", "nvidia.com/mig-1g.10gb", 1, "env")
	// The webhook reads supply from allocatable, where a DRA node has
	// none: until it reads ResourceSlices, the pod opts out of it.
	pod.Labels = map[string]string{labelOptOut: "disabled"}
	env := runEnvPod(t, pod)
	ids := checkAllocateEnv(t, env, layout, "1g.10gb", 1)
	got, err := cluster.Client.CoreV1().Pods(ns).Get(t.Context(), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claim := extendedResourceClaim(t, got, "nvidia.com/mig-1g.10gb")
	// The claim goes with the finished pod; the device the container saw
	// is the slice's.
	devs, err := draSlices(t.Context())
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
func checkExtendedResourceClaim(t *testing.T, ns, pod, resource, profile string) draDevice {
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
	if r.Driver != draDriver || r.Pool != cluster.NodeName {
		t.Fatalf("claim %s got device %s of driver %s, pool %s; want driver %s, pool %s", claim.Name, r.Device, r.Driver, r.Pool, draDriver, cluster.NodeName)
	}
	devs, err := draSlices(ctx)
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

// claimPod runs args in a pod holding a claim made from spec.
func claimPod(t *testing.T, ns, name string, spec resourceapi.ResourceClaimSpec, args ...string) *corev1.Pod {
	t.Helper()
	claim, err := cluster.Client.ResourceV1().ResourceClaims(ns).Create(t.Context(), &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := cluster.TestboxPod(ns, name, args...)
	pod.Spec.NodeName = ""
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
func testDRAClaimByCEL(t *testing.T) {
	layout := applyDRALayout(t, gpuLayouts{0: {"1g.10gb", "1g.10gb"}, 1: {"3g.40gb"}})
	ns := cluster.Namespace(t)
	pod := claimPod(t, ns, "cel-3g", profileClaim("3g.40gb"), "env")
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
func testDRAClaimKeepsGPU(t *testing.T) {
	applyDRALayout(t, gpuLayouts{0: {"1g.10gb", "1g.10gb"}, 1: {"3g.40gb"}})
	ns := cluster.Namespace(t)
	pod := claimPod(t, ns, "holder", profileClaim("3g.40gb"), "sleep", "3600")
	if _, err := cluster.WaitForPodPhase(t.Context(), ns, pod.Name, corev1.PodRunning); err != nil {
		t.Fatal(err)
	}
	setMigConfig(t, annotationMigConfig, migConfigPerGPU(gpuLayouts{0: {"1g.10gb", "1g.10gb"}, 1: {"1g.10gb"}}))
	holder := ns + "/" + pod.Name
	if _, err := cluster.WaitForNode(t.Context(), "state pending naming the claim's pod", timeout, func(n *corev1.Node) error {
		if s, r := n.Labels[labelState], n.Annotations[annotationReason]; s != "pending" || !strings.Contains(r, holder) || !strings.Contains(r, "GPU 1") {
			return fmt.Errorf("state %q, reason %q", s, r)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Still pending a while later: the wait is not a moment's.
	time.Sleep(3 * time.Second)
	n, err := cluster.Node(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if l, err := nodeLayout(n); err != nil || fmt.Sprint(profiles(l)[1]) != "[3g.40gb]" {
		t.Fatalf("GPU 1 changed under the claim: %v (%v)", profiles(l), err)
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
	waitForDRALayout(t, gpuLayouts{0: {"1g.10gb", "1g.10gb"}, 1: {"1g.10gb"}})
	waitForNoCDISpec(t, string(claim.UID))
}

// waitForNoCDISpec waits until the claim's CDI spec is gone: unprepared.
func waitForNoCDISpec(t *testing.T, uid string) {
	t.Helper()
	dir, err := framework.CDIDir()
	if err != nil {
		t.Fatal(err)
	}
	spec := filepath.Join(dir, "migflex.io-gpu_"+uid+".json")
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
func testDRAAgentRestart(t *testing.T) {
	applyDRALayout(t, gpuLayouts{0: {"1g.10gb", "1g.10gb"}, 1: {"3g.40gb"}})
	ns := cluster.Namespace(t)
	pod := claimPod(t, ns, "survivor", profileClaim("1g.10gb"), "sleep", "3600")
	if _, err := cluster.WaitForPodPhase(t.Context(), ns, pod.Name, corev1.PodRunning); err != nil {
		t.Fatal(err)
	}
	claim, err := cluster.Client.ResourceV1().ResourceClaims(ns).Get(t.Context(), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before, err := draSlices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	agent, err := cluster.AgentPod(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.Client.CoreV1().Pods(framework.MigflexNamespace).Delete(t.Context(), agent.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitFor(t.Context(), "a new agent pod running", timeout, func(ctx context.Context) (bool, error) {
		p, err := cluster.AgentPod(ctx)
		return err == nil && p.UID != agent.UID && podReady(p), nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitFor(t.Context(), "the restarted agent to publish the same devices", timeout, func(ctx context.Context) (bool, error) {
		after, err := draSlices(ctx)
		return err == nil && fmt.Sprint(after) == fmt.Sprint(before), nil
	}); err != nil {
		after, _ := draSlices(t.Context())
		t.Fatalf("%v: before %v, after %v", err, before, after)
	}
	if p, err := cluster.Client.CoreV1().Pods(ns).Get(t.Context(), pod.Name, metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodRunning {
		t.Fatalf("the claim's pod after the agent restart: %v, %v", err, p.Status.Phase)
	}
	if err := cluster.Client.CoreV1().Pods(ns).Delete(t.Context(), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForNoCDISpec(t, string(claim.UID))
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
// watch event that shows the pod Running. On the device-plugin path the
// scheduler sees the new profile at the kubelet's next node status update;
// on the DRA path when the agent republishes the ResourceSlice. It is a
// measurement, not a check (no threshold), and takes minutes: it runs only
// with MIGFLEX_E2E_DRA_RUNS set (runs per path, e.g. 10).
func TestDRAReshapeToRunning(t *testing.T) {
	runs, _ := strconv.Atoi(os.Getenv("MIGFLEX_E2E_DRA_RUNS"))
	if runs <= 0 {
		t.Skip("MIGFLEX_E2E_DRA_RUNS is unset: a measurement, run on request")
	}
	migflex(t)
	ns := cluster.Namespace(t)
	from := gpuLayouts{0: all1g, 1: all1g}
	dp := reshapeToRunningRuns(t, ns, "device-plugin", runs, 10*time.Second, func() { applyLayouts(t, from) })
	switchToDRA(t)
	dra := reshapeToRunningRuns(t, ns, "dra", runs, 10*time.Second, func() { applyDRALayout(t, from) })
	t.Log("change + creation -> Running, " + runsSummary("device plugin", dp))
	t.Log("change + creation -> Running, " + runsSummary("DRA", dra))
}

// reshapeToRunningRuns times runs of a hand-made reshape: each run resets
// the layout (reset), waits a further fraction of period so that the runs
// sample the whole kubelet status period, then changes GPU 0 from seven
// 1g.10gb to two 3g.40gb and at once creates a pod asking for a 3g.40gb
// (opted out of the webhook); each result is from just before the change
// to the watch event that shows the pod Running.
func reshapeToRunningRuns(t *testing.T, ns, label string, runs int, period time.Duration, reset func()) []time.Duration {
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
		pod := gpuPod(ns, name, "nvidia.com/mig-3g.40gb", 1, "sleep", "3600")
		pod.Labels = map[string]string{labelOptOut: "disabled"}
		start := time.Now()
		setMigConfig(t, annotationMigConfig, migConfigPerGPU(to))
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
func testDRAPlannerReshape(t *testing.T) {
	ns := planner(t)
	took := plannerReshapeRuns(t, ns, "dra", 1, 0, resetDRATo1g, func(t *testing.T, pod string) {
		checkExtendedResourceClaim(t, ns, pod, "nvidia.com/mig-3g.40gb", "3g.40gb")
	})
	t.Logf("creation -> Running through the planner's reshape on DRA: %s", took[0].Round(time.Millisecond))
}

// resetDRATo1g is resetTo1g on a DRA node: it waits for the slice too.
func resetDRATo1g(t *testing.T) {
	t.Helper()
	written := time.Now()
	applyDRALayout(t, gpuLayouts{0: all1g, 1: all1g})
	if d := time.Until(written.Add(2 * time.Second)); d > 0 {
		time.Sleep(d) // the planner's --manual-hold, as resetTo1g
	}
}

// plannerReshapeRuns creates, runs times, a pod asking for
// nvidia.com/mig-3g.40gb in ns (a namespace of planner(t)), each after
// reset and a wait spread over period (runs start at any phase of the
// kubelet's status period, as pods arrive), and returns each one's time
// from just before its creation to the watch event that shows it Running.
// Each run checks the planner's MigReshapePlanned Event, check (when not
// nil) on the running pod, and waits for the agent to report the pod on
// its device before the pod is deleted.
func plannerReshapeRuns(t *testing.T, ns, path string, runs int, period time.Duration, reset func(*testing.T), check func(t *testing.T, pod string)) []time.Duration {
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
		cluster.CreatePod(t, gpuPod(ns, name, "nvidia.com/mig-3g.40gb", 1, "sleep", "3600"))
		running, err := waitRunning(t.Context(), w)
		w.Stop()
		if err != nil {
			p, _ := cluster.Client.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
			n, _ := cluster.Node(t.Context())
			t.Fatalf("%s run %d: %v; pod %+v; node %s", path, i, err, p.Status, summary(n))
		}
		took = append(took, running.Sub(start))
		msg := podEvent(t, ns, name, reasonPlanned, "will run on node "+cluster.NodeName+": GPU ", "-> ")
		t.Logf("%s run %d: %s; %s", path, i, running.Sub(start).Round(time.Millisecond), msg)
		if check != nil {
			check(t, name)
		}
		if _, err := cluster.WaitForNode(t.Context(), "the agent reporting "+name+" on its device", timeout, func(n *corev1.Node) error {
			if !strings.Contains(n.Annotations[annotationLayout], ns+"/"+name) {
				return fmt.Errorf("layout %s", n.Annotations[annotationLayout])
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
// measures, on both paths in the same run: every GPU seven free 1g.10gb, the
// node opted in to the planner, a pod asking for nvidia.com/mig-3g.40gb
// timed from just before its creation to the watch event that shows it
// Running, through the planner's reshape (its MigReshapePlanned Event is
// checked each run, and on DRA the device its claim got). First on the
// device-plugin path, then with the node switched to DRA, where the planner
// reads the node's supply from its ResourceSlices and the scheduler sees
// the new devices when the agent republishes them. TestDRA's "planner
// reshape" proves it once in every suite; this is a measurement, not a
// check (no threshold): it runs only with MIGFLEX_E2E_DRA_RUNS set (runs
// per path, e.g. 10).
func TestDRAPlannerReshapeToRunning(t *testing.T) {
	runs, _ := strconv.Atoi(os.Getenv("MIGFLEX_E2E_DRA_RUNS"))
	if runs <= 0 {
		t.Skip("MIGFLEX_E2E_DRA_RUNS is unset: a measurement, run on request")
	}
	ns := planner(t)
	period := 10 * time.Second
	if d, err := time.ParseDuration(os.Getenv("KUBELET_NODE_STATUS_UPDATE_FREQUENCY")); err == nil && d > 0 {
		period = d
	}
	dp := plannerReshapeRuns(t, ns, "device-plugin", runs, period, resetTo1g, nil)
	switchToDRA(t)
	dra := plannerReshapeRuns(t, ns, "dra", runs, period, resetDRATo1g, func(t *testing.T, pod string) {
		checkExtendedResourceClaim(t, ns, pod, "nvidia.com/mig-3g.40gb", "3g.40gb")
	})
	t.Logf("creation -> Running through the planner's reshape (kubelet status period %s, planner %q)", period, plannerArgs)
	t.Log(runsSummary("device plugin", dp))
	t.Log(runsSummary("DRA", dra))
}
