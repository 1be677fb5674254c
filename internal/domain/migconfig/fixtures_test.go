package migconfig

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/migflex/migflex/internal/domain/mig"
)

// fixtureFiles are upstream mig-parted configs (see testdata/mig-parted/SOURCE)
// with the number of named configurations in each.
var fixtureFiles = map[string]int{
	"config-default.yaml":                   81,
	"examples-config.yaml":                  9,
	"examples-dgx-station-80gb-config.yaml": 9,
}

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "mig-parted", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFixturesParse(t *testing.T) {
	for file, n := range fixtureFiles {
		t.Run(file, func(t *testing.T) {
			spec, err := Parse(readFixture(t, file))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if len(spec.Configs) != n {
				t.Errorf("parsed %d configs, want %d: %v", len(spec.Configs), n, spec.Names())
			}
			for _, name := range spec.Names() {
				c, err := spec.Select(name)
				if err != nil {
					t.Errorf("Select(%q): %v", name, err)
					continue
				}
				if c.Name != name || len(c.Entries) == 0 {
					t.Errorf("config %q: name %q, %d entries", name, c.Name, len(c.Entries))
				}
				for i, e := range c.Entries {
					if !e.AllDevices && len(e.Devices) == 0 {
						t.Errorf("config %q entry %d: no devices", name, i)
					}
				}
			}
		})
	}
}

// TestFixturesValidate validates every named config of every fixture on an
// eight-GPU node of each model; exactly the configs listed must pass, and
// every other one must fail.
func TestFixturesValidate(t *testing.T) {
	for file := range fixtureFiles {
		spec, err := Parse(readFixture(t, file))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for _, m := range []model{a100x40, a100x80, h100, h200} {
			t.Run(file+"/"+m.name, func(t *testing.T) {
				node := gpus(8, m)
				var offNode []mig.GPU
				for i := range 8 {
					offNode = append(offNode, migOff(i, m))
				}
				var valid []string
				for _, name := range spec.Names() {
					desired, err := Validate(spec.Configs[name], node)
					if err != nil {
						continue
					}
					valid = append(valid, name)
					// What validates must also plan, from MIG on and from MIG off.
					if _, err := MakePlan(node, desired); err != nil {
						t.Errorf("%s validates but does not plan: %v", name, err)
					}
					if _, err := MakePlan(offNode, desired); err != nil {
						t.Errorf("%s validates but does not plan from MIG off: %v", name, err)
					}
				}
				wantValid := slices.Sorted(slices.Values(fixtureWant()[file][m.name]))
				if diff := cmp.Diff(wantValid, valid); diff != "" {
					t.Errorf("configs that validate (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// fixtureWant lists, per fixture file and GPU model, the configs that
// validate on an eight-GPU node of that model; every other must fail.
func fixtureWant() map[string]map[string][]string {
	hopperAmpere80 := []string{
		"all-1g.10gb", "all-1g.10gb.me", "all-1g.20gb", "all-2g.20gb", "all-3g.40gb",
		"all-4g.40gb", "all-7g.80gb", "all-balanced", "all-disabled", "all-enabled",
	}
	dgxStation80 := []string{
		"all-1g.10gb-dgx-station-80", "all-2g.20gb-dgx-station-80", "all-3g.40gb-dgx-station-80",
		"all-4g.40gb-dgx-station-80", "all-7g.80gb-dgx-station-80", "all-balanced-dgx-station-80",
		"all-disabled-dgx-station-80", "all-enabled-dgx-station-80", "balanced-k8s-dgx-station-80",
	}
	return map[string]map[string][]string{
		"config-default.yaml": {
			a100x40.name: {"all-1g.10gb", "all-1g.5gb", "all-1g.5gb.me", "all-2g.10gb", "all-3g.20gb",
				"all-4g.20gb", "all-7g.40gb", "all-balanced", "all-disabled", "all-enabled"},
			a100x80.name: hopperAmpere80,
			h100.name:    hopperAmpere80,
			h200.name: {"all-1g.18gb", "all-1g.18gb.me", "all-1g.35gb", "all-2g.35gb", "all-3g.71gb",
				"all-4g.71gb", "all-7g.141gb", "all-balanced", "all-disabled", "all-enabled"},
			// The models added for issue 19: mig-parted's configs for each
			// validate on the simulator's table of the GPU.
			"A30-24GB": {"all-1g.6gb", "all-1g.6gb.me", "all-2g.12gb", "all-2g.12gb.me", "all-4g.24gb",
				"all-balanced", "all-disabled", "all-enabled"},
			"A100-PCIE-40GB": {"all-1g.10gb", "all-1g.5gb", "all-1g.5gb.me", "all-2g.10gb", "all-3g.20gb",
				"all-4g.20gb", "all-7g.40gb", "all-balanced", "all-disabled", "all-enabled"},
			"A100-PCIE-80GB": hopperAmpere80,
			"H100-PCIE-80GB": hopperAmpere80,
			"H100-NVL-94GB": {"all-1g.12gb", "all-1g.12gb.me", "all-1g.24gb", "all-2g.24gb", "all-3g.47gb",
				"all-4g.47gb", "all-7g.94gb", "all-balanced", "all-disabled", "all-enabled"},
			"H20-96GB": {"all-1g.12gb", "all-1g.12gb.me", "all-1g.24gb", "all-2g.24gb", "all-3g.48gb",
				"all-4g.48gb", "all-7g.96gb", "all-balanced", "all-disabled", "all-enabled"},
			// mig-parted filters all-1g.35gb to the SXM H200's device id.
			"H200-NVL-141GB": {"all-1g.18gb", "all-1g.18gb.me", "all-2g.35gb", "all-3g.71gb", "all-4g.71gb",
				"all-7g.141gb", "all-balanced", "all-disabled", "all-enabled"},
			"B200-180GB": {"all-1g.23gb", "all-1g.23gb.me", "all-1g.45gb", "all-2g.45gb", "all-3g.90gb",
				"all-4g.90gb", "all-7g.180gb", "all-balanced", "all-disabled", "all-enabled"},
			"GB200-186GB": {"all-1g.23gb", "all-1g.23gb.me", "all-1g.47gb", "all-2g.47gb", "all-3g.93gb",
				"all-4g.93gb", "all-7g.186gb", "all-balanced", "all-disabled", "all-enabled"},
			"RTX-PRO-6000-Server-96GB": {"all-1g.24gb", "all-1g.24gb-me", "all-1g.24gb.gfx", "all-1g.24gb.me",
				"all-1g.24gb.me.all", "all-2g.48gb", "all-2g.48gb-me", "all-2g.48gb.gfx", "all-2g.48gb.me.all",
				"all-4g.96gb", "all-4g.96gb.gfx", "all-balanced", "all-disabled", "all-enabled"},
		},
		"examples-config.yaml": {
			a100x40.name: {"all-1g.10gb", "all-1g.5gb", "all-1g.5gb.me", "all-2g.10gb", "all-3g.20gb",
				"all-balanced", "all-disabled", "all-enabled", "custom-config"},
			// 1g.10gb x4 is four of the seven 1g.10gb an 80GB GPU takes.
			a100x80.name: {"all-1g.10gb", "all-disabled", "all-enabled"},
			h100.name:    {"all-1g.10gb", "all-disabled", "all-enabled"},
			h200.name:    {"all-disabled", "all-enabled"},
			"A30-24GB":   {"all-disabled", "all-enabled"},
			"A100-PCIE-40GB": {"all-1g.10gb", "all-1g.5gb", "all-1g.5gb.me", "all-2g.10gb", "all-3g.20gb",
				"all-balanced", "all-disabled", "all-enabled", "custom-config"},
			"A100-PCIE-80GB":           {"all-1g.10gb", "all-disabled", "all-enabled"},
			"H100-PCIE-80GB":           {"all-1g.10gb", "all-disabled", "all-enabled"},
			"H100-NVL-94GB":            {"all-disabled", "all-enabled"},
			"H20-96GB":                 {"all-disabled", "all-enabled"},
			"H200-NVL-141GB":           {"all-disabled", "all-enabled"},
			"B200-180GB":               {"all-disabled", "all-enabled"},
			"GB200-186GB":              {"all-disabled", "all-enabled"},
			"RTX-PRO-6000-Server-96GB": {"all-disabled", "all-enabled"},
		},
		"examples-dgx-station-80gb-config.yaml": {
			a100x40.name: nil,
			a100x80.name: dgxStation80,
			h100.name:    nil,
			h200.name:    nil,
		},
	}
}
