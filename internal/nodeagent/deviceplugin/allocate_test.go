package deviceplugin

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/migflex/migflex/internal/nodeagent/devnodes"
	"github.com/migflex/migflex/internal/testsupport/testutil"
)

const testMigMinors = `config 1
monitor 2
gpu0/gi2/access 21
gpu0/gi2/ci0/access 22
gpu0/gi3/access 30
gpu0/gi3/ci0/access 31
gpu1/gi7/access 84
gpu1/gi7/ci0/access 85
`

// fakeHostRoot makes a host root with the given files (path -> content).
func fakeHostRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	return testutil.WriteTree(t, "", files)
}

func spec(p string) *pluginapi.DeviceSpec {
	return &pluginapi.DeviceSpec{ContainerPath: p, HostPath: p, Permissions: "rw"}
}

// envPost is a PostAllocator, as a backend without device nodes (the
// simulator) has: it names the devices in the environment.
type envPost struct{}

func (envPost) PostAllocate(resp *pluginapi.ContainerAllocateResponse, devs []Device) error {
	ids := make([]string, len(devs))
	for i, d := range devs {
		ids[i] = d.ID
	}
	resp.Envs["POST"] = strings.Join(ids, ",")
	return nil
}

// pairEnv is a backend's DeviceEnv that names each device with its
// profile, so a test sees what the device plugin passes it.
type pairEnv struct{}

func (pairEnv) ContainerEnv(ids, profiles []string) map[string]string {
	pairs := make([]string, len(ids))
	for i := range ids {
		pairs[i] = ids[i] + "=" + profiles[i]
	}
	return map[string]string{"DEVICES": strings.Join(pairs, ",")}
}

func TestAllocateResponse(t *testing.T) {
	host := fakeHostRoot(t, map[string]string{devnodes.MigMinorsPath: testMigMinors, "dev/nvidia-uvm": ""})
	mig02 := migDev("nvidia.com/mig-3g.40gb", "3g.40gb", 0, 2)
	mig03 := migDev("nvidia.com/mig-3g.40gb", "3g.40gb", 0, 3)
	mig17 := migDev("nvidia.com/mig-1g.10gb+me", "1g.10gb+me", 1, 7)

	for name, tc := range map[string]struct {
		strategy   DeviceListStrategy
		post       PostAllocator
		driverRoot string
		devs       []Device
		want       *pluginapi.ContainerAllocateResponse
	}{
		"envvar real MIG": {
			strategy: DeviceListEnvvar, devs: []Device{mig02, mig03, mig17},
			want: &pluginapi.ContainerAllocateResponse{
				Envs: map[string]string{EnvVisibleDevices: "MIG-0-2,MIG-0-3,MIG-1-7"},
				Devices: []*pluginapi.DeviceSpec{
					spec("/dev/nvidiactl"), spec("/dev/nvidia-uvm"),
					spec("/dev/nvidia0"), spec("/dev/nvidia-caps/nvidia-cap21"), spec("/dev/nvidia-caps/nvidia-cap22"),
					spec("/dev/nvidia-caps/nvidia-cap30"), spec("/dev/nvidia-caps/nvidia-cap31"),
					spec("/dev/nvidia1"), spec("/dev/nvidia-caps/nvidia-cap84"), spec("/dev/nvidia-caps/nvidia-cap85"),
				},
			},
		},
		"envvar real whole GPU under a driver root": {
			strategy: DeviceListEnvvar, driverRoot: "/run/nvidia/driver", devs: []Device{wholeDev(2)},
			want: &pluginapi.ContainerAllocateResponse{
				Envs: map[string]string{EnvVisibleDevices: "GPU-2"},
				// No nvidia-uvm: it does not exist under host/driver root.
				Devices: []*pluginapi.DeviceSpec{
					{ContainerPath: "/dev/nvidiactl", HostPath: "/run/nvidia/driver/dev/nvidiactl", Permissions: "rw"},
					{ContainerPath: "/dev/nvidia2", HostPath: "/run/nvidia/driver/dev/nvidia2", Permissions: "rw"},
				},
			},
		},
		"cdi-cri real": {
			strategy: DeviceListCDICRI, devs: []Device{mig02, mig17},
			want: &pluginapi.ContainerAllocateResponse{
				Envs:       map[string]string{EnvVisibleDevices: "void"},
				CdiDevices: []*pluginapi.CDIDevice{{Name: "nvidia.com/gpu=MIG-0-2"}, {Name: "nvidia.com/gpu=MIG-1-7"}},
			},
		},
		"cdi-annotations real": {
			strategy: DeviceListCDIAnnotations, devs: []Device{mig02, mig17},
			want: &pluginapi.ContainerAllocateResponse{
				Envs:        map[string]string{EnvVisibleDevices: "void"},
				Annotations: map[string]string{"cdi.k8s.io/migflex_MIG-0-2": "nvidia.com/gpu=MIG-0-2,nvidia.com/gpu=MIG-1-7"},
			},
		},
		"envvar with a PostAllocator": {
			strategy: DeviceListEnvvar, post: envPost{}, devs: []Device{mig02, wholeDev(2)},
			want: &pluginapi.ContainerAllocateResponse{Envs: map[string]string{
				EnvVisibleDevices: "MIG-0-2,GPU-2", "POST": "MIG-0-2,GPU-2",
			}},
		},
		"cdi-cri with a PostAllocator": {
			strategy: DeviceListCDICRI, post: envPost{}, devs: []Device{mig17},
			want: &pluginapi.ContainerAllocateResponse{
				Envs:       map[string]string{EnvVisibleDevices: "void", "POST": "MIG-1-7"},
				CdiDevices: []*pluginapi.CDIDevice{{Name: "nvidia.com/gpu=MIG-1-7"}},
			},
		},
		"envvar with a backend's DeviceEnv": {
			strategy: DeviceListEnvvar, post: EnvPostAllocator(pairEnv{}), devs: []Device{mig02, wholeDev(2), mig17},
			want: &pluginapi.ContainerAllocateResponse{Envs: map[string]string{
				EnvVisibleDevices: "MIG-0-2,GPU-2,MIG-1-7", "DEVICES": "MIG-0-2=3g.40gb,GPU-2=,MIG-1-7=1g.10gb+me",
			}},
		},
		"cdi-annotations with a backend's DeviceEnv": {
			strategy: DeviceListCDIAnnotations, post: EnvPostAllocator(pairEnv{}), devs: []Device{mig17},
			want: &pluginapi.ContainerAllocateResponse{
				Envs:        map[string]string{EnvVisibleDevices: "void", "DEVICES": "MIG-1-7=1g.10gb+me"},
				Annotations: map[string]string{"cdi.k8s.io/migflex_MIG-1-7": "nvidia.com/gpu=MIG-1-7"},
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			o := Options{DeviceListStrategy: tc.strategy, PostAllocator: tc.post, HostRoot: host, DriverRoot: tc.driverRoot}
			o.setDefaults()
			got, err := newAllocator(o).response(tc.devs)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("response (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAllocateHostErrors(t *testing.T) {
	mig09 := migDev("nvidia.com/mig-1g.10gb", "1g.10gb", 0, 9)
	for name, tc := range map[string]struct {
		files   map[string]string
		wantErr string
	}{
		"no mig-minors":       {files: map[string]string{}, wantErr: "reading MIG capability minors"},
		"instance not listed": {files: map[string]string{devnodes.MigMinorsPath: testMigMinors}, wantErr: `device MIG-0-9: no "gpu0/gi9/access"`},
		"malformed table":     {files: map[string]string{devnodes.MigMinorsPath: "gpu0/gi9/access twelve\n"}, wantErr: `line 1: minor "twelve"`},
	} {
		t.Run(name, func(t *testing.T) {
			o := Options{HostRoot: fakeHostRoot(t, tc.files)}
			o.setDefaults()
			_, err := newAllocator(o).response([]Device{mig09})
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestCDIAnnotationKey(t *testing.T) {
	for name, tc := range map[string]struct {
		ids  []string
		want string
	}{
		"MIG UUID":         {ids: []string{"MIG-4f0c2b5e-1d6a-5b8e-9f3a-7c2d1e0b9a8f"}, want: "cdi.k8s.io/migflex_MIG-4f0c2b5e-1d6a-5b8e-9f3a-7c2d1e0b9a8f"},
		"first of several": {ids: []string{"GPU-1", "GPU-0"}, want: "cdi.k8s.io/migflex_GPU-1"},
		// 8 + 60 characters is over the 63-character name limit.
		"too long":     {ids: []string{strings.Repeat("a", 60)}, want: "cdi.k8s.io/migflex_"},
		"invalid last": {ids: []string{"GPU-"}, want: "cdi.k8s.io/migflex_"},
		"invalid char": {ids: []string{"GPU/0"}, want: "cdi.k8s.io/migflex_"},
	} {
		got := cdiAnnotationKey(tc.ids)
		if strings.HasSuffix(tc.want, "_") {
			// Hashed: prefix plus 16 hex digits, and a valid name.
			if !strings.HasPrefix(got, tc.want) || len(got) != len(tc.want)+16 || !validAnnotationName(strings.TrimPrefix(got, cdiAnnotationPrefix)) {
				t.Errorf("%s: key %q, want %s<16 hex digits>", name, got, tc.want)
			}
			continue
		}
		if got != tc.want {
			t.Errorf("%s: key %q, want %q", name, got, tc.want)
		}
	}
}
