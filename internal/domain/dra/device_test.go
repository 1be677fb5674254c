package dra

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/migflex/migflex/internal/domain/mig"
)

func TestDevices(t *testing.T) {
	a100 := func(index int, instances ...string) mig.GPU { return gpu(t, index, "A100-SXM4-40GB", instances...) }
	tests := []struct {
		name string
		gpus []mig.GPU
		want []string // name=uuid
	}{
		{"no GPUs", nil, nil},
		{"whole GPU with MIG off", []mig.GPU{wholeGPU(t, 0, "A100-SXM4-40GB")}, []string{"gpu-0=GPU-0"}},
		{
			"MIG devices by placement, GPUs by index, inputs in any order",
			[]mig.GPU{a100(1, "3g.20gb@4", "1g.5gb@0"), a100(0, "7g.40gb@0")},
			[]string{"gpu-0-mig-7g40gb-0-0=MIG-0-0", "gpu-1-mig-1g5gb-19-0=MIG-1-0", "gpu-1-mig-3g20gb-9-4=MIG-1-4"},
		},
		{
			"a profile attribute becomes part of the label; the id keeps it apart",
			[]mig.GPU{a100(0, "1g.5gb+me@0", "1g.5gb@1")},
			[]string{"gpu-0-mig-1g5gb-me-20-0=MIG-0-0", "gpu-0-mig-1g5gb-19-1=MIG-0-1"},
		},
		{
			"RTX PRO 6000: +me and -me differ by profile id",
			[]mig.GPU{gpu(t, 0, "RTX-PRO-6000-Server-96GB", "1g.24gb+me@0", "1g.24gb-me@3", "1g.24gb+me.all@6", "1g.24gb+gfx@9")},
			[]string{"gpu-0-mig-1g24gb-me-21-0=MIG-0-0", "gpu-0-mig-1g24gb-me-67-3=MIG-0-3", "gpu-0-mig-1g24gb-meall-65-6=MIG-0-6", "gpu-0-mig-1g24gb-gfx-47-9=MIG-0-9"},
		},
		{"MIG on with no instance: no device, not the whole GPU", []mig.GPU{a100(0)}, nil},
		{"a GPU instance without compute instance is no device", []mig.GPU{withoutCI(a100(0, "1g.5gb@0", "1g.5gb@1"), 1)}, []string{"gpu-0-mig-1g5gb-19-0=MIG-0-0"}},
		{"minor, not index, names the GPU", []mig.GPU{withMinor(wholeGPU(t, 0, "A30-24GB"), 3)}, []string{"gpu-3=GPU-0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			devs, err := Devices(tt.gpus)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range devs {
				got = append(got, d.Name+"="+d.UUID)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("devices (-want,+got):\n%s", diff)
			}
		})
	}
}

// The whole record of one MIG device and one whole GPU, with the profile's
// numbers from the built-in A100 table.
func TestDevicesRecord(t *testing.T) {
	devs, err := Devices([]mig.GPU{gpu(t, 0, "A100-SXM4-40GB", "2g.10gb@2"), wholeGPU(t, 1, "A30-24GB")})
	if err != nil {
		t.Fatal(err)
	}
	want := []Device{
		{
			Name: "gpu-0-mig-2g10gb-14-2", UUID: "MIG-0-2", MIG: true, Profile: "2g.10gb", ProfileID: 14,
			GPUIndex: 0, GPUUUID: "GPU-0", Minor: 0, Model: "A100-SXM4-40GB", GI: 1, Start: 2, Size: 2,
			MemoryMB: 9856, SMs: 28, Engines: mig.Engines{CopyEngines: 2, Decoders: 1, JPEGs: 0, OFAs: 0},
		},
		{Name: "gpu-1", UUID: "GPU-1", GPUIndex: 1, GPUUUID: "GPU-1", Minor: 1, Model: "A30-24GB", MemoryMB: 24576},
	}
	if diff := cmp.Diff(want, devs); diff != "" {
		t.Errorf("(-want,+got):\n%s", diff)
	}
}

// A re-created instance has a new UUID; its name must not change, or a
// claim allocated before would name a device that is gone.
func TestDeviceNamesIgnoreUUIDs(t *testing.T) {
	before := gpu(t, 0, "A100-SXM4-80GB", "3g.40gb@0", "1g.10gb@6")
	after := gpu(t, 0, "A100-SXM4-80GB", "3g.40gb@0", "1g.10gb@6")
	for i := range after.Instances {
		after.Instances[i].UUID += "-recreated"
		after.Instances[i].GIID += 5
	}
	a, err := Devices([]mig.GPU{before})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Devices([]mig.GPU{after})
	if err != nil {
		t.Fatal(err)
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].UUID == b[i].UUID {
			t.Errorf("device %d: names %q, %q (want equal); UUIDs %q, %q (want different)", i, a[i].Name, b[i].Name, a[i].UUID, b[i].UUID)
		}
	}
}

func TestDevicesErrors(t *testing.T) {
	a100 := func(instances ...string) mig.GPU { return gpu(t, 0, "A100-SXM4-40GB", instances...) }
	noUUID := a100("1g.5gb@0")
	noUUID.Instances[0].UUID = ""
	unknown := a100("1g.5gb@0")
	unknown.Instances[0].Profile = "9g.99gb"
	dupUUID := []mig.GPU{a100("1g.5gb@0"), gpu(t, 1, "A100-SXM4-40GB", "1g.5gb@0")}
	dupUUID[1].Instances[0].UUID = dupUUID[0].Instances[0].UUID
	dupName := []mig.GPU{wholeGPU(t, 0, "A30-24GB"), withMinor(wholeGPU(t, 1, "A30-24GB"), 0)}
	tests := []struct {
		name string
		gpus []mig.GPU
		want string
	}{
		{"MIG device without UUID", []mig.GPU{noUUID}, "GPU 0 GI 1 (1g.5gb) has no UUID"},
		{"profile the GPU does not list", []mig.GPU{unknown}, `profile "9g.99gb" is not one GPU 0 supports`},
		{"two devices with one UUID", dupUUID, `UUID "MIG-0-0" is also the UUID of GPU 0 GI 1 (1g.5gb)`},
		{"two GPUs with one minor", dupName, `device name "gpu-0" is also the name of GPU 0`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			devs, err := Devices(tt.gpus)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Devices = %v, %v; want an error containing %q", devs, err, tt.want)
			}
			if devs != nil {
				t.Errorf("partial result %v", devs)
			}
		})
	}
}

func TestLabelPart(t *testing.T) {
	for in, want := range map[string]string{
		"1g.10gb": "1g10gb", "1g.10gb+me": "1g10gb-me", "1g.24gb-me": "1g24gb-me",
		"2g.48gb+me.all": "2g48gb-meall", "4g.96gb+gfx": "4g96gb-gfx", "7G.80GB": "7g80gb", "+x+": "x",
	} {
		if got := labelPart(in); got != want {
			t.Errorf("labelPart(%q) = %q, want %q", in, got, want)
		}
	}
}

func withoutCI(g mig.GPU, i int) mig.GPU {
	g.Instances[i].HasCI, g.Instances[i].UUID = false, ""
	return g
}

func withMinor(g mig.GPU, minor int) mig.GPU {
	g.Minor = minor
	return g
}
