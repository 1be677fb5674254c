package migconfig

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/migflex/migflex/internal/domain/mig"
)

func TestMakePlan(t *testing.T) {
	noCI := func(g mig.GPU, i int) mig.GPU {
		g.Instances[i].HasCI = false
		return g
	}
	pending := func(g mig.GPU, enabled, pending bool) mig.GPU {
		g.MigEnabled, g.MigPending = enabled, pending
		return g
	}
	want := func(profiles map[string]int, pins ...Placement) Desired {
		return Desired{GPU: 0, MigEnabled: true, Profiles: profiles, Placements: pins}
	}
	tests := map[string]struct {
		gpu     mig.GPU
		desired Desired
		// keep and destroy are GI ids of the GPU's instances.
		keep, destroy []uint32
		create        []Placement
		mode          ModeChange
		summary       string
	}{
		"already right: nothing to do": {
			gpu:     gpu(0, h100, at("3g.40gb", 4), at("2g.20gb", 0), at("1g.10gb", 2)),
			desired: want(map[string]int{"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}),
			keep:    []uint32{2, 3, 1},
			summary: "GPU 0 (H100-SXM5-80GB): unchanged, 2g.20gb@0:2, 1g.10gb@2:1, 3g.40gb@4:4",
		},
		"already right with pins": {
			gpu:     gpu(0, h100, at("3g.40gb", 0), at("3g.40gb", 4)),
			desired: want(nil, Placement{"3g.40gb", 4, 4}, Placement{"3g.40gb", 0, 4}),
			keep:    []uint32{1, 2},
			summary: "GPU 0 (H100-SXM5-80GB): unchanged, 3g.40gb@0:4, 3g.40gb@4:4",
		},
		"MIG on without instances, already so": {
			gpu:     gpu(0, h100),
			desired: want(nil),
			summary: "GPU 0 (H100-SXM5-80GB): unchanged, MIG enabled, no instances",
		},
		"3g+3g to 3g+2g+1g keeps one 3g, the lower": {
			gpu:     gpu(0, h100, at("3g.40gb", 0), at("3g.40gb", 4)),
			desired: want(map[string]int{"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}),
			keep:    []uint32{1},
			destroy: []uint32{2},
			create:  []Placement{{"2g.20gb", 4, 2}, {"1g.10gb", 6, 1}},
			summary: "GPU 0 (H100-SXM5-80GB): keep 3g.40gb@0:4 (GI 1); destroy 3g.40gb@4:4 (GI 2); create 2g.20gb@4:2, 1g.10gb@6:1",
		},
		"keeping beats lower placements": {
			// The lowest layout would put 2g at 0; keeping the 2g at 4 is better.
			gpu:     gpu(0, h100, at("2g.20gb", 4)),
			desired: want(map[string]int{"2g.20gb": 1, "1g.10gb": 1}),
			keep:    []uint32{1},
			create:  []Placement{{"1g.10gb", 0, 1}},
			summary: "GPU 0 (H100-SXM5-80GB): keep 2g.20gb@4:2 (GI 1); create 1g.10gb@0:1",
		},
		"keep what still fits, rebuild what does not": {
			// 4g+2g+1g: the 2g at 0 is where the 4g must go; the 1g at 6 stays.
			gpu:     gpu(0, h100, at("2g.20gb", 0), at("1g.10gb", 6)),
			desired: want(map[string]int{"4g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}),
			keep:    []uint32{2},
			destroy: []uint32{1},
			create:  []Placement{{"4g.40gb", 0, 4}, {"2g.20gb", 4, 2}},
			summary: "GPU 0 (H100-SXM5-80GB): keep 1g.10gb@6:1 (GI 2); destroy 2g.20gb@0:2 (GI 1); create 4g.40gb@0:4, 2g.20gb@4:2",
		},
		"7x1g to 4g+3g destroys all": {
			gpu: gpu(0, a100x40, at("1g.5gb", 0), at("1g.5gb", 1), at("1g.5gb", 2), at("1g.5gb", 3),
				at("1g.5gb", 4), at("1g.5gb", 5), at("1g.5gb", 6)),
			desired: want(map[string]int{"4g.20gb": 1, "3g.20gb": 1}),
			destroy: []uint32{1, 2, 3, 4, 5, 6, 7},
			create:  []Placement{{"4g.20gb", 0, 4}, {"3g.20gb", 4, 4}},
			summary: "GPU 0 (A100-SXM4-40GB): destroy 1g.5gb@0:1 (GI 1), 1g.5gb@1:1 (GI 2), 1g.5gb@2:1 (GI 3), 1g.5gb@3:1 (GI 4), 1g.5gb@4:1 (GI 5), 1g.5gb@5:1 (GI 6), 1g.5gb@6:1 (GI 7); create 4g.20gb@0:4, 3g.20gb@4:4",
		},
		"4g+2g+1g on an empty GPU, where first fit in a bad order fails": {
			gpu:     gpu(0, a100x80),
			desired: want(map[string]int{"1g.10gb": 1, "2g.20gb": 1, "4g.40gb": 1}),
			create:  []Placement{{"4g.40gb", 0, 4}, {"2g.20gb", 4, 2}, {"1g.10gb", 6, 1}},
			summary: "GPU 0 (A100-SXM4-80GB): create 4g.40gb@0:4, 2g.20gb@4:2, 1g.10gb@6:1",
		},
		"a pin moves an instance": {
			gpu:     gpu(0, h100, at("3g.40gb", 0)),
			desired: want(nil, Placement{"3g.40gb", 4, 4}),
			destroy: []uint32{1},
			create:  []Placement{{"3g.40gb", 4, 4}},
			summary: "GPU 0 (H100-SXM5-80GB): destroy 3g.40gb@0:4 (GI 1); create 3g.40gb@4:4",
		},
		"a GPU instance without its compute instance is rebuilt": {
			gpu:     noCI(gpu(0, h100, at("3g.40gb", 0), at("3g.40gb", 4)), 1),
			desired: want(map[string]int{"3g.40gb": 2}),
			keep:    []uint32{1},
			destroy: []uint32{2},
			create:  []Placement{{"3g.40gb", 4, 4}},
			summary: "GPU 0 (H100-SXM5-80GB): keep 3g.40gb@0:4 (GI 1); destroy 3g.40gb@4:4 (GI 2); create 3g.40gb@4:4",
		},
		"profiles no longer wanted go": {
			gpu:     gpu(0, h100, at("7g.80gb", 0)),
			desired: want(map[string]int{"1g.10gb": 2}),
			destroy: []uint32{1},
			create:  []Placement{{"1g.10gb", 0, 1}, {"1g.10gb", 1, 1}},
			summary: "GPU 0 (H100-SXM5-80GB): destroy 7g.80gb@0:8 (GI 1); create 1g.10gb@0:1, 1g.10gb@1:1",
		},
		"enable MIG": {
			gpu:     migOff(0, h100),
			desired: want(map[string]int{"7g.80gb": 1}),
			mode:    ModeEnable,
			create:  []Placement{{"7g.80gb", 0, 8}},
			summary: "GPU 0 (H100-SXM5-80GB): enable MIG; create 7g.80gb@0:8",
		},
		"enable MIG while a disable is pending": {
			gpu:     pending(gpu(0, a100x40), true, false),
			desired: want(nil),
			mode:    ModeEnable,
			summary: "GPU 0 (A100-SXM4-40GB): enable MIG",
		},
		"enable already pending, awaiting reset": {
			gpu:     pending(migOff(0, a100x40), false, true),
			desired: want(map[string]int{"7g.40gb": 1}),
			mode:    ModeEnable,
			create:  []Placement{{"7g.40gb", 0, 8}},
			summary: "GPU 0 (A100-SXM4-40GB): enable MIG; create 7g.40gb@0:8",
		},
		"disable MIG destroys everything first": {
			gpu:     gpu(0, h100, at("3g.40gb", 0), at("4g.40gb", 4)),
			desired: Desired{GPU: 0},
			mode:    ModeDisable,
			destroy: []uint32{1, 2},
			summary: "GPU 0 (H100-SXM5-80GB): destroy 3g.40gb@0:4 (GI 1), 4g.40gb@4:4 (GI 2); disable MIG",
		},
		"MIG already off": {
			gpu:     migOff(0, h100),
			desired: Desired{GPU: 0},
			summary: "GPU 0 (H100-SXM5-80GB): unchanged, MIG disabled",
		},
		"GPU without MIG asked for MIG off": {
			gpu:     gpu(0, t4),
			desired: Desired{GPU: 0},
			summary: "GPU 0 (Tesla-T4): unchanged, MIG disabled",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			plan, err := MakePlan([]mig.GPU{tc.gpu}, []Desired{tc.desired})
			if err != nil {
				t.Fatalf("MakePlan: %v", err)
			}
			if len(plan.GPUs) != 1 {
				t.Fatalf("MakePlan returned %d GPU plans, want 1", len(plan.GPUs))
			}
			got := plan.GPUs[0]
			byGI := map[uint32]mig.Instance{}
			for _, in := range tc.gpu.Instances {
				byGI[in.GIID] = in
			}
			pick := func(ids []uint32) []mig.Instance {
				var out []mig.Instance
				for _, id := range ids {
					out = append(out, byGI[id])
				}
				return sortedInstances(out)
			}
			wantPlan := GPUPlan{
				GPU:        0,
				Model:      tc.gpu.Model,
				Mode:       tc.mode,
				Before:     sortedInstances(tc.gpu.Instances),
				BeforeMode: tc.gpu.MigPending,
				Keep:       pick(tc.keep),
				Destroy:    pick(tc.destroy),
				Create:     tc.create,
			}
			if diff := cmp.Diff(wantPlan, got); diff != "" {
				t.Errorf("MakePlan (-want +got):\n%s", diff)
			}
			if s := got.Summary(); s != tc.summary {
				t.Errorf("Summary() = %q, want %q", s, tc.summary)
			}
			wantChanged := tc.mode != ModeUnchanged || tc.destroy != nil || tc.create != nil
			if got.Changed() != wantChanged {
				t.Errorf("Changed() = %v, want %v", got.Changed(), wantChanged)
			}
		})
	}
}

// TestMakePlanReachesTarget checks, for every pair of layouts from the
// feasibility table, that the plan's result is the target multiset, that it
// never overlaps, and that moving to the same layout is a no-op.
func TestMakePlanReachesTarget(t *testing.T) {
	layouts := []string{
		"1g 1g 1g 1g 1g 1g 1g", "4g 3g", "3g 3g", "4g 2g 1g", "2g 2g 3g", "2g 2g 2g 1g", "7g", "1gx2 1g 1g 1g 1g 1g 1g", "",
	}
	for _, m := range []model{a100x40, h100} {
		for _, from := range layouts {
			// Lay out "from" as the plan would from an empty GPU.
			start, err := MakePlan([]mig.GPU{gpu(0, m)}, []Desired{{GPU: 0, MigEnabled: true, Profiles: counts(m, from)}})
			if err != nil {
				t.Fatalf("%s: plan %q from empty: %v", m.name, from, err)
			}
			var current []mig.Instance
			for _, c := range start.GPUs[0].Create {
				current = append(current, at(c.Profile, c.Start))
			}
			g := gpu(0, m, current...)
			for _, to := range layouts {
				t.Run(m.name+"/"+from+"->"+to, func(t *testing.T) {
					target := counts(m, to)
					plan, err := MakePlan([]mig.GPU{g}, []Desired{{GPU: 0, MigEnabled: true, Profiles: target}})
					if err != nil {
						t.Fatalf("MakePlan: %v", err)
					}
					p := plan.GPUs[0]
					got := map[string]int{}
					var occupied uint64
					for _, pl := range p.After() {
						got[pl.Profile]++
						mk, _ := mask(pl.Start, pl.Size)
						if occupied&mk != 0 {
							t.Errorf("layout after the plan overlaps at %s: %s", pl, p.Summary())
						}
						occupied |= mk
					}
					if len(target) == 0 {
						target = map[string]int{}
					}
					if diff := cmp.Diff(target, got); diff != "" {
						t.Errorf("layout after the plan (-want +got):\n%s\n%s", diff, p.Summary())
					}
					if len(p.Keep)+len(p.Destroy) != len(g.Instances) {
						t.Errorf("plan keeps %d and destroys %d of %d instances", len(p.Keep), len(p.Destroy), len(g.Instances))
					}
					if from == to && p.Changed() {
						t.Errorf("same layout, plan changes it: %s", p.Summary())
					}
				})
			}
		}
	}
}

func TestMakePlanErrors(t *testing.T) {
	tests := map[string]struct {
		gpus    []mig.GPU
		desired []Desired
		want    []string
	}{
		"GPU not on the node": {
			gpus:    gpus(2, h100),
			desired: []Desired{{GPU: 5, MigEnabled: true}},
			want:    []string{"GPU 5: not on this node (node has GPUs 0, 1)"},
		},
		"layout that does not fit": {
			gpus: gpus(2, h100),
			desired: []Desired{
				{GPU: 0, MigEnabled: true, Profiles: map[string]int{"4g.40gb": 1, "2g.20gb": 2}},
				{GPU: 1, MigEnabled: true, Profiles: map[string]int{"1g.5gb": 1}},
			},
			want: []string{
				"GPU 0 (H100-SXM5-80GB): 4g.40gb + 2g.20gb x2 needs 8 of 7 compute slices",
				"GPU 1 (H100-SXM5-80GB): unknown profile 1g.5gb (supported: 1g.10gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb, 1g.10gb+me, 1g.20gb)",
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := MakePlan(tc.gpus, tc.desired)
			if err == nil {
				t.Fatal("MakePlan succeeded, want an error")
			}
			if diff := cmp.Diff(tc.want, strings.Split(err.Error(), "\n")); diff != "" {
				t.Errorf("MakePlan error (-want +got):\n%s", diff)
			}
		})
	}
}
