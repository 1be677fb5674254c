package dra

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/internal/domain/mig"
)

// gpu is a GPU of a built-in model with MIG on and instances of the given
// profiles at the given placement starts ("1g.5gb@0"), each with a compute
// instance and a UUID derived from the GPU and placement.
func gpu(t testing.TB, index int, model string, instances ...string) mig.GPU {
	t.Helper()
	m, ok := gpumodel.Lookup(model)
	if !ok {
		t.Fatalf("no built-in model %q", model)
	}
	g := mig.GPU{
		Index: index, Minor: index, UUID: fmt.Sprintf("GPU-%d", index), Model: m.Name,
		MemoryMiB: m.MemoryMiB, MigCapable: true, MigEnabled: true, MigPending: true,
		Profiles: m.MIGProfiles(),
	}
	for i, spec := range instances {
		name, at, _ := strings.Cut(spec, "@")
		start, err := strconv.Atoi(at)
		if err != nil {
			t.Fatalf("instance %q: placement: %v", spec, err)
		}
		p, ok := g.Profile(name)
		if !ok {
			t.Fatalf("model %s has no profile %q", model, name)
		}
		if !slices.Contains(p.Placements, start) {
			t.Fatalf("model %s: %s cannot start at %d (placements %v)", model, name, start, p.Placements)
		}
		g.Instances = append(g.Instances, mig.Instance{
			Profile: name, Start: start, Size: p.MemorySlices,
			GIID: uint32(i + 1), CIID: 0, HasCI: true,
			UUID: fmt.Sprintf("MIG-%d-%d", index, start),
		})
	}
	return g
}

// wholeGPU is a GPU of a built-in model with MIG off.
func wholeGPU(t testing.TB, index int, model string) mig.GPU {
	g := gpu(t, index, model)
	g.MigEnabled, g.MigPending = false, false
	return g
}
