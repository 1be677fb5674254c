// Package simtest builds simulated NVML libraries for tests, closed when
// the test ends.
package simtest

import (
	"sync"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
)

// New returns a simulator for cfg, not initialized: code that reads it
// through NVML (nvmlmig.Discover, the Partitioner) holds its own reference.
func New(t testing.TB, cfg sim.Config) *sim.Lib {
	t.Helper()
	l, err := sim.New(cfg)
	if err != nil {
		t.Fatalf("sim.New() = %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
	})
	return l
}

// NewInit is New, initialized (and shut down before it closes).
func NewInit(t testing.TB, cfg sim.Config) *sim.Lib {
	t.Helper()
	l := New(t, cfg)
	if ret := l.Init(); ret != nvml.SUCCESS {
		t.Fatalf("Init() = %v", ret)
	}
	t.Cleanup(func() { l.Shutdown() })
	return l
}

// GPUs is a config of the given GPUs, in memory, with UUIDs seeded by seed.
func GPUs(seed string, specs ...sim.GPUSpec) sim.Config {
	return sim.Config{GPUs: specs, UUIDSeed: seed}
}

// Hang arms a hang fault of 10 minutes (the longest) named name at call on
// GPU gpu, for every call from the first on, and returns release, which
// clears it (the hung call then runs) once however often it is called.
// The test's end releases it too, before the simulator closes.
func Hang(t testing.TB, l *sim.Lib, name string, call sim.CallSite, gpu int) (release func()) {
	t.Helper()
	if _, err := l.ArmFault(sim.Fault{Name: name, Kind: sim.FaultHang, Call: call, GPU: &gpu, Always: true, Duration: sim.Duration(sim.MaxHang)}); err != nil {
		t.Fatalf("ArmFault(%s) = %v", name, err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			if _, err := l.ClearFaults(name); err != nil {
				t.Errorf("ClearFaults(%s) = %v", name, err)
			}
		})
	}
	t.Cleanup(release)
	return release
}
