package migconfig

import (
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/migconfig/migconfigtest"
)

// corpusOut writes the generated corpus to a directory, for measuring it
// in a process of its own (docs/BENCHMARKS.md).
var corpusOut = flag.String("corpus-out", "", "write the hostile mig.config corpus to this directory")

const (
	// allocBudget bounds what one document may allocate on its way from
	// the bytes to the plan. The heap cannot grow by more than what is
	// allocated, so this bounds the agent's memory growth for any
	// annotation, inside issue 14's 32 MiB. It was 16 MiB while
	// MaxValues was 8,192; issue 29 doubled that limit so a fleet's
	// config file of MaxConfigs configurations fits, and a list of 16,000
	// profiles now decodes (about 20 MB allocated, docs/BENCHMARKS.md).
	allocBudget = 24 << 20
	// maxErrorBytes bounds the error a document gets, which becomes the
	// Node's reason and an Event message.
	maxErrorBytes = 2048
)

// cost is what running a function allocated.
type cost struct {
	bytes, mallocs uint64
	took           time.Duration
}

// measure runs f and returns what it allocated, from runtime.MemStats
// (the bytes and objects allocated are exact; the time is only logged).
func measure(f func()) cost {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	f()
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	return cost{bytes: after.TotalAlloc - before.TotalAlloc, mallocs: after.Mallocs - before.Mallocs, took: took}
}

// toPlan takes a document as the agent does, from its bytes to a plan,
// and returns the first error.
func toPlan(data []byte, gpus []mig.GPU) error {
	spec, err := Parse(data)
	if err != nil {
		return err
	}
	cfg, err := spec.Select("")
	if err != nil {
		return err
	}
	desired, err := Validate(cfg, gpus)
	if err != nil {
		return err
	}
	_, err = MakePlan(gpus, desired)
	return err
}

// TestHostileDocumentsAreBounded runs every document of the hostile corpus
// (aliases, nesting, huge numbers, lists and strings, many configurations,
// junk; sizes up to 256 KiB) from its bytes to the plan on an eight-GPU
// node: each must fail with a short error, allocating less than
// allocBudget. The controls, real documents of the same forms, must pass.
func TestHostileDocumentsAreBounded(t *testing.T) {
	node := gpus(8, h100)
	if *corpusOut != "" {
		writeCorpus(t, *corpusOut)
	}
	var worst cost
	var worstBytes, worstTime string
	for _, d := range migconfigtest.Hostile() {
		t.Run(d.Name, func(t *testing.T) {
			if len(d.Data) > migconfigtest.MaxBytes && d.Name != "one-byte-too-big" {
				t.Fatalf("the corpus document is %d bytes, more than %d", len(d.Data), migconfigtest.MaxBytes)
			}
			var err error
			c := measure(func() { err = toPlan(d.Data, node) })
			if err == nil {
				t.Fatalf("%d-byte document accepted", len(d.Data))
			}
			msg := err.Error()
			if len(msg) > maxErrorBytes {
				t.Errorf("error of %d bytes, want at most %d:\n%.600s...", len(msg), maxErrorBytes, msg)
			}
			if c.bytes > allocBudget {
				t.Errorf("allocated %d bytes, want at most %d", c.bytes, allocBudget)
			}
			t.Logf("%d bytes in, %d bytes and %d objects allocated, %v: %.200s", len(d.Data), c.bytes, c.mallocs, c.took, msg)
			if c.bytes > worst.bytes {
				worst.bytes, worstBytes = c.bytes, d.Name
			}
			worst.mallocs = max(worst.mallocs, c.mallocs)
			if c.took > worst.took {
				worst.took, worstTime = c.took, d.Name
			}
		})
	}
	t.Logf("corpus of %d: at most %d bytes allocated (%s), %d objects, %v (%s)",
		len(migconfigtest.Hostile()), worst.bytes, worstBytes, worst.mallocs, worst.took, worstTime)

	for _, d := range migconfigtest.Controls() {
		t.Run("control/"+d.Name, func(t *testing.T) {
			var err error
			c := measure(func() { err = toPlan(d.Data, node) })
			if err != nil {
				t.Fatalf("a real document failed: %v", err)
			}
			if c.bytes > allocBudget {
				t.Errorf("allocated %d bytes, want at most %d", c.bytes, allocBudget)
			}
		})
	}
}

func writeCorpus(t *testing.T, dir string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range append(migconfigtest.Hostile(), migconfigtest.Controls()...) {
		if err := os.WriteFile(filepath.Join(dir, d.Name+".yaml"), d.Data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
