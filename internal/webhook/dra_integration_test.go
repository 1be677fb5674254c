package webhook

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/testsupport/testenv"
	"github.com/migflex/migflex/internal/testsupport/testutil"
	"github.com/migflex/migflex/internal/webhook/fallback"
)

// On a DRA node the webhook counts the devices of the node's
// ResourceSlice that our DeviceClasses serve, less those allocated to
// ResourceClaims, and never the stale device-plugin entries of its
// status.allocatable. DRAExtendedResource (extendedResourceName) is alpha
// and off on 1.35, GA on 1.37: turned on, the test runs on every minor.
func TestDRANodeAgainstAPIServer(t *testing.T) {
	cfg := testenv.Start(t, testenv.WithAPIServerFlag("feature-gates", "DRAExtendedResource=true"))
	_, ctx := ktesting.NewTestContext(t)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, ctx: ctx, client: client}
	// d serves through DRA; its allocatable still lists 2g.20gb from the
	// device plugin it ran before. b is a device-plugin node with 1g.10gb.
	c.node("d", map[string]string{nodeinfo.LabelServing: nodeinfo.ServingDRA}, map[corev1.ResourceName]int64{mig2g20: 7}, false)
	c.node("b", nil, map[corev1.ResourceName]int64{mig1g10: 7}, false)
	c.namespaces()
	classes, err := dra.DeviceClasses([]string{"1g.10gb", "2g.20gb"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range classes {
		if _, err := client.ResourceV1().DeviceClasses().Create(ctx, &classes[i], metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	d, err := fallback.NewDecider(fallback.Options{Policy: fallback.DefaultPolicy(), Mode: fallback.ModeCapacity})
	if err != nil {
		t.Fatal(err)
	}
	c.startWebhook(d)
	probe := gpuPod("probe", mig2g20, "1")
	fallbackOf := func() string {
		p, err := c.create("team", probe, true)
		if err != nil {
			t.Fatalf("dry-run create: %v", err)
		}
		return p.Annotations[fallback.AnnotationFallback]
	}
	// No slice yet: d offers nothing, whatever its allocatable says.
	testutil.Eventually(t, "the webhook to rewrite 2g.20gb, absent", func() bool { return fallbackOf() == "2g.20gb->1g.10gb" })
	if got := c.stored("team", gpuPod("no-slice", mig2g20, "1")); got.Annotations[fallback.AnnotationReason] != "2g.20gb->1g.10gb=absent" {
		t.Errorf("reason = %q, want absent", got.Annotations[fallback.AnnotationReason])
	}

	// The agent publishes its layout: one 2g.20gb device, free.
	dev := dra.Device{Name: "gpu-0-mig-2g20gb-14-0", UUID: "MIG-0", MIG: true, Profile: "2g.20gb", ProfileID: 14,
		GPUUUID: "GPU-0", Model: "A100-SXM4-80GB", Start: 0, Size: 2, MemoryMB: 19968}
	slice := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "d-gpu.migflex.io"},
		Spec: resourceapi.ResourceSliceSpec{Driver: dra.DriverName, NodeName: ptr.To("d"),
			Pool:    resourceapi.ResourcePool{Name: "d", ResourceSliceCount: 1},
			Devices: []resourceapi.Device{dra.APIDevice(dev)}},
	}
	if _, err := client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the free 2g.20gb in d's slice to leave the pod alone", func() bool { return fallbackOf() == "" })

	// The scheduler allocates it to a claim: the only device is in use.
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "held", Namespace: "opted-out"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: dra.ProfileClass("2g.20gb")},
		}}}},
	}
	claim, err = client.ResourceV1().ResourceClaims("opted-out").Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
		Request: "gpu", Driver: dra.DriverName, Pool: "d", Device: dev.Name,
	}}}}
	if claim, err = client.ResourceV1().ResourceClaims("opted-out").UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the allocated device to count as used", func() bool { return fallbackOf() == "2g.20gb->1g.10gb" })
	if got := c.stored("team", gpuPod("while-held", mig2g20, "1")); got.Annotations[fallback.AnnotationReason] != "2g.20gb->1g.10gb=exhausted" {
		t.Errorf("reason = %q, want exhausted", got.Annotations[fallback.AnnotationReason])
	}

	// The claim is deallocated: free again.
	claim.Status.Allocation = nil
	if _, err := client.ResourceV1().ResourceClaims("opted-out").UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the deallocated device to be free", func() bool { return fallbackOf() == "" })
}
