package probe

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
)

// TestRealDumpsMatchBuiltins keeps the built-in tables honest against
// dumps that `device-plugin probe` wrote on real GPUs (docs/MODELS.md
// names the machine and driver of each): a table edit that drifts from
// what a driver reported fails here, and each dump runs as a simulated node.
func TestRealDumpsMatchBuiltins(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*-r*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no probe dumps of real GPUs in testdata")
	}
	builtins := gpumodel.Builtin()
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := sim.ParseConfig(data, t.TempDir(), "")
			if err != nil {
				t.Fatalf("the dump is not a simulator config: %v", err)
			}
			if len(cfg.Models) == 0 {
				t.Fatal("the dump has no model")
			}
			diffs := CompareWithBuiltin(&Result{Config: cfg}, builtins)
			for _, d := range diffs {
				t.Errorf("built-in table differs from the real GPU: %s", d)
			}
			// The dump runs: a simulated copy of that node probes the same.
			again, err := Probe(newSim(t, cfg), builtins)
			if err != nil {
				t.Fatalf("probing a simulator run from the dump: %v", err)
			}
			if diffs := CompareWithBuiltin(again, builtins); len(diffs) != 0 {
				t.Errorf("simulated copy differs from the built-in: %v", diffs)
			}
		})
	}
}
