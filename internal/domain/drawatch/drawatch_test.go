package drawatch

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/testsupport/testutil"
)

const mig1g = corev1.ResourceName("nvidia.com/mig-1g.10gb")

func device(name string) resourceapi.Device {
	return dra.APIDevice(dra.Device{Name: name, UUID: "MIG-" + name, MIG: true, Profile: "1g.10gb", GPUUUID: "GPU-0", Size: 1, MemoryMB: 9856})
}

func slice(name, node, driver string, devs ...resourceapi.Device) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: ptr.To(node),
			Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1}, Devices: devs}}
}

type changes struct {
	mu    sync.Mutex
	nodes []string
}

func (c *changes) add(n string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodes = append(c.nodes, n)
}

func (c *changes) saw(n string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Contains(c.nodes, n)
}

// The caches answer a node's supply by its pool, and a claim whose
// allocation moves tells both nodes.
func TestWatch(t *testing.T) {
	ctx := context.Background()
	classes, err := dra.DeviceClasses([]string{"1g.10gb"})
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(&classes[3],
		slice("a", "n1", dra.DriverName, device("d0"), device("d1")),
		slice("b", "n2", dra.DriverName, device("d0")),
		slice("other", "n1", "gpu.nvidia.com", device("x0")))
	var seen changes
	w, err := New(client, Options{Slices: true, Claims: true, Templates: true, NodeChanged: seen.add})
	if err != nil {
		t.Fatal(err)
	}
	run, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, inf := range w.Informers() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inf.RunWithContext(run)
		}()
	}
	defer func() {
		cancel()
		wg.Wait()
	}()
	if !cache.WaitForCacheSync(run.Done(), w.Synced()...) {
		t.Fatal("caches did not sync")
	}
	supply := func(node string) [2]map[corev1.ResourceName]int64 {
		a, u := w.Supply(node)
		return [2]map[corev1.ResourceName]int64{a, u}
	}
	if diff := cmp.Diff([2]map[corev1.ResourceName]int64{{mig1g: 2}, {}}, supply("n1")); diff != "" {
		t.Errorf("n1 (-want,+got):\n%s", diff)
	}

	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"}}
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "r", Driver: dra.DriverName, Pool: "n1", Device: "d1"}}}}
	if claim, err = client.ResourceV1().ResourceClaims("ns").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the claim on n1", func() bool {
		return seen.saw("n1") && cmp.Equal([2]map[corev1.ResourceName]int64{{mig1g: 2}, {mig1g: 1}}, supply("n1"))
	})
	if w.Claim("ns", "c") == nil || w.Claim("ns", "gone") != nil {
		t.Error("Claim does not find what the cache holds")
	}

	// Reallocated to n2: both nodes hear of it.
	claim.Status.Allocation.Devices.Results[0].Pool = "n2"
	claim.Status.Allocation.Devices.Results[0].Device = "d0"
	if _, err := client.ResourceV1().ResourceClaims("ns").UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the claim on n2", func() bool {
		return seen.saw("n2") && cmp.Equal([2]map[corev1.ResourceName]int64{{mig1g: 1}, {mig1g: 1}}, supply("n2")) &&
			cmp.Equal([2]map[corev1.ResourceName]int64{{mig1g: 2}, {}}, supply("n1"))
	})
}

// A DeviceClass of our driver that is not read is logged with why, once
// per change: a resync or another class's event does not repeat it.
func TestUnreadClassesLogged(t *testing.T) {
	ctx := context.Background()
	bad := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "bad.migflex.io"}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "gpu.migflex.io" && device.attributes["gpu.migflex.io"].profile == 3`}}}}}
	client := fake.NewClientset(bad)
	var mu sync.Mutex
	var lines []string
	log := klog.Logger(funcr.New(func(_, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, args)
	}, funcr.Options{}))
	w, err := New(client, Options{Logger: &log})
	if err != nil {
		t.Fatal(err)
	}
	run, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, inf := range w.Informers() {
		wg.Go(func() { inf.RunWithContext(run) })
	}
	defer func() {
		cancel()
		wg.Wait()
	}()
	if !cache.WaitForCacheSync(run.Done(), w.Synced()...) {
		t.Fatal("caches did not sync")
	}
	logged := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(lines)
	}
	w.Classes()
	want := `"msg"="DeviceClass not read: claims on it are left to the scheduler" "deviceClass"="bad.migflex.io" "why"="` +
		"`device.driver == \\\"gpu.migflex.io\\\" && device.attributes[\\\"gpu.migflex.io\\\"].profile == 3`: profile == 3 is false on every device"
	if got := logged(); len(got) != 1 || !strings.Contains(got[0], want) {
		t.Fatalf("logged %q, want one line with %q", got, want)
	}
	// Another class arrives: the classes are read again, the bad one is
	// not logged again.
	good, err := dra.DeviceClasses([]string{"1g.10gb"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.ResourceV1().DeviceClasses().Create(ctx, &good[3], metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the new class read", func() bool { return w.Classes().Serves(mig1g) })
	if got := logged(); len(got) != 1 {
		t.Errorf("logged again without a change: %q", got)
	}
}
