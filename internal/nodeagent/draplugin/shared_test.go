package draplugin

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/migflex/migflex/internal/domain/dra"
)

// TestSharedClaim: a ResourceClaim two pods share, in static mode. The
// kubelet prepares it for the first pod; a Prepare repeated for the second
// (the kubelet records it without asking, but a restarted kubelet asks
// again) gets the same answer and prepares nothing more. Its
// status.devices names the MIG UUID, for every pod that shares it. The
// busy check holds the instance for each pod the API reserves the claim
// for, also once the first pod has ended (the checkpoint's pods are the
// first's only), and until the kubelet unprepares it after the last.
func TestSharedClaim(t *testing.T) {
	_, discover := simGPUs(t)
	claim := allocated("ns", "pair", "p1", [2]string{"gpu", mig0})
	client := fakeClient(claim)
	d := newDirs(t)
	drv := startDriver(t, client, d, Options{})
	if err := drv.Publish(discover(), nil); err != nil {
		t.Fatal(err)
	}
	devs, _ := drv.Published()
	uuid := dra.ByName(devs)[mig0].UUID
	k := dialKubelet(t, d)

	first := k.prepare(claim)["uid-pair"]
	if first.GetError() != "" {
		t.Fatalf("prepare for p1: %s", first.GetError())
	}
	spec := filepath.Join(d.cdi, "migflex.io-gpu_uid-pair.json")
	before, err := os.ReadFile(spec)
	if err != nil {
		t.Fatal(err)
	}

	// The scheduler reserves the claim for the second pod too.
	claim = reserve(t, client, claim, "p1", "p2")
	again := k.prepare(claim)["uid-pair"]
	if diff := cmp.Diff(first, again, protocmp.Transform()); diff != "" {
		t.Errorf("prepare for p2 (-p1's answer, +p2's):\n%s", diff)
	}
	if after, err := os.ReadFile(spec); err != nil || string(after) != string(before) {
		t.Errorf("the claim's CDI spec changed when prepared for p2 (%v):\n%s\nthen\n%s", err, before, after)
	}
	if p := drv.Prepared(); len(p) != 1 || len(p[0].Devices) != 1 || p[0].Devices[0].UUID != uuid {
		t.Errorf("prepared %+v, want the one claim with %s once", p, uuid)
	}

	// status.devices names the instance, so whatever reads the claim of
	// either pod finds its MIG UUID.
	got, err := client.ResourceV1().ResourceClaims("ns").Get(context.Background(), "pair", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gpu0 := dra.ByName(devs)[mig0]
	want := DeviceStatusData{UUID: uuid, Profile: gpu0.Profile, ParentUUID: gpu0.GPUUUID, GPUIndex: gpu0.GPUIndex, Start: gpu0.Start, Size: gpu0.Size}
	if len(got.Status.Devices) != 1 {
		t.Fatalf("status.devices %+v, want one entry", got.Status.Devices)
	}
	var data DeviceStatusData
	if s := got.Status.Devices[0]; s.Data == nil || json.Unmarshal(s.Data.Raw, &data) != nil || data != want || s.Device != mig0 || s.Pool != node || s.Driver != dra.DriverName {
		t.Errorf("status.devices entry %+v (data %+v), want device %s of pool %s with %+v", s, data, mig0, node, want)
	}
	if got.Status.Allocation == nil || len(got.Status.Allocation.Devices.Results) != 1 {
		t.Errorf("the allocation changed: %+v", got.Status.Allocation)
	}

	holders := func() []string {
		c, err := client.ResourceV1().ResourceClaims("ns").Get(context.Background(), "pair", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, u := range dra.Uses(devs, dra.DriverName, node, dra.Sources{Claims: []resourceapi.ResourceClaim{*c}, Prepared: drv.Prepared()}) {
			if u.DeviceUUID == uuid {
				out = append(out, u.Holder)
			}
		}
		return out
	}
	if h := holders(); !slices.Equal(h, []string{"ns/p1", "ns/p2"}) {
		t.Errorf("the instance's holders %v, want both pods", h)
	}
	// p1 ends: the kubelet does not unprepare (p2 uses the claim), the
	// API reserves it for p2 only.
	claim = reserve(t, client, claim, "p2")
	if h := holders(); !slices.Equal(h, []string{"ns/p2"}) {
		t.Errorf("the instance's holders once p1 ended %v, want p2 only", h)
	}

	// p2 ends: the kubelet unprepares the claim.
	if r := k.unprepare(claim)["uid-pair"]; r.GetError() != "" {
		t.Fatalf("unprepare: %s", r.GetError())
	}
	if _, err := os.Stat(spec); !os.IsNotExist(err) {
		t.Errorf("the claim's CDI spec after the last pod: %v", err)
	}
	if p := drv.Prepared(); len(p) != 0 {
		t.Errorf("prepared after the last pod: %+v", p)
	}
}

// reserve sets the claim's reservedFor to pods in the API, as the
// scheduler and the claim controller do.
func reserve(t *testing.T, client kubernetes.Interface, c *resourceapi.ResourceClaim, pods ...string) *resourceapi.ResourceClaim {
	t.Helper()
	cur, err := client.ResourceV1().ResourceClaims(c.Namespace).Get(context.Background(), c.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Status.ReservedFor = nil
	for _, p := range pods {
		cur.Status.ReservedFor = append(cur.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p, UID: types.UID("uid-" + p)})
	}
	out, err := client.ResourceV1().ResourceClaims(c.Namespace).UpdateStatus(context.Background(), cur, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
