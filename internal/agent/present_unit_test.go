package agent

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/migflex/migflex/internal/deviceplugin"
)

func TestUnpublished(t *testing.T) {
	dev := func(id string, healthy, draining bool) deviceplugin.DeviceStatus {
		return deviceplugin.DeviceStatus{Device: deviceplugin.Device{ID: id}, Healthy: healthy, Draining: draining}
	}
	served := []deviceplugin.ResourceStatus{
		{Name: resource3g, Devices: []deviceplugin.DeviceStatus{dev("a", true, false), dev("b", true, false)}},
		{Name: resource1g, Devices: []deviceplugin.DeviceStatus{dev("c", true, false), dev("d", false, false), dev("e", true, true)}},
		{Name: resource7g, Devices: []deviceplugin.DeviceStatus{}},
	}
	q := func(n int64) resource.Quantity { return *resource.NewQuantity(n, resource.DecimalSI) }
	tests := []struct {
		name        string
		allocatable corev1.ResourceList
		want        []string
	}{
		{"published: unhealthy and draining devices are not allocatable, a resource without devices may be absent",
			corev1.ResourceList{resource3g: q(2), resource1g: q(1)}, nil},
		{"published with an explicit 0", corev1.ResourceList{resource3g: q(2), resource1g: q(1), resource7g: q(0)}, nil},
		{"nothing yet", nil, []string{"nvidia.com/mig-1g.10gb 0 of 1", "nvidia.com/mig-3g.40gb 0 of 2"}},
		{"an old count", corev1.ResourceList{resource3g: q(2), resource1g: q(1), resource7g: q(1)}, []string{"nvidia.com/mig-7g.80gb 1 of 0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, unpublished(tc.allocatable, served)); diff != "" {
				t.Errorf("unpublished() (-want +got):\n%s", diff)
			}
		})
	}

	refused := []deviceplugin.ResourceStatus{{Name: resource3g, RegisterError: "kubelet down", Devices: []deviceplugin.DeviceStatus{dev("a", true, false)}}}
	if diff := cmp.Diff([]string{"nvidia.com/mig-3g.40gb 0 of 1 (registration refused: kubelet down)"}, unpublished(nil, refused)); diff != "" {
		t.Errorf("refused registration (-want +got):\n%s", diff)
	}
}

func TestServedLayout(t *testing.T) {
	dev := func(id string, healthy bool) deviceplugin.DeviceStatus {
		return deviceplugin.DeviceStatus{Device: deviceplugin.Device{ID: id}, Healthy: healthy}
	}
	a := []deviceplugin.ResourceStatus{{Name: "y", Devices: []deviceplugin.DeviceStatus{dev("1", true)}}, {Name: "x", Devices: []deviceplugin.DeviceStatus{dev("2", true)}}}
	sameUnhealthy := []deviceplugin.ResourceStatus{{Name: "x", Devices: []deviceplugin.DeviceStatus{dev("2", false)}}, {Name: "y", Devices: []deviceplugin.DeviceStatus{dev("1", true)}}}
	other := []deviceplugin.ResourceStatus{{Name: "x", Devices: []deviceplugin.DeviceStatus{dev("2", true), dev("3", true)}}, {Name: "y", Devices: []deviceplugin.DeviceStatus{dev("1", true)}}}
	if servedLayout(a) != servedLayout(sameUnhealthy) {
		t.Error("health or order changed the layout's identity")
	}
	if servedLayout(a) == servedLayout(other) {
		t.Error("another device set has the same identity")
	}
}
