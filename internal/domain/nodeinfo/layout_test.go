package nodeinfo

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/mig"
)

// Fixture GPUs. The UUIDs are what the agent serves as device IDs.
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

func TestMigModeOf(t *testing.T) {
	for _, tc := range []struct {
		g    mig.GPU
		want string
	}{
		{mig.GPU{}, "N/A"},
		{mig.GPU{MigCapable: true}, "Disabled"},
		{mig.GPU{MigCapable: true, MigEnabled: true, MigPending: true}, "Enabled"},
		{mig.GPU{MigCapable: true, MigPending: true}, "Disabled (pending Enabled)"},
		{mig.GPU{MigCapable: true, MigEnabled: true}, "Enabled (pending Disabled)"},
	} {
		if got := MigModeOf(tc.g); got != tc.want {
			t.Errorf("MigModeOf(%+v) = %q, want %q", tc.g, got, tc.want)
		}
	}
}

func TestEncodeLayout(t *testing.T) {
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
	got, err := EncodeLayout(gpus, served, inUse, nil)
	if err != nil {
		t.Fatal(err)
	}
	var decoded []GPU
	if err := json.Unmarshal([]byte(got), &decoded); err != nil {
		t.Fatalf("the annotation is not JSON: %v\n%s", err, got)
	}
	want := []GPU{
		{Index: 0, UUID: gpuUUID(0), Model: "NVIDIA H100 80GB HBM3", MigMode: "Enabled", Instances: []Instance{
			{Profile: "3g.40gb", Placement: Placement{Start: 0, Size: 4}, GI: 1, UUID: migUUID(1), Health: HealthHealthy, UsedBy: []string{"a/p", "b/q"}},
			{Profile: "2g.20gb", Placement: Placement{Start: 4, Size: 2}, GI: 2, UUID: migUUID(2), Health: HealthUnhealthy},
			{Profile: "1g.10gb", Placement: Placement{Start: 6, Size: 1}, GI: 3, Health: HealthNotServed},
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

// What the agent encodes, a reader decodes to the same layout.
func TestLayoutRoundTrip(t *testing.T) {
	gpus := []mig.GPU{
		h100(0, true, inst("3g.40gb", 0, 4, 1), inst("2g.20gb", 4, 2, 2)),
		h100(1, false),
		{Index: 2, UUID: "GPU-t4", Model: "Tesla T4"},
	}
	served := map[string]bool{migUUID(1): true, migUUID(2): false, gpuUUID(1): true}
	inUse := map[string][]string{migUUID(1): {"ns/p"}, gpuUUID(1): {"ns/q", "ns/r"}}
	s, err := EncodeLayout(gpus, served, inUse, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseLayout(s)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Layout(gpus, served, inUse, nil), got); diff != "" {
		t.Errorf("ParseLayout(EncodeLayout()) (-want +got):\n%s", diff)
	}
	again, err := EncodeLayout(gpus, served, inUse, nil)
	if err != nil || again != s {
		t.Errorf("encoding is not stable: %v\n%s\n%s", err, s, again)
	}
}

// The API server keeps at most 256 KiB of annotations on an object; a
// layout that size (hundreds of GPUs' worth, far more than a node has)
// decodes whole, and every kind of hostile value is an error, never a
// partial layout.
func TestParseLayoutHostile(t *testing.T) {
	const annotationLimit = 256 << 10
	gpu := func(i int) GPU {
		g := GPU{Index: i, UUID: fmt.Sprintf("GPU-%08d", i), Model: "NVIDIA H100 80GB HBM3", MigMode: MigModeEnabled}
		for j := range 7 {
			g.Instances = append(g.Instances, Instance{Profile: "1g.10gb", Placement: Placement{Start: j, Size: 1}, GI: uint32(j + 1), UUID: fmt.Sprintf("MIG-%08d-%d", i, j), Health: HealthHealthy, UsedBy: []string{"ns/pod"}})
		}
		return g
	}
	one, _ := json.Marshal(gpu(0))
	gpus := make([]GPU, annotationLimit/(len(one)+1))
	for i := range gpus {
		gpus[i] = gpu(i)
	}
	b, _ := json.Marshal(gpus)
	got, err := ParseLayout(string(b))
	if err != nil || len(got) != len(gpus) || len(got[len(got)-1].Instances) != 7 {
		t.Fatalf("a %d-byte layout of %d GPUs: decoded %d, error %v", len(b), len(gpus), len(got), err)
	}

	for _, tc := range []struct{ name, value string }{
		{"empty", ""},
		{"not JSON", "GPU 0: 3g.40gb"},
		{"an object, not a list", `{"index":0}`},
		{"truncated", string(b[:len(b)/2])},
		{"GI id over uint32", `[{"index":0,"instances":[{"gi":4294967296}]}]`},
		{"index not a number", `[{"index":"0"}]`},
		{"index past int64", `[{"index":1e30}]`},
		{"nested past the decoder's depth", strings.Repeat("[", 20000) + strings.Repeat("]", 20000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseLayout(tc.value)
			if err == nil || got != nil {
				t.Fatalf("ParseLayout() = %v, %v; want nothing and an error", got, err)
			}
			if !strings.Contains(err.Error(), AnnotationLayout) {
				t.Errorf("error %q does not name the annotation", err)
			}
		})
	}
}

func TestLayoutShared(t *testing.T) {
	gpus := []mig.GPU{
		h100(0, true, inst("1g.10gb", 6, 1, 3), inst("3g.40gb", 0, 4, 1)),
		h100(1, false),
	}
	served := map[string]bool{migUUID(3): true, migUUID(1): true, gpuUUID(1): true}
	inUse := map[string][]string{migUUID(3): {"a/p", "b/q"}, gpuUUID(1): {"c/r"}}
	shared := map[string]Shared{
		migUUID(3): {Resource: "nvidia.com/mig-1g.10gb", Replicas: 2, InUse: 2},
		gpuUUID(1): {Resource: "nvidia.com/gpu.shared", Replicas: 4, InUse: 1},
		// Not a device of this layout: left out.
		"MIG-gone": {Resource: "nvidia.com/mig-1g.10gb", Replicas: 2},
	}
	s, err := EncodeLayout(gpus, served, inUse, shared)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"index":0,"uuid":"GPU-a","model":"NVIDIA H100 80GB HBM3","migMode":"Enabled","instances":[` +
		`{"profile":"3g.40gb","placement":{"start":0,"size":4},"gi":1,"ci":0,"uuid":"MIG-1","health":"Healthy"},` +
		`{"profile":"1g.10gb","placement":{"start":6,"size":1},"gi":3,"ci":0,"uuid":"MIG-3","health":"Healthy","usedBy":["a/p","b/q"],` +
		`"shared":{"resource":"nvidia.com/mig-1g.10gb","replicas":2,"inUse":2}}]},` +
		`{"index":1,"uuid":"GPU-b","model":"NVIDIA H100 80GB HBM3","migMode":"Disabled","health":"Healthy","usedBy":["c/r"],` +
		`"shared":{"resource":"nvidia.com/gpu.shared","replicas":4,"inUse":1}}]`
	if s != want {
		t.Errorf("EncodeLayout() =\n%s\nwant\n%s", s, want)
	}
	got, err := ParseLayout(s)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Layout(gpus, served, inUse, shared), got); diff != "" {
		t.Errorf("ParseLayout(EncodeLayout()) (-want +got):\n%s", diff)
	}
}

func TestHeld(t *testing.T) {
	for _, tc := range []struct {
		name string
		gpus []GPU
		want map[corev1.ResourceName]int64
	}{
		{name: "nothing held", gpus: []GPU{{Index: 0, Instances: []Instance{{Profile: "1g.10gb", UUID: "MIG-a"}}}}},
		{
			name: "held instances by profile, a held whole GPU",
			gpus: []GPU{
				{Index: 0, Instances: []Instance{
					{Profile: "4g.40gb", UUID: "MIG-a", UsedBy: []string{"ns/a"}},
					{Profile: "1g.10gb", UUID: "MIG-b", UsedBy: []string{"ns/b"}},
					{Profile: "1g.10gb", UUID: "MIG-c", UsedBy: []string{"ns/c"}},
					{Profile: "1g.10gb", UUID: "MIG-d"},
				}},
				{Index: 1, UsedBy: []string{"ns/e"}},
			},
			want: map[corev1.ResourceName]int64{"nvidia.com/mig-4g.40gb": 1, "nvidia.com/mig-1g.10gb": 2, "nvidia.com/gpu": 1},
		},
		{
			name: "a GPU instance without a compute instance is no device",
			gpus: []GPU{{Index: 0, Instances: []Instance{{Profile: "2g.20gb", UsedBy: []string{"ns/a"}}}}},
		},
		{
			// The allocatable counts replicas: two pods on two replicas
			// leave none free, not one.
			name: "a shared instance's replicas in use",
			gpus: []GPU{{Index: 0, Instances: []Instance{
				{Profile: "1g.10gb", UUID: "MIG-a", UsedBy: []string{"ns/a", "ns/b"}, Shared: &Shared{Resource: "nvidia.com/mig-1g.10gb", Replicas: 2, InUse: 2}},
				{Profile: "1g.10gb", UUID: "MIG-b", UsedBy: []string{"ns/c"}, Shared: &Shared{Resource: "nvidia.com/mig-1g.10gb", Replicas: 4, InUse: 3}},
				{Profile: "1g.10gb", UUID: "MIG-c", Shared: &Shared{Resource: "nvidia.com/mig-1g.10gb", Replicas: 4}},
			}}},
			want: map[corev1.ResourceName]int64{"nvidia.com/mig-1g.10gb": 5},
		},
		{
			name: "replicas under a renamed resource, beside the profile's unshared devices",
			gpus: []GPU{{Index: 0, Instances: []Instance{
				{Profile: "1g.10gb", UUID: "MIG-a", UsedBy: []string{"ns/a"}, Shared: &Shared{Resource: "nvidia.com/mig-1g.10gb.shared", Replicas: 2, InUse: 1}},
				{Profile: "1g.10gb", UUID: "MIG-b", UsedBy: []string{"ns/b"}},
			}}},
			want: map[corev1.ResourceName]int64{"nvidia.com/mig-1g.10gb.shared": 1, "nvidia.com/mig-1g.10gb": 1},
		},
		{
			// The agent polls the kubelet: a pod it names holds a replica
			// even when the count it polled is older.
			name: "each pod named holds at least one replica, never more than there are",
			gpus: []GPU{
				{Index: 0, UsedBy: []string{"ns/a", "ns/b", "ns/c"}, Shared: &Shared{Resource: "nvidia.com/gpu", Replicas: 2, InUse: 1}},
				{Index: 1, Instances: []Instance{{Profile: "3g.40gb", UUID: "MIG-a", UsedBy: []string{"ns/d", "ns/e"}, Shared: &Shared{Resource: "nvidia.com/mig-3g.40gb", Replicas: 4, InUse: 1}}}},
			},
			want: map[corev1.ResourceName]int64{"nvidia.com/gpu": 2, "nvidia.com/mig-3g.40gb": 2},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Held(tc.gpus); !maps.Equal(got, tc.want) {
				t.Errorf("Held = %v, want %v", got, tc.want)
			}
		})
	}
}
