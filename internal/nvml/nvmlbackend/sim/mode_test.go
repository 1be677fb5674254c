package sim_test

import (
	"errors"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
)

type migModes struct{ Current, Pending int }

func modes(t *testing.T, d nvml.Device) migModes {
	t.Helper()
	cur, pending, ret := d.GetMigMode()
	if ret != nvml.SUCCESS {
		t.Fatalf("GetMigMode() = %v", ret)
	}
	return migModes{cur, pending}
}

func TestSetMigMode(t *testing.T) {
	const on, off = nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_DISABLE
	tests := []struct {
		model          string
		wantActivation nvml.Return
		wantAfterSet   migModes
	}{
		// Ampere keeps the change pending until a reset.
		{"A100-SXM4-40GB", nvml.ERROR_RESET_REQUIRED, migModes{off, on}},
		{"A100-SXM4-80GB", nvml.ERROR_RESET_REQUIRED, migModes{off, on}},
		// Hopper switches at once.
		{"H100-SXM5-80GB", nvml.SUCCESS, migModes{on, on}},
		{"H200-SXM-141GB", nvml.SUCCESS, migModes{on, on}},
	}
	for _, tc := range tests {
		t.Run(tc.model, func(t *testing.T) {
			l := newLib(t, gpu(tc.model))
			d := device(t, l, 0)
			if got := modes(t, d); got != (migModes{off, off}) {
				t.Fatalf("initial modes = %+v", got)
			}
			activation, ret := d.SetMigMode(on)
			if ret != nvml.SUCCESS || activation != tc.wantActivation {
				t.Errorf("SetMigMode(on) = %v, %v, want activation %v, SUCCESS", activation, ret, tc.wantActivation)
			}
			if got := modes(t, d); got != tc.wantAfterSet {
				t.Errorf("modes after SetMigMode = %+v, want %+v", got, tc.wantAfterSet)
			}
			if err := l.ResetGPU(0); err != nil {
				t.Fatal(err)
			}
			if got := modes(t, d); got != (migModes{on, on}) {
				t.Errorf("modes after reset = %+v, want enabled", got)
			}
			// Same mode again: a no-op, even with instances present.
			createInstance(t, d, byKind["7g"], 0)
			if a, r := d.SetMigMode(on); a != nvml.SUCCESS || r != nvml.SUCCESS {
				t.Errorf("SetMigMode(on) again = %v, %v, want SUCCESS", a, r)
			}
			// A change while instances exist is refused and changes nothing.
			if a, r := d.SetMigMode(off); r != nvml.ERROR_IN_USE {
				t.Errorf("SetMigMode(off) with instances = %v, %v, want ERROR_IN_USE", a, r)
			}
			if got := modes(t, d); got != (migModes{on, on}) {
				t.Errorf("modes after refused change = %+v", got)
			}
		})
	}
}

func TestSetMigModeRefusals(t *testing.T) {
	l := newLib(t, gpu("H100-SXM5-80GB"))
	d := device(t, l, 0)
	if _, ret := d.SetMigMode(2); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("SetMigMode(2) = %v, want ERROR_INVALID_ARGUMENT", ret)
	}
	// Processes on the whole GPU (gi 0) block a mode change and a reset.
	if err := l.SetBusy(0, 0, true); err != nil {
		t.Fatal(err)
	}
	if _, ret := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.ERROR_IN_USE {
		t.Errorf("SetMigMode on a busy GPU = %v, want ERROR_IN_USE", ret)
	}
	if err := l.ResetGPU(0); !errors.Is(err, nvml.ERROR_IN_USE) {
		t.Errorf("ResetGPU on a busy GPU = %v, want ERROR_IN_USE", err)
	}
	if err := l.SetBusy(0, 0, false); err != nil {
		t.Fatal(err)
	}
	if _, ret := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		t.Errorf("SetMigMode on an idle GPU = %v", ret)
	}
}

func TestResetGPU(t *testing.T) {
	l := newLib(t, gpu("A100-SXM4-40GB"), gpu("A100-SXM4-40GB"))
	d := enableMIG(t, l, 0)
	createInstance(t, d, byKind["1g"], 0)
	if err := l.ResetGPU(0); err == nil || err.Error() != "GPU 0: reset: 1 GPU instances exist: ERROR_IN_USE" {
		t.Errorf("ResetGPU with an instance = %v", err)
	}
	if err := l.ResetGPU(2); err == nil || !errors.Is(err, nvml.ERROR_INVALID_ARGUMENT) {
		t.Errorf("ResetGPU(2) = %v, want ERROR_INVALID_ARGUMENT", err)
	}
	// A reset only touches its GPU.
	d1 := device(t, l, 1)
	d1.SetMigMode(nvml.DEVICE_MIG_ENABLE)
	if err := l.ResetGPU(0); err == nil {
		t.Error("ResetGPU(0) succeeded with an instance")
	}
	if got := modes(t, d1); got != (migModes{nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_ENABLE}) {
		t.Errorf("GPU 1 modes = %+v, want still pending", got)
	}
}

func TestReboot(t *testing.T) {
	l := newLib(t, gpu("A100-SXM4-40GB"), gpu("A100-SXM4-40GB"), gpu("H100-SXM5-80GB"))
	d0 := enableMIG(t, l, 0)
	gi, _ := createInstance(t, d0, byKind["3g"], 0)
	if err := l.SetBusy(0, giID(t, gi), true); err != nil {
		t.Fatal(err)
	}
	device(t, l, 1).SetMigMode(nvml.DEVICE_MIG_ENABLE) // pending on Ampere
	if err := l.SetBusy(2, 0, true); err != nil {
		t.Fatal(err)
	}

	if err := l.Reboot(); err != nil {
		t.Fatal(err)
	}
	got := map[int]migModes{}
	for i := range 3 {
		got[i] = modes(t, device(t, l, i))
	}
	want := map[int]migModes{
		0: {nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE},   // kept
		1: {nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE},   // pending applied
		2: {nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_DISABLE}, // unchanged
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("modes after reboot (-want +got):\n%s", diff)
	}
	for _, g := range l.Snapshot() {
		if len(g.Instances) > 0 || g.Busy {
			t.Errorf("GPU %d after reboot: %d instances, busy %v; want none", g.Index, len(g.Instances), g.Busy)
		}
	}
	if _, ret := gi.GetInfo(); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("GPU instance handle after reboot = %v, want ERROR_INVALID_ARGUMENT", ret)
	}
	// GPU handles survive; the busy mark went with the processes.
	if _, ret := device(t, l, 2).SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		t.Errorf("SetMigMode after reboot = %v", ret)
	}
}
