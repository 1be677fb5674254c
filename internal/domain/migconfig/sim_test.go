package migconfig

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim/simtest"
	"github.com/migflex/migflex/internal/nvml/nvmlmig"
)

// The tests in this file go through the simulated NVML and internal/domain/mig,
// the code path the agent uses.

var _ Partitioner = (*nvmlmig.Partitioner)(nil)

func newSim(t *testing.T, specs ...sim.GPUSpec) *sim.Lib {
	t.Helper()
	return simtest.New(t, simtest.GPUs("migconfig-test", specs...))
}

func discover(t *testing.T, lib *sim.Lib) []mig.GPU {
	t.Helper()
	gpus, err := nvmlmig.Discover(lib)
	if err != nil {
		t.Fatalf("nvmlmig.Discover: %v", err)
	}
	return gpus
}

// TestTableModelsMatchSimulator keeps the tables the pure tests use honest:
// they must be what Discover reads from the simulator's built-in models.
func TestTableModelsMatchSimulator(t *testing.T) {
	for _, m := range []model{a100x40, a100x80, h100, h200} {
		t.Run(m.name, func(t *testing.T) {
			got := discover(t, newSim(t, sim.GPUSpec{Model: m.name, Count: 1}))[0]
			want := gpu(0, m)
			ignore := cmpopts.IgnoreFields(mig.Profile{}, "MemoryMiB", "SMs", "Engines")
			if diff := cmp.Diff(want.Profiles, got.Profiles, ignore); diff != "" {
				t.Errorf("profiles (-table +simulator):\n%s", diff)
			}
			if got.Model != want.Model || got.PCIDeviceID != want.PCIDeviceID || !got.MigCapable {
				t.Errorf("simulator GPU %q 0x%08X capable=%v, table %q 0x%08X", got.Model, got.PCIDeviceID, got.MigCapable, want.Model, want.PCIDeviceID)
			}
		})
	}
}

// TestFixturesValidateOnSimulator runs the fixture expectations against GPUs
// read from each built-in simulated model.
func TestFixturesValidateOnSimulator(t *testing.T) {
	for file := range fixtureFiles {
		spec, err := Parse(readFixture(t, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range gpumodel.Builtin() {
			t.Run(file+"/"+m.Name, func(t *testing.T) {
				node := discover(t, newSim(t, sim.GPUSpec{Model: m.Name, Count: 8}))
				var valid []string
				for _, name := range spec.Names() {
					desired, err := Validate(spec.Configs[name], node)
					if err != nil {
						continue
					}
					valid = append(valid, name)
					if _, err := MakePlan(node, desired); err != nil {
						t.Errorf("%s validates but does not plan: %v", name, err)
					}
				}
				wantValid := slices.Sorted(slices.Values(fixtureWant()[file][m.Name]))
				if diff := cmp.Diff(wantValid, valid); diff != "" {
					t.Errorf("configs that validate (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// TestApplyOnSimulator applies configurations through nvmlmig.Partitioner and
// reads the result back with Discover.
func TestApplyOnSimulator(t *testing.T) {
	steps := []string{
		"version: v1\nmig-configs:\n  selected:\n  - {devices: all, mig-enabled: true, mig-devices: [3g.40gb, 3g.40gb]}\n",
		// From 3g+3g: one 3g stays.
		"version: v1\nmig-configs:\n  selected:\n  - {devices: all, mig-enabled: true, mig-devices: [3g.40gb, 2g.20gb, 1g.10gb]}\n",
		"version: v1\nmig-configs:\n  selected:\n  - {devices: [0], mig-enabled: true, mig-devices: [1g.10gb, 2g.20gb, 4g.40gb]}\n  - {devices: [1], mig-enabled: true, mig-devices: {\"1g.10gb\": 7}}\n",
		"version: v1\nmig-configs:\n  selected:\n  - devices: all\n    mig-enabled: true\n    mig-devices: [{name: 2g.20gb, position: 4, size: 2}, {name: 2g.20gb, position: 0, size: 2}, 2g.20gb, 1g.10gb]\n",
		"version: v1\nmig-configs:\n  selected:\n  - {devices: all, mig-enabled: false}\n",
		"version: v1\nmig-configs:\n  selected:\n  - {devices: all, mig-enabled: true, mig-devices: {\"7g.80gb\": 1}}\n",
	}
	lib := newSim(t, sim.GPUSpec{Model: "H100-SXM5-80GB", Count: 2})
	p := nvmlmig.NewPartitioner(lib)
	var prevKept []mig.Instance
	for i, doc := range steps {
		spec, err := Parse([]byte(doc))
		if err != nil {
			t.Fatalf("step %d: Parse: %v", i, err)
		}
		cfg, err := spec.Select("")
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		before := discover(t, lib)
		desired, err := Validate(cfg, before)
		if err != nil {
			t.Fatalf("step %d: Validate: %v", i, err)
		}
		plan, err := MakePlan(before, desired)
		if err != nil {
			t.Fatalf("step %d: MakePlan: %v", i, err)
		}
		res, err := Apply(context.Background(), p, plan)
		if err != nil {
			t.Fatalf("step %d: Apply: %v", i, err)
		}
		after := discover(t, lib)
		for j, gp := range plan.GPUs {
			g := after[gp.GPU]
			wantEnabled := desired[j].MigEnabled
			if g.MigEnabled != wantEnabled || g.MigPending != wantEnabled {
				t.Errorf("step %d GPU %d: MIG %v (pending %v), want %v", i, gp.GPU, g.MigEnabled, g.MigPending, wantEnabled)
			}
			if diff := cmp.Diff(gp.After(), placementsOf(g.Instances)); diff != "" {
				t.Errorf("step %d GPU %d layout (-plan +simulator):\n%s", i, gp.GPU, diff)
			}
			if diff := cmp.Diff(g.Instances, res.GPUs[j].Instances, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("step %d GPU %d: reported instances (-simulator +result):\n%s", i, gp.GPU, diff)
			}
			// Kept instances are the same GPU instances, not recreated ones.
			for _, k := range gp.Keep {
				if !slices.ContainsFunc(g.Instances, func(in mig.Instance) bool { return in.GIID == k.GIID && in.UUID == k.UUID }) {
					t.Errorf("step %d GPU %d: kept %s is gone", i, gp.GPU, instanceString(k))
				}
			}
			if i == 1 && gp.GPU == 0 {
				prevKept = gp.Keep
			}
		}
	}
	if len(prevKept) != 1 || prevKept[0].Profile != "3g.40gb" {
		t.Errorf("3g+3g to 3g+2g+1g kept %v, want one 3g.40gb", prevKept)
	}
}

func TestApplyOnSimulatorBusyRollsBack(t *testing.T) {
	lib := newSim(t, sim.GPUSpec{Model: "H100-SXM5-80GB", Count: 2})
	p := nvmlmig.NewPartitioner(lib)
	apply := func(profiles map[string]int) (Plan, Result, error) {
		t.Helper()
		gpus := discover(t, lib)
		desired, err := Validate(allDevices(profiles), gpus)
		if err != nil {
			t.Fatalf("Validate: %v", err)
		}
		plan, err := MakePlan(gpus, desired)
		if err != nil {
			t.Fatalf("MakePlan: %v", err)
		}
		res, err := Apply(context.Background(), p, plan)
		return plan, res, err
	}
	if _, _, err := apply(map[string]int{"1g.10gb": 3, "2g.20gb": 2}); err != nil {
		t.Fatalf("first layout: %v", err)
	}
	before := discover(t, lib)
	// A process on GPU 1's last 1g.10gb: the new layout must destroy it.
	busy := before[1].Instances[len(before[1].Instances)-1]
	if err := lib.SetBusy(1, busy.GIID, true); err != nil {
		t.Fatal(err)
	}
	_, res, err := apply(map[string]int{"4g.40gb": 1, "3g.40gb": 1})
	if err == nil {
		t.Fatal("Apply succeeded over a busy instance")
	}
	if !errors.Is(err, mig.ErrInUse) {
		t.Errorf("error does not match mig.ErrInUse: %v", err)
	}
	if !strings.Contains(err.Error(), "GPU 1 (H100-SXM5-80GB): destroy "+instanceString(busy)+", instance busy: ") ||
		!strings.Contains(err.Error(), "; rolled back, the previous layout is back (") {
		t.Errorf("error = %v", err)
	}
	if r := res.GPUs[1]; r.Outcome != OutcomeRolledBack || !r.Busy {
		t.Errorf("GPU 1: outcome %v busy %v, want rolled back and busy", r.Outcome, r.Busy)
	}
	if r := res.GPUs[0]; r.Outcome != OutcomeApplied {
		t.Errorf("GPU 0: %v (%v), want applied", r.Outcome, r.Err)
	}
	after := discover(t, lib)
	if diff := cmp.Diff(placementsOf(before[1].Instances), placementsOf(after[1].Instances)); diff != "" {
		t.Errorf("GPU 1 not back on its old layout (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(after[1].Instances, res.GPUs[1].Instances); diff != "" {
		t.Errorf("GPU 1 reported instances (-simulator +result):\n%s", diff)
	}
	if !slices.ContainsFunc(after[1].Instances, func(in mig.Instance) bool { return in.UUID == busy.UUID }) {
		t.Errorf("the busy instance %s was replaced", instanceString(busy))
	}
}

// TestApplyOnSimulatorAmpereReset: enabling MIG on an Ampere GPU waits for
// a reset; Apply leaves it pending, and after the reset a second pass
// creates the instances.
func TestApplyOnSimulatorAmpereReset(t *testing.T) {
	lib := newSim(t, sim.GPUSpec{Model: "A100-SXM4-40GB", Count: 1})
	p := nvmlmig.NewPartitioner(lib)
	cfg := allDevices(map[string]int{"3g.20gb": 2})
	pass := func() (Plan, Result, error) {
		gpus := discover(t, lib)
		desired, err := Validate(cfg, gpus)
		if err != nil {
			t.Fatalf("Validate: %v", err)
		}
		plan, err := MakePlan(gpus, desired)
		if err != nil {
			t.Fatalf("MakePlan: %v", err)
		}
		res, err := Apply(context.Background(), p, plan)
		return plan, res, err
	}
	if g := discover(t, lib)[0]; g.MigEnabled || g.MigPending {
		t.Fatalf("simulated A100 starts with MIG %v pending %v, want off", g.MigEnabled, g.MigPending)
	}
	_, res, err := pass()
	if !errors.Is(err, mig.ErrResetRequired) {
		t.Fatalf("first pass error = %v, want mig.ErrResetRequired", err)
	}
	if r := res.GPUs[0]; r.Outcome != OutcomeResetRequired || !r.MigEnabled {
		t.Errorf("first pass: %v MIG %v, want reset required with MIG requested on", r.Outcome, r.MigEnabled)
	}
	if g := discover(t, lib)[0]; g.MigEnabled || !g.MigPending {
		t.Errorf("after the first pass MIG %v pending %v, want off with on pending", g.MigEnabled, g.MigPending)
	}
	if err := p.ResetGPU(0); err != nil {
		t.Fatalf("ResetGPU: %v", err)
	}
	plan, res, err := pass()
	if err != nil {
		t.Fatalf("second pass: %v", err)
	}
	if plan.GPUs[0].Mode != ModeUnchanged || res.GPUs[0].Outcome != OutcomeApplied {
		t.Errorf("second pass: mode %v outcome %v, want no mode change and applied", plan.GPUs[0].Mode, res.GPUs[0].Outcome)
	}
	want := []Placement{{"3g.20gb", 0, 4}, {"3g.20gb", 4, 4}}
	if diff := cmp.Diff(want, placementsOf(discover(t, lib)[0].Instances)); diff != "" {
		t.Errorf("layout (-want +simulator):\n%s", diff)
	}
}

// TestSubsystemFilterOnSimulator: the simulated H100 reports its board's
// subsystem id through NVML's PCI info, and a device-filter naming it
// matches it as mig-parted's does (issue 16 point 1;
// api/spec/v1/helpers_test.go TestMigConfigSpecMatchesDeviceFilter).
func TestSubsystemFilterOnSimulator(t *testing.T) {
	node := discover(t, newSim(t, sim.GPUSpec{Model: "H100-SXM5-80GB", Count: 2}, sim.GPUSpec{Model: "A100-SXM4-80GB", Count: 1}))
	if node[0].PCISubsystemID != 0x16C110DE || node[2].PCISubsystemID != 0 {
		t.Fatalf("subsystem ids %#x %#x, want 0x16C110DE and 0 (unknown)", node[0].PCISubsystemID, node[2].PCISubsystemID)
	}
	for filter, want := range map[string][]int{
		`"0x233010DE:0x16C110DE"`: {0, 1},
		`"0x233010DE:0x16C010DE"`: {},
		`"0x233010DE"`:            {0, 1},
		`["0x20B210DE:0x00000000", "0x233010DE:0x16C110DE"]`: {0, 1, 2},
	} {
		spec, err := Parse([]byte(entryDoc("device-filter: "+filter, "devices: all", "mig-enabled: true", "mig-devices: {}")))
		if err != nil {
			t.Fatal(err)
		}
		v, err := ValidateFor(spec.Configs["c"], node, ScopeFleet)
		if err != nil {
			t.Fatalf("%s: %v", filter, err)
		}
		got := []int{}
		for _, d := range v.Desired {
			got = append(got, d.GPU)
		}
		if !slices.Equal(got, want) {
			t.Errorf("device-filter %s covers %v, want %v", filter, got, want)
		}
	}
}
