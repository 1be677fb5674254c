package deviceplugin

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/testsupport/testutil"
)

const (
	resource1g = "nvidia.com/mig-1g.10gb"
	resource3g = "nvidia.com/mig-3g.40gb"
	resource7g = "nvidia.com/mig-7g.80gb"
)

func TestUnpublished(t *testing.T) {
	dev := func(id string, healthy, draining bool) DeviceStatus {
		return DeviceStatus{Device: Device{ID: id}, Healthy: healthy, Draining: draining}
	}
	served := []ResourceStatus{
		{Name: resource3g, Devices: []DeviceStatus{dev("a", true, false), dev("b", true, false)}},
		{Name: resource1g, Devices: []DeviceStatus{dev("c", true, false), dev("d", false, false), dev("e", true, true)}},
		{Name: resource7g, Devices: []DeviceStatus{}},
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

	refused := []ResourceStatus{{Name: resource3g, RegisterError: "kubelet down", Devices: []DeviceStatus{dev("a", true, false)}}}
	if diff := cmp.Diff([]string{"nvidia.com/mig-3g.40gb 0 of 1 (registration refused: kubelet down)"}, unpublished(nil, refused)); diff != "" {
		t.Errorf("refused registration (-want +got):\n%s", diff)
	}
}

func TestServedLayout(t *testing.T) {
	dev := func(id string, healthy bool) DeviceStatus {
		return DeviceStatus{Device: Device{ID: id}, Healthy: healthy}
	}
	a := []ResourceStatus{{Name: "y", Devices: []DeviceStatus{dev("1", true)}}, {Name: "x", Devices: []DeviceStatus{dev("2", true)}}}
	sameUnhealthy := []ResourceStatus{{Name: "x", Devices: []DeviceStatus{dev("2", false)}}, {Name: "y", Devices: []DeviceStatus{dev("1", true)}}}
	other := []ResourceStatus{{Name: "x", Devices: []DeviceStatus{dev("2", true), dev("3", true)}}, {Name: "y", Devices: []DeviceStatus{dev("1", true)}}}
	if servedLayout(a) != servedLayout(sameUnhealthy) {
		t.Error("health or order changed the layout's identity")
	}
	if servedLayout(a) == servedLayout(other) {
		t.Error("another device set has the same identity")
	}
}

// What the node agent asks of a Manager, before it runs: Serve under its
// strategy, Servable, Served with health, and Visible against a Node.
func TestManagerAsTheAgentsServer(t *testing.T) {
	h := newFakeHealth()
	m, err := New(Options{PluginDir: testutil.SocketDir(t), MigStrategy: MigStrategySingle, Health: h})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	one := []mig.GPU{migGPU(0, inst("3g.40gb", 0, 4, 2), inst("3g.40gb", 4, 4, 1))}
	two := []mig.GPU{migGPU(0, inst("4g.40gb", 0, 4, 1), inst("3g.40gb", 4, 4, 2))}
	if err := m.Servable(one); err != nil {
		t.Errorf("Servable(one profile) = %v", err)
	}
	err = m.Servable(two)
	if err == nil || !strings.HasPrefix(err.Error(), "the layout cannot be served under --mig-strategy=single: ") {
		t.Errorf("Servable(two profiles) = %v, want the strategy named", err)
	}
	if err := m.Serve(ctx, one); err != nil {
		t.Fatal(err)
	}
	h.set("MIG-0-1", 79)
	m.mu.Lock()
	m.refreshHealthLocked()
	m.mu.Unlock()
	if diff := cmp.Diff(map[string]map[string]bool{resourceGPU: {"MIG-0-2": true, "MIG-0-1": false}}, m.Served()); diff != "" {
		t.Errorf("Served() (-want +got):\n%s", diff)
	}
	err = m.Serve(ctx, two)
	if err == nil || !strings.Contains(err.Error(), "--mig-strategy=single") || !strings.Contains(err.Error(), "keeping the previous devices that still exist") {
		t.Errorf("Serve(two profiles) = %v", err)
	}

	node := &corev1.Node{}
	layout, missing, err := m.Visible(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"nvidia.com/gpu 0 of 1"}; !cmp.Equal(want, missing) {
		t.Errorf("Visible() missing %q, want %q", missing, want)
	}
	node.Status.Allocatable = corev1.ResourceList{corev1.ResourceName(resourceGPU): *resource.NewQuantity(1, resource.DecimalSI)}
	if again, missing, _ := m.Visible(ctx, node); again != layout || missing != nil {
		t.Errorf("Visible() once published = %q, %q; want %q and nothing missing", again, missing, layout)
	}
	if who, where, hint := m.Publisher(); who != "the kubelet" || where != "the Node's allocatable" || !strings.Contains(hint, "registration") {
		t.Errorf("Publisher() = %q, %q, %q", who, where, hint)
	}
	if got := m.Labels(one)[nodeinfo.LabelMigStrategy]; got != "single" {
		t.Errorf("Labels() strategy label %q", got)
	}
	if got := m.Labels(one)[nodeinfo.LabelServing]; got != nodeinfo.ServingDevicePlugin {
		t.Errorf("Labels() serving label %q, want %q", got, nodeinfo.ServingDevicePlugin)
	}
}

func TestGFDLabels(t *testing.T) {
	const product = "H100-SXM5-80GB"
	tests := []struct {
		name     string
		gpus     []mig.GPU
		strategy MigStrategy
		want     map[string]string
	}{
		{
			name:     "no GPUs",
			strategy: MigStrategyMixed,
			want:     map[string]string{nodeinfo.LabelGPUCount: "0", nodeinfo.LabelMigCapable: "false", nodeinfo.LabelMigStrategy: "mixed"},
		},
		{
			name:     "mixed: physical GPUs and a count per profile",
			strategy: MigStrategyMixed,
			gpus: []mig.GPU{
				migGPU(0, inst("3g.40gb", 0, 4, 1), inst("2g.20gb", 4, 2, 2), inst("1g.10gb+me", 6, 1, 3)),
				migGPU(1, inst("3g.40gb", 0, 4, 1)),
				plainGPU(2),
			},
			want: map[string]string{
				nodeinfo.LabelGPUCount: "3", nodeinfo.LabelGPUProduct: product, nodeinfo.LabelMigCapable: "true", nodeinfo.LabelMigStrategy: "mixed",
				"nvidia.com/mig-3g.40gb.count": "2", "nvidia.com/mig-2g.20gb.count": "1", "nvidia.com/mig-1g.10gb.me.count": "1",
			},
		},
		{
			name:     "a GPU instance without compute instance is no device",
			strategy: MigStrategyMixed,
			gpus:     []mig.GPU{migGPU(0, inst("3g.40gb", 0, 4, 1), mig.Instance{Profile: "3g.40gb", Start: 4, Size: 4, GIID: 2})},
			want: map[string]string{
				nodeinfo.LabelGPUCount: "1", nodeinfo.LabelGPUProduct: product, nodeinfo.LabelMigCapable: "true", nodeinfo.LabelMigStrategy: "mixed",
				"nvidia.com/mig-3g.40gb.count": "1",
			},
		},
		{
			name:     "single with one profile: gpu.* describe the MIG devices",
			strategy: MigStrategySingle,
			gpus:     []mig.GPU{migGPU(0, inst("3g.40gb", 0, 4, 1), inst("3g.40gb", 4, 4, 2)), migGPU(1, inst("3g.40gb", 0, 4, 1))},
			want: map[string]string{
				nodeinfo.LabelGPUCount: "3", nodeinfo.LabelGPUProduct: product + "-MIG-3g.40gb", nodeinfo.LabelMigCapable: "true", nodeinfo.LabelMigStrategy: "single",
				"nvidia.com/mig-3g.40gb.count": "3",
			},
		},
		{
			name:     "single with a GPU without MIG: physical GPUs",
			strategy: MigStrategySingle,
			gpus:     []mig.GPU{migGPU(0, inst("3g.40gb", 0, 4, 1)), plainGPU(1)},
			want: map[string]string{
				nodeinfo.LabelGPUCount: "2", nodeinfo.LabelGPUProduct: product, nodeinfo.LabelMigCapable: "true", nodeinfo.LabelMigStrategy: "single",
				"nvidia.com/mig-3g.40gb.count": "1",
			},
		},
		{
			name:     "none: no MIG resources, no counts",
			strategy: MigStrategyNone,
			gpus:     []mig.GPU{migGPU(0, inst("3g.40gb", 0, 4, 1))},
			want:     map[string]string{nodeinfo.LabelGPUCount: "1", nodeinfo.LabelGPUProduct: product, nodeinfo.LabelMigCapable: "true", nodeinfo.LabelMigStrategy: "none"},
		},
		{
			name:     "not MIG capable",
			strategy: MigStrategyMixed,
			gpus:     []mig.GPU{{Index: 0, UUID: "GPU-t4", Model: "Tesla T4"}},
			want:     map[string]string{nodeinfo.LabelGPUCount: "1", nodeinfo.LabelGPUProduct: "Tesla-T4", nodeinfo.LabelMigCapable: "false", nodeinfo.LabelMigStrategy: "mixed"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, GFDLabels(tc.gpus, tc.strategy)); diff != "" {
				t.Errorf("GFDLabels() (-want +got):\n%s", diff)
			}
		})
	}
}

// The GFD count labels of media-extension and graphics profiles: one per
// variant, named like its resource, each a valid label key.
func TestGFDLabelsMediaVariants(t *testing.T) {
	gpus := []mig.GPU{
		migGPU(0, inst("1g.24gb+me.all", 0, 3, 1), inst("1g.24gb-me", 3, 3, 2), inst("1g.24gb-me", 6, 3, 3), inst("1g.24gb+gfx", 9, 3, 4)),
		migGPU(1, inst("1g.10gb+me", 0, 1, 1)),
	}
	labels := GFDLabels(gpus, MigStrategyMixed)
	want := map[string]string{
		"nvidia.com/mig-1g.24gb.me.all.count": "1",
		"nvidia.com/mig-1g.24gb-me.count":     "2",
		"nvidia.com/mig-1g.24gb.gfx.count":    "1",
		"nvidia.com/mig-1g.10gb.me.count":     "1",
	}
	for k, v := range want {
		if labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, labels[k], v)
		}
	}
	for k := range labels {
		if strings.HasPrefix(k, "nvidia.com/mig-") {
			if _, ok := want[k]; !ok {
				t.Errorf("unexpected label %s", k)
			}
		}
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			t.Errorf("label key %s: %v", k, errs)
		}
	}
}

func TestLabelValue(t *testing.T) {
	tests := map[string]string{
		"NVIDIA H100 80GB HBM3":             "NVIDIA-H100-80GB-HBM3",
		"A100-SXM4-40GB":                    "A100-SXM4-40GB",
		"  (weird)  name!! ":                "weird-name",
		strings.Repeat("x", 100):            strings.Repeat("x", 63),
		"a" + strings.Repeat("-", 70) + "b": "a",
	}
	for in, want := range tests {
		if got := labelValue(in); got != want {
			t.Errorf("labelValue(%q) = %q, want %q", in, got, want)
		}
	}
}
