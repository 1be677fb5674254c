package migconfig

import (
	"context"
	"runtime"
	"testing"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/migconfig/migconfigtest"
)

// FuzzParse feeds Parse arbitrary documents, seeded with the mig-parted
// fixtures, the three forms and the hostile corpus (migconfigtest). Parse
// must not panic, must return a spec or an error and never both, must stay
// within allocBudget and give a short error, and whatever it accepts must
// hold the model's invariants and go through Validate, MakePlan and Apply
// without panicking.
//
//	go test -run '^$' -fuzz FuzzParse -fuzzminimizetime 50x ./internal/domain/migconfig
//
// (Without -fuzzminimizetime the fuzzer spends its first minute shrinking
// the 12 KB fixture seeds, with execs standing still.)
func FuzzParse(f *testing.F) {
	for file := range fixtureFiles {
		f.Add(readFixture(f, file))
	}
	for _, d := range append(migconfigtest.Hostile(), migconfigtest.Controls()...) {
		f.Add(d.Data)
	}
	for _, seed := range []string{
		"version: v1\nmig-configs:\n  selected:\n  - devices: [0,1,2,3]\n    mig-enabled: true\n    mig-devices:\n    - 2g.20gb\n    - 2g.20gb\n    - 3g.40gb\n",
		"version: v1\nmig-configs:\n  selected:\n  - devices: [0]\n    mig-enabled: true\n    mig-devices: [{name: 3g.40gb, position: 4, size: 4}, {name: 2g.20gb, position: 0, size: 2}]\n",
		"version: v1\nmig-configs:\n  a:\n  - device-filter: 0x233010DE\n    devices: all\n    mig-enabled: false\n",
		`{"version":"v1","mig-configs":{"j":[{"devices":"all","mig-enabled":true,"mig-devices":{"7g.80gb":1}}]}}`,
		"version: v1\nmig-configs:\n  a: &x\n  - devices: all\n    mig-enabled: false\n  b: *x\n",
		"",
		"version: v1\nmig-configs:\n  a:\n  - {devices: [0, 0], mig-enabled: maybe, mig-device: {}}\n",
	} {
		f.Add([]byte(seed))
	}
	node := []mig.GPU{
		gpu(0, h100, at("3g.40gb", 0), at("2g.20gb", 4), at("1g.10gb", 6)),
		migOff(1, a100x40),
		gpu(2, h200),
		gpu(3, t4),
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var spec *Spec
		var err error
		// TotalAlloc counts every byte allocated, so the delta bounds what
		// Parse allocated without a GC to settle the heap first.
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		spec, err = Parse(data)
		runtime.ReadMemStats(&after)
		if (spec == nil) == (err == nil) {
			t.Fatalf("Parse returned spec %v and error %v", spec, err)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > allocBudget {
			t.Fatalf("Parse of %d bytes allocated %d bytes, more than %d", len(data), n, allocBudget)
		}
		if err != nil {
			if len(err.Error()) > maxErrorBytes {
				t.Fatalf("error of %d bytes: %.300s", len(err.Error()), err)
			}
			return
		}
		if spec.Version != Version || len(spec.Configs) == 0 {
			t.Fatalf("accepted spec with version %q and %d configs", spec.Version, len(spec.Configs))
		}
		for name, c := range spec.Configs {
			if c.Name != name {
				t.Fatalf("config %q named %q", name, c.Name)
			}
			if c.Err != nil {
				// Scoped to the configuration: short, and nothing to use.
				if len(c.Err.Error()) > maxErrorBytes || len(c.Entries) > 0 {
					t.Fatalf("config %q: %d entries with error of %d bytes", name, len(c.Entries), len(c.Err.Error()))
				}
				if _, err := spec.Select(name); err == nil {
					t.Fatalf("config %q: Select hides its error", name)
				}
				continue
			}
			if len(c.Entries) == 0 {
				t.Fatalf("config %q: no entries and no error", name)
			}
			for _, e := range c.Entries {
				if !e.MigEnabled && (len(e.Profiles) > 0 || len(e.Placements) > 0) {
					t.Fatalf("config %q: instances with MIG off", name)
				}
				// Names are kept canonical, which reads back as itself.
				for p, n := range e.Profiles {
					if canonical, err := profileOf(p); err != nil || canonical != p || n < 1 {
						t.Fatalf("config %q: accepted %q x%d", name, p, n)
					}
				}
				for _, pl := range e.Placements {
					if canonical, err := profileOf(pl.Profile); err != nil || canonical != pl.Profile || pl.Start < 0 || pl.Size < 1 {
						t.Fatalf("config %q: accepted placement %v", name, pl)
					}
				}
			}
			for _, scope := range []Scope{ScopeNode, ScopeFleet} {
				v, err := ValidateFor(c, node, scope)
				if err != nil {
					continue
				}
				if _, err := MakePlan(node, v.Desired); err != nil {
					t.Fatalf("config %q validates for scope %d but does not plan: %v", name, scope, err)
				}
			}
			desired, err := Validate(c, node)
			if err != nil {
				continue
			}
			plan, err := MakePlan(node, desired)
			if err != nil {
				t.Fatalf("config %q validates but does not plan: %v", name, err)
			}
			if _, err := Apply(context.Background(), newFake(node), plan); err != nil {
				t.Fatalf("config %q: plan fails on the fake: %v\n%v", name, err, plan)
			}
		}
	})
}
