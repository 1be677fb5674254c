package agent

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/nodeagent/deviceplugin"
	"github.com/migflex/migflex/internal/nodeagent/draserver"
	"github.com/migflex/migflex/internal/nodeagent/podresources"
	"github.com/migflex/migflex/internal/nodeagent/podresources/podresourcestest"
)

// GPUs the agent must not or cannot change at once: pods on them, NVML
// processes the kubelet does not know, a mode change waiting for a reset.

// testBusyGPUWaits: a GPU with a pod on an instance the layout destroys
// stays as it is, pending and named in the reason, while the other GPUs
// change; once the pod is gone it changes too. The per-instance series
// follow the pod and the layout.
func testBusyGPUWaits(t *testing.T, api *apiServer) {
	n := newNode(t, api)
	n.partition(0, "3g.40gb", "3g.40gb")
	gpus := n.discover()
	busyID := gpus[0].Instances[1].UUID
	n.podres.Set(podresourcestest.Device{Namespace: "ml", Pod: "train-0", Container: "main", Resource: resource3g, IDs: []string{busyID}})
	r := n.start()
	waitInstanceHolders(t, n, r, map[string][]string{busyID: {"ml/train-0"}})
	n.annotate(nodeinfo.AnnotationMigConfig, allSeven)

	obj := n.waitState(nodeinfo.StatePending)
	if r := obj.Annotations[nodeinfo.AnnotationReason]; !strings.Contains(r, "ml/train-0") || !strings.Contains(r, "GPU 0") {
		t.Errorf("pending reason %q does not name the pod and its GPU", r)
	}
	n.waitEvent(corev1.EventTypeNormal, ReasonPending, "ml/train-0", "GPU 0")
	// GPU 1 is configured meanwhile; GPU 0 is untouched.
	want := []string{"GPU 0 mig=true 3g.40gb@0 3g.40gb@4", "GPU 1 mig=true 1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6"}
	waitLayout(t, n, want)
	n.waitServed(map[string]int{resource3g: 2, resource1g: 7, string(resourcename.GPU): 0})
	n.waitEvent(corev1.EventTypeNormal, ReasonApplied, "GPU 1")
	// GPU 1's new instances show, free; the pod still on GPU 0.
	waitInstanceHolders(t, n, r, map[string][]string{busyID: {"ml/train-0"}})

	// The pod is gone: GPU 0 follows, and no series of the pod or of the
	// destroyed instances stays.
	n.podres.Set()
	n.waitState(nodeinfo.StateSuccess)
	n.waitServed(map[string]int{resource3g: 0, resource1g: 14, string(resourcename.GPU): 0})
	waitInstanceHolders(t, n, r, nil)
	if h := instanceHolders(t, r.reg); len(h) != 14 {
		t.Errorf("%d instances in migflex_agent_instance_info, want 14", len(h))
	}
	if pending := countReason(n.events(), ReasonPending); pending != 1 {
		t.Errorf("%d MigConfigPending Events, want 1 (retries are no news)", pending)
	}
}

// testWaitingNodeWritesNothing: a node whose new layout waits for a pod
// on a busy GPU reports the wait once, then writes nothing to the API
// server while it waits, however often it reconciles: the wait is not
// news, and neither announcing a change it does not make nor its own
// writes may start the next write (the agent once wrote such a Node ~22
// times a second for as long as the pod ran).
func testWaitingNodeWritesNothing(t *testing.T, api *apiServer) {
	n := newNode(t, api)
	n.partition(0, "3g.40gb", "3g.40gb")
	busyID := n.discover()[0].Instances[1].UUID
	n.podres.Set(podresourcestest.Device{Namespace: "ml", Pod: "train-0", Container: "main", Resource: resource3g, IDs: []string{busyID}})
	counts := &requestCounter{counts: map[string]int{}}
	cfg := rest.CopyConfig(api.cfg)
	cfg.WrapTransport = counts.wrap
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Retries every 50 ms (the test default): the period below is
	// counted in reconciles, not in seconds.
	r := n.start(withClient(client))
	n.annotate(nodeinfo.AnnotationMigConfig, allSeven)
	n.waitState(nodeinfo.StatePending)
	waitLayout(t, n, []string{"GPU 0 mig=true 3g.40gb@0 3g.40gb@4", "GPU 1 mig=true 1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6"})
	n.waitEvent(corev1.EventTypeNormal, ReasonApplied, "GPU 1")
	n.waitEvent(corev1.EventTypeNormal, ReasonPending, "ml/train-0")

	// The wait is reported; from here on each reconcile finds the same.
	// A reconcile is counted before its report is sent, so the reports
	// of the first one counted below are inside the period.
	const period = 20
	start := r.counter("migflex_agent_reconciles_total", "result", resultPending)
	patches, events := counts.get("PATCH nodes"), counts.get("POST events")
	rv := n.get().ResourceVersion
	waitCounter(t, r, "migflex_agent_reconciles_total", "result", resultPending, start+period)
	if got := counts.get("PATCH nodes") - patches; got != 0 {
		t.Errorf("%d Node writes during %d reconciles of a waiting node, want 0", got, period)
	}
	if got := counts.get("POST events") - events; got != 0 {
		t.Errorf("%d Events during %d reconciles of a waiting node, want 0", got, period)
	}
	if got := n.get().ResourceVersion; got != rv {
		t.Errorf("the Node changed while its agent waited: resourceVersion %s, before %s", got, rv)
	}
	if got := n.get().Labels[nodeinfo.LabelMigConfigState]; got != nodeinfo.StatePending {
		t.Errorf("state %q while GPU 0 waits, want pending", got)
	}

	// The pod goes: GPU 0 changes, announced once and reported once.
	n.podres.Set()
	n.waitState(nodeinfo.StateSuccess)
	waitLayout(t, n, []string{"GPU 0 mig=true 1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6", "GPU 1 mig=true 1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6"})
}

// testEvict: under --busy-policy=evict the pods in the way are evicted
// through the Eviction API; a PodDisruptionBudget's 429 means wait.
func testEvict(t *testing.T, api *apiServer) {
	n := newNode(t, api)
	n.partition(0, "3g.40gb", "3g.40gb")
	gpus := n.discover()
	pod := runningPod(t, api, n.name, "train-0")
	n.podres.Set(podresourcestest.Device{Namespace: pod.Namespace, Pod: pod.Name, Container: "main", Resource: resource3g, IDs: []string{gpus[0].Instances[0].UUID}})
	// A budget that allows no disruption: the eviction gets a 429.
	pdb := blockingPDB(t, api, pod)
	n.start(withPolicy(BusyEvict))
	n.annotate(nodeinfo.AnnotationMigConfig, allSeven)

	obj := n.waitNode("the blocked eviction", func(o *corev1.Node) bool {
		return o.Labels[nodeinfo.LabelMigConfigState] == nodeinfo.StatePending && strings.Contains(o.Annotations[nodeinfo.AnnotationReason], "eviction refused")
	})
	if r := obj.Annotations[nodeinfo.AnnotationReason]; !strings.Contains(r, "default/train-0") {
		t.Errorf("reason %q does not name the pod", r)
	}
	if p, err := api.client.CoreV1().Pods("default").Get(context.Background(), pod.Name, metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Fatalf("the pod a budget protects was deleted: %v, %v", err, p.DeletionTimestamp)
	}
	waitLayout(t, n, []string{"GPU 0 mig=true 3g.40gb@0 3g.40gb@4", "GPU 1 mig=true 1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6"})

	// The budget goes: the eviction goes through and the pod
	// terminates (there is no kubelet to finish it, so it stays
	// with a deletion timestamp).
	if err := api.client.PolicyV1().PodDisruptionBudgets(pdb.Namespace).Delete(context.Background(), pdb.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPodEvicted(t, api, pod)
	n.waitNode("the evicted pod", func(o *corev1.Node) bool {
		return o.Labels[nodeinfo.LabelMigConfigState] == nodeinfo.StatePending && strings.Contains(o.Annotations[nodeinfo.AnnotationReason], "evicted default/train-0")
	})
	if diff := cmp.Diff("GPU 0 mig=true 3g.40gb@0 3g.40gb@4", n.layoutOf()[0]); diff != "" {
		t.Errorf("GPU 0 changed while the kubelet still lists the pod (-want +got):\n%s", diff)
	}
	// The kubelet lets go of the device once the pod stopped.
	n.podres.Set()
	n.waitState(nodeinfo.StateSuccess)
	n.waitServed(map[string]int{resource3g: 0, resource1g: 14, string(resourcename.GPU): 0})
}

// testNoPodResourcesSocket: without the kubelet's word on which devices
// pods hold, no GPU is changed and the state is failed.
func testNoPodResourcesSocket(t *testing.T, api *apiServer) {
	n := newNode(t, api)
	n.partition(0, "3g.40gb")
	before := n.layoutOf()
	n.start(withPodResourcesSocket(filepath.Join(t.TempDir(), "missing.sock")))
	n.annotate(nodeinfo.AnnotationMigConfig, allSeven)
	obj := n.waitState(nodeinfo.StateFailed)
	if r := obj.Annotations[nodeinfo.AnnotationReason]; !strings.Contains(r, "cannot tell which GPUs pods use") {
		t.Errorf("reason %q", r)
	}
	n.waitEvent(corev1.EventTypeWarning, ReasonFailed, "cannot tell which GPUs pods use")
	if diff := cmp.Diff(before, n.layoutOf()); diff != "" {
		t.Errorf("GPUs changed without a busy check (-before +after):\n%s", diff)
	}
}

// testAmpereReset: a MIG mode change that waits for a GPU reset is
// finished by a reset where the backend can reset GPUs.
func testAmpereReset(t *testing.T, api *apiServer) {
	n := newNode(t, api, withGPUs("A100-SXM4-40GB", 1), withAnnotation(nodeinfo.AnnotationMigConfig, "version: v1\nmig-configs:\n  selected:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {\"3g.20gb\": 2}\n"))
	n.start()
	n.waitState(nodeinfo.StateSuccess)
	waitLayout(t, n, []string{"GPU 0 mig=true 3g.20gb@0 3g.20gb@4"})
	n.waitServed(map[string]int{"nvidia.com/mig-3g.20gb": 2, string(resourcename.GPU): 0})
}

// testAmpereWithoutReset: where the backend cannot reset GPUs (real
// NVML), the reason tells the operator what to do.
func testAmpereWithoutReset(t *testing.T, api *apiServer) {
	n := newNode(t, api, withGPUs("A100-SXM4-40GB", 1), withAnnotation(nodeinfo.AnnotationMigConfig, "version: v1\nmig-configs:\n  selected:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {\"3g.20gb\": 2}\n"))
	// A backend without the reset capability, as real NVML.
	n.start(withNVML(struct{ nvml.Interface }{n.lib}), withResync(100*time.Millisecond))
	obj := n.waitState(nodeinfo.StateFailed)
	if r := obj.Annotations[nodeinfo.AnnotationReason]; !strings.Contains(r, "nvidia-smi -r -i 0") {
		t.Errorf("reason %q does not tell the operator what to do", r)
	}
	n.waitEvent(corev1.EventTypeWarning, ReasonFailed, "reset")
	waitLayout(t, n, []string{"GPU 0 mig=false (pending true)"})
	n.waitServed(map[string]int{string(resourcename.GPU): 1})

	// The operator resets the GPU: the agent completes the layout.
	if err := n.lib.ResetGPU(0); err != nil {
		t.Fatal(err)
	}
	n.waitState(nodeinfo.StateSuccess)
	waitLayout(t, n, []string{"GPU 0 mig=true 3g.20gb@0 3g.20gb@4"})
	n.waitServed(map[string]int{"nvidia.com/mig-3g.20gb": 2, string(resourcename.GPU): 0})
}

// testProcessesUnknownToTheKubelet: NVML refusing to destroy an instance
// in use by processes the kubelet does not know rolls the GPU back and
// holds it until a resync.
func testProcessesUnknownToTheKubelet(t *testing.T, api *apiServer) {
	n := newNode(t, api)
	n.partition(0, "3g.40gb", "3g.40gb")
	gpus := n.discover()
	// Something outside Kubernetes runs on the second instance.
	if err := n.lib.SetBusy(0, gpus[0].Instances[1].GIID, true); err != nil {
		t.Fatal(err)
	}
	r := n.start(withResync(200 * time.Millisecond))
	n.annotate(nodeinfo.AnnotationMigConfig, "version: v1\nmig-configs:\n  selected:\n  - devices: [0]\n    mig-enabled: true\n    mig-devices: {\"1g.10gb\": 7}\n")
	obj := n.waitState(nodeinfo.StateFailed)
	if r := obj.Annotations[nodeinfo.AnnotationReason]; !strings.Contains(r, "rolled back") || !strings.Contains(r, "busy") {
		t.Errorf("reason %q does not say the GPU was busy and rolled back", r)
	}
	n.waitEvent(corev1.EventTypeWarning, ReasonFailed, "GPU 0")
	waitLayout(t, n, []string{"GPU 0 mig=true 3g.40gb@0 3g.40gb@4", "GPU 1 mig=false"})
	n.waitServed(map[string]int{resource3g: 2, string(resourcename.GPU): 1})
	// Held: a reconcile that is not a resync (a user's label change
	// starts one) does not try again ...
	deadline := time.Now().Add(hangTimeout)
	for i := 0; r.counter("migflex_agent_reconciles_total", "result", resultHeld) < 1; i++ {
		if time.Now().After(deadline) {
			t.Fatal("no reconcile found the GPU held")
		}
		n.label("example.com/poke", fmt.Sprint(i))
		time.Sleep(pollInterval) // polling a counter nothing signals
	}
	// ... a resync does, and the same failure is no news.
	waitCounter(t, r, "migflex_agent_reconciles_total", "result", resultFailed, 2)
	if failed := countReason(n.events(), ReasonFailed); failed != 1 {
		t.Errorf("%d MigConfigFailed Events, want 1: %s", failed, describeEvents(n.events()))
	}
	// The processes end: the next resync gets through.
	if err := n.lib.SetBusy(0, gpus[0].Instances[1].GIID, false); err != nil {
		t.Fatal(err)
	}
	n.waitState(nodeinfo.StateSuccess)
	n.waitServed(map[string]int{resource3g: 0, string(resourcename.GPU): 1, resource1g: 7})
}

// testClaimHoldsGPU: on a node served through DRA, a GPU whose MIG device
// a ResourceClaim holds is busy exactly as one a device-plugin pod holds:
// the scheduler's allocation alone (the kubelet has not prepared it yet)
// keeps the GPU as it is, pending, with the pod named; the other GPU
// changes; once the claim is gone the GPU follows.
func testClaimHoldsGPU(t *testing.T, api *apiServer) {
	n := newNode(t, api)
	n.partition(0, "3g.40gb", "3g.40gb")
	devs, err := dra.Devices(n.discover())
	if err != nil {
		t.Fatal(err)
	}
	held := devs[1] // GPU 0's second 3g.40gb
	claim := allocatedClaim(t, api, "train-0-gpu", dra.DriverName, n.name, held.Name, "train-0")
	holders := &draserver.Holders{
		Kubelet: podresources.New(n.podres.Socket),
		Claims: func() ([]resourceapi.ResourceClaim, error) {
			l, err := api.client.ResourceV1().ResourceClaims("").List(context.Background(), metav1.ListOptions{})
			if err != nil {
				return nil, err
			}
			return l.Items, nil
		},
		State:  staticState(devs),
		Driver: dra.DriverName, Pool: n.name,
	}
	n.start(func(o *Options, _ *deviceplugin.Options) { o.PodResources = holders })
	n.annotate(nodeinfo.AnnotationMigConfig, allSeven)

	obj := n.waitState(nodeinfo.StatePending)
	if r := obj.Annotations[nodeinfo.AnnotationReason]; !strings.Contains(r, "default/train-0") || !strings.Contains(r, "GPU 0") {
		t.Errorf("pending reason %q does not name the claim's pod and its GPU", r)
	}
	waitLayout(t, n, []string{"GPU 0 mig=true 3g.40gb@0 3g.40gb@4", "GPU 1 mig=true 1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6"})

	if err := api.client.ResourceV1().ResourceClaims(claim.Namespace).Delete(context.Background(), claim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	n.waitState(nodeinfo.StateSuccess)
	waitLayout(t, n, []string{"GPU 0 mig=true 1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6", "GPU 1 mig=true 1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6"})
}

type staticState []dra.Device

func (s staticState) Devices() []dra.Device         { return s }
func (s staticState) Prepared() []dra.PreparedClaim { return nil }

// allocatedClaim creates a claim in default with the allocation the
// scheduler would write (device of driver in pool) reserved for pod.
func allocatedClaim(t *testing.T, api *apiServer, name, driver, pool, device, pod string) *resourceapi.ResourceClaim {
	t.Helper()
	ctx := context.Background()
	c, err := api.client.ResourceV1().ResourceClaims("default").Create(ctx, &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: dra.ClassMIG},
		}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
		Request: "gpu", Driver: driver, Pool: pool, Device: device,
	}}}}
	c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod, UID: types.UID("uid-" + pod)}}
	c, err = api.client.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, c, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
