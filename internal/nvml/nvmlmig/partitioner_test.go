package nvmlmig_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
	"github.com/migflex/migflex/internal/nvml/nvmlmig"
)

func TestSetMigMode(t *testing.T) {
	tests := []struct {
		model     string
		wantErr   error // from enabling
		wantAfter [2]bool
	}{
		{"A100-SXM4-40GB", mig.ErrResetRequired, [2]bool{false, true}},
		{"H100-SXM5-80GB", nil, [2]bool{true, true}},
	}
	for _, tc := range tests {
		t.Run(tc.model, func(t *testing.T) {
			l := newSim(t, gpus(tc.model, 1))
			p := nvmlmig.NewPartitioner(l)
			err := p.SetMigMode(0, true)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("SetMigMode(true) = %v, want %v", err, tc.wantErr)
			}
			if err != nil && err.Error() != "GPU 0: enable MIG mode: pending until GPU reset (activation status ERROR_RESET_REQUIRED): ERROR_RESET_REQUIRED" {
				t.Errorf("error text = %q", err)
			}
			g := discover(t, l)[0]
			if got := [2]bool{g.MigEnabled, g.MigPending}; got != tc.wantAfter {
				t.Errorf("current/pending = %v, want %v", got, tc.wantAfter)
			}
			if err := p.ResetGPU(0); err != nil {
				t.Fatal(err)
			}
			if err := p.SetMigMode(0, true); err != nil {
				t.Errorf("SetMigMode(true) once enabled = %v, want nil", err)
			}
			if _, err := p.CreateInstance(0, discover(t, l)[0].Profiles[0].Name, 0); err != nil {
				t.Fatal(err)
			}
			err = p.SetMigMode(0, false)
			if !errors.Is(err, mig.ErrInUse) || !errors.Is(err, nvml.ERROR_IN_USE) {
				t.Errorf("SetMigMode(false) with an instance = %v, want ErrInUse", err)
			}
			if err == nil || err.Error() != "GPU 0: disable MIG mode: ERROR_IN_USE" {
				t.Errorf("error text = %v", err)
			}
		})
	}
}

func TestResetGPUCapability(t *testing.T) {
	l := newSim(t, gpus("A100-SXM4-40GB", 1))
	if err := nvmlmig.NewPartitioner(plainLib{l}).ResetGPU(0); !errors.Is(err, mig.ErrNotSupported) {
		t.Errorf("ResetGPU without the capability = %v, want ErrNotSupported", err)
	}
	p := nvmlmig.NewPartitioner(l)
	if err := p.ResetGPU(4); err == nil || err.Error() != "reset: no GPU 4 (the simulator has 1): ERROR_INVALID_ARGUMENT" {
		t.Errorf("ResetGPU(4) = %v", err)
	}
	p.SetMigMode(0, true)
	p.ResetGPU(0)
	p.CreateInstance(0, "7g.40gb", 0)
	if err := p.ResetGPU(0); !errors.Is(err, mig.ErrInUse) || err.Error() != "GPU 0: reset: 1 GPU instances exist: ERROR_IN_USE" {
		t.Errorf("ResetGPU with an instance = %v, want ErrInUse", err)
	}
}

func TestCreateAndDestroy(t *testing.T) {
	l := newSim(t, gpus("H100-SXM5-80GB", 3))
	p := nvmlmig.NewPartitioner(l)
	if err := p.SetMigMode(2, true); err != nil {
		t.Fatal(err)
	}
	inst, err := p.CreateInstance(2, "3g.40gb", 4)
	if err != nil {
		t.Fatal(err)
	}
	want := mig.Instance{Profile: "3g.40gb", Start: 4, Size: 4, GIID: 1, CIID: 0, HasCI: true, UUID: inst.UUID}
	if diff := cmp.Diff(want, inst); diff != "" || !strings.HasPrefix(inst.UUID, "MIG-") {
		t.Errorf("CreateInstance() = %q (-want +got):\n%s", inst.UUID, diff)
	}
	if diff := cmp.Diff([]mig.Instance{inst}, discover(t, l)[2].Instances); diff != "" {
		t.Errorf("discovered instances (-want +got):\n%s", diff)
	}

	tests := []struct {
		name    string
		gpu     int
		profile string
		start   int
		wantIs  error
		wantMsg string
	}{
		{"overlap", 2, "2g.20gb", 4, mig.ErrInsufficientResources, "GPU 2: create 2g.20gb at 4: ERROR_INSUFFICIENT_RESOURCES"},
		{"count", 2, "3g.40gb", 0, nil, ""},
		{"third 3g", 2, "3g.40gb", 0, mig.ErrInsufficientResources, "GPU 2: create 3g.40gb at 0: ERROR_INSUFFICIENT_RESOURCES"},
		{"placement", 2, "2g.20gb", 1, nvml.ERROR_INVALID_ARGUMENT, "GPU 2: create 2g.20gb at 1: 2g.20gb may start at [0 2 4]: ERROR_INVALID_ARGUMENT"},
		{"unknown profile", 2, "5g.50gb", 0, mig.ErrNotFound, `GPU 2: create 5g.50gb at 0: no profile "5g.50gb" (the GPU has 1g.10gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb, 1g.10gb+me, 1g.20gb): not found`},
		{"MIG disabled", 0, "1g.10gb", 0, mig.ErrNotSupported, "GPU 0: create 1g.10gb at 0: ERROR_NOT_SUPPORTED"},
		{"no such GPU", 7, "1g.10gb", 0, nvml.ERROR_INVALID_ARGUMENT, "GPU 7: get device handle: ERROR_INVALID_ARGUMENT"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := discover(t, l)
			_, err := p.CreateInstance(tc.gpu, tc.profile, tc.start)
			if tc.wantIs == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, tc.wantIs) || err.Error() != tc.wantMsg {
				t.Errorf("CreateInstance() = %v, want %q matching %v", err, tc.wantMsg, tc.wantIs)
			}
			if diff := cmp.Diff(before, discover(t, l)); diff != "" {
				t.Errorf("a failed create changed the GPUs (-before +after):\n%s", diff)
			}
		})
	}

	if err := p.DestroyInstance(2, inst.GIID); err != nil {
		t.Fatal(err)
	}
	if err := p.DestroyInstance(2, inst.GIID); !errors.Is(err, mig.ErrNotFound) || err.Error() != "GPU 2: destroy GPU instance 1: ERROR_NOT_FOUND" {
		t.Errorf("second DestroyInstance() = %v, want ErrNotFound", err)
	}
	left := discover(t, l)[2].Instances
	if len(left) != 1 || left[0].Start != 0 {
		t.Errorf("instances left = %+v, want the 3g.40gb at 0", left)
	}
}

func TestDestroyBusy(t *testing.T) {
	l := newSim(t, gpus("A100-SXM4-80GB", 1))
	p := nvmlmig.NewPartitioner(l)
	p.SetMigMode(0, true)
	p.ResetGPU(0)
	inst, err := p.CreateInstance(0, "2g.20gb", 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetBusy(0, inst.GIID, true); err != nil {
		t.Fatal(err)
	}
	err = p.DestroyInstance(0, inst.GIID)
	if !errors.Is(err, mig.ErrInUse) || err.Error() != "GPU 0: destroy GPU instance 1: destroy compute instance 0: ERROR_IN_USE" {
		t.Errorf("DestroyInstance() of a busy instance = %v, want ErrInUse", err)
	}
	if diff := cmp.Diff([]mig.Instance{inst}, discover(t, l)[0].Instances); diff != "" {
		t.Errorf("busy instance changed (-want +got):\n%s", diff)
	}
	l.SetBusy(0, inst.GIID, false)
	if err := p.DestroyInstance(0, inst.GIID); err != nil {
		t.Errorf("DestroyInstance() once idle = %v", err)
	}
}

// TestCreateRollsBack: when the compute instance cannot be made, the GPU
// instance is destroyed again.
func TestCreateRollsBack(t *testing.T) {
	l := newSim(t, gpus("H100-SXM5-80GB", 1))
	p := nvmlmig.NewPartitioner(noCILib{l})
	if err := p.SetMigMode(0, true); err != nil {
		t.Fatal(err)
	}
	_, err := p.CreateInstance(0, "4g.40gb", 0)
	if !errors.Is(err, mig.ErrInsufficientResources) || err.Error() != "GPU 0: create 4g.40gb at 0: create compute instance: ERROR_INSUFFICIENT_RESOURCES" {
		t.Errorf("CreateInstance() = %v", err)
	}
	if got := discover(t, l)[0].Instances; len(got) != 0 {
		t.Errorf("instances left after a failed create: %+v", got)
	}
}

// noCILib's GPU instances refuse compute instances.
type noCILib struct{ nvml.Interface }

func (l noCILib) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	d, ret := l.Interface.DeviceGetHandleByIndex(i)
	return noCIDevice{d}, ret
}

type noCIDevice struct{ nvml.Device }

func (d noCIDevice) CreateGpuInstanceWithPlacement(info *nvml.GpuInstanceProfileInfo, pl *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
	gi, ret := d.Device.CreateGpuInstanceWithPlacement(info, pl)
	return noCIGpuInstance{gi}, ret
}

type noCIGpuInstance struct{ nvml.GpuInstance }

func (noCIGpuInstance) CreateComputeInstance(*nvml.ComputeInstanceProfileInfo) (nvml.ComputeInstance, nvml.Return) {
	return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
}

// TestUUIDsSurviveRestart: a new simulator process on the same state file
// discovers the same GPUs, layout and MIG device UUIDs.
func TestUUIDsSurviveRestart(t *testing.T) {
	cfg := sim.Config{GPUs: []sim.GPUSpec{gpus("H200-SXM-141GB", 2)}, StateDir: filepath.Join(t.TempDir(), "sim"), UUIDSeed: "n1"}
	l, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := nvmlmig.NewPartitioner(l)
	p.SetMigMode(1, true)
	for _, c := range []struct {
		name  string
		start int
	}{{"4g.71gb", 0}, {"2g.35gb", 4}, {"1g.18gb", 6}} {
		if _, err := p.CreateInstance(1, c.name, c.start); err != nil {
			t.Fatal(err)
		}
	}
	before := discover(t, l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	l2 := newSimConfig(t, cfg)
	if diff := cmp.Diff(before, discover(t, l2)); diff != "" {
		t.Errorf("after restart (-before +after):\n%s", diff)
	}
}

func discover(t *testing.T, lib nvml.Interface) []mig.GPU {
	t.Helper()
	gpus, err := nvmlmig.Discover(lib)
	if err != nil {
		t.Fatalf("Discover() = %v", err)
	}
	return gpus
}
