package dra

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/migflex/migflex/internal/domain/mig"
)

// claim is an allocated ResourceClaim in namespace ns, reserved for pods,
// with results "driver/pool/device".
func claim(ns, name string, pods []string, results ...[3]string) resourceapi.ResourceClaim {
	c := resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for _, r := range results {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: "req", Driver: r[0], Pool: r[1], Device: r[2]})
	}
	for _, p := range pods {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p, UID: types.UID("pod-uid-" + p)})
	}
	return c
}

// podResources is a pod-resources answer with one pod whose container has
// the given claim resources ("driver/pool/device") and one device-plugin
// device.
func podResources(ns, pod, claimName string, res ...[3]string) *podresourcesv1.ListPodResourcesResponse {
	dr := &podresourcesv1.DynamicResource{ClaimName: claimName, ClaimNamespace: ns}
	for _, r := range res {
		dr.ClaimResources = append(dr.ClaimResources, &podresourcesv1.ClaimResource{DriverName: r[0], PoolName: r[1], DeviceName: r[2]})
	}
	return &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{{
		Namespace: ns, Name: pod,
		Containers: []*podresourcesv1.ContainerResources{{
			Name:             "c",
			Devices:          []*podresourcesv1.ContainerDevices{{ResourceName: "nvidia.com/mig-1g.5gb", DeviceIds: []string{"MIG-0-0"}}},
			DynamicResources: []*podresourcesv1.DynamicResource{dr},
		}},
	}}}
}

func TestUses(t *testing.T) {
	devs, err := Devices([]mig.GPU{
		gpu(t, 0, "A100-SXM4-40GB", "1g.5gb@0", "3g.20gb@4"),
		wholeGPU(t, 1, "A30-24GB"),
	})
	if err != nil {
		t.Fatal(err)
	}
	const (
		mig0  = "gpu-0-mig-1g5gb-19-0"
		mig4  = "gpu-0-mig-3g20gb-9-4"
		whole = "gpu-1"
		gone  = "gpu-0-mig-2g10gb-14-2"
	)
	ours := func(dev string) [3]string { return [3]string{DriverName, "node-a", dev} }
	prepared := func(ns, name string, pods []string, dev, uuid string) PreparedClaim {
		return PreparedClaim{UID: "uid-" + name, Namespace: ns, Name: name, Pods: pods,
			Devices: []PreparedDevice{{Device: Device{Name: dev, UUID: uuid}, Requests: []string{"req"}}}}
	}
	tests := []struct {
		name string
		src  Sources
		want []Use
	}{
		{"nothing", Sources{}, nil},
		{
			"allocated claim reserved for a pod: the pod holds the device by its UUID",
			Sources{Claims: []resourceapi.ResourceClaim{claim("ns", "c1", []string{"p1"}, ours(mig4))}},
			[]Use{{DeviceUUID: "MIG-0-4", Device: mig4, Holder: "ns/p1", Claim: "ns/c1"}},
		},
		{
			"allocated claim no pod reserved yet: the claim holds it",
			Sources{Claims: []resourceapi.ResourceClaim{claim("ns", "c1", nil, ours(whole))}},
			[]Use{{DeviceUUID: "GPU-1", Device: whole, Holder: "ResourceClaim ns/c1", Claim: "ns/c1"}},
		},
		{
			"a claim shared by two pods: both hold it",
			Sources{Claims: []resourceapi.ResourceClaim{claim("ns", "c1", []string{"p2", "p1"}, ours(mig0))}},
			[]Use{
				{DeviceUUID: "MIG-0-0", Device: mig0, Holder: "ns/p1", Claim: "ns/c1"},
				{DeviceUUID: "MIG-0-0", Device: mig0, Holder: "ns/p2", Claim: "ns/c1"},
			},
		},
		{
			"unallocated claims, other drivers and pools, devices not in the layout: ignored",
			Sources{Claims: []resourceapi.ResourceClaim{
				{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pending"}},
				claim("ns", "c1", []string{"p1"}, [3]string{"gpu.nvidia.com", "node-a", mig0}, [3]string{DriverName, "node-b", mig0}, ours(gone)),
			}},
			nil,
		},
		{
			"pod-resources: the pod's claim devices, not its device-plugin devices",
			Sources{PodResources: podResources("ns", "p1", "c1", ours(mig0), [3]string{"other.example.com", "node-a", whole})},
			[]Use{{DeviceUUID: "MIG-0-0", Device: mig0, Holder: "ns/p1", Claim: "ns/c1"}},
		},
		{
			"prepared claim: the current device by name; a device gone by its recorded UUID",
			Sources{Prepared: []PreparedClaim{
				prepared("ns", "c1", []string{"ns/p1"}, mig4, "MIG-old"),
				prepared("ns", "c2", nil, gone, "MIG-gone"),
			}},
			[]Use{
				{DeviceUUID: "MIG-gone", Device: gone, Holder: "ResourceClaim ns/c2", Claim: "ns/c2"},
				{DeviceUUID: "MIG-0-4", Device: mig4, Holder: "ns/p1", Claim: "ns/c1"},
			},
		},
		{
			"a claim two pods share: both hold its device, from each source",
			Sources{
				Claims: []resourceapi.ResourceClaim{claim("ns", "c1", []string{"p1", "p2"}, ours(mig0))},
				PodResources: &podresourcesv1.ListPodResourcesResponse{PodResources: append(
					podResources("ns", "p1", "c1", ours(mig0)).PodResources,
					podResources("ns", "p2", "c1", ours(mig0)).PodResources...)},
				Prepared: []PreparedClaim{prepared("ns", "c1", []string{"ns/p1"}, mig0, "MIG-0-0")},
			},
			[]Use{
				{DeviceUUID: "MIG-0-0", Device: mig0, Holder: "ns/p1", Claim: "ns/c1"},
				{DeviceUUID: "MIG-0-0", Device: mig0, Holder: "ns/p2", Claim: "ns/c1"},
			},
		},
		{
			"a shared claim whose first pod ended: the API's reservedFor, not the checkpoint's pods, names its holder",
			Sources{
				Claims:   []resourceapi.ResourceClaim{claim("ns", "c1", []string{"p2"}, ours(mig0))},
				Prepared: []PreparedClaim{prepared("ns", "c1", []string{"ns/p1"}, mig0, "MIG-0-0")},
			},
			[]Use{{DeviceUUID: "MIG-0-0", Device: mig0, Holder: "ns/p2", Claim: "ns/c1"}},
		},
		{
			"a shared claim the API still has, its device gone from the layout: its pods hold the recorded UUID",
			Sources{
				Claims:   []resourceapi.ResourceClaim{claim("ns", "c2", []string{"p2", "p3"}, ours(gone))},
				Prepared: []PreparedClaim{prepared("ns", "c2", []string{"ns/p2"}, gone, "MIG-gone")},
			},
			[]Use{
				{DeviceUUID: "MIG-gone", Device: gone, Holder: "ns/p2", Claim: "ns/c2"},
				{DeviceUUID: "MIG-gone", Device: gone, Holder: "ns/p3", Claim: "ns/c2"},
			},
		},
		{
			"a prepared claim the API has under another UID (made again under its name): the checkpoint's pods",
			Sources{
				Claims: []resourceapi.ResourceClaim{func() resourceapi.ResourceClaim {
					c := claim("ns", "c1", []string{"p9"}, ours(mig4))
					c.UID = "uid-new"
					return c
				}()},
				Prepared: []PreparedClaim{prepared("ns", "c1", []string{"ns/p1"}, mig0, "MIG-0-0")},
			},
			[]Use{
				{DeviceUUID: "MIG-0-0", Device: mig0, Holder: "ns/p1", Claim: "ns/c1"},
				{DeviceUUID: "MIG-0-4", Device: mig4, Holder: "ns/p9", Claim: "ns/c1"},
			},
		},
		{
			"the same hold seen by all three sources is reported once",
			Sources{
				Claims:       []resourceapi.ResourceClaim{claim("ns", "c1", []string{"p1"}, ours(mig0))},
				PodResources: podResources("ns", "p1", "c1", ours(mig0)),
				Prepared:     []PreparedClaim{prepared("ns", "c1", []string{"ns/p1"}, mig0, "MIG-0-0")},
			},
			[]Use{{DeviceUUID: "MIG-0-0", Device: mig0, Holder: "ns/p1", Claim: "ns/c1"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Uses(devs, DriverName, "node-a", tt.src)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want,+got):\n%s", diff)
			}
		})
	}
}
