package agent

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/migflex/migflex/internal/deviceplugin"
	"github.com/migflex/migflex/internal/mig"
	"github.com/migflex/migflex/internal/nodeinfo"
)

// Fixture GPUs. The UUIDs are what the device plugin serves as device IDs.
func h100(index int, migOn bool, instances ...mig.Instance) mig.GPU {
	return mig.GPU{
		Index: index, UUID: gpuUUID(index), Model: "NVIDIA H100 80GB HBM3",
		MigCapable: true, MigEnabled: migOn, MigPending: migOn, Instances: instances,
	}
}

func gpuUUID(index int) string { return "GPU-" + string(rune('a'+index)) }

func inst(profile string, start, size int, gi uint32) mig.Instance {
	return mig.Instance{Profile: profile, Start: start, Size: size, GIID: gi, CIID: 0, HasCI: true, UUID: migUUID(gi)}
}

func migUUID(gi uint32) string { return "MIG-" + string(rune('0'+gi)) }

func TestGFDLabels(t *testing.T) {
	tests := []struct {
		name     string
		gpus     []mig.GPU
		strategy deviceplugin.MigStrategy
		want     map[string]string
	}{
		{
			name:     "no GPUs",
			strategy: deviceplugin.MigStrategyMixed,
			want:     map[string]string{nodeinfo.LabelGPUCount: "0", nodeinfo.LabelMigCapable: "false", nodeinfo.LabelMigStrategy: "mixed"},
		},
		{
			name:     "mixed: physical GPUs and a count per profile",
			strategy: deviceplugin.MigStrategyMixed,
			gpus: []mig.GPU{
				h100(0, true, inst("3g.40gb", 0, 4, 1), inst("2g.20gb", 4, 2, 2), inst("1g.10gb+me", 6, 1, 3)),
				h100(1, true, inst("3g.40gb", 0, 4, 1)),
				h100(2, false),
			},
			want: map[string]string{
				nodeinfo.LabelGPUCount: "3", nodeinfo.LabelGPUProduct: "NVIDIA-H100-80GB-HBM3", nodeinfo.LabelMigCapable: "true", nodeinfo.LabelMigStrategy: "mixed",
				"nvidia.com/mig-3g.40gb.count": "2", "nvidia.com/mig-2g.20gb.count": "1", "nvidia.com/mig-1g.10gb.me.count": "1",
			},
		},
		{
			name:     "a GPU instance without compute instance is no device",
			strategy: deviceplugin.MigStrategyMixed,
			gpus:     []mig.GPU{h100(0, true, inst("3g.40gb", 0, 4, 1), mig.Instance{Profile: "3g.40gb", Start: 4, Size: 4, GIID: 2})},
			want: map[string]string{
				nodeinfo.LabelGPUCount: "1", nodeinfo.LabelGPUProduct: "NVIDIA-H100-80GB-HBM3", nodeinfo.LabelMigCapable: "true", nodeinfo.LabelMigStrategy: "mixed",
				"nvidia.com/mig-3g.40gb.count": "1",
			},
		},
		{
			name:     "single with one profile: gpu.* describe the MIG devices",
			strategy: deviceplugin.MigStrategySingle,
			gpus:     []mig.GPU{h100(0, true, inst("3g.40gb", 0, 4, 1), inst("3g.40gb", 4, 4, 2)), h100(1, true, inst("3g.40gb", 0, 4, 1))},
			want: map[string]string{
				nodeinfo.LabelGPUCount: "3", nodeinfo.LabelGPUProduct: "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb", nodeinfo.LabelMigCapable: "true", nodeinfo.LabelMigStrategy: "single",
				"nvidia.com/mig-3g.40gb.count": "3",
			},
		},
		{
			name:     "single with a GPU without MIG: physical GPUs",
			strategy: deviceplugin.MigStrategySingle,
			gpus:     []mig.GPU{h100(0, true, inst("3g.40gb", 0, 4, 1)), h100(1, false)},
			want: map[string]string{
				nodeinfo.LabelGPUCount: "2", nodeinfo.LabelGPUProduct: "NVIDIA-H100-80GB-HBM3", nodeinfo.LabelMigCapable: "true", nodeinfo.LabelMigStrategy: "single",
				"nvidia.com/mig-3g.40gb.count": "1",
			},
		},
		{
			name:     "none: no MIG resources, no counts",
			strategy: deviceplugin.MigStrategyNone,
			gpus:     []mig.GPU{h100(0, true, inst("3g.40gb", 0, 4, 1))},
			want:     map[string]string{nodeinfo.LabelGPUCount: "1", nodeinfo.LabelGPUProduct: "NVIDIA-H100-80GB-HBM3", nodeinfo.LabelMigCapable: "true", nodeinfo.LabelMigStrategy: "none"},
		},
		{
			name:     "not MIG capable",
			strategy: deviceplugin.MigStrategyMixed,
			gpus:     []mig.GPU{{Index: 0, UUID: "GPU-t4", Model: "Tesla T4"}},
			want:     map[string]string{nodeinfo.LabelGPUCount: "1", nodeinfo.LabelGPUProduct: "Tesla-T4", nodeinfo.LabelMigCapable: "false", nodeinfo.LabelMigStrategy: "mixed"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, gfdLabels(tc.gpus, tc.strategy)); diff != "" {
				t.Errorf("gfdLabels() (-want +got):\n%s", diff)
			}
		})
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

func TestTruncate(t *testing.T) {
	short := "fits"
	if got := truncate(short); got != short {
		t.Errorf("truncate(%q) = %q", short, got)
	}
	long := strings.Repeat("é", maxMessageLength) // 2 bytes each
	got := truncate(long)
	if len(got) > maxMessageLength || !strings.HasSuffix(got, " ... (truncated)") {
		t.Errorf("truncate(long) has %d bytes and ends %q", len(got), got[len(got)-20:])
	}
	if !strings.HasPrefix(got, "éé") || strings.ContainsRune(got, '\uFFFD') {
		t.Errorf("truncate(long) cut a rune: %q", got[:10])
	}
}

func TestServedHealth(t *testing.T) {
	res := []deviceplugin.ResourceStatus{
		{Name: "nvidia.com/mig-3g.40gb", Devices: []deviceplugin.DeviceStatus{
			{Device: deviceplugin.Device{ID: "MIG-1"}, Healthy: true},
			{Device: deviceplugin.Device{ID: "MIG-2"}, Healthy: false},
		}},
		{Name: "nvidia.com/mig-1g.10gb", Devices: []deviceplugin.DeviceStatus{}},
		{Name: "nvidia.com/gpu", Devices: []deviceplugin.DeviceStatus{{Device: deviceplugin.Device{ID: "GPU-b"}, Healthy: true}}},
	}
	want := map[string]bool{"MIG-1": true, "MIG-2": false, "GPU-b": true}
	if diff := cmp.Diff(want, servedHealth(res)); diff != "" {
		t.Errorf("servedHealth() (-want +got):\n%s", diff)
	}
}

func TestOwnedMetadata(t *testing.T) {
	gpus := []mig.GPU{h100(0, true, inst("3g.40gb", 0, 4, 1))}
	layoutJSON, err := nodeinfo.EncodeLayout(gpus, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	base := map[string]string{
		nodeinfo.LabelGPUCount: "1", nodeinfo.LabelGPUProduct: "NVIDIA-H100-80GB-HBM3", nodeinfo.LabelMigCapable: "true", nodeinfo.LabelMigStrategy: "mixed",
		"nvidia.com/mig-3g.40gb.count": "1",
	}
	with := func(m map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	tests := []struct {
		name            string
		st              status
		wantLabels      map[string]string
		wantAnnotations map[string]string
	}{
		{"no source: no state, no reason", status{}, base, map[string]string{nodeinfo.AnnotationLayout: layoutJSON}},
		{"success", status{State: nodeinfo.StateSuccess}, with(base, nodeinfo.LabelMigConfigState, "success"), map[string]string{nodeinfo.AnnotationLayout: layoutJSON}},
		{"success with a note", status{nodeinfo.StateSuccess, "run.ai/mig.config ignored"}, with(base, nodeinfo.LabelMigConfigState, "success"), map[string]string{nodeinfo.AnnotationLayout: layoutJSON, nodeinfo.AnnotationReason: "run.ai/mig.config ignored"}},
		{"success with what was left out", status{nodeinfo.StateSuccess, "entry 0 matches no GPU"}, with(base, nodeinfo.LabelMigConfigState, "success"), map[string]string{nodeinfo.AnnotationLayout: layoutJSON, nodeinfo.AnnotationReason: "entry 0 matches no GPU"}},
		{"pending", status{nodeinfo.StatePending, "GPU 0: ns/p"}, with(base, nodeinfo.LabelMigConfigState, "pending"), map[string]string{nodeinfo.AnnotationLayout: layoutJSON, nodeinfo.AnnotationReason: "GPU 0: ns/p"}},
		{"failed", status{nodeinfo.StateFailed, "bad"}, with(base, nodeinfo.LabelMigConfigState, "failed"), map[string]string{nodeinfo.AnnotationLayout: layoutJSON, nodeinfo.AnnotationReason: "bad"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			labels, annotations, err := ownedMetadata(tc.st, gpus, nil, nil, deviceplugin.MigStrategyMixed)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantLabels, labels); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantAnnotations, annotations); diff != "" {
				t.Errorf("annotations (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReportingInstance(t *testing.T) {
	if got := reportingInstance("migflex-agent", "n1"); got != "migflex-agent-n1" {
		t.Errorf("reportingInstance() = %q", got)
	}
	long := strings.Repeat("n", 253)
	if got := reportingInstance("migflex-agent", long); len(got) != 128 || !strings.HasPrefix(got, "migflex-agent-nnn") {
		t.Errorf("reportingInstance(long) = %q (%d)", got, len(got))
	}
}
