package sim_test

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"

	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
)

func builtinModel(t *testing.T, name string) gpumodel.Model {
	t.Helper()
	for _, m := range gpumodel.Builtin() {
		if m.Name == name {
			return m
		}
	}
	t.Fatalf("no built-in model %s", name)
	return gpumodel.Model{}
}

func modelProfile(t *testing.T, m gpumodel.Model, name string) gpumodel.Profile {
	t.Helper()
	for _, p := range m.Profiles {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("model %s has no profile %s", m.Name, name)
	return gpumodel.Profile{}
}

// createByName creates a GPU instance of the named profile at start.
func createByName(t *testing.T, d nvml.Device, m gpumodel.Model, name string, start int) nvml.Return {
	t.Helper()
	p := modelProfile(t, m, name)
	info := profileInfo(t, d, p.Query)
	_, ret := createGI(d, info, start, uint32(p.MemorySlices))
	return ret
}

type create struct {
	profile string
	start   int
	want    nvml.Return
}

// TestGeometryAndMedia runs creation sequences on the models whose geometry
// or media engines differ from A100/H100: A30 (4 memory and compute slices,
// one OFA and one JPEG decoder shared by the +me profiles) and RTX PRO 6000
// Blackwell (12 placement units, 4 compute slices, +me.all and -me).
func TestGeometryAndMedia(t *testing.T) {
	const (
		ok           = nvml.SUCCESS
		insufficient = nvml.ERROR_INSUFFICIENT_RESOURCES
		invalid      = nvml.ERROR_INVALID_ARGUMENT
	)
	tests := []struct {
		name  string
		model string
		steps []create
	}{
		{"A30 four 1g then no more", "A30-24GB", []create{
			{"1g.6gb", 0, ok}, {"1g.6gb", 1, ok}, {"1g.6gb", 2, ok}, {"1g.6gb", 3, ok}, {"1g.6gb+me", 3, insufficient},
		}},
		{"A30 placement outside the 4 slices", "A30-24GB", []create{{"1g.6gb", 4, invalid}, {"2g.12gb", 1, invalid}}},
		{"A30 two +me profiles share one OFA", "A30-24GB", []create{
			{"1g.6gb+me", 0, ok}, {"2g.12gb+me", 2, insufficient}, {"2g.12gb", 2, ok},
		}},
		{"A30 2g+me beside 2g uses all four decoders", "A30-24GB", []create{{"2g.12gb+me", 0, ok}, {"2g.12gb", 2, ok}}},
		{"A30 1g+me with three 1g", "A30-24GB", []create{
			{"1g.6gb+me", 0, ok}, {"1g.6gb", 1, ok}, {"1g.6gb", 2, ok}, {"1g.6gb", 3, ok},
		}},
		{"RTX 2g and two 1g fill the 12 units", "RTX-PRO-6000-Server-96GB", []create{
			{"2g.48gb", 0, ok}, {"1g.24gb", 3, insufficient}, {"1g.24gb", 6, ok}, {"1g.24gb", 9, ok},
		}},
		{"RTX 1g only at multiples of 3", "RTX-PRO-6000-Server-96GB", []create{{"1g.24gb", 1, invalid}, {"2g.48gb", 3, invalid}}},
		{"RTX four compute slices", "RTX-PRO-6000-Server-96GB", []create{
			{"1g.24gb-me", 0, ok}, {"1g.24gb+gfx", 3, ok}, {"1g.24gb", 6, ok}, {"1g.24gb+me", 9, ok},
		}},
		{"RTX +me.all leaves room for -me only", "RTX-PRO-6000-Server-96GB", []create{
			{"1g.24gb+me.all", 0, ok}, {"1g.24gb", 3, insufficient}, {"1g.24gb+gfx", 3, insufficient},
			{"1g.24gb+me", 3, insufficient}, {"1g.24gb-me", 3, ok}, {"2g.48gb-me", 6, ok},
		}},
		{"RTX +me.all after a profile with media", "RTX-PRO-6000-Server-96GB", []create{
			{"1g.24gb", 0, ok}, {"1g.24gb+me.all", 3, insufficient}, {"2g.48gb+me.all", 6, insufficient}, {"2g.48gb-me", 6, ok},
		}},
		{"RTX +me and 2g+me.all share the OFA", "RTX-PRO-6000-Server-96GB", []create{
			{"1g.24gb+me", 0, ok}, {"2g.48gb+me.all", 6, insufficient},
		}},
		{"RTX whole GPU with graphics", "RTX-PRO-6000-Server-96GB", []create{{"4g.96gb+gfx", 0, ok}, {"1g.24gb-me", 9, insufficient}}},
		{"H100 +me beside six 1g uses all seven decoders", "H100-SXM5-80GB", []create{
			{"1g.10gb+me", 0, ok}, {"1g.10gb", 1, ok}, {"1g.10gb", 2, ok}, {"1g.10gb", 3, ok},
			{"1g.10gb", 4, ok}, {"1g.10gb", 5, ok}, {"1g.10gb", 6, ok},
		}},
		{"B200 4g+3g", "B200-180GB", []create{{"4g.90gb", 0, ok}, {"3g.90gb", 4, ok}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := builtinModel(t, tc.model)
			l := newLib(t, gpu(tc.model))
			d := enableMIG(t, l, 0)
			for i, s := range tc.steps {
				if got := createByName(t, d, m, s.profile, s.start); got != s.want {
					t.Errorf("step %d: create %s at %d = %v, want %v", i, s.profile, s.start, got, s.want)
				}
			}
		})
	}
}

func TestRemainingCapacityMediaAndGeometry(t *testing.T) {
	tests := []struct {
		name   string
		model  string
		before []create
		want   map[string]int
	}{
		{"A30 after 1g+me", "A30-24GB", []create{{"1g.6gb+me", 0, nvml.SUCCESS}},
			map[string]int{"2g.12gb+me": 0, "2g.12gb": 1, "1g.6gb": 3, "1g.6gb+me": 0, "4g.24gb": 0}},
		{"RTX after 1g", "RTX-PRO-6000-Server-96GB", []create{{"1g.24gb", 0, nvml.SUCCESS}},
			map[string]int{"1g.24gb+me.all": 0, "2g.48gb+me.all": 0, "1g.24gb-me": 3, "1g.24gb+me": 1, "2g.48gb": 1, "4g.96gb": 0}},
		{"RTX after +me.all", "RTX-PRO-6000-Server-96GB", []create{{"1g.24gb+me.all", 0, nvml.SUCCESS}},
			map[string]int{"1g.24gb": 0, "1g.24gb+gfx": 0, "1g.24gb-me": 3, "2g.48gb-me": 1, "2g.48gb": 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := builtinModel(t, tc.model)
			l := newLib(t, gpu(tc.model))
			d := enableMIG(t, l, 0)
			for _, s := range tc.before {
				if got := createByName(t, d, m, s.profile, s.start); got != s.want {
					t.Fatalf("create %s at %d = %v", s.profile, s.start, got)
				}
			}
			got := map[string]int{}
			for name := range tc.want {
				info := profileInfo(t, d, modelProfile(t, m, name).Query)
				n, ret := d.GetGpuInstanceRemainingCapacity(&info)
				if ret != nvml.SUCCESS {
					t.Fatalf("GetGpuInstanceRemainingCapacity(%s) = %v", name, ret)
				}
				got[name] = n
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("remaining capacity (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEveryProfileReachesItsCount keeps the tables consistent: on every
// built-in model, each profile's max count of instances can be created
// (first fit), so no engine, compute or placement figure contradicts the
// count nvidia-smi reports, and one more is refused.
func TestEveryProfileReachesItsCount(t *testing.T) {
	for _, m := range gpumodel.Builtin() {
		for _, p := range m.Profiles {
			t.Run(m.Name+"/"+p.Name, func(t *testing.T) {
				l := newLib(t, gpu(m.Name))
				d := enableMIG(t, l, 0)
				info := profileInfo(t, d, p.Query)
				for i := range p.MaxCount {
					if _, ret := d.CreateGpuInstance(&info); ret != nvml.SUCCESS {
						t.Fatalf("instance %d of %d = %v", i+1, p.MaxCount, ret)
					}
				}
				if _, ret := d.CreateGpuInstance(&info); ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
					t.Errorf("instance %d of %d = %v, want ERROR_INSUFFICIENT_RESOURCES", p.MaxCount+1, p.MaxCount, ret)
				}
			})
		}
	}
}

func TestMaxMigDeviceCountFollowsComputeSlices(t *testing.T) {
	for model, want := range map[string]int{"A30-24GB": 4, "RTX-PRO-6000-Server-96GB": 4, "H100-SXM5-80GB": 7} {
		l := newLib(t, gpu(model))
		d := enableMIG(t, l, 0)
		if n, ret := d.GetMaxMigDeviceCount(); n != want || ret != nvml.SUCCESS {
			t.Errorf("%s: GetMaxMigDeviceCount() = %d, %v, want %d", model, n, ret, want)
		}
	}
}

func TestProfileInfoEngines(t *testing.T) {
	l := newLib(t, gpu("RTX-PRO-6000-Server-96GB"))
	info := profileInfo(t, device(t, l, 0), nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME)
	want := nvml.GpuInstanceProfileInfo{Id: 65, SliceCount: 1, InstanceCount: 1, MultiprocessorCount: 46,
		CopyEngineCount: 1, DecoderCount: 4, EncoderCount: 4, JpegCount: 4, OfaCount: 1, MemorySizeMB: 24192}
	if diff := cmp.Diff(want, info); diff != "" {
		t.Errorf("1g.24gb+me.all info (-want +got):\n%s", diff)
	}
}

func TestInitialState(t *testing.T) {
	pending := false
	cfg := sim.Config{UUIDSeed: "n", GPUs: []sim.GPUSpec{
		{Model: "A30-24GB", Count: 1, Initial: &sim.InitialState{
			UUID: "GPU-real-one", MigEnabled: true, MigPending: &pending,
			Instances: []sim.InitialInstance{
				{Profile: "2g.12gb+me", Start: 0, ComputeInstances: []string{"2_SLICE"}},
				{Profile: "1g.6gb", Start: 3},
			},
		}},
		{Model: "H100-SXM5-80GB", Count: 1},
	}}
	l := newLibConfig(t, cfg)
	snap := l.Snapshot()
	g := snap[0]
	if g.UUID != "GPU-real-one" || !g.MigEnabled || g.MigPending {
		t.Errorf("GPU 0 = %s enabled=%v pending=%v, want GPU-real-one enabled, disable pending", g.UUID, g.MigEnabled, g.MigPending)
	}
	var got []string
	for _, in := range g.Instances {
		got = append(got, in.Profile+"@"+string(rune('0'+in.Start))+map[bool]string{true: "+ci", false: ""}[in.HasCI])
	}
	if diff := cmp.Diff([]string{"2g.12gb+me@0+ci", "1g.6gb@3"}, got); diff != "" {
		t.Errorf("instances (-want +got):\n%s", diff)
	}
	if snap[1].MigEnabled || len(snap[1].Instances) != 0 || snap[1].UUID == "" {
		t.Errorf("GPU 1 without initial state = %+v", snap[1])
	}
	// The instances are real: the free placement takes a 1g, the taken
	// ones nothing.
	d := device(t, l, 0)
	m := builtinModel(t, "A30-24GB")
	if ret := createByName(t, d, m, "1g.6gb", 2); ret != nvml.SUCCESS {
		t.Errorf("create 1g.6gb in the free slice = %v", ret)
	}
	if ret := createByName(t, d, m, "1g.6gb", 0); ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
		t.Errorf("create 1g.6gb over the initial 2g = %v", ret)
	}
}

func TestInitialStateErrors(t *testing.T) {
	tests := []struct {
		name string
		spec sim.GPUSpec
		want string
	}{
		{"unknown profile", sim.GPUSpec{Model: "A30-24GB", Count: 1, Initial: &sim.InitialState{MigEnabled: true,
			Instances: []sim.InitialInstance{{Profile: "1g.5gb", Start: 0}}}}, `instances[0]: model A30-24GB has no profile "1g.5gb"`},
		{"instances without MIG", sim.GPUSpec{Model: "A30-24GB", Count: 1, Initial: &sim.InitialState{
			Instances: []sim.InitialInstance{{Profile: "1g.6gb", Start: 0}}}}, "GPU instances while MIG mode is disabled"},
		{"overlap", sim.GPUSpec{Model: "A30-24GB", Count: 1, Initial: &sim.InitialState{MigEnabled: true,
			Instances: []sim.InitialInstance{{Profile: "2g.12gb", Start: 0}, {Profile: "1g.6gb", Start: 1}}}}, "overlaps another"},
		{"media engines", sim.GPUSpec{Model: "A30-24GB", Count: 1, Initial: &sim.InitialState{MigEnabled: true,
			Instances: []sim.InitialInstance{{Profile: "1g.6gb+me", Start: 0}, {Profile: "2g.12gb+me", Start: 2}}}}, "not enough media engines"},
		{"bad placement", sim.GPUSpec{Model: "RTX-PRO-6000-Server-96GB", Count: 1, Initial: &sim.InitialState{MigEnabled: true,
			Instances: []sim.InitialInstance{{Profile: "1g.24gb", Start: 1}}}}, "1g.24gb cannot start at 1"},
		{"smaller compute instance", sim.GPUSpec{Model: "A30-24GB", Count: 1, Initial: &sim.InitialState{MigEnabled: true,
			Instances: []sim.InitialInstance{{Profile: "2g.12gb", Start: 0, ComputeInstances: []string{"1_SLICE"}}}}}, "only has the one spanning"},
		{"unknown compute profile", sim.GPUSpec{Model: "A30-24GB", Count: 1, Initial: &sim.InitialState{MigEnabled: true,
			Instances: []sim.InitialInstance{{Profile: "2g.12gb", Start: 0, ComputeInstances: []string{"9_SLICE"}}}}}, `unknown compute instance profile query "9_SLICE"`},
		{"one UUID for two GPUs", sim.GPUSpec{Model: "A30-24GB", Count: 2, Initial: &sim.InitialState{UUID: "GPU-x"}}, "a UUID names one GPU"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sim.New(sim.Config{GPUs: []sim.GPUSpec{tc.spec}})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestMarshalConfigRoundTrip writes every built-in model as a custom model
// and reads it back unchanged.
func TestMarshalConfigRoundTrip(t *testing.T) {
	var models []gpumodel.Model
	var gpus []sim.GPUSpec
	for _, m := range gpumodel.Builtin() {
		m.Name = "copy-of-" + m.Name
		models = append(models, m)
		gpus = append(gpus, sim.GPUSpec{Model: m.Name, Count: 1})
	}
	// A state and compute-instance profiles beyond the default, as a probe
	// of a real GPU writes them.
	models[0].Profiles[4].ComputeProfiles = []gpumodel.ComputeProfile{
		{Query: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, Slices: 1, SMs: 14, MaxCount: 7, Placements: []int{0, 1, 2, 3, 4, 5, 6}},
		{Query: nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE, Slices: 7, SMs: 98, MaxCount: 1, Placements: []int{0}},
	}
	pending := true
	gpus[0].Initial = &sim.InitialState{UUID: "GPU-1", MigEnabled: true, MigPending: &pending,
		Instances: []sim.InitialInstance{{Profile: models[0].Profiles[1].Name, Start: 2, ComputeInstances: []string{"2_SLICE"}}}}
	cfg := sim.Config{GPUs: gpus, Models: models}
	data, err := sim.MarshalConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	back, err := sim.ParseConfig(data, t.TempDir(), "")
	if err != nil {
		t.Fatalf("ParseConfig(MarshalConfig()) = %v\n%s", err, data)
	}
	if diff := cmp.Diff(cfg.Models, back.Models); diff != "" {
		t.Errorf("models after a round trip (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(cfg.GPUs, back.GPUs); diff != "" {
		t.Errorf("GPUs after a round trip (-want +got):\n%s", diff)
	}
}
