package migconfig

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/migflex/migflex/internal/domain/mig"
)

// names names each model's profiles by their compute slices, so one table of
// layouts runs on every model.
func names(m model) map[string]string {
	out := map[string]string{}
	for _, p := range m.profiles {
		key := fmt.Sprintf("%dg", p.Slices)
		switch {
		case strings.HasSuffix(p.Name, "+me"):
			key += "+me"
		case p.Slices == 1 && p.MemorySlices == 2:
			key += "x2"
		}
		out[key] = p.Name
	}
	return out
}

// counts turns "4g 2g 1g 1g" into profile counts on model m.
func counts(m model, layout string) map[string]int {
	out := map[string]int{}
	for _, f := range strings.Fields(layout) {
		name, ok := names(m)[f]
		if !ok {
			panic("no " + f + " on " + m.name)
		}
		out[name]++
	}
	return out
}

func allDevices(profiles map[string]int) Config {
	return Config{Name: "c", Entries: []Entry{{AllDevices: true, MigEnabled: true, Profiles: profiles}}}
}

func TestValidateLayoutsPerModel(t *testing.T) {
	feasible := []string{
		"1g 1g 1g 1g 1g 1g 1g",
		"4g 3g",
		"3g 3g",
		"4g 2g 1g",
		"2g 2g 3g",
		"2g 2g 2g 1g",
		"7g",
		"1gx2 1gx2 1gx2 1gx2",
		"1g+me 2g 2g 2g",
		"1gx2 1g 1g 1g 1g 1g 1g",
	}
	for _, m := range []model{a100x40, a100x80, h100, h200} {
		for _, layout := range feasible {
			t.Run(m.name+"/"+layout, func(t *testing.T) {
				want := counts(m, layout)
				got, err := Validate(allDevices(want), gpus(2, m))
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				wantDesired := []Desired{
					{GPU: 0, MigEnabled: true, Profiles: want},
					{GPU: 1, MigEnabled: true, Profiles: want},
				}
				if diff := cmp.Diff(wantDesired, got); diff != "" {
					t.Errorf("Validate (-want +got):\n%s", diff)
				}
			})
		}
	}

	infeasible := map[string]struct {
		layout string
		// want, per GPU, with %[1]s the GPU's name and %[2]s... the
		// model's profile names for 1g, 2g, 3g, 4g.
		want []string
	}{
		"8x1g":  {"1g 1g 1g 1g 1g 1g 1g 1g", []string{"%[1]s: %[2]s x8 exceeds the maximum of 7 per GPU"}},
		"3x3g":  {"3g 3g 3g", []string{"%[1]s: %[4]s x3 needs 12 of 8 memory slices"}},
		"4g+4g": {"4g 4g", []string{"%[1]s: %[5]s x2 exceeds the maximum of 1 per GPU"}},
		"4x2g":  {"2g 2g 2g 2g", []string{"%[1]s: %[3]s x4 exceeds the maximum of 3 per GPU"}},
		"3g+3g+1g": {"3g 3g 1g", []string{
			"%[1]s: %[4]s x2 + %[2]s needs 9 of 8 memory slices",
		}},
		"4g+2g+2g fits the memory, not the compute slices": {"4g 2g 2g", []string{
			"%[1]s: %[5]s + %[3]s x2 needs 8 of 7 compute slices",
		}},
		"7g+1g": {"7g 1g", []string{"%[1]s: %[6]s + %[2]s needs 9 of 8 memory slices"}},
	}
	for _, m := range []model{a100x40, a100x80, h100, h200} {
		n := names(m)
		for name, tc := range infeasible {
			t.Run(m.name+"/"+name, func(t *testing.T) {
				_, err := Validate(allDevices(counts(m, tc.layout)), gpus(2, m))
				if err == nil {
					t.Fatal("Validate succeeded, want an error")
				}
				var want []string
				for i := range 2 {
					for _, w := range tc.want {
						want = append(want, fmt.Sprintf(w, fmt.Sprintf("GPU %d (%s)", i, m.name), n["1g"], n["2g"], n["3g"], n["4g"], n["7g"]))
					}
				}
				if diff := cmp.Diff(want, strings.Split(err.Error(), "\n")); diff != "" {
					t.Errorf("Validate error (-want +got):\n%s", diff)
				}
			})
		}
	}
}

func TestValidate(t *testing.T) {
	node4H100 := gpus(4, h100)
	mixed := []mig.GPU{gpu(0, h100), gpu(1, h100), gpu(2, a100x40), gpu(3, t4)}
	tests := map[string]struct {
		cfg     Config
		gpus    []mig.GPU
		want    []Desired
		wantErr []string
	}{
		"devices list, others untouched": {
			cfg: Config{Name: "c", Entries: []Entry{
				{Devices: []int{1, 3}, MigEnabled: true, Profiles: map[string]int{"3g.40gb": 2}},
				{Devices: []int{0}},
			}},
			gpus: node4H100,
			want: []Desired{
				{GPU: 0},
				{GPU: 1, MigEnabled: true, Profiles: map[string]int{"3g.40gb": 2}},
				{GPU: 3, MigEnabled: true, Profiles: map[string]int{"3g.40gb": 2}},
			},
		},
		"device that does not exist": {
			cfg: Config{Name: "c", Entries: []Entry{
				{Devices: []int{0, 7}, MigEnabled: true, Profiles: map[string]int{"7g.80gb": 1}},
			}},
			gpus:    node4H100,
			wantErr: []string{"mig-configs.c[0]: GPU 7 does not exist (node has GPUs 0, 1, 2, 3)"},
		},
		"device-filter picks the model's entry, entries for absent models are skipped": {
			cfg: Config{Name: "all-balanced", Entries: []Entry{
				// GB200: not on this node, and its index 9 is not checked.
				{DeviceFilter: filter("0x294110DE"), Devices: []int{9}, MigEnabled: true, Profiles: map[string]int{"1g.23gb": 2}},
				{DeviceFilter: filter("0x233010DE", "0x20B210DE"), AllDevices: true, MigEnabled: true,
					Profiles: map[string]int{"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}},
				{DeviceFilter: filter("0x20B010DE"), AllDevices: true, MigEnabled: true,
					Profiles: map[string]int{"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}},
			}},
			gpus: mixed,
			want: []Desired{
				{GPU: 0, MigEnabled: true, Profiles: map[string]int{"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}},
				{GPU: 1, MigEnabled: true, Profiles: map[string]int{"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}},
				{GPU: 2, MigEnabled: true, Profiles: map[string]int{"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}},
			},
		},
		"device-filter with an index of another model skips that GPU": {
			cfg: Config{Name: "c", Entries: []Entry{
				{DeviceFilter: filter("0x233010DE"), Devices: []int{1, 2}, MigEnabled: true, Profiles: map[string]int{"7g.80gb": 1}},
			}},
			gpus: mixed,
			want: []Desired{{GPU: 1, MigEnabled: true, Profiles: map[string]int{"7g.80gb": 1}}},
		},
		"GPU matched by two entries": {
			cfg: Config{Name: "c", Entries: []Entry{
				{AllDevices: true, MigEnabled: true, Profiles: map[string]int{"7g.80gb": 1}},
				{Devices: []int{2}},
			}},
			gpus:    node4H100,
			wantErr: []string{"GPU 2 (H100-SXM5-80GB): matched by mig-configs.c[0] and mig-configs.c[1]; each GPU may be matched by one entry"},
		},
		"GPU without MIG asked for MIG": {
			cfg: Config{Name: "c", Entries: []Entry{
				{Devices: []int{3}, MigEnabled: true, Profiles: map[string]int{"1g.10gb": 1}},
			}},
			gpus:    mixed,
			wantErr: []string{"GPU 3 (Tesla-T4): MIG is not supported on this GPU"},
		},
		"GPU without MIG asked for MIG off is fine": {
			cfg:  Config{Name: "all-disabled", Entries: []Entry{{AllDevices: true}}},
			gpus: mixed,
			want: []Desired{{GPU: 0}, {GPU: 1}, {GPU: 2}, {GPU: 3}},
		},
		"MIG on with no instances": {
			cfg:  Config{Name: "all-enabled", Entries: []Entry{{AllDevices: true, MigEnabled: true}}},
			gpus: []mig.GPU{gpu(0, h100)},
			want: []Desired{{GPU: 0, MigEnabled: true}},
		},
		"unknown profile names the supported ones": {
			cfg:  allDevices(map[string]int{"2g.20gb": 1, "1g.5gb": 2}),
			gpus: []mig.GPU{gpu(0, a100x40), gpu(1, h100)},
			wantErr: []string{
				"GPU 0 (A100-SXM4-40GB): unknown profile 2g.20gb (supported: 1g.5gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb, 1g.5gb+me, 1g.10gb)",
				"GPU 1 (H100-SXM5-80GB): unknown profile 1g.5gb (supported: 1g.10gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb, 1g.10gb+me, 1g.20gb)",
			},
		},
		"pinned placements": {
			cfg: Config{Name: "c", Entries: []Entry{{Devices: []int{0}, MigEnabled: true,
				Profiles:   map[string]int{"1g.10gb": 2},
				Placements: []Placement{{"3g.40gb", 4, 4}, {"2g.20gb", 0, 2}}}}},
			gpus: []mig.GPU{gpu(0, h100)},
			want: []Desired{{GPU: 0, MigEnabled: true, Profiles: map[string]int{"1g.10gb": 2},
				Placements: []Placement{{"3g.40gb", 4, 4}, {"2g.20gb", 0, 2}}}},
		},
		"pinned placement errors": {
			cfg: Config{Name: "c", Entries: []Entry{{Devices: []int{0}, MigEnabled: true,
				Placements: []Placement{{"2g.20gb", 1, 2}, {"3g.40gb", 4, 2}, {"1g.10gb", 1, 1}, {"1g.10gb", 4, 1}, {"9g.90gb", 0, 1}}}}},
			gpus: []mig.GPU{gpu(0, h100)},
			wantErr: []string{
				"GPU 0 (H100-SXM5-80GB): unknown profile 9g.90gb (supported: 1g.10gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb, 1g.10gb+me, 1g.20gb)",
				"GPU 0 (H100-SXM5-80GB): 2g.20gb cannot start at position 1 (valid: 0, 2, 4)",
				"GPU 0 (H100-SXM5-80GB): 3g.40gb at position 4 has size 2, but the profile takes 4 memory slices",
				"GPU 0 (H100-SXM5-80GB): 1g.10gb@1:1 overlaps 2g.20gb@1:2",
				"GPU 0 (H100-SXM5-80GB): 1g.10gb@4:1 overlaps 3g.40gb@4:2",
			},
		},
		"the same overlap many times is said once, with its count": {
			cfg: Config{Name: "c", Entries: []Entry{{Devices: []int{0}, MigEnabled: true,
				Placements: append(slices.Repeat([]Placement{{"1g.10gb", 0, 1}}, 100), Placement{"2g.20gb", 2, 2}, Placement{"1g.10gb", 3, 1})}}},
			gpus: []mig.GPU{gpu(0, h100)},
			wantErr: []string{
				"GPU 0 (H100-SXM5-80GB): 1g.10gb@0:1 overlaps 1g.10gb@0:1 (99 times)",
				"GPU 0 (H100-SXM5-80GB): 1g.10gb@3:1 overlaps 2g.20gb@2:2",
			},
		},
		"pins count towards the maximum": {
			cfg: Config{Name: "c", Entries: []Entry{{Devices: []int{0}, MigEnabled: true,
				Profiles:   map[string]int{"4g.40gb": 1},
				Placements: []Placement{{"4g.40gb", 0, 4}}}}},
			gpus:    []mig.GPU{gpu(0, h100)},
			wantErr: []string{"GPU 0 (H100-SXM5-80GB): 4g.40gb x2 exceeds the maximum of 1 per GPU"},
		},
		"a pin that leaves no room for the rest": {
			// 3g.40gb pinned at 0 takes the only start 4g.40gb has.
			cfg: Config{Name: "c", Entries: []Entry{{Devices: []int{0}, MigEnabled: true,
				Profiles:   map[string]int{"4g.40gb": 1},
				Placements: []Placement{{"3g.40gb", 0, 4}}}}},
			gpus:    []mig.GPU{gpu(0, h100)},
			wantErr: []string{"GPU 0 (H100-SXM5-80GB): no placement fits 4g.40gb + 3g.40gb on 8 memory slices (3g.40gb starts at 0, 4; 4g.40gb starts at 0)"},
		},
		"every GPU's errors are reported": {
			cfg: Config{Name: "c", Entries: []Entry{
				{Devices: []int{0}, MigEnabled: true, Profiles: map[string]int{"3g.40gb": 3}},
				{Devices: []int{1, 9}, MigEnabled: true, Profiles: map[string]int{"1g.10gb": 8}},
				{Devices: []int{2}, MigEnabled: true, Profiles: map[string]int{"7g.80gb": 1}},
			}},
			gpus: node4H100,
			wantErr: []string{
				"mig-configs.c[1]: GPU 9 does not exist (node has GPUs 0, 1, 2, 3)",
				"GPU 0 (H100-SXM5-80GB): 3g.40gb x3 needs 12 of 8 memory slices",
				"GPU 1 (H100-SXM5-80GB): 1g.10gb x8 exceeds the maximum of 7 per GPU",
			},
		},
		"every entry filtered out: the config is not for this node": {
			cfg: Config{Name: "all-1g.35gb", Entries: []Entry{
				{DeviceFilter: filter("0x233510DE"), AllDevices: true, MigEnabled: true, Profiles: map[string]int{"1g.35gb": 4}},
				{DeviceFilter: filter("0x31C210DE"), AllDevices: true, MigEnabled: true, Profiles: map[string]int{"1g.35gb": 7}},
			}},
			gpus:    mixed,
			wantErr: []string{"mig-configs.all-1g.35gb: no entry applies to this node's GPUs (H100-SXM5-80GB is 0x233010DE; A100-SXM4-40GB is 0x20B010DE; Tesla-T4 is 0x1EB810DE, without MIG)"},
		},
		"no entries": {
			cfg:     Config{Name: "c"},
			gpus:    mixed,
			wantErr: []string{"mig-configs.c: no entries"},
		},
		"custom model: compute slices run out before memory": {
			cfg:     allDevices(map[string]int{"1g.5gb": 8}),
			gpus:    []mig.GPU{gpu(0, oddModel)},
			wantErr: []string{"GPU 0 (Odd-40GB): 1g.5gb x8 needs 8 of 7 compute slices"},
		},
		"custom model: everything fits but the placements": {
			cfg:     allDevices(map[string]int{"4g.20gb": 1, "1g.10gb": 2}),
			gpus:    []mig.GPU{gpu(0, oddModel)},
			wantErr: []string{"GPU 0 (Odd-40GB): no placement fits 4g.20gb + 1g.10gb x2 on 8 memory slices (1g.10gb starts at 1, 3, 5; 4g.20gb starts at 0)"},
		},
		"custom model: odd starts fit where first fit would not": {
			cfg:  allDevices(map[string]int{"1g.5gb": 2, "1g.10gb": 3}),
			gpus: []mig.GPU{gpu(0, oddModel)},
			want: []Desired{{GPU: 0, MigEnabled: true, Profiles: map[string]int{"1g.5gb": 2, "1g.10gb": 3}}},
		},
		"no GPUs, devices all": {
			cfg:     Config{Name: "c", Entries: []Entry{{AllDevices: true}}},
			wantErr: []string{"mig-configs.c: no entry applies to this node's GPUs (it has no GPUs)"},
		},
		"no GPUs": {
			cfg:     Config{Name: "c", Entries: []Entry{{Devices: []int{0}}}},
			wantErr: []string{"mig-configs.c[0]: GPU 0 does not exist (node has no GPUs)"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Validate(tc.cfg, tc.gpus)
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("Validate succeeded with %+v, want errors", got)
				}
				if diff := cmp.Diff(tc.wantErr, strings.Split(err.Error(), "\n")); diff != "" {
					t.Errorf("Validate error (-want +got):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Validate (-want +got):\n%s", diff)
			}
		})
	}
}

// TestValidateForScopes: what does not fit the node is an error in a
// document written for it (ScopeNode) and left out with a note in a file
// shared by a fleet (ScopeFleet), as mig-parted does (issue 16 points 2, 6,
// 7; mig-parted: cmd/nvidia-mig-parted/assert WalkSelectedMigConfigForEachGPU
// walks only the GPUs an entry matches, apply/config.go skips a GPU without
// MIG under "all").
func TestValidateForScopes(t *testing.T) {
	h100Sub := func(i int) mig.GPU { return withSubsystem(gpu(i, h100), 0x16C110DE) }
	node := []mig.GPU{h100Sub(0), h100Sub(1), gpu(2, a100x40), gpu(3, t4)}
	seven := map[string]int{"1g.10gb": 7}
	type want struct {
		covers []int
		notes  []string
		err    []string
	}
	tests := map[string]struct {
		cfg         Config
		node, fleet want
	}{
		"indices the node lacks": {
			cfg: Config{Name: "c", Entries: []Entry{{Devices: []int{1, 8, 9}, MigEnabled: true, Profiles: seven}}},
			node: want{err: []string{
				"mig-configs.c[0]: GPU 8 does not exist (node has GPUs 0, 1, 2, 3)",
				"mig-configs.c[0]: GPU 9 does not exist (node has GPUs 0, 1, 2, 3)",
			}},
			fleet: want{covers: []int{1}, notes: []string{
				"mig-configs.c[0]: GPU 8 does not exist (node has GPUs 0, 1, 2, 3)",
				"mig-configs.c[0]: GPU 9 does not exist (node has GPUs 0, 1, 2, 3)",
			}},
		},
		"no entry matches: nothing to do in a fleet": {
			cfg:  Config{Name: "gb200", Entries: []Entry{{DeviceFilter: filter("0x294110DE"), AllDevices: true, MigEnabled: true, Profiles: seven}}},
			node: want{err: []string{"mig-configs.gb200: no entry applies to this node's GPUs (H100-SXM5-80GB is 0x233010DE:0x16C110DE; A100-SXM4-40GB is 0x20B010DE; Tesla-T4 is 0x1EB810DE, without MIG)"}},
			fleet: want{covers: []int{}, notes: []string{
				`mig-configs.gb200[0]: its device-filter ("0x294110DE") matches no GPU on this node (H100-SXM5-80GB is 0x233010DE:0x16C110DE; A100-SXM4-40GB is 0x20B010DE; Tesla-T4 is 0x1EB810DE, without MIG)`,
				"mig-configs.gb200: no entry applies to this node's GPUs (H100-SXM5-80GB is 0x233010DE:0x16C110DE; A100-SXM4-40GB is 0x20B010DE; Tesla-T4 is 0x1EB810DE, without MIG); they are left as they are",
			}},
		},
		"an entry for another model is a note in both": {
			cfg: Config{Name: "c", Entries: []Entry{
				{DeviceFilter: filter("MODEL"), AllDevices: true, MigEnabled: true, Profiles: seven},
				{DeviceFilter: filter("0x233010DE:0x16C110DE"), AllDevices: true, MigEnabled: true, Profiles: seven},
			}},
			node:  want{covers: []int{0, 1}, notes: []string{`mig-configs.c[0]: its device-filter ("MODEL") matches no GPU on this node (H100-SXM5-80GB is 0x233010DE:0x16C110DE; A100-SXM4-40GB is 0x20B010DE; Tesla-T4 is 0x1EB810DE, without MIG)`}},
			fleet: want{covers: []int{0, 1}, notes: []string{`mig-configs.c[0]: its device-filter ("MODEL") matches no GPU on this node (H100-SXM5-80GB is 0x233010DE:0x16C110DE; A100-SXM4-40GB is 0x20B010DE; Tesla-T4 is 0x1EB810DE, without MIG)`}},
		},
		"a sibling subsystem matches nothing": {
			cfg:   Config{Name: "c", Entries: []Entry{{DeviceFilter: filter("0x233010DE:0x16C010DE"), AllDevices: true, MigEnabled: false}}},
			node:  want{err: []string{"mig-configs.c: no entry applies to this node's GPUs (H100-SXM5-80GB is 0x233010DE:0x16C110DE; A100-SXM4-40GB is 0x20B010DE; Tesla-T4 is 0x1EB810DE, without MIG)"}},
			fleet: want{covers: []int{}, notes: []string{`mig-configs.c[0]: its device-filter ("0x233010DE:0x16C010DE") matches no GPU on this node (H100-SXM5-80GB is 0x233010DE:0x16C110DE; A100-SXM4-40GB is 0x20B010DE; Tesla-T4 is 0x1EB810DE, without MIG)`, "mig-configs.c: no entry applies to this node's GPUs (H100-SXM5-80GB is 0x233010DE:0x16C110DE; A100-SXM4-40GB is 0x20B010DE; Tesla-T4 is 0x1EB810DE, without MIG); they are left as they are"}},
		},
		"devices: [] names no GPU": {
			cfg: Config{Name: "c", Entries: []Entry{
				{Devices: []int{}, MigEnabled: false},
				{Devices: []int{0}, MigEnabled: false},
			}},
			node:  want{err: []string{"mig-configs.c[0]: devices: [] names no GPU"}},
			fleet: want{covers: []int{0}, notes: []string{"mig-configs.c[0]: devices: [] names no GPU"}},
		},
		"all is every GPU with MIG when it turns MIG on": {
			cfg:   Config{Name: "c", Entries: []Entry{{DeviceFilter: filter("0x233010DE", "0x1EB810DE"), AllDevices: true, MigEnabled: true, Profiles: seven}}},
			node:  want{covers: []int{0, 1}},
			fleet: want{covers: []int{0, 1}},
		},
		"and every GPU when it turns MIG off": {
			cfg:   Config{Name: "c", Entries: []Entry{{AllDevices: true}}},
			node:  want{covers: []int{0, 1, 2, 3}},
			fleet: want{covers: []int{0, 1, 2, 3}},
		},
		"naming a GPU without MIG for MIG is an error in both": {
			cfg:   Config{Name: "c", Entries: []Entry{{Devices: []int{3}, MigEnabled: true, Profiles: seven}}},
			node:  want{err: []string{"GPU 3 (Tesla-T4): MIG is not supported on this GPU"}},
			fleet: want{err: []string{"GPU 3 (Tesla-T4): MIG is not supported on this GPU"}},
		},
		"a configuration's own error comes first": {
			cfg:   Config{Name: "c", Err: fmt.Errorf("mig-configs.c[0]: unknown field \"x\"")},
			node:  want{err: []string{`mig-configs.c[0]: unknown field "x"`}},
			fleet: want{err: []string{`mig-configs.c[0]: unknown field "x"`}},
		},
	}
	for name, tc := range tests {
		for _, sc := range []struct {
			scope Scope
			want  want
		}{{ScopeNode, tc.node}, {ScopeFleet, tc.fleet}} {
			t.Run(fmt.Sprintf("%s/scope %d", name, sc.scope), func(t *testing.T) {
				v, err := ValidateFor(tc.cfg, node, sc.scope)
				if sc.want.err != nil {
					if err == nil {
						t.Fatalf("ValidateFor succeeded with %+v, want errors", v)
					}
					if diff := cmp.Diff(sc.want.err, strings.Split(err.Error(), "\n")); diff != "" {
						t.Errorf("error (-want +got):\n%s", diff)
					}
					return
				}
				if err != nil {
					t.Fatalf("ValidateFor: %v", err)
				}
				covers := []int{}
				for _, d := range v.Desired {
					covers = append(covers, d.GPU)
				}
				if diff := cmp.Diff(sc.want.covers, covers); diff != "" {
					t.Errorf("GPUs covered (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(sc.want.notes, v.Notes); diff != "" {
					t.Errorf("notes (-want +got):\n%s", diff)
				}
			})
		}
	}
}
