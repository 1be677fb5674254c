package mig_test

import (
	"testing"

	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/internal/domain/mig"
)

// TestDeriveProfileNameBuiltins derives every built-in profile's name from
// its numbers alone. It checks the derivation and, as much, the memory
// figures in the simulator's tables: a wrong MiB value gives a wrong name.
func TestDeriveProfileNameBuiltins(t *testing.T) {
	for _, m := range gpumodel.Builtin() {
		for _, p := range m.Profiles {
			t.Run(m.Name+"/"+p.Name, func(t *testing.T) {
				if got := mig.DeriveProfileName(p.Query, p.Slices, p.MemoryMiB, m.MemoryMiB<<20); got != p.Name {
					t.Errorf("DeriveProfileName() = %q, want %q", got, p.Name)
				}
			})
		}
	}
}

func TestDeriveProfileName(t *testing.T) {
	const a100_80 = 81920 << 20
	tests := []struct {
		name   string
		query  int
		slices int
		memMiB uint64
		total  uint64
		want   string
	}{
		{"full A100 80GB rounds up to 80, not 79", mig.GIProfile7Slice, 7, 80384, a100_80, "7g.80gb"},
		{"media extension", mig.GIProfile1SliceRev1, 1, 9856, a100_80, "1g.10gb+me"},
		{"all media engines", mig.GIProfile1SliceAllME, 1, 9856, a100_80, "1g.10gb+me.all"},
		{"no media engines", mig.GIProfile2SliceNoME, 2, 19968, a100_80, "2g.20gb-me"},
		{"graphics", mig.GIProfile4SliceGFX, 4, 40192, a100_80, "4g.40gb+gfx"},
		{"double memory has no suffix", mig.GIProfile1SliceRev2, 1, 19968, a100_80, "1g.20gb"},
		{"70 GB card", mig.GIProfile3Slice, 3, 30720, 71680 << 20, "3g.35gb"},
		{"no total memory", mig.GIProfile1Slice, 1, 4864, 0, "1g.0gb"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := mig.DeriveProfileName(tc.query, tc.slices, tc.memMiB, tc.total); got != tc.want {
				t.Errorf("DeriveProfileName() = %q, want %q", got, tc.want)
			}
		})
	}
}
