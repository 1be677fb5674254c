package podresources_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/migflex/migflex/internal/nodeagent/podresources"
	"github.com/migflex/migflex/internal/nodeagent/podresources/podresourcestest"
)

func TestAllocatable(t *testing.T) {
	srv := podresourcestest.Start(t)
	srv.SetAllocatable(map[string][]string{
		"nvidia.com/mig-1g.10gb": {"MIG-a", "MIG-b"},
		"nvidia.com/gpu":         {"GPU-1"},
	})
	got, err := podresources.New(srv.Socket).Allocatable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"nvidia.com/mig-1g.10gb": {"MIG-a", "MIG-b"}, "nvidia.com/gpu": {"GPU-1"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Allocatable (-want +got):\n%s", diff)
	}
	if _, err := podresources.New(filepath.Join(t.TempDir(), "missing.sock")).Allocatable(context.Background()); err == nil || !strings.Contains(err.Error(), "missing.sock") {
		t.Errorf("without a kubelet: %v, want an error naming the socket", err)
	}
}

// The kubelet may list a resource's devices in several entries (one per
// device, with its topology); they are one resource's.
func TestAllocatableDevicesJoinsEntries(t *testing.T) {
	got := podresources.AllocatableDevices(&podresourcesv1.AllocatableResourcesResponse{Devices: []*podresourcesv1.ContainerDevices{
		{ResourceName: "nvidia.com/mig-1g.10gb", DeviceIds: []string{"MIG-a"}},
		{ResourceName: "nvidia.com/gpu", DeviceIds: []string{"GPU-1"}},
		{ResourceName: "nvidia.com/mig-1g.10gb", DeviceIds: []string{"MIG-b", "MIG-c"}},
	}})
	want := map[string][]string{"nvidia.com/mig-1g.10gb": {"MIG-a", "MIG-b", "MIG-c"}, "nvidia.com/gpu": {"GPU-1"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
