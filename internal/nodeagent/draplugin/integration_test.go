package draplugin

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim/simtest"
	"github.com/migflex/migflex/internal/nvml/nvmlmig"
	"github.com/migflex/migflex/internal/testsupport/testenv"
)

// Against a real kube-apiserver (envtest): the DeviceClasses manifest is
// accepted, the published slices pass the API's validation and follow the
// layout, and a claim allocated through the API is prepared, seen as busy
// and unprepared. The gates are on where they are beta or GA (1.36, 1.37)
// and turned on where they are alpha, so the test runs on every minor
// the local cluster may be built at. A layout of more than one slice is
// signalled once the API server has all of it.
func TestIntegrationWithAPIServer(t *testing.T) {
	cfg := testenv.Start(t, testenv.WithAPIServerFlag("feature-gates", "DRADeviceTaints=true,DRAExtendedResource=true"))
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("DeviceClasses manifest", func(t *testing.T) {
		data, err := os.ReadFile("../../../deployments/dra/deviceclasses.yaml")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, doc := range bytes.Split(data, []byte("\n---\n"))[1:] {
			var c resourceapi.DeviceClass
			if err := yaml.UnmarshalStrict(doc, &c); err != nil {
				t.Fatal(err)
			}
			got, err := client.ResourceV1().DeviceClasses().Create(ctx, &c, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("DeviceClass %s: %v", c.Name, err)
			}
			if (got.Spec.ExtendedResourceName == nil) != (c.Spec.ExtendedResourceName == nil) {
				t.Errorf("DeviceClass %s: extendedResourceName %v stored as %v", c.Name, c.Spec.ExtendedResourceName, got.Spec.ExtendedResourceName)
			}
			n++
		}
		if n < 10 {
			t.Errorf("only %d DeviceClasses in the manifest", n)
		}
	})

	part, discover := simGPUs(t)
	d := newDirs(t)
	drv := startDriver(t, client, d, Options{})
	gpus := discover()
	if err := drv.Publish(gpus, map[string]dra.Fault{gpus[1].UUID: {Xid: 79, Reason: "Xid 79"}}); err != nil {
		t.Fatal(err)
	}
	waitDevices(t, client, drv, mig0, mig4, whole+" gpu.migflex.io/xid=79:NoSchedule")

	// The layout changes and is republished in place, attributes intact.
	if err := part.DestroyInstance(0, gpus[0].Instances[1].GIID); err != nil {
		t.Fatal(err)
	}
	if _, err := part.CreateInstance(0, "1g.10gb+me", 4); err != nil {
		t.Fatal(err)
	}
	gpus = discover()
	if err := drv.Publish(gpus, nil); err != nil {
		t.Fatal(err)
	}
	const me = "gpu-0-mig-1g10gb-me-20-4"
	waitDevices(t, client, drv, mig0, me, whole)
	list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Items {
		for _, dev := range s.Spec.Devices {
			if dev.Name == me {
				if p := dev.Attributes["profile"].StringValue; p == nil || *p != "1g.10gb+me" {
					t.Errorf("%s: profile %v", me, p)
				}
				p, _ := gpus[0].Profile("1g.10gb+me")
				if q := dev.Capacity["memory"].Value; q.Value() != int64(p.MemoryMiB)<<20 {
					t.Errorf("%s: memory %v, want %d MiB", me, q.String(), p.MemoryMiB)
				}
			}
		}
	}

	// A claim allocated through the API, as the scheduler writes it.
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "train"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: dra.ProfileClass("3g.40gb")},
		}}}},
	}
	claim, err = client.ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
		Request: "gpu", Driver: dra.DriverName, Pool: node, Device: mig0,
	}}}}
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "trainer", UID: "pod-uid"}}
	if claim, err = client.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Busy from the API's allocation, before any Prepare.
	claims, err := client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	devs, _ := drv.Published()
	uses := dra.Uses(devs, dra.DriverName, node, dra.Sources{Claims: claims.Items})
	if len(uses) != 1 || uses[0].Holder != "default/trainer" || uses[0].Device != mig0 || uses[0].DeviceUUID != gpus[0].Instances[0].UUID {
		t.Errorf("uses from the API: %+v", uses)
	}

	k := dialKubelet(t, d)
	r := k.prepare(claim)[string(claim.UID)]
	if r.GetError() != "" || len(r.GetDevices()) != 1 || !strings.HasPrefix(r.GetDevices()[0].GetCdiDeviceIds()[0], "migflex.io/gpu="+string(claim.UID)) {
		t.Fatalf("prepare: %v", r)
	}
	if u := k.unprepare(claim)[string(claim.UID)]; u.GetError() != "" {
		t.Fatalf("unprepare: %s", u.GetError())
	}
	if p := drv.Prepared(); len(p) != 0 {
		t.Errorf("prepared after unprepare: %v", p)
	}

	// More devices than a slice holds: 10 GPUs of seven 1g.10gb, stored
	// by the helper as two slices, one request each, after Publish
	// returned. The driver signals each change of its slices, and
	// Visible, asked only on a signal, agrees once the last is stored.
	big := sevenPerGPU(t, 10)
	select {
	case <-drv.SliceChanges():
	default:
	}
	if err := drv.Publish(big, nil); err != nil {
		t.Fatal(err)
	}
	hang := time.After(hangTimeout)
	for visible := false; !visible; {
		select {
		case <-drv.SliceChanges():
		case <-hang:
			t.Fatal("no signal of the slices that make the 70 devices visible")
		}
		if visible, err = drv.Visible(ctx); err != nil {
			t.Fatal(err)
		}
	}
	list, err = client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int
	for _, s := range list.Items {
		sizes = append(sizes, len(s.Spec.Devices))
	}
	slices.Sort(sizes)
	if !slices.Equal(sizes, []int{6, dra.MaxDevicesPerSlice}) {
		t.Errorf("slices of %v devices, want 6 and %d", sizes, dra.MaxDevicesPerSlice)
	}
}

// sevenPerGPU is the layout of n simulated H100s, each split into seven
// 1g.10gb.
func sevenPerGPU(t *testing.T, n int) []mig.GPU {
	t.Helper()
	lib := simtest.New(t, sim.Config{GPUs: []sim.GPUSpec{{Model: "H100-SXM5-80GB", Count: n}}, UUIDSeed: t.Name() + "-seven"})
	part := nvmlmig.NewPartitioner(lib)
	for gpu := range n {
		if err := part.SetMigMode(gpu, true); err != nil {
			t.Fatal(err)
		}
		for start := range 7 {
			if _, err := part.CreateInstance(gpu, "1g.10gb", start); err != nil {
				t.Fatal(err)
			}
		}
	}
	gpus, err := nvmlmig.Discover(lib)
	if err != nil {
		t.Fatal(err)
	}
	return gpus
}
