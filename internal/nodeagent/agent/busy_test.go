package agent

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/migconfig"
	"github.com/migflex/migflex/internal/nodeagent/podresources"
)

func assigned(pod, id string) podresources.Assignment {
	return podresources.Assignment{Namespace: "ns", Pod: pod, Container: "c", Resource: "nvidia.com/x", DeviceID: id}
}

func TestDeviceIndex(t *testing.T) {
	gpus := []mig.GPU{
		h100(0, true, inst("3g.40gb", 0, 4, 1), mig.Instance{Profile: "3g.40gb", Start: 4, Size: 4, GIID: 2}),
		h100(1, false),
	}
	want := map[string]deviceRef{
		gpuUUID(0): {GPU: 0},
		migUUID(1): {GPU: 0, MIG: true, GI: 1},
		gpuUUID(1): {GPU: 1},
	}
	if diff := cmp.Diff(want, deviceIndex(gpus)); diff != "" {
		t.Errorf("deviceIndex() (-want +got):\n%s", diff)
	}
}

func TestBusyGPUs(t *testing.T) {
	a1, a2 := inst("3g.40gb", 0, 4, 1), inst("3g.40gb", 4, 4, 2)
	gpus := []mig.GPU{h100(0, true, a1, a2), h100(1, false), h100(2, true, inst("7g.80gb", 0, 8, 1))}
	// GPU 2's instance has GI 1 too: MIG UUIDs tell the GPUs apart.
	gpus[2].Instances[0].UUID = "MIG-gpu2"

	destroyA2 := migconfig.GPUPlan{GPU: 0, Keep: []mig.Instance{a1}, Destroy: []mig.Instance{a2}, Create: []migconfig.Placement{{Profile: "1g.10gb", Start: 4, Size: 1}}}
	enable1 := migconfig.GPUPlan{GPU: 1, Mode: migconfig.ModeEnable, Create: []migconfig.Placement{{Profile: "7g.80gb", Start: 0, Size: 8}}}
	disable0 := migconfig.GPUPlan{GPU: 0, Mode: migconfig.ModeDisable, Destroy: []mig.Instance{a1, a2}}
	unchanged2 := migconfig.GPUPlan{GPU: 2, Keep: gpus[2].Instances}

	tests := []struct {
		name        string
		plan        []migconfig.GPUPlan
		assignments []podresources.Assignment
		want        map[int][]string
	}{
		{"nothing assigned", []migconfig.GPUPlan{destroyA2, enable1}, nil, map[int][]string{}},
		{
			"a pod on a destroyed instance",
			[]migconfig.GPUPlan{destroyA2},
			[]podresources.Assignment{assigned("p", migUUID(2))},
			map[int][]string{0: {"ns/p"}},
		},
		{
			"a pod on a kept instance is not in the way",
			[]migconfig.GPUPlan{destroyA2},
			[]podresources.Assignment{assigned("p", migUUID(1))},
			map[int][]string{},
		},
		{
			"a pod on a kept instance of a GPU whose MIG mode changes is",
			[]migconfig.GPUPlan{disable0},
			[]podresources.Assignment{assigned("p", migUUID(1))},
			map[int][]string{0: {"ns/p"}},
		},
		{
			"a pod on a whole GPU that changes",
			[]migconfig.GPUPlan{enable1},
			[]podresources.Assignment{assigned("whole", gpuUUID(1))},
			map[int][]string{1: {"ns/whole"}},
		},
		{
			"a GPU the plan leaves alone is not busy",
			[]migconfig.GPUPlan{unchanged2},
			[]podresources.Assignment{assigned("p", "MIG-gpu2"), assigned("q", gpuUUID(2))},
			map[int][]string{},
		},
		{
			"a GPU the config does not cover is not busy",
			[]migconfig.GPUPlan{destroyA2},
			[]podresources.Assignment{assigned("p", gpuUUID(1))},
			map[int][]string{},
		},
		{
			"unknown and stale IDs are ignored",
			[]migconfig.GPUPlan{destroyA2, enable1},
			[]podresources.Assignment{assigned("p", "MIG-gone"), assigned("q", "0000:3b:00.0")},
			map[int][]string{},
		},
		{
			"a pod on any replica of a destroyed instance is in the way",
			[]migconfig.GPUPlan{destroyA2},
			[]podresources.Assignment{assigned("p", migUUID(2)+"::0"), assigned("q", migUUID(2)+"::3")},
			map[int][]string{0: {"ns/p", "ns/q"}},
		},
		{
			"a pod on a replica of a kept instance is not",
			[]migconfig.GPUPlan{destroyA2},
			[]podresources.Assignment{assigned("p", migUUID(1)+"::1")},
			map[int][]string{},
		},
		{
			"a pod on a replica of a whole GPU that changes",
			[]migconfig.GPUPlan{enable1},
			[]podresources.Assignment{assigned("p", gpuUUID(1)+"::0")},
			map[int][]string{1: {"ns/p"}},
		},
		{
			"pods are listed once, sorted, per GPU",
			[]migconfig.GPUPlan{disable0, enable1},
			[]podresources.Assignment{
				assigned("b", migUUID(2)), assigned("a", migUUID(1)), assigned("b", migUUID(1)),
				{Namespace: "other", Pod: "a", Container: "c", DeviceID: gpuUUID(1)},
			},
			map[int][]string{0: {"ns/a", "ns/b"}, 1: {"other/a"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := busyGPUs(migconfig.Plan{GPUs: tc.plan}, gpus, tc.assignments)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("busyGPUs() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWithoutGPUsAndDescribe(t *testing.T) {
	plan := migconfig.Plan{GPUs: []migconfig.GPUPlan{{GPU: 0}, {GPU: 1}, {GPU: 2}}}
	busy := map[int][]string{2: {"ns/b"}, 0: {"ns/a", "ns/b"}}
	got := withoutGPUs(plan, busy)
	if diff := cmp.Diff(migconfig.Plan{GPUs: []migconfig.GPUPlan{{GPU: 1}}}, got); diff != "" {
		t.Errorf("withoutGPUs() (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"ns/a", "ns/b"}, busyPods(busy)); diff != "" {
		t.Errorf("busyPods() (-want +got):\n%s", diff)
	}
	if got, want := describeBusy(busy), "GPU 0: ns/a, ns/b; GPU 2: ns/b"; got != want {
		t.Errorf("describeBusy() = %q, want %q", got, want)
	}
}
