package agent

import (
	"encoding/json"
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
			want:     map[string]string{LabelGPUCount: "0", LabelMigCapable: "false", LabelMigStrategy: "mixed"},
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
				LabelGPUCount: "3", LabelGPUProduct: "NVIDIA-H100-80GB-HBM3", LabelMigCapable: "true", LabelMigStrategy: "mixed",
				"nvidia.com/mig-3g.40gb.count": "2", "nvidia.com/mig-2g.20gb.count": "1", "nvidia.com/mig-1g.10gb.me.count": "1",
			},
		},
		{
			name:     "a GPU instance without compute instance is no device",
			strategy: deviceplugin.MigStrategyMixed,
			gpus:     []mig.GPU{h100(0, true, inst("3g.40gb", 0, 4, 1), mig.Instance{Profile: "3g.40gb", Start: 4, Size: 4, GIID: 2})},
			want: map[string]string{
				LabelGPUCount: "1", LabelGPUProduct: "NVIDIA-H100-80GB-HBM3", LabelMigCapable: "true", LabelMigStrategy: "mixed",
				"nvidia.com/mig-3g.40gb.count": "1",
			},
		},
		{
			name:     "single with one profile: gpu.* describe the MIG devices",
			strategy: deviceplugin.MigStrategySingle,
			gpus:     []mig.GPU{h100(0, true, inst("3g.40gb", 0, 4, 1), inst("3g.40gb", 4, 4, 2)), h100(1, true, inst("3g.40gb", 0, 4, 1))},
			want: map[string]string{
				LabelGPUCount: "3", LabelGPUProduct: "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb", LabelMigCapable: "true", LabelMigStrategy: "single",
				"nvidia.com/mig-3g.40gb.count": "3",
			},
		},
		{
			name:     "single with a GPU without MIG: physical GPUs",
			strategy: deviceplugin.MigStrategySingle,
			gpus:     []mig.GPU{h100(0, true, inst("3g.40gb", 0, 4, 1)), h100(1, false)},
			want: map[string]string{
				LabelGPUCount: "2", LabelGPUProduct: "NVIDIA-H100-80GB-HBM3", LabelMigCapable: "true", LabelMigStrategy: "single",
				"nvidia.com/mig-3g.40gb.count": "1",
			},
		},
		{
			name:     "none: no MIG resources, no counts",
			strategy: deviceplugin.MigStrategyNone,
			gpus:     []mig.GPU{h100(0, true, inst("3g.40gb", 0, 4, 1))},
			want:     map[string]string{LabelGPUCount: "1", LabelGPUProduct: "NVIDIA-H100-80GB-HBM3", LabelMigCapable: "true", LabelMigStrategy: "none"},
		},
		{
			name:     "not MIG capable",
			strategy: deviceplugin.MigStrategyMixed,
			gpus:     []mig.GPU{{Index: 0, UUID: "GPU-t4", Model: "Tesla T4"}},
			want:     map[string]string{LabelGPUCount: "1", LabelGPUProduct: "Tesla-T4", LabelMigCapable: "false", LabelMigStrategy: "mixed"},
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

func TestLayoutAnnotation(t *testing.T) {
	gpus := []mig.GPU{
		h100(1, false),
		h100(0, true, inst("2g.20gb", 4, 2, 2), inst("3g.40gb", 0, 4, 1), mig.Instance{Profile: "1g.10gb", Start: 6, Size: 1, GIID: 3}),
		{Index: 2, UUID: "GPU-t4", Model: "Tesla T4"},
		{Index: 3, UUID: "GPU-amp", Model: "A100-SXM4-40GB", MigCapable: true, MigEnabled: false, MigPending: true},
	}
	served := map[string]bool{migUUID(1): true, migUUID(2): false, gpuUUID(1): true}
	// The kubelet's assignments: MIG-1 by two pods (sorted), the whole GPU
	// 1, an ID no device of this node has, and one of GPU 0 (MIG on: its
	// whole-GPU ID is no device then).
	inUse := map[string][]string{migUUID(1): {"a/p", "b/q"}, gpuUUID(1): {"ml/train"}, "MIG-gone": {"x/y"}, gpuUUID(0): {"x/z"}}
	got, err := layoutAnnotation(gpus, served, inUse)
	if err != nil {
		t.Fatal(err)
	}
	var decoded []LayoutGPU
	if err := json.Unmarshal([]byte(got), &decoded); err != nil {
		t.Fatalf("the annotation is not JSON: %v\n%s", err, got)
	}
	want := []LayoutGPU{
		{Index: 0, UUID: gpuUUID(0), Model: "NVIDIA H100 80GB HBM3", MigMode: "Enabled", Instances: []LayoutInstance{
			{Profile: "3g.40gb", Placement: LayoutPlacement{Start: 0, Size: 4}, GI: 1, UUID: migUUID(1), Health: HealthHealthy, UsedBy: []string{"a/p", "b/q"}},
			{Profile: "2g.20gb", Placement: LayoutPlacement{Start: 4, Size: 2}, GI: 2, UUID: migUUID(2), Health: HealthUnhealthy},
			{Profile: "1g.10gb", Placement: LayoutPlacement{Start: 6, Size: 1}, GI: 3, Health: HealthNotServed},
		}},
		{Index: 1, UUID: gpuUUID(1), Model: "NVIDIA H100 80GB HBM3", MigMode: "Disabled", Health: HealthHealthy, UsedBy: []string{"ml/train"}},
		{Index: 2, UUID: "GPU-t4", Model: "Tesla T4", MigMode: "N/A", Health: HealthNotServed},
		{Index: 3, UUID: "GPU-amp", Model: "A100-SXM4-40GB", MigMode: "Disabled (pending Enabled)", Health: HealthNotServed},
	}
	if diff := cmp.Diff(want, decoded); diff != "" {
		t.Errorf("layout (-want +got):\n%s", diff)
	}
	// The wire form is what users and tools read: pin its field names.
	const wantGPU0 = `{"index":0,"uuid":"GPU-a","model":"NVIDIA H100 80GB HBM3","migMode":"Enabled","instances":[{"profile":"3g.40gb","placement":{"start":0,"size":4},"gi":1,"ci":0,"uuid":"MIG-1","health":"Healthy","usedBy":["a/p","b/q"]},`
	if !strings.HasPrefix(got, "["+wantGPU0) {
		t.Errorf("annotation starts\n%s\nwant\n[%s", got[:min(len(got), len(wantGPU0)+1)], wantGPU0)
	}
}

func TestProfilesAnnotation(t *testing.T) {
	h := func(i int) mig.GPU {
		g := h100(i, true)
		g.Profiles = []mig.Profile{{Name: "1g.10gb", Slices: 1, MemorySlices: 1, MaxCount: 7, Placements: []int{0, 1, 2, 3, 4, 5, 6}}}
		return g
	}
	a100 := mig.GPU{Index: 2, Model: "A100-SXM4-40GB", MigCapable: true, Profiles: []mig.Profile{{Name: "7g.40gb", Slices: 7, MemorySlices: 8, MaxCount: 1, Placements: []int{0}}}}
	t4 := mig.GPU{Index: 3, Model: "Tesla T4"}
	tests := []struct {
		name string
		gpus []mig.GPU
		want []nodeinfo.Model
	}{
		{name: "no MIG-capable GPU: no annotation", gpus: []mig.GPU{t4}},
		{
			name: "each model once, by name",
			gpus: []mig.GPU{h(0), h(1), t4, a100},
			want: []nodeinfo.Model{{Name: "A100-SXM4-40GB", Profiles: a100.Profiles}, {Name: "NVIDIA H100 80GB HBM3", Profiles: h(0).Profiles}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := profilesAnnotation(tc.gpus)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == nil {
				if got != "" {
					t.Fatalf("annotation %q, want none", got)
				}
				return
			}
			decoded, err := nodeinfo.ParseProfiles(got)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, decoded); diff != "" {
				t.Errorf("profiles (-want +got):\n%s", diff)
			}
		})
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
	layoutJSON, err := layoutAnnotation(gpus, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	base := map[string]string{
		LabelGPUCount: "1", LabelGPUProduct: "NVIDIA-H100-80GB-HBM3", LabelMigCapable: "true", LabelMigStrategy: "mixed",
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
		{"no source: no state, no reason", status{}, base, map[string]string{AnnotationLayout: layoutJSON}},
		{"success", status{State: StateSuccess}, with(base, LabelMigConfigState, "success"), map[string]string{AnnotationLayout: layoutJSON}},
		{"success with a note", status{StateSuccess, "run.ai/mig.config ignored"}, with(base, LabelMigConfigState, "success"), map[string]string{AnnotationLayout: layoutJSON, AnnotationReason: "run.ai/mig.config ignored"}},
		{"success with what was left out", status{StateSuccess, "entry 0 matches no GPU"}, with(base, LabelMigConfigState, "success"), map[string]string{AnnotationLayout: layoutJSON, AnnotationReason: "entry 0 matches no GPU"}},
		{"pending", status{StatePending, "GPU 0: ns/p"}, with(base, LabelMigConfigState, "pending"), map[string]string{AnnotationLayout: layoutJSON, AnnotationReason: "GPU 0: ns/p"}},
		{"failed", status{StateFailed, "bad"}, with(base, LabelMigConfigState, "failed"), map[string]string{AnnotationLayout: layoutJSON, AnnotationReason: "bad"}},
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
