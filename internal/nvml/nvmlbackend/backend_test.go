package nvmlbackend

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"

	"github.com/migflex/migflex/internal/platform/cli"
)

func TestOpenRealWithoutLibrary(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "libnvidia-ml.so.1")
	for _, b := range []Backend{BackendAuto, BackendReal, ""} {
		t.Run(string(b), func(t *testing.T) {
			_, err := Open(Options{Backend: b, libraryPath: missing})
			want := "NVML library " + missing + " not found: run on a GPU node with the NVIDIA driver, or pass --nvml-backend=simulated"
			if err == nil || err.Error() != want {
				t.Fatalf("Open() error = %v, want %q", err, want)
			}
		})
	}
}

// TestOpenAutoOnThisMachine is the path a user without a GPU takes: the
// default library name, which does not load on a machine without the driver.
func TestOpenAutoOnThisMachine(t *testing.T) {
	lib, err := Open(Options{Backend: BackendAuto})
	if err == nil {
		lib.Close()
		t.Skip("libnvidia-ml.so.1 loads here: this is a GPU node")
	}
	want := "NVML library libnvidia-ml.so.1 not found: run on a GPU node with the NVIDIA driver, or pass --nvml-backend=simulated"
	if err.Error() != want {
		t.Fatalf("Open() error = %q, want %q", err, want)
	}
}

func TestOpenSimulated(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "sim.yaml")
	writeFile(t, cfgPath, `version: v1
gpus:
- {model: A100-SXM4-40GB, count: 2}
nodes:
  node-b:
    gpus: [{model: H200-SXM-141GB, count: 1}]
    stateDir: state-b
stateDir: state
`)
	tests := []struct {
		name      string
		opts      Options
		wantNames []string
	}{
		{"default config", Options{Backend: BackendSimulated}, []string{"H100-SXM5-80GB"}},
		{"config file", Options{Backend: BackendSimulated, SimConfig: cfgPath, NodeName: "node-a"}, []string{"A100-SXM4-40GB", "A100-SXM4-40GB"}},
		{"node override", Options{Backend: BackendSimulated, SimConfig: cfgPath, NodeName: "node-b"}, []string{"H200-SXM-141GB"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lib, err := Open(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := lib.Close(); err != nil {
					t.Errorf("Close() = %v", err)
				}
			}()
			// Open returns an initialized library.
			n, ret := lib.DeviceGetCount()
			if ret != nvml.SUCCESS {
				t.Fatalf("DeviceGetCount() = %v", ret)
			}
			var names []string
			for i := range n {
				d, _ := lib.DeviceGetHandleByIndex(i)
				name, _ := d.GetName()
				names = append(names, name)
			}
			if diff := cmp.Diff(tc.wantNames, names); diff != "" {
				t.Errorf("GPU names (-want +got):\n%s", diff)
			}
			// The simulator's reset capability survives the wrapping.
			if _, ok := lib.(interface{ ResetGPU(int) error }); !ok {
				t.Error("simulated library lost its ResetGPU capability")
			}
			// What its devices need in a container, which the serving
			// layer finds by type assertion (deviceplugin.DeviceEnv,
			// cdi.DeviceEnv).
			if _, ok := lib.(interface {
				ContainerEnv(ids, profiles []string) map[string]string
			}); !ok {
				t.Error("simulated library does not name its devices in a container's environment")
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "state", "state.json")); err != nil {
		t.Errorf("relative stateDir not resolved next to the config: %v", err)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, "version: v1\ngpus: [{model: A100-SXM4-40GB, count: 1}]\ncolour: blue\n")
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"unknown backend", Options{Backend: "fake"}, `--nvml-backend: unknown NVML backend "fake" (want one of auto, real, simulated)`},
		{"missing config", Options{Backend: BackendSimulated, SimConfig: filepath.Join(dir, "nope.yaml")}, "reading simulator config"},
		{"unknown field", Options{Backend: BackendSimulated, SimConfig: bad}, `unknown field "colour"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lib, err := Open(tc.opts)
			if err == nil {
				lib.Close()
				t.Fatalf("Open() succeeded, want error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Open() error = %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    Options
		wantErr bool
	}{
		{"defaults", nil, nil, Options{Backend: BackendAuto}, false},
		{"env", nil, map[string]string{"MIGFLEX_AGENT_NVML_BACKEND": "simulated", "MIGFLEX_AGENT_SIM_CONFIG": "/etc/sim.yaml"}, Options{Backend: BackendSimulated, SimConfig: "/etc/sim.yaml"}, false},
		{"older env names", nil, map[string]string{"NVML_BACKEND": "simulated", "SIM_CONFIG": "/etc/sim.yaml"}, Options{Backend: BackendSimulated, SimConfig: "/etc/sim.yaml"}, false},
		{"flags win", []string{"--nvml-backend=real", "--sim-config=x.yaml"}, map[string]string{"NVML_BACKEND": "simulated", "SIM_CONFIG": "/etc/sim.yaml"}, Options{Backend: BackendReal, SimConfig: "x.yaml"}, false},
		{"bad backend", []string{"--nvml-backend=gpu"}, nil, Options{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var o Options
			f := cli.New("test", "agent")
			f.SetOutput(new(strings.Builder))
			o.AddFlags(f)
			err := f.Parse(tc.args, func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			if (err != nil) != tc.wantErr {
				t.Fatalf("Parse() error = %v, wantErr %v", err, tc.wantErr)
			}
			if err == nil {
				if diff := cmp.Diff(tc.want, o, cmp.AllowUnexported(Options{})); diff != "" {
					t.Errorf("options (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestSimulatedDevicesContainerEnv(t *testing.T) {
	for name, tc := range map[string]struct {
		ids, profiles []string
		want          map[string]string
	}{
		"MIG devices and a whole GPU": {
			ids: []string{"MIG-a", "GPU-b", "MIG-c"}, profiles: []string{"1g.10gb", "", "3g.40gb"},
			want: map[string]string{EnvSimulated: "true", EnvDeviceIDs: "MIG-a,GPU-b,MIG-c", EnvProfiles: "1g.10gb,gpu,3g.40gb"},
		},
		"one MIG device": {
			ids: []string{"MIG-a"}, profiles: []string{"1g.10gb+me"},
			want: map[string]string{EnvSimulated: "true", EnvDeviceIDs: "MIG-a", EnvProfiles: "1g.10gb+me"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, SimulatedDevices{}.ContainerEnv(tc.ids, tc.profiles)); diff != "" {
				t.Errorf("environment (-want +got):\n%s", diff)
			}
		})
	}
}
