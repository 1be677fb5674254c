// Package simtest builds simulated NVML libraries for tests, closed when
// the test ends.
package simtest

import (
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
