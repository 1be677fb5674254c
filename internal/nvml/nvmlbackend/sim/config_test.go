package sim_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
)

func TestParseGPUList(t *testing.T) {
	tests := []struct {
		in      string
		want    []sim.GPUSpec
		wantErr string
	}{
		{in: "H100-SXM5-80GB:4,A100-SXM4-40GB:2", want: []sim.GPUSpec{{Model: "H100-SXM5-80GB", Count: 4}, {Model: "A100-SXM4-40GB", Count: 2}}},
		{in: " H200-SXM-141GB ", want: []sim.GPUSpec{{Model: "H200-SXM-141GB", Count: 1}}},
		{in: "A100-SXM4-80GB: 3 , H100-SXM5-80GB", want: []sim.GPUSpec{{Model: "A100-SXM4-80GB", Count: 3}, {Model: "H100-SXM5-80GB", Count: 1}}},
		{in: "", wantErr: "GPU list is empty"},
		{in: "H100-SXM5-80GB:0", wantErr: `count "0" for H100-SXM5-80GB must be a whole number >= 1`},
		{in: "H100-SXM5-80GB:two", wantErr: `count "two"`},
		{in: "H100-SXM5-80GB,,A100-SXM4-40GB", wantErr: `empty model name in ""`},
		{in: ":2", wantErr: "empty model name"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := sim.ParseGPUList(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseGPUList() error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseGPUList() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseConfig(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "models.yaml"), []byte(customModels), 0o644); err != nil {
		t.Fatal(err)
	}
	const base = `version: v1
gpus:
- {model: H100-SXM5-80GB, count: 2}
stateDir: state
`
	tests := []struct {
		name    string
		yaml    string
		node    string
		want    sim.Config
		models  []string // custom model names
		wantErr string
	}{
		{
			name: "defaults: seed is the node name, stateDir next to the file",
			yaml: base, node: "worker-1",
			want: sim.Config{GPUs: []sim.GPUSpec{{Model: "H100-SXM5-80GB", Count: 2}}, StateDir: filepath.Join(dir, "state"), UUIDSeed: "worker-1"},
		},
		{
			name: "node override",
			yaml: base + `uuidSeed: cluster
nodes:
  worker-2:
    gpus: [{model: A100-SXM4-40GB, count: 1}]
    stateDir: /var/lib/sim-2
    uuidSeed: w2
`,
			node: "worker-2",
			want: sim.Config{GPUs: []sim.GPUSpec{{Model: "A100-SXM4-40GB", Count: 1}}, StateDir: "/var/lib/sim-2", UUIDSeed: "w2"},
		},
		{
			name: "other nodes keep the defaults",
			yaml: base + "uuidSeed: cluster\nnodes:\n  worker-2:\n    gpus: []\n",
			node: "worker-1",
			want: sim.Config{GPUs: []sim.GPUSpec{{Model: "H100-SXM5-80GB", Count: 2}}, StateDir: filepath.Join(dir, "state"), UUIDSeed: "cluster"},
		},
		{
			name: "a node without GPUs",
			yaml: base + "nodes:\n  cpu-1:\n    gpus: []\n",
			node: "cpu-1",
			want: sim.Config{GPUs: []sim.GPUSpec{}, StateDir: filepath.Join(dir, "state"), UUIDSeed: "cpu-1"},
		},
		{
			name: "custom models inline and from a file",
			yaml: `version: v1
gpus: [{model: H100-PCIE-70GB, count: 1}, {model: INLINE, count: 1}]
modelsFile: models.yaml
models:
- name: INLINE
  pciDeviceID: 0x20B010DE
  memoryMiB: 40960
  sms: 108
  architecture: ampere
  profiles:
  - {name: 7g.40gb, slices: 7, memorySlices: 8, memoryMiB: 40192, sms: 98, maxCount: 1, placements: [0]}
`,
			want:   sim.Config{GPUs: []sim.GPUSpec{{Model: "H100-PCIE-70GB", Count: 1}, {Model: "INLINE", Count: 1}}},
			models: []string{"INLINE", "H100-PCIE-70GB"},
		},
		{
			name: "operation delay",
			yaml: base + "operationDelay: 250ms\n", node: "worker-1",
			want: sim.Config{GPUs: []sim.GPUSpec{{Model: "H100-SXM5-80GB", Count: 2}}, StateDir: filepath.Join(dir, "state"), UUIDSeed: "worker-1", OperationDelay: 250 * time.Millisecond},
		},
		{
			name: "hold file next to the config",
			yaml: base + "holdFile: release\nholdAfter: 6\n", node: "worker-1",
			want: sim.Config{GPUs: []sim.GPUSpec{{Model: "H100-SXM5-80GB", Count: 2}}, StateDir: filepath.Join(dir, "state"), UUIDSeed: "worker-1", HoldFile: filepath.Join(dir, "release"), HoldAfter: 6},
		},
		{name: "hold count without a file", yaml: base + "holdAfter: 6\n", wantErr: "holdAfter needs holdFile"},
		{name: "negative hold count", yaml: base + "holdFile: /r\nholdAfter: -1\n", wantErr: "holdAfter -1: want the number of MIG changes to let through, >= 0"},
		{name: "bad operation delay", yaml: base + "operationDelay: soon\n", wantErr: `operationDelay: "soon" is not a non-negative duration`},
		{name: "negative operation delay", yaml: base + "operationDelay: -1s\n", wantErr: `operationDelay: "-1s" is not a non-negative duration`},
		{name: "unknown field", yaml: base + "gpu: []\n", wantErr: `unknown field "gpu"`},
		{name: "unknown node field", yaml: base + "nodes:\n  w:\n    gpu: []\n", wantErr: `unknown field "gpu"`},
		{name: "no version", yaml: "gpus: [{model: H100-SXM5-80GB, count: 1}]\n", wantErr: `version: got "", want "v1"`},
		{name: "no GPUs", yaml: "version: v1\n", wantErr: "gpus: at least one GPU is required"},
		{name: "unknown model", yaml: "version: v1\ngpus: [{model: T4, count: 1}]\n", wantErr: `gpus[0]: unknown GPU model "T4"`},
		{name: "zero count", yaml: "version: v1\ngpus: [{model: H100-SXM5-80GB}]\n", wantErr: "gpus[0]: count 0 for H100-SXM5-80GB must be >= 1"},
		{name: "missing models file", yaml: base + "modelsFile: nope.yaml\n", wantErr: "modelsFile: reading models file"},
		{name: "bad inline model", yaml: base + "models:\n- name: X\n", wantErr: `models[0]: model "X"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := sim.ParseConfig([]byte(tc.yaml), dir, tc.node)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseConfig() error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, m := range got.Models {
				names = append(names, m.Name)
			}
			if diff := cmp.Diff(tc.models, names); diff != "" {
				t.Errorf("custom models (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(sim.Config{}, "Models")); diff != "" {
				t.Errorf("ParseConfig() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadConfigNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sim.yaml")
	if err := os.WriteFile(path, []byte("version: v1\ngpus: [{model: T4, count: 1}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := sim.LoadConfig(path, "")
	if err == nil || !strings.HasPrefix(err.Error(), "simulator config "+path+": ") {
		t.Errorf("LoadConfig() error = %v, want it to name %s", err, path)
	}
}

func TestDefaultConfig(t *testing.T) {
	cfg := sim.DefaultConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]sim.GPUSpec{{Model: "H100-SXM5-80GB", Count: 1}}, cfg.GPUs); diff != "" {
		t.Errorf("default GPUs (-want +got):\n%s", diff)
	}
}

// TestExampleConfig keeps the examples in testdata loadable.
func TestExampleConfig(t *testing.T) {
	for node, want := range map[string][]sim.GPUSpec{
		"kind-worker":  {{Model: "H100-SXM5-80GB", Count: 2}},
		"kind-worker2": {{Model: "A100-SXM4-40GB", Count: 1}},
		"kind-worker3": {{Model: "H100-PCIE-70GB", Count: 1}},
	} {
		cfg, err := sim.LoadConfig("testdata/example-config.yaml", node)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, cfg.GPUs); diff != "" {
			t.Errorf("%s GPUs (-want +got):\n%s", node, diff)
		}
		cfg.StateDir = "" // in memory for the test
		l := newLibConfig(t, cfg)
		if n, _ := l.DeviceGetCount(); n != want[0].Count {
			t.Errorf("%s: %d GPUs, want %d", node, n, want[0].Count)
		}
	}
}

// TestOperationDelay checks that a configured delay is spent on every call
// that changes MIG state, and on no other.
func TestOperationDelay(t *testing.T) {
	const delay = 250 * time.Millisecond
	for name, tc := range map[string]struct {
		delay time.Duration
		want  []time.Duration
	}{
		"none":       {},
		"configured": {delay: delay, want: []time.Duration{delay, delay}},
	} {
		t.Run(name, func(t *testing.T) {
			lib := newLibConfig(t, sim.Config{GPUs: []sim.GPUSpec{{Model: "H100-SXM5-80GB", Count: 1}}, OperationDelay: tc.delay})
			var slept []time.Duration
			sim.SetSleep(lib, func(d time.Duration) { slept = append(slept, d) })
			dev := device(t, lib, 0)
			if _, r := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE); r != nvml.SUCCESS {
				t.Fatalf("SetMigMode: %v", r)
			}
			info := profileInfo(t, dev, nvml.GPU_INSTANCE_PROFILE_1_SLICE)
			if _, r := dev.GetGpuInstancePossiblePlacements(&info); r != nvml.SUCCESS {
				t.Fatalf("GetGpuInstancePossiblePlacements: %v", r)
			}
			if _, r := dev.CreateGpuInstance(&info); r != nvml.SUCCESS {
				t.Fatalf("CreateGpuInstance: %v", r)
			}
			if diff := cmp.Diff(tc.want, slept); diff != "" {
				t.Errorf("delays of SetMigMode, two queries and CreateGpuInstance (-want +got):\n%s", diff)
			}
		})
	}
}
