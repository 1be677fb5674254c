package migconfig

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
	"github.com/migflex/migflex/internal/nvml/nvmlmig"
)

// Media-extension profiles (+me, +me.all, -me, +gfx) in every form of the
// document, validated against GPUs read from the simulator's tables.
func TestMediaProfilesInEveryForm(t *testing.T) {
	tests := []struct {
		name    string
		model   string
		devices string // the mig-devices value
		wantErr string // "" when valid
	}{
		{"map form", "H100-SXM5-80GB", `{"1g.10gb+me": 1, "1g.10gb": 6}`, ""},
		{"list form", "H100-SXM5-80GB", `[1g.10gb+me, 3g.40gb, 2g.20gb]`, ""},
		{"Run:ai form", "H100-SXM5-80GB", `[{name: 1g.10gb+me, position: 6, size: 1}, {name: 3g.40gb, position: 0, size: 4}]`, ""},
		{"mixed form", "RTX-PRO-6000-Server-96GB", `[{name: 2g.48gb+gfx, position: 0, size: 6}, 1g.24gb+gfx, 1g.24gb+me]`, ""},
		{"+me.all with -me", "RTX-PRO-6000-Server-96GB", `{"1g.24gb+me.all": 1, "1g.24gb-me": 3}`, ""},
		{"two +me", "H100-SXM5-80GB", `[1g.10gb+me, 1g.10gb+me]`, "1g.10gb+me x2 exceeds the maximum of 1 per GPU"},
		{"+me.all beside a profile with media", "RTX-PRO-6000-Server-96GB", `{"1g.24gb+me.all": 1, "1g.24gb": 1}`,
			"1g.24gb+me.all takes all media engines and can share the GPU only with -me profiles"},
		{"two +me profiles on one OFA", "A30-24GB", `{"1g.6gb+me": 1, "2g.12gb+me": 1}`,
			"2g.12gb+me + 1g.6gb+me: needs 2 of the GPU's 1 JPEG decoders, 2 of the GPU's 1 OFAs (media engines go to one instance each)"},
		{"2g+me beside 2g", "A30-24GB", `{"2g.12gb+me": 1, "2g.12gb": 1}`, ""},
		{"a variant the GPU lacks", "A30-24GB", `[1g.6gb+gfx]`, "unknown profile 1g.6gb+gfx"},
		{"uppercase suffix", "A30-24GB", `[1g.6gb+ME]`, `profile names are lower case ("1g.6gb+me")`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := fmt.Sprintf("version: v1\nmig-configs:\n  c:\n  - devices: all\n    mig-enabled: true\n    mig-devices: %s\n", tc.devices)
			spec, err := Parse([]byte(doc))
			if err == nil {
				var cfg Config
				if cfg, err = spec.Select("c"); err == nil {
					_, err = Validate(cfg, discover(t, newSim(t, sim.GPUSpec{Model: tc.model, Count: 1})))
				}
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("want valid, got %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestMediaRuleAgreesWithSimulator: for every built-in model and every pair
// of its profiles, Validate accepts the pair exactly when the simulated
// driver creates it. Where Validate refuses for media engines alone, the
// plan applied anyway fails and is rolled back.
func TestMediaRuleAgreesWithSimulator(t *testing.T) {
	enabled := &sim.InitialState{MigEnabled: true}
	for _, m := range gpumodel.Builtin() {
		t.Run(m.Name, func(t *testing.T) {
			for i, a := range m.Profiles {
				for _, b := range m.Profiles[i:] {
					counts := map[string]int{a.Name: 1}
					counts[b.Name]++
					lib := newSim(t, sim.GPUSpec{Model: m.Name, Count: 1, Initial: enabled})
					gpus := discover(t, lib)
					_, verr := Validate(allDevices(counts), gpus)
					if verr != nil && !strings.Contains(verr.Error(), "media engines") {
						continue // refused for memory, counts or placements
					}
					if verr == nil {
						plan, err := MakePlan(gpus, []Desired{{GPU: 0, MigEnabled: true, Profiles: counts}})
						if err != nil {
							t.Errorf("%v: MakePlan: %v", counts, err)
							continue
						}
						if _, err := Apply(context.Background(), nvmlmig.NewPartitioner(lib), plan); err != nil {
							t.Errorf("%v validates but the simulator refuses it: %v", counts, err)
						}
						continue
					}
					// Refused for media engines: no placement of the two
					// gets past the simulated driver either.
					for _, sa := range a.Placements {
						for _, sb := range b.Placements {
							if sa < sb+b.MemorySlices && sb < sa+a.MemorySlices {
								continue
							}
							lib := newSim(t, sim.GPUSpec{Model: m.Name, Count: 1, Initial: enabled})
							p := nvmlmig.NewPartitioner(lib)
							_, errA := p.CreateInstance(0, a.Name, sa)
							_, errB := p.CreateInstance(0, b.Name, sb)
							if errA == nil && errB == nil {
								t.Errorf("%v refused for media engines (%v) but the simulator creates %s at %d and %s at %d", counts, verr, a.Name, sa, b.Name, sb)
							}
						}
					}
				}
			}
		})
	}
}
