package migconfig

import (
	"fmt"
	"strings"
	"testing"

	"github.com/migflex/migflex/internal/domain/mig"
)

// The planner's worst cases, as the agent runs them on every reconcile:
// Parse, Select, Validate (with its exact placement search) and MakePlan
// (with the search for the layout that keeps the most instances), on
// 8-GPU nodes. The GPUs are the tables of gpus_test.go, which
// TestTableModelsMatchSimulator keeps equal to the simulator's models.

// benchScenario is one node and the document the agent is given.
type benchScenario struct {
	gpus []mig.GPU
	doc  string
	// infeasible: Validate must fail (after the search where it applies).
	infeasible bool
}

func benchDoc(entries ...string) string {
	return "version: v1\nmig-configs:\n  selected:\n" + strings.Join(entries, "")
}

func benchEntry(filter, devices string) string {
	e := "  - devices: all\n    mig-enabled: true\n    mig-devices: " + devices + "\n"
	if filter != "" {
		e += "    device-filter: " + filter + "\n"
	}
	return e
}

// eightOf is 8 GPUs of model m, each with the given instances.
func eightOf(m model, instances ...mig.Instance) []mig.GPU {
	out := make([]mig.GPU, 8)
	for i := range out {
		out[i] = gpu(i, m, instances...)
	}
	return out
}

func sevenSmall(profile string) []mig.Instance {
	var out []mig.Instance
	for s := range 7 {
		out = append(out, at(profile, s))
	}
	return out
}

func benchScenarios() map[string]benchScenario {
	mixed := []mig.GPU{
		gpu(0, a100x40, sevenSmall("1g.5gb")...), gpu(1, a100x40, sevenSmall("1g.5gb")...),
		gpu(2, a100x80, sevenSmall("1g.10gb")...), gpu(3, a100x80, sevenSmall("1g.10gb")...),
		gpu(4, h100, sevenSmall("1g.10gb")...), gpu(5, h100, sevenSmall("1g.10gb")...),
		gpu(6, h200, sevenSmall("1g.18gb")...), gpu(7, h200, sevenSmall("1g.18gb")...),
	}
	h100Off := make([]mig.GPU, 8)
	for i := range h100Off {
		h100Off[i] = migOff(i, h100)
	}
	return map[string]benchScenario{
		// Every GPU changes and keeps at most one 1g.10gb.
		"h100x8 7x1g.10gb to 4g+2g+1g": {
			gpus: eightOf(h100, sevenSmall("1g.10gb")...),
			doc:  benchDoc(benchEntry("", `{"4g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}`)),
		},
		// Every GPU changes and nothing can be kept.
		"h100x8 7x1g.10gb to 3g+3g": {
			gpus: eightOf(h100, sevenSmall("1g.10gb")...),
			doc:  benchDoc(benchEntry("", `{"3g.40gb": 2}`)),
		},
		"h100x8 4g+3g to 7x1g.10gb": {
			gpus: eightOf(h100, at("4g.40gb", 0), at("3g.40gb", 4)),
			doc:  benchDoc(benchEntry("", `{"1g.10gb": 7}`)),
		},
		// The most instances per GPU, in the list form: 7 slots to place.
		"h100x8 MIG off to 7x1g.10gb": {
			gpus: h100Off,
			doc:  benchDoc(benchEntry("", "[1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb]")),
		},
		// What every resync costs: the layout is already right.
		"h100x8 unchanged 7x1g.10gb": {
			gpus: eightOf(h100, sevenSmall("1g.10gb")...),
			doc:  benchDoc(benchEntry("", `{"1g.10gb": 7}`)),
		},
		// Four models on one node, one entry per model by device filter.
		"mixed A100-40/A100-80/H100/H200 7x1g to balanced": {
			gpus: mixed,
			doc: benchDoc(
				benchEntry(`"0x20B010DE"`, `{"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}`),
				benchEntry(`"0x20B210DE"`, `{"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}`),
				benchEntry(`"0x233010DE"`, `{"4g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}`),
				benchEntry(`"0x233510DE"`, `{"3g.71gb": 1, "1g.35gb": 1, "1g.18gb": 2}`),
			),
		},
		// Passes every count, memory and compute check, then the exact
		// search finds no placement: 1g.10gb cannot start at memory slice
		// 7, so six of them do not fit beside a 1g.20gb pinned at 0. The
		// search tries every arrangement before it says so, on each GPU.
		"h100x8 infeasible pinned 1g.20gb@0 + 6x1g.10gb": {
			gpus:       eightOf(h100, sevenSmall("1g.10gb")...),
			doc:        benchDoc(benchEntry("", "[{name: 1g.20gb, position: 0, size: 2}, 1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb]")),
			infeasible: true,
		},
	}
}

// pipeline is what the agent runs per reconcile before it touches a GPU.
func pipeline(sc benchScenario) (Plan, error) {
	spec, err := Parse([]byte(sc.doc))
	if err != nil {
		return Plan{}, fmt.Errorf("parse: %w", err)
	}
	cfg, err := spec.Select("")
	if err != nil {
		return Plan{}, fmt.Errorf("select: %w", err)
	}
	desired, err := Validate(cfg, sc.gpus)
	if err != nil {
		return Plan{}, fmt.Errorf("validate: %w", err)
	}
	return MakePlan(sc.gpus, desired)
}

// TestBenchScenarios keeps the benchmarks honest: each scenario does what
// its name says, so a benchmark never times an early error.
func TestBenchScenarios(t *testing.T) {
	for name, sc := range benchScenarios() {
		t.Run(name, func(t *testing.T) {
			plan, err := pipeline(sc)
			if sc.infeasible {
				if err == nil || !strings.Contains(err.Error(), "no placement fits") {
					t.Fatalf("error %v, want one from the placement search", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			changed := 0
			for _, g := range plan.GPUs {
				if g.Changed() {
					changed++
				}
			}
			want := 8
			if strings.Contains(name, "unchanged") {
				want = 0
			}
			if changed != want || len(plan.GPUs) != 8 {
				t.Errorf("%d of %d GPUs change, want %d of 8", changed, len(plan.GPUs), want)
			}
			if strings.Contains(name, "3g+3g") {
				for _, g := range plan.GPUs {
					if len(g.Keep) != 0 {
						t.Errorf("GPU %d keeps %v; nothing is reusable", g.GPU, g.Keep)
					}
				}
			}
		})
	}
}

func BenchmarkPlanner(b *testing.B) {
	for name, sc := range benchScenarios() {
		b.Run(name+"/parse+validate+plan", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := pipeline(sc); (err != nil) != sc.infeasible {
					b.Fatal(err)
				}
			}
		})
		if sc.infeasible {
			continue
		}
		spec, err := Parse([]byte(sc.doc))
		if err != nil {
			b.Fatal(err)
		}
		cfg, err := spec.Select("")
		if err != nil {
			b.Fatal(err)
		}
		desired, err := Validate(cfg, sc.gpus)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name+"/plan", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := MakePlan(sc.gpus, desired); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
