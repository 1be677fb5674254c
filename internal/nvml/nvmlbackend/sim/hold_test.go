package sim_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
)

// hangTimeout only protects against hangs; the tests wait on conditions.
const hangTimeout = 10 * time.Second

// startHeld makes the simulator's second change (after SetMigMode) and
// waits until it is held; the change's result arrives on the channel.
func startHeld(t *testing.T, l *sim.Lib) <-chan nvml.Return {
	t.Helper()
	d := enableMIG(t, l, 0) // the one change let through
	info := profileInfo(t, d, nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	done := make(chan nvml.Return, 1)
	go func() {
		_, r := d.CreateGpuInstance(&info)
		done <- r
	}()
	deadline := time.Now().Add(hangTimeout)
	for sim.Held(l) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("CreateGpuInstance was never held")
		}
		time.Sleep(time.Millisecond) // polling a counter nothing signals
	}
	if n := len(l.Snapshot()[0].Instances); n != 0 {
		t.Fatalf("%d instances while the change is held, want none", n)
	}
	return done
}

func result(t *testing.T, done <-chan nvml.Return, what string) nvml.Return {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(hangTimeout):
		t.Fatalf("%s never returned", what)
		return 0
	}
}

func TestHoldFileReleases(t *testing.T) {
	release := filepath.Join(t.TempDir(), "release")
	l := newLibConfig(t, sim.Config{GPUs: []sim.GPUSpec{gpu("H100-SXM5-80GB")}, HoldFile: release, HoldAfter: 1})
	done := startHeld(t, l)
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := result(t, done, "the held CreateGpuInstance"); r != nvml.SUCCESS {
		t.Fatalf("held CreateGpuInstance = %v after the release, want SUCCESS", r)
	}
	// Released for good: later changes do not look for the file again.
	if err := os.Remove(release); err != nil {
		t.Fatal(err)
	}
	d := device(t, l, 0)
	info := profileInfo(t, d, nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	again := make(chan nvml.Return, 1)
	go func() {
		_, r := d.CreateGpuInstance(&info)
		again <- r
	}()
	if r := result(t, again, "a change after the release"); r != nvml.SUCCESS {
		t.Fatalf("CreateGpuInstance after the release = %v, want SUCCESS", r)
	}
	if n := len(l.Snapshot()[0].Instances); n != 2 {
		t.Errorf("%d instances, want 2", n)
	}
}

func TestHoldEndsWithClose(t *testing.T) {
	l := newLibConfig(t, sim.Config{GPUs: []sim.GPUSpec{gpu("H100-SXM5-80GB")}, HoldFile: filepath.Join(t.TempDir(), "never"), HoldAfter: 1})
	done := startHeld(t, l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if r := result(t, done, "the held CreateGpuInstance"); r != nvml.ERROR_NO_PERMISSION {
		t.Errorf("held CreateGpuInstance = %v after Close, want ERROR_NO_PERMISSION", r)
	}
	if n := len(l.Snapshot()[0].Instances); n != 0 {
		t.Errorf("%d instances after Close, want none", n)
	}
}
