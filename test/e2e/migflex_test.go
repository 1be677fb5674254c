//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/migflex/migflex/test/e2e/framework"
)

// The migflex tests (migflex_<n>_<flow>_test.go, run in that order after
// the harness tests) share one installation, from the local kustomize
// overlay as a user installs it, and the nodes' GPUs. Each test sets the
// layout it needs and waits for it, so any one of them also runs alone
// (go test -run). "The node" of a test is node 1 (dpNode: two
// H100-SXM5-80GB, the device plugin), and its pods are pinned there
// (gpuPod), so that the scheduler, the webhook and the planner decide as
// on a cluster of that node alone; tests about the other nodes say so
// (nodes_test.go).

// Keys on the Node, as users and the GPU operator's tools know them. They
// are written out here rather than imported: the suite checks the contract,
// not the product's constants.
const (
	annotationMigConfig = "nvidia.com/mig.config"
	annotationRunAI     = "run.ai/mig.config"
	labelState          = "nvidia.com/mig.config.state"
	annotationReason    = "migflex.io/mig.config.reason"
	annotationLayout    = "migflex.io/mig.layout"

	labelGPUProduct  = "nvidia.com/gpu.product"
	labelGPUCount    = "nvidia.com/gpu.count"
	labelMigCapable  = "nvidia.com/mig.capable"
	labelMigStrategy = "nvidia.com/mig.strategy"

	annotationFallback = "gpu-webhook.k8s.io/fallback"
	annotationOriginal = "migflex.io/original-resources"
	annotationPolicy   = "migflex.io/fallback-policy"
	labelOptOut        = "migflex.io/fallback"

	resourceGPU = "nvidia.com/gpu"
	// The local overlay simulates simGPUs GPUs of model simModel on node 1
	// (overlays/local/sim-config-local.yaml; nodes_test.go has the others).
	simModel = "H100-SXM5-80GB"
	simGPUs  = 2
)

// Timeout for waits on the agent and the kubelet: hang protection only.
const timeout = framework.Timeout

var install struct {
	once sync.Once
	err  error
}

// migflex installs migflex from deployments/kustomize/overlays/local the
// first time a test asks, and fails every test if that failed.
func migflex(t *testing.T) {
	t.Helper()
	install.once.Do(func() {
		root, err := framework.RepoRoot()
		if err != nil {
			install.err = err
			return
		}
		// Not t.Context(): the installation outlives the first test.
		ctx, cancel := context.WithTimeout(context.Background(), 2*timeout)
		defer cancel()
		install.err = cluster.InstallMigflex(ctx, filepath.Join(root, framework.LocalOverlay))
	})
	if install.err != nil {
		t.Fatalf("installing migflex from %s: %v", framework.LocalOverlay, install.err)
	}
}

// uuidsOf is the MIG device UUIDs of profile in the layout.
func uuidsOf(l []framework.LayoutGPU, profile string) []string {
	var out []string
	for _, g := range l {
		for _, in := range g.Instances {
			if in.Profile == profile && in.UUID != "" {
				out = append(out, in.UUID)
			}
		}
	}
	return out
}

// gpuResources is the node's nvidia.com/* entries of a resource list
// (allocatable or capacity) as numbers.
func gpuResources(l corev1.ResourceList) map[string]int64 {
	out := map[string]int64{}
	for name, q := range l {
		if strings.HasPrefix(string(name), "nvidia.com/") {
			out[string(name)] = q.Value()
		}
	}
	return out
}

// checkAllocatable says how the node's GPU allocatable and capacity differ
// from want: every resource in want with its count, every other nvidia.com
// resource the kubelet knows at 0 (a profile that went away reads 0, it
// does not linger), and capacity equal to allocatable (all healthy).
func checkAllocatable(node *corev1.Node, want map[string]int64) error {
	alloc, capacity := gpuResources(node.Status.Allocatable), gpuResources(node.Status.Capacity)
	expect := map[string]int64{}
	for r := range alloc {
		expect[r] = 0
	}
	maps.Copy(expect, want)
	if diff := cmp.Diff(expect, alloc); diff != "" {
		return fmt.Errorf("GPU allocatable (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(alloc, capacity); diff != "" {
		return fmt.Errorf("GPU capacity differs from allocatable (-allocatable +capacity):\n%s", diff)
	}
	return nil
}

// counts turns devices into allocatable counts.
func counts(devs map[string][]string) map[string]int64 {
	out := map[string]int64{}
	for r, ids := range devs {
		out[r] = int64(len(ids))
	}
	return out
}

// summary describes what the agent reported on the node, for failures.
func summary(node *corev1.Node) string {
	return fmt.Sprintf("state=%q reason=%q layout=%s allocatable=%v",
		node.Labels[labelState], node.Annotations[annotationReason], node.Annotations[annotationLayout], gpuResources(node.Status.Allocatable))
}

// gpuLayouts is a layout by GPU index: each GPU's MIG profiles.
type gpuLayouts map[int][]string

// everyGPU is the same profiles on each of node 1's GPUs.
func everyGPU(profiles ...string) gpuLayouts { return dpNode().everyGPU(profiles...) }

// everyGPU is the same profiles on each of the node's GPUs.
func (n simNode) everyGPU(profiles ...string) gpuLayouts {
	l := gpuLayouts{}
	for i := range n.gpus {
		l[i] = profiles
	}
	return l
}

// migConfig is a mig.config document giving every GPU the profiles in
// list form.
func migConfig(profiles ...string) string {
	return "version: v1\nmig-configs:\n  selected:\n  - devices: all\n    mig-enabled: true\n    mig-devices: [" + strings.Join(profiles, ", ") + "]\n"
}

// migConfigPerGPU is a mig.config document with one entry per GPU index
// in l, in list form; GPUs not in l are left as they are.
func migConfigPerGPU(l gpuLayouts) string {
	var b strings.Builder
	b.WriteString("version: v1\nmig-configs:\n  selected:\n")
	for _, i := range slices.Sorted(maps.Keys(l)) {
		fmt.Fprintf(&b, "  - devices: [%d]\n    mig-enabled: true\n    mig-devices: [%s]\n", i, strings.Join(l[i], ", "))
	}
	return b.String()
}

// setMigConfig puts doc in node 1's annotation key and removes the other
// layout annotation, whose precedence could otherwise hide it.
func setMigConfig(t *testing.T, key, doc string) {
	t.Helper()
	dpNode().setMigConfig(t, key, doc)
}

// setMigConfig is setMigConfig on the node.
func (n simNode) setMigConfig(t *testing.T, key, doc string) {
	t.Helper()
	ann := map[string]*string{annotationMigConfig: nil, annotationRunAI: nil}
	ann[key] = &doc
	if err := n.SetNodeAnnotations(t.Context(), ann); err != nil {
		t.Fatal(err)
	}
}

// sorted is l with each GPU's profiles sorted (and none as an empty list),
// as profiles reports them.
func (l gpuLayouts) sorted() map[int][]string {
	out := map[int][]string{}
	for i, ps := range l {
		out[i] = append([]string{}, ps...)
		slices.Sort(out[i])
	}
	return out
}

// waitForLayout waits until node 1's agent reports success with these
// profiles on every GPU, and the kubelet's allocatable on the Node matches
// the devices of the reported layout. It returns the node and its layout.
func waitForLayout(t *testing.T, want ...string) (*corev1.Node, []framework.LayoutGPU) {
	t.Helper()
	return dpNode().waitForLayouts(t, everyGPU(want...))
}

// waitForLayouts is waitForLayout with each GPU's profiles, for every GPU
// of node 1.
func waitForLayouts(t *testing.T, want gpuLayouts) (*corev1.Node, []framework.LayoutGPU) {
	t.Helper()
	return dpNode().waitForLayouts(t, want)
}

// waitForLayouts is waitForLayouts on the node; on a DRA node it waits for
// its ResourceSlice to list the layout's devices instead of allocatable
// (waitForDRALayout).
func (n simNode) waitForLayouts(t *testing.T, want gpuLayouts) (*corev1.Node, []framework.LayoutGPU) {
	t.Helper()
	return n.waitForLayoutsIn(t, want, stateSuccess)
}

// waitForLayoutsIn is waitForLayouts with the state the node must show:
// stateSuccess once a mig.config was applied, stateNone on a node that
// never had a mig.config source (the agent sets no state there, and
// success cannot say when the kubelet has published the layout: the
// allocatable or the slice does).
func (n simNode) waitForLayoutsIn(t *testing.T, want gpuLayouts, state string) (*corev1.Node, []framework.LayoutGPU) {
	t.Helper()
	if n.dra {
		layout := n.waitForDRALayoutIn(t, want, state)
		node, err := n.Node(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return node, layout
	}
	w := want.sorted()
	var layout []framework.LayoutGPU
	node, err := n.WaitForNode(t.Context(), fmt.Sprintf("%s with layout %v and its allocatable", stateName(state), w), timeout, func(n *corev1.Node) error {
		if err := checkState(n, state); err != nil {
			return err
		}
		l, err := framework.NodeLayout(n)
		if err != nil {
			return err
		}
		if diff := cmp.Diff(w, framework.LayoutProfiles(l)); diff != "" {
			return fmt.Errorf("layout profiles (-want +got):\n%s", diff)
		}
		if err := checkAllocatable(n, counts(framework.LayoutDevices(l))); err != nil {
			return err
		}
		layout = l
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return node, layout
}

// The states waitForLayoutsIn waits for: the label's value, or none.
const (
	stateSuccess = "success"
	stateNone    = ""
)

// stateName is state as a wait describes it.
func stateName(state string) string {
	if state == stateNone {
		return "no state"
	}
	return "state " + state
}

// checkState says how the node's state label differs from state; with
// stateNone the label must be absent.
func checkState(n *corev1.Node, state string) error {
	s, ok := n.Labels[labelState]
	if state == stateNone && ok {
		return fmt.Errorf("state %q, want none (the node never had a mig.config source), reason %q", s, n.Annotations[annotationReason])
	}
	if s != state {
		return fmt.Errorf("state %q, reason %q", s, n.Annotations[annotationReason])
	}
	return nil
}

// applyLayout annotates node 1 with a list-form mig.config giving every
// GPU profiles and waits until it is in place.
func applyLayout(t *testing.T, profiles ...string) (*corev1.Node, []framework.LayoutGPU) {
	t.Helper()
	return dpNode().applyLayout(t, profiles...)
}

// applyLayout is applyLayout on the node.
func (n simNode) applyLayout(t *testing.T, profiles ...string) (*corev1.Node, []framework.LayoutGPU) {
	t.Helper()
	n.setMigConfig(t, annotationMigConfig, migConfig(profiles...))
	return n.waitForLayouts(t, n.everyGPU(profiles...))
}

// applyLayouts annotates node 1 with a mig.config giving each GPU its
// profiles and waits until it is in place.
func applyLayouts(t *testing.T, l gpuLayouts) (*corev1.Node, []framework.LayoutGPU) {
	t.Helper()
	return dpNode().applyLayouts(t, l)
}

// applyLayouts is applyLayouts on the node.
func (n simNode) applyLayouts(t *testing.T, l gpuLayouts) (*corev1.Node, []framework.LayoutGPU) {
	t.Helper()
	n.setMigConfig(t, annotationMigConfig, migConfigPerGPU(l))
	return n.waitForLayouts(t, l)
}

// gpuOf is the layout's GPU with index i.
func gpuOf(t *testing.T, l []framework.LayoutGPU, i int) framework.LayoutGPU {
	t.Helper()
	for _, g := range l {
		if g.Index == i {
			return g
		}
	}
	t.Fatalf("no GPU %d in the layout %+v", i, l)
	return framework.LayoutGPU{}
}

// gpuHolding is the index of the GPU in the layout with the MIG device id.
func gpuHolding(l []framework.LayoutGPU, id string) (int, bool) {
	for _, g := range l {
		for _, in := range g.Instances {
			if in.UUID == id {
				return g.Index, true
			}
		}
	}
	return 0, false
}

// gpuPod is a testbox pod (args) that requests n devices of resource, left
// to the scheduler so that it is placed by node 1's allocatable, on node 1
// only (its hostname label): the other nodes offer other GPUs, and the
// webhook and the planner decide for a pod by the nodes it may land on.
func gpuPod(namespace, name, res string, n int64, args ...string) *corev1.Pod {
	return dpNode().gpuPod(namespace, name, res, n, args...)
}

// gpuPod is gpuPod pinned to the node.
func (node simNode) gpuPod(namespace, name, res string, n int64, args ...string) *corev1.Pod {
	pod := anyNodeGPUPod(namespace, name, res, n, args...)
	framework.PinToNode(pod, node.NodeName)
	return pod
}

// anyNodeGPUPod is gpuPod on whichever node the scheduler picks.
func anyNodeGPUPod(namespace, name, res string, n int64, args ...string) *corev1.Pod {
	pod := cluster.TestboxPod(namespace, name, args...)
	pod.Spec.NodeName = ""
	q := *resource.NewQuantity(n, resource.DecimalSI)
	pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceName(res): q},
		Limits:   corev1.ResourceList{corev1.ResourceName(res): q},
	}
	return pod
}

// envOf parses the `testbox env` output of a pod into a map.
func envOf(logs string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(logs, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			out[k] = v
		}
	}
	return out
}

// runEnvPod runs pod (a testbox env pod) to completion and returns its
// environment.
func runEnvPod(t *testing.T, pod *corev1.Pod) map[string]string {
	t.Helper()
	cluster.CreatePod(t, pod)
	if _, err := cluster.WaitForPodSucceeded(t.Context(), pod.Namespace, pod.Name); err != nil {
		t.Fatal(err)
	}
	logs, err := cluster.PodLogs(t.Context(), pod.Namespace, pod.Name, "")
	if err != nil {
		t.Fatal(err)
	}
	return envOf(logs)
}

// checkAllocateEnv checks the variables the device plugin's Allocate gave
// a container holding n devices of profile: NVIDIA_VISIBLE_DEVICES names n
// distinct MIG devices of that profile from the layout.
func checkAllocateEnv(t *testing.T, env map[string]string, layout []framework.LayoutGPU, profile string, n int) []string {
	t.Helper()
	visible := env["NVIDIA_VISIBLE_DEVICES"]
	ids := strings.Split(visible, ",")
	if visible == "" || len(ids) != n {
		t.Fatalf("NVIDIA_VISIBLE_DEVICES=%q, want %d MIG device UUIDs; environment: %v", visible, n, env)
	}
	known := uuidsOf(layout, profile)
	for _, id := range ids {
		if !strings.HasPrefix(id, "MIG-") || !slices.Contains(known, id) {
			t.Errorf("NVIDIA_VISIBLE_DEVICES has %q, not one of the %s devices of the layout %v", id, profile, known)
		}
	}
	if s := slices.Compact(slices.Sorted(slices.Values(ids))); len(s) != n {
		t.Errorf("NVIDIA_VISIBLE_DEVICES=%q repeats a device", visible)
	}
	if got := env["MIGFLEX_SIMULATED"]; got != "true" {
		t.Errorf("MIGFLEX_SIMULATED=%q, want true", got)
	}
	if got := env["MIGFLEX_DEVICE_IDS"]; got != visible {
		t.Errorf("MIGFLEX_DEVICE_IDS=%q, want the same list as NVIDIA_VISIBLE_DEVICES %q", got, visible)
	}
	if got, want := env["MIGFLEX_MIG_PROFILES"], strings.Repeat(","+profile, n)[1:]; got != want {
		t.Errorf("MIGFLEX_MIG_PROFILES=%q, want %q", got, want)
	}
	return ids
}

// checkGFDLabels checks the GPU feature discovery labels for the node's
// simulated GPUs under the mixed strategy whose MIG devices are counts
// (over all GPUs).
func checkGFDLabels(t *testing.T, node *corev1.Node, counts map[string]int) {
	t.Helper()
	want := map[string]string{
		labelGPUProduct:  simModel,
		labelGPUCount:    strconv.Itoa(simGPUs),
		labelMigCapable:  "true",
		labelMigStrategy: "mixed",
	}
	for p, n := range counts {
		want["nvidia.com/mig-"+p+".count"] = strconv.Itoa(n)
	}
	got := map[string]string{}
	for k, v := range node.Labels {
		if _, ok := want[k]; ok || (strings.HasPrefix(k, "nvidia.com/mig-") && strings.HasSuffix(k, ".count")) {
			got[k] = v
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GPU feature discovery labels (-want +got):\n%s", diff)
	}
}
