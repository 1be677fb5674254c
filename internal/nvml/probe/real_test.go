package probe

import (
	"errors"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/google/go-cmp/cmp"

	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
)

// The tests in this file drive the probe through go-nvml's mocks, which
// answer like a real driver would and unlike the simulator: no
// ProfileNamer, a zero versioned-info handler (go-nvml fills it only from
// the C library, which no test can load), and a panic for any call the
// test did not provide, so a probe that tried to change anything would
// crash the test.

// fakeGPU answers NVML's MIG queries from a table, the way a driver
// reports it.
type fakeGPU struct {
	name      string
	model     gpumodel.Model
	migMode   int
	instances []fakeInstance
	// fail makes the profile query of that constant fail.
	failQuery  int
	failReturn nvml.Return
	// noPlacements empties the placement list of that query (-1: none).
	noPlacements int
}

func newFake(name string, model gpumodel.Model, migMode int) *fakeGPU {
	return &fakeGPU{name: name, model: model, migMode: migMode, failQuery: -1, noPlacements: -1}
}

type fakeInstance struct {
	query, start int
	ci           bool
}

func (f *fakeGPU) profile(q int) (gpumodel.Profile, bool) {
	for _, p := range f.model.Profiles {
		if p.Query == q {
			return p, true
		}
	}
	return gpumodel.Profile{}, false
}

func (f *fakeGPU) profileByID(id uint32) (gpumodel.Profile, bool) {
	for _, p := range f.model.Profiles {
		if p.ID == id {
			return p, true
		}
	}
	return gpumodel.Profile{}, false
}

func info(p gpumodel.Profile) nvml.GpuInstanceProfileInfo {
	return nvml.GpuInstanceProfileInfo{
		Id: p.ID, SliceCount: uint32(p.Slices), InstanceCount: uint32(p.MaxCount), MultiprocessorCount: uint32(p.SMs),
		CopyEngineCount: uint32(p.Engines.CopyEngines), DecoderCount: uint32(p.Engines.Decoders), EncoderCount: uint32(p.Engines.Encoders),
		JpegCount: uint32(p.Engines.JPEGs), OfaCount: uint32(p.Engines.OFAs), MemorySizeMB: p.MemoryMiB,
	}
}

func (f *fakeGPU) device() *mock.Device {
	d := &mock.Device{
		GetMigModeFunc: func() (int, int, nvml.Return) {
			if f.migMode < 0 {
				return 0, 0, nvml.ERROR_NOT_SUPPORTED
			}
			return f.migMode, f.migMode, nvml.SUCCESS
		},
		GetNameFunc: func() (string, nvml.Return) { return f.name, nvml.SUCCESS },
		GetUUIDFunc: func() (string, nvml.Return) { return "GPU-" + f.model.Name, nvml.SUCCESS },
		GetPciInfoFunc: func() (nvml.PciInfo, nvml.Return) {
			return nvml.PciInfo{PciDeviceId: f.model.PCIDeviceID}, nvml.SUCCESS
		},
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: f.model.MemoryMiB << 20}, nvml.SUCCESS
		},
		GetArchitectureFunc: func() (nvml.DeviceArchitecture, nvml.Return) { return nvml.DEVICE_ARCH_BLACKWELL, nvml.SUCCESS },
		GetGpuInstanceProfileInfoFunc: func(q int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
			if q == f.failQuery && f.failReturn != nvml.SUCCESS {
				return nvml.GpuInstanceProfileInfo{}, f.failReturn
			}
			if q < 0 || q >= nvml.GPU_INSTANCE_PROFILE_COUNT {
				return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_INVALID_ARGUMENT
			}
			p, ok := f.profile(q)
			if !ok {
				return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
			}
			return info(p), nvml.SUCCESS
		},
		// go-nvml fills the handler only on a real device.
		GetGpuInstanceProfileInfoVFunc: func(int) nvml.GpuInstanceProfileInfoHandler {
			return nvml.GpuInstanceProfileInfoHandler{}
		},
		GetGpuInstancePossiblePlacementsFunc: func(in *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
			p, _ := f.profileByID(in.Id)
			if p.Query == f.noPlacements {
				return nil, nvml.SUCCESS
			}
			var out []nvml.GpuInstancePlacement
			for _, s := range p.Placements {
				out = append(out, nvml.GpuInstancePlacement{Start: uint32(s), Size: uint32(p.MemorySlices)})
			}
			return out, nvml.SUCCESS
		},
		GetGpuInstancesFunc: func(in *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstance, nvml.Return) {
			p, _ := f.profileByID(in.Id)
			var out []nvml.GpuInstance
			for id, fi := range f.instances {
				if fi.query == p.Query {
					out = append(out, f.gpuInstance(id+1, p, fi))
				}
			}
			return out, nvml.SUCCESS
		},
	}
	return d
}

func (f *fakeGPU) gpuInstance(id int, p gpumodel.Profile, fi fakeInstance) *mock.GpuInstance {
	full := mig.FullComputeProfile(p.Slices)
	ciInfo := nvml.ComputeInstanceProfileInfo{Id: uint32(full), SliceCount: uint32(p.Slices), InstanceCount: 1, MultiprocessorCount: uint32(p.SMs)}
	return &mock.GpuInstance{
		GetInfoFunc: func() (nvml.GpuInstanceInfo, nvml.Return) {
			return nvml.GpuInstanceInfo{Id: uint32(id), ProfileId: p.ID, Placement: nvml.GpuInstancePlacement{Start: uint32(fi.start), Size: uint32(p.MemorySlices)}}, nvml.SUCCESS
		},
		GetComputeInstanceProfileInfoFunc: func(q, eng int) (nvml.ComputeInstanceProfileInfo, nvml.Return) {
			switch {
			case q == full:
				return ciInfo, nvml.SUCCESS
			case q == nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE && p.Slices > 1:
				return nvml.ComputeInstanceProfileInfo{Id: uint32(q), SliceCount: 1, InstanceCount: uint32(p.Slices), MultiprocessorCount: uint32(p.SMs / p.Slices)}, nvml.SUCCESS
			}
			return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
		},
		GetComputeInstancePossiblePlacementsFunc: func(in *nvml.ComputeInstanceProfileInfo) ([]nvml.ComputeInstancePlacement, nvml.Return) {
			var out []nvml.ComputeInstancePlacement
			for s := 0; s+int(in.SliceCount) <= p.Slices; s += int(in.SliceCount) {
				out = append(out, nvml.ComputeInstancePlacement{Start: uint32(s), Size: in.SliceCount})
			}
			return out, nvml.SUCCESS
		},
		GetComputeInstancesFunc: func(in *nvml.ComputeInstanceProfileInfo) ([]nvml.ComputeInstance, nvml.Return) {
			if fi.ci && int(in.Id) == full {
				return []nvml.ComputeInstance{&mock.ComputeInstance{}}, nvml.SUCCESS
			}
			return nil, nvml.SUCCESS
		},
	}
}

func fakeLib(symbols error, gpus ...*fakeGPU) *mock.Interface {
	return &mock.Interface{
		InitFunc:                   func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:               func() nvml.Return { return nvml.SUCCESS },
		SystemGetDriverVersionFunc: func() (string, nvml.Return) { return "610.43.02", nvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, nvml.Return) { return len(gpus), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) { return gpus[i].device(), nvml.SUCCESS },
		ExtensionsFunc: func() nvml.ExtendedInterface {
			return &mock.ExtendedInterface{LookupSymbolFunc: func(string) error { return symbols }}
		},
	}
}

func builtin(t *testing.T, name string) gpumodel.Model {
	t.Helper()
	for _, m := range gpumodel.Builtin() {
		if m.Name == name {
			return m
		}
	}
	t.Fatalf("no built-in %s", name)
	return gpumodel.Model{}
}

// TestRealDriverPath probes an RTX PRO 6000 Blackwell as a driver reports
// it: the +gfx, -me and +me.all variants come out of the plain profile
// queries, named from their query constants and memory, and the table
// compares clean with the built-in model.
func TestRealDriverPath(t *testing.T) {
	rtx := builtin(t, "RTX-PRO-6000-Server-96GB")
	for name, symbols := range map[string]error{
		"driver without the versioned call": errors.New("symbol not found"),
		// The symbol is there but the handler is a zero value: calling it
		// would crash, so the probe must not.
		"handler not from the C library": nil,
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake("NVIDIA RTX PRO 6000 Blackwell Server Edition", rtx, nvml.DEVICE_MIG_ENABLE)
			f.instances = []fakeInstance{{query: nvml.GPU_INSTANCE_PROFILE_2_SLICE, start: 6, ci: true}, {query: nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, start: 0}}
			notMIG := newFake("NVIDIA L4", gpumodel.Model{}, -1)
			r, err := Probe(fakeLib(symbols, f, notMIG), gpumodel.Builtin())
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Config.Models) != 1 || r.Config.Models[0].Name != rtx.Name {
				t.Fatalf("models = %v, want one named %s", r.Config.Models, rtx.Name)
			}
			// The probe saw a 1-slice compute-instance profile on the 2g
			// instance, which the built-in table leaves out.
			var got []string
			for _, d := range CompareWithBuiltin(r, gpumodel.Builtin()) {
				got = append(got, d.Field)
			}
			if diff := cmp.Diff([]string{"profile 2g.48gb: computeProfiles"}, got); diff != "" {
				t.Errorf("differences from the built-in model (-want +got):\n%s", diff)
			}
			wantState := &sim.InitialState{UUID: "GPU-" + rtx.Name, MigEnabled: true, MigPending: ptr(true), Instances: []sim.InitialInstance{
				{Profile: "1g.24gb-me", Start: 0},
				{Profile: "2g.48gb", Start: 6, ComputeInstances: []string{"2_SLICE"}},
			}}
			if diff := cmp.Diff(wantState, r.Config.GPUs[0].Initial); diff != "" {
				t.Errorf("state (-want +got):\n%s", diff)
			}
			notes := strings.Join(r.Notes, "\n")
			for _, want := range []string{"GPU 0: 11 profile names derived from memory sizes", "GPU 1 is not MIG capable and is left out"} {
				if !strings.Contains(notes, want) {
					t.Errorf("notes %q lack %q", notes, want)
				}
			}
			if r.Driver != "610.43.02" {
				t.Errorf("driver = %q", r.Driver)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestRealDriverErrors(t *testing.T) {
	a30 := builtin(t, "A30-24GB")
	failing := newFake("NVIDIA A30", a30, nvml.DEVICE_MIG_DISABLE)
	failing.failQuery, failing.failReturn = nvml.GPU_INSTANCE_PROFILE_2_SLICE, nvml.ERROR_UNKNOWN
	unplaced := newFake("NVIDIA A30", a30, nvml.DEVICE_MIG_DISABLE)
	unplaced.noPlacements = nvml.GPU_INSTANCE_PROFILE_4_SLICE
	tests := []struct {
		name string
		gpu  *fakeGPU
		want string
	}{
		{"profile query fails", failing, "GPU 0: get GPU instance profile 2_SLICE: ERROR_UNKNOWN"},
		{"no placement", unplaced, "GPU 0: GPU instance profile 4_SLICE (id 0) has no placement"},
		{"MIG mode but no profile", newFake("NVIDIA A30", gpumodel.Model{Name: "empty"}, nvml.DEVICE_MIG_DISABLE), "NVML reports MIG mode but no GPU-instance profile"},
		{"no MIG GPU at all", newFake("NVIDIA L4", gpumodel.Model{}, -1), "no MIG-capable GPU among the 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Probe(fakeLib(errors.New("no symbol"), tc.gpu), gpumodel.Builtin())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Probe() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
