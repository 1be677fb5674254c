package migconfig

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	tests := map[string]struct {
		doc  string
		want *Spec
	}{
		"mig-parted map form": {
			doc: `
version: v1
mig-configs:
  all-balanced:
  - device-filter: ["0x233010DE", "0x20B210DE"]
    devices: all
    mig-enabled: true
    mig-devices:
      "1g.10gb": 2
      "2g.20gb": 1
      "3g.40gb": 1
  - device-filter: "0x20B010DE"
    devices: [0, 3]
    mig-enabled: false
    mig-devices: {}
`,
			want: &Spec{Version: "v1", Configs: map[string]Config{
				"all-balanced": {Name: "all-balanced", Entries: []Entry{
					{DeviceFilter: filter("0x233010DE", "0x20B210DE"), AllDevices: true, MigEnabled: true,
						Profiles: map[string]int{"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}},
					{DeviceFilter: filter("0x20B010DE"), Devices: []int{0, 3}},
				}},
			}},
		},
		"annotation list form, repeats are counts": {
			// As users type it: kubectl annotate node gpu-worker run.ai/mig.config='...'
			doc: `
version: v1
mig-configs:
  selected:
  - devices: [0,1,2,3]
    mig-enabled: true
    mig-devices:
    - 2g.20gb
    - 2g.20gb
    - 3g.30gb
`,
			want: &Spec{Version: "v1", Configs: map[string]Config{
				"selected": {Name: "selected", Entries: []Entry{
					{Devices: []int{0, 1, 2, 3}, MigEnabled: true, Profiles: map[string]int{"2g.20gb": 2, "3g.30gb": 1}},
				}},
			}},
		},
		"run:ai form, explicit placements": {
			doc: `
version: v1
mig-configs:
  selected:
  - devices: [0]
    mig-enabled: true
    mig-devices:
    - {name: 2g.20gb, position: 0, size: 2}
    - name: 3g.40gb
      position: 4
      size: 4
`,
			want: &Spec{Version: "v1", Configs: map[string]Config{
				"selected": {Name: "selected", Entries: []Entry{
					{Devices: []int{0}, MigEnabled: true, Placements: []Placement{
						{Profile: "2g.20gb", Start: 0, Size: 2}, {Profile: "3g.40gb", Start: 4, Size: 4}}},
				}},
			}},
		},
		"list mixing names, placed and unplaced items": {
			doc: `
version: v1
mig-configs:
  mixed:
  - devices: all
    mig-enabled: true
    mig-devices: [1g.10gb, {name: 1g.10gb}, {name: 3g.40gb, position: 0, size: 4}]
`,
			want: &Spec{Version: "v1", Configs: map[string]Config{
				"mixed": {Name: "mixed", Entries: []Entry{
					{AllDevices: true, MigEnabled: true, Profiles: map[string]int{"1g.10gb": 2},
						Placements: []Placement{{Profile: "3g.40gb", Start: 0, Size: 4}}},
				}},
			}},
		},
		"attribute suffixes": {
			doc: `
version: v1
mig-configs:
  attrs:
  - devices: all
    mig-enabled: true
    mig-devices: {"1g.5gb+me": 1, "1g.24gb+me.all": 1, "1g.24gb+gfx": 4, "1g.24gb-me": 4}
`,
			want: &Spec{Version: "v1", Configs: map[string]Config{
				"attrs": {Name: "attrs", Entries: []Entry{
					{AllDevices: true, MigEnabled: true, Profiles: map[string]int{
						"1g.5gb+me": 1, "1g.24gb+me.all": 1, "1g.24gb+gfx": 4, "1g.24gb-me": 4}},
				}},
			}},
		},
		"MIG on without instances, off without mig-devices, empty list": {
			doc: `
version: v1
mig-configs:
  c:
  - devices: [0]
    mig-enabled: true
    mig-devices: {}
  - devices: [1]
    mig-enabled: false
  - devices: [2]
    mig-enabled: true
    mig-devices: []
`,
			want: &Spec{Version: "v1", Configs: map[string]Config{
				"c": {Name: "c", Entries: []Entry{
					{Devices: []int{0}, MigEnabled: true},
					{Devices: []int{1}},
					{Devices: []int{2}, MigEnabled: true},
				}},
			}},
		},
		"unquoted hex device-filter is the same id": {
			doc: `
version: v1
mig-configs:
  c:
  - device-filter: 0x233010DE
    devices: all
    mig-enabled: false
`,
			want: &Spec{Version: "v1", Configs: map[string]Config{
				"c": {Name: "c", Entries: []Entry{{DeviceFilter: filter("0x233010DE"), AllDevices: true}}},
			}},
		},
		"JSON": {
			doc: `{"version":"v1","mig-configs":{"j":[{"devices":"all","mig-enabled":true,"mig-devices":{"7g.80gb":1}}]}}`,
			want: &Spec{Version: "v1", Configs: map[string]Config{
				"j": {Name: "j", Entries: []Entry{{AllDevices: true, MigEnabled: true, Profiles: map[string]int{"7g.80gb": 1}}}},
			}},
		},
		"annotation with yes as true (YAML 1.1, as kubectl users get)": {
			doc: "version: v1\nmig-configs:\n  selected:\n  - devices: all\n    mig-enabled: yes\n    mig-devices: [1g.10gb]\n",
			want: &Spec{Version: "v1", Configs: map[string]Config{
				"selected": {Name: "selected", Entries: []Entry{{AllDevices: true, MigEnabled: true, Profiles: map[string]int{"1g.10gb": 1}}}},
			}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Parse([]byte(tc.doc))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
		})
	}
}

// entryDoc wraps entry lines (indented by four) in a one-config document.
func entryDoc(lines ...string) string {
	return "version: v1\nmig-configs:\n  c:\n  - " + strings.Join(lines, "\n    ") + "\n"
}

func TestParseErrors(t *testing.T) {
	tests := map[string]struct {
		doc string
		// want is the whole error, one line per problem.
		want []string
	}{
		"empty":      {doc: "", want: []string{"empty mig.config"}},
		"blank":      {doc: "  \n\t\n", want: []string{"empty mig.config"}},
		"bad YAML":   {doc: "version: v1\nmig-configs: [\n", want: []string{"invalid YAML: yaml: line 2: did not find expected node content"}},
		"tab indent": {doc: "version: v1\nmig-configs:\n\tc: []\n", want: []string{"invalid YAML: yaml: line 3: found character that cannot start any token"}},
		// mig-parted takes the last of each silently; here only the
		// configuration it is in fails (TestParseScopedErrors).
		"duplicate config name": {
			doc:  "version: v1\nmig-configs:\n  a:\n  - {devices: all, mig-enabled: false}\n  a:\n  - {devices: all, mig-enabled: true, mig-devices: {}}\n",
			want: []string{"mig-configs.a: the configuration is given twice (lines 3 and 5), and only the last would count; give each name once"},
		},
		"duplicate field in entry": {
			doc:  entryDoc("devices: all", "devices: [0]", "mig-enabled: false"),
			want: []string{`mig-configs.c: line 5: "devices" given twice in one map (first on line 4)`},
		},
		"duplicate top-level field": {
			doc:  "version: v1\nversion: v1\nmig-configs:\n  a: [{devices: all, mig-enabled: false}]\n",
			want: []string{`line 2: "version" given twice (first on line 1)`},
		},
		"not a map":           {doc: "- a\n- b\n", want: []string{"document must be a map with version and mig-configs, got a list"}},
		"scalar document":     {doc: "hello\n", want: []string{"document must be a map with version and mig-configs, got a string"}},
		"missing version":     {doc: "mig-configs:\n  c:\n  - {devices: all, mig-enabled: false}\n", want: []string{`missing required field "version"`}},
		"unsupported version": {doc: "version: v2\nmig-configs:\n  c:\n  - {devices: all, mig-enabled: false}\n", want: []string{`version: unsupported version "v2" (want "v1")`}},
		"numeric version":     {doc: "version: 1\nmig-configs:\n  c:\n  - {devices: all, mig-enabled: false}\n", want: []string{`version: must be the string "v1", got a number`}},
		"unknown top-level field": {
			doc:  "version: v1\nkind: MigConfig\nmig-configs:\n  c:\n  - {devices: all, mig-enabled: false}\n",
			want: []string{`unknown field "kind" (known: version, mig-configs)`},
		},
		"missing mig-configs": {doc: "version: v1\n", want: []string{`missing required field "mig-configs"`}},
		"empty mig-configs":   {doc: "version: v1\nmig-configs: {}\n", want: []string{"mig-configs: no configurations"}},
		"mig-configs a list":  {doc: "version: v1\nmig-configs: [a]\n", want: []string{"mig-configs: must be a map of configuration name to a list of entries, got a list"}},
		"empty config name":   {doc: "version: v1\nmig-configs:\n  \"\":\n  - {devices: all, mig-enabled: false}\n", want: []string{"mig-configs: empty configuration name"}},
		"config without entries": {
			doc:  "version: v1\nmig-configs:\n  c: []\n",
			want: []string{"mig-configs.c: no entries"},
		},
		"config not a list": {
			doc:  "version: v1\nmig-configs:\n  c: {devices: all}\n",
			want: []string{"mig-configs.c: must be a list of entries, got a map"},
		},
		"entry not a map": {
			doc:  "version: v1\nmig-configs:\n  c: [all]\n",
			want: []string{"mig-configs.c[0]: entry must be a map with devices, mig-enabled and mig-devices, got a string"},
		},
		"unknown field in entry, named": {
			doc:  entryDoc("devices: all", "mig-enabled: true", "mig-devices: {}", "mig-device: {}"),
			want: []string{`mig-configs.c[0]: unknown field "mig-device" (known: devices, device-filter, mig-enabled, mig-devices)`},
		},
		"missing devices and mig-enabled": {
			doc: entryDoc("mig-devices: {}"),
			want: []string{
				`mig-configs.c[0]: missing required field "devices"`,
				`mig-configs.c[0]: missing required field "mig-enabled"`,
			},
		},
		"devices neither all nor a list": {
			doc:  entryDoc("devices: some", "mig-enabled: false"),
			want: []string{`mig-configs.c[0].devices: must be "all" or a list of GPU indices, got the string "some"`},
		},
		"devices a bare number": {
			doc:  entryDoc("devices: 3", "mig-enabled: false"),
			want: []string{`mig-configs.c[0].devices: must be "all" or a list of GPU indices, got a number`},
		},
		"devices empty list: no GPU, as in mig-parted (Validate says so)": {
			doc:  entryDoc("devices: []", "mig-enabled: false"),
			want: nil,
		},
		"bad device list": {
			doc: entryDoc(`devices: [0, 0, -1, "1", 1.5]`, "mig-enabled: false"),
			want: []string{
				`mig-configs.c[0].devices[2]: a GPU index must be a whole number from 0 to 2147483647, written 3 or "3", got the number -1`,
				`mig-configs.c[0].devices[4]: a GPU index must be a whole number from 0 to 2147483647, written 3 or "3", got the number 1.5`,
			},
		},
		"mig-enabled not a bool": {
			doc:  entryDoc("devices: all", "mig-enabled: maybe"),
			want: []string{"mig-configs.c[0].mig-enabled: must be true or false, got a string"},
		},
		"mig-enabled without mig-devices": {
			doc:  entryDoc("devices: all", "mig-enabled: true"),
			want: []string{`mig-configs.c[0]: missing required field "mig-devices" when mig-enabled is true (use mig-devices: {} for MIG without instances)`},
		},
		"mig-enabled with null mig-devices": {
			doc:  entryDoc("devices: all", "mig-enabled: true", "mig-devices:"),
			want: []string{`mig-configs.c[0]: missing required field "mig-devices" when mig-enabled is true (use mig-devices: {} for MIG without instances)`},
		},
		"mig-devices with MIG disabled": {
			doc:  entryDoc("devices: all", "mig-enabled: false", `mig-devices: {"1g.10gb": 1}`),
			want: []string{"mig-configs.c[0]: mig-devices given with mig-enabled: false"},
		},
		"mig-devices a string": {
			doc:  entryDoc("devices: all", "mig-enabled: true", "mig-devices: 1g.10gb"),
			want: []string{"mig-configs.c[0].mig-devices: must be a map of profile to count or a list of profiles, got a string"},
		},
		"bad profile syntax": {
			doc: entryDoc("devices: all", "mig-enabled: true",
				`mig-devices: ["2g20gb", "2G.20GB", "1c.2g.10gb", "0g.5gb", "2g.20gb+", "2g.20gb+me,gfx", " 1g.10gb", "", "2g.20gb++me"]`),
			// 0g.5gb and 2g.20gb+me,gfx are well formed (no GPU has them:
			// Validate's question).
			want: []string{
				`mig-configs.c[0].mig-devices[0]: profile "2g20gb": not a MIG profile name (want [<c>c.]<g>g.<m>gb with optional attributes, e.g. 2g.20gb, 1g.10gb+me, 1g.24gb-me)`,
				`mig-configs.c[0].mig-devices[1]: profile "2G.20GB": profile names are lower case ("2g.20gb")`,
				`mig-configs.c[0].mig-devices[2]: profile "1c.2g.10gb": compute-instance profiles (1 of the 2 compute slices of a GPU instance) are not supported: migflex gives each GPU instance one compute instance spanning it, and serves that; name the GPU-instance profile ("2g.10gb") instead, or keep this configuration for mig-parted`,
				`mig-configs.c[0].mig-devices[4]: profile "2g.20gb+": empty attribute`,
				`mig-configs.c[0].mig-devices[6]: profile " 1g.10gb": leading or trailing spaces`,
				`mig-configs.c[0].mig-devices[7]: empty profile name`,
				`mig-configs.c[0].mig-devices[8]: profile "2g.20gb++me": attribute "+me" has characters other than letters, digits and dots`,
			},
		},
		"bad profile as map key": {
			doc:  entryDoc("devices: all", "mig-enabled: true", `mig-devices: {"2g-20gb": 1}`),
			want: []string{`mig-configs.c[0].mig-devices: profile "2g-20gb": not a MIG profile name (want [<c>c.]<g>g.<m>gb with optional attributes, e.g. 2g.20gb, 1g.10gb+me, 1g.24gb-me)`},
		},
		// A zero beside other counts is none of that profile, as in
		// mig-parted; every count zero is an error there too.
		"negative and non-integer counts": {
			doc: entryDoc("devices: all", "mig-enabled: true",
				`mig-devices: {"1g.5gb": 0, "2g.10gb": -1, "3g.20gb": 1.5, "4g.20gb": "1", "7g.40gb": 99999999999, "1g.10gb": null}`),
			want: []string{
				`mig-configs.c[0].mig-devices["1g.10gb"]: a count must be a whole number from 0 to 2147483647, got nothing`,
				`mig-configs.c[0].mig-devices["2g.10gb"]: a count must be a whole number from 0 to 2147483647, got -1`,
				`mig-configs.c[0].mig-devices["3g.20gb"]: a count must be a whole number from 0 to 2147483647, got 1.5`,
				`mig-configs.c[0].mig-devices["4g.20gb"]: a count must be a whole number from 0 to 2147483647, got "1"`,
				`mig-configs.c[0].mig-devices["7g.40gb"]: a count must be a whole number from 0 to 2147483647, got 99999999999`,
			},
		},
		"every count zero": {
			doc:  entryDoc("devices: all", "mig-enabled: true", `mig-devices: {"1g.5gb": 0, "2g.10gb": 0}`),
			want: []string{"mig-configs.c[0].mig-devices: every count is 0 (for MIG without instances write mig-devices: {})"},
		},
		"position without size, size without position": {
			doc: entryDoc("devices: all", "mig-enabled: true",
				"mig-devices: [{name: 2g.20gb, position: 0}, {name: 3g.40gb, size: 4}]"),
			want: []string{
				"mig-configs.c[0].mig-devices[0]: position without size (give both, in memory slices, or neither)",
				"mig-configs.c[0].mig-devices[1]: size without position (give both, in memory slices, or neither)",
			},
		},
		"bad position and size": {
			doc: entryDoc("devices: all", "mig-enabled: true",
				"mig-devices: [{name: 2g.20gb, position: -1, size: 0}, {name: 1g.10gb, position: a, size: 1.5}]"),
			want: []string{
				"mig-configs.c[0].mig-devices[0].position: a memory-slice start must be a whole number from 0 to 2147483647, got -1",
				"mig-configs.c[0].mig-devices[0].size: a size in memory slices must be a whole number from 1 to 2147483647, got 0",
				`mig-configs.c[0].mig-devices[1].position: a memory-slice start must be a whole number from 0 to 2147483647, got "a"`,
				"mig-configs.c[0].mig-devices[1].size: a size in memory slices must be a whole number from 1 to 2147483647, got 1.5",
			},
		},
		"run:ai item without name, with unknown field, name not a string": {
			doc: entryDoc("devices: all", "mig-enabled: true",
				"mig-devices: [{position: 0, size: 1}, {name: 1g.10gb, pos: 1}, {name: 7}]"),
			want: []string{
				`mig-configs.c[0].mig-devices[0]: missing required field "name"`,
				`mig-configs.c[0].mig-devices[1]: unknown field "pos" (known: name, position, size)`,
				"mig-configs.c[0].mig-devices[2].name: must be a profile name, got a number",
			},
		},
		"list item neither name nor map": {
			doc:  entryDoc("devices: all", "mig-enabled: true", "mig-devices: [7, [1g.10gb]]"),
			want: []string{"mig-configs.c[0].mig-devices[0]: must be a profile name or {name, position, size}, got a number", "mig-configs.c[0].mig-devices[1]: must be a profile name or {name, position, size}, got a list"},
		},
		// Strings that are no PCI id match no GPU, as in mig-parted
		// (TestParseDeviceFilter); other types are errors.
		"bad device-filter": {
			doc: entryDoc("devices: all", "mig-enabled: false", `device-filter: ["0x", "233010DE", "0xZZ", "0x20B010DE:0x145F10DE", 12345678901, true]`),
			want: []string{
				`mig-configs.c[0].device-filter[4]: 12345678901 is not a 32-bit PCI device id`,
				`mig-configs.c[0].device-filter[5]: must be a PCI device id like "0x233010DE", got true/false`,
			},
		},
		"device-filter a map": {
			doc:  entryDoc("devices: all", "mig-enabled: false", "device-filter: {a: b}"),
			want: []string{`mig-configs.c[0].device-filter: must be a PCI device id like "0x233010DE" or a list of them, got a map`},
		},
		"every error in the document is reported": {
			doc: `
version: v1
mig-configs:
  a:
  - devices: all
    mig-enabled: true
    mig-devices: {"9x.1gb": 1}
  b:
  - devices: [x]
    mig-enabled: false
  - devices: all
    mig-enabled: true
    mig-devices: [{name: 1g.10gb, position: 0}]
`,
			want: []string{
				`mig-configs.a[0].mig-devices: profile "9x.1gb": "9x" is not a number followed by "g" (want [<c>c.]<g>g.<m>gb with optional attributes, e.g. 2g.20gb, 1g.10gb+me, 1g.24gb-me)`,
				`mig-configs.b[0].devices[0]: a GPU index must be a whole number from 0 to 2147483647, written 3 or "3", got the string "x"`,
				"mig-configs.b[1].mig-devices[0]: position without size (give both, in memory slices, or neither)",
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, docErrors(t, tc.doc)); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

// docErrors is what is wrong with a document, one line per problem: Parse's
// error, or else each configuration's Err, in name order.
func docErrors(t *testing.T, doc string) []string {
	t.Helper()
	spec, err := Parse([]byte(doc))
	if err != nil {
		if spec != nil {
			t.Errorf("Parse returned a spec with its error: %+v", spec)
		}
		return strings.Split(err.Error(), "\n")
	}
	var out []string
	for _, name := range spec.Names() {
		if c := spec.Configs[name]; c.Err != nil {
			out = append(out, strings.Split(c.Err.Error(), "\n")...)
		}
	}
	return out
}

func TestSelect(t *testing.T) {
	spec := func(names ...string) *Spec {
		s := &Spec{Version: Version, Configs: map[string]Config{}}
		for _, n := range names {
			s.Configs[n] = Config{Name: n, Entries: []Entry{{AllDevices: true}}}
		}
		return s
	}
	tests := map[string]struct {
		spec    *Spec
		name    string
		want    string
		wantErr string
	}{
		"explicit name":                     {spec: spec("a", "b", "selected"), name: "b", want: "b"},
		"explicit name beats selected":      {spec: spec("a", "selected"), name: "a", want: "a"},
		"explicit name missing":             {spec: spec("b", "a"), name: "c", wantErr: `mig-config "c" not found (have: a, b)`},
		"selected":                          {spec: spec("a", "selected", "z"), want: "selected"},
		"the only one":                      {spec: spec("all-1g.10gb"), want: "all-1g.10gb"},
		"several and none selected":         {spec: spec("z", "a", "m"), wantErr: `3 mig-configs and none named "selected": choose one of a, m, z`},
		"explicit name on a one-config doc": {spec: spec("a"), name: "b", wantErr: `mig-config "b" not found (have: a)`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := tc.spec.Select(tc.name)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("Select(%q) error = %v, want %q", tc.name, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Select(%q): %v", tc.name, err)
			}
			if got.Name != tc.want {
				t.Errorf("Select(%q) = %q, want %q", tc.name, got.Name, tc.want)
			}
		})
	}
}

// TestParseStringIndices: issue 14 point 2. Run:ai and fake-gpu-operator
// write devices as strings (fake-gpu-operator's migfaker.SelectedDevices
// has Devices []string, its test TestFakeMapping uses []string{"0"}), so a
// string of digits is an index in every form, and "all" is every GPU.
// Anything else names what was given and what is allowed.
func TestParseStringIndices(t *testing.T) {
	accepted := map[string]struct {
		devices string
		all     bool
		want    []int
	}{
		"one string index":            {devices: `["0"]`, want: []int{0}},
		"several":                     {devices: `["0", "1", "7"]`, want: []int{0, 1, 7}},
		"strings and numbers mixed":   {devices: `[0, "1"]`, want: []int{0, 1}},
		"leading zeros are decimal":   {devices: `["007"]`, want: []int{7}},
		"the largest index":           {devices: `["2147483647"]`, want: []int{2147483647}},
		"all, quoted":                 {devices: `"all"`, all: true},
		"all, plain":                  {devices: `all`, all: true},
		"a block list of strings":     {devices: "\n    - \"2\"\n    - '3'", want: []int{2, 3}},
		"unquoted numbers, as before": {devices: `[4, 5]`, want: []int{4, 5}},
	}
	for name, tc := range accepted {
		t.Run(name, func(t *testing.T) {
			spec, err := Parse([]byte(entryDoc("devices: "+tc.devices, "mig-enabled: false")))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			e := spec.Configs["c"].Entries[0]
			if e.AllDevices != tc.all || !cmp.Equal(e.Devices, tc.want) {
				t.Errorf("all %v devices %v, want all %v devices %v", e.AllDevices, e.Devices, tc.all, tc.want)
			}
		})
	}

	const allowed = `a GPU index must be a whole number from 0 to 2147483647, written 3 or "3", got `
	rejected := map[string]struct{ devices, want string }{
		"not a number":       {`["x"]`, `mig-configs.c[0].devices[0]: ` + allowed + `the string "x"`},
		"negative string":    {`["-1"]`, `mig-configs.c[0].devices[0]: ` + allowed + `the string "-1"`},
		"fraction string":    {`["1.5"]`, `mig-configs.c[0].devices[0]: ` + allowed + `the string "1.5"`},
		"negative number":    {`[-1]`, `mig-configs.c[0].devices[0]: ` + allowed + `the number -1`},
		"fraction number":    {`[1.5]`, `mig-configs.c[0].devices[0]: ` + allowed + `the number 1.5`},
		"spaces":             {`[" 1"]`, `mig-configs.c[0].devices[0]: ` + allowed + `the string " 1"`},
		"empty string":       {`[""]`, `mig-configs.c[0].devices[0]: ` + allowed + `the string ""`},
		"hex string":         {`["0x1"]`, `mig-configs.c[0].devices[0]: ` + allowed + `the string "0x1"`},
		"past the largest":   {`["2147483648"]`, `mig-configs.c[0].devices[0]: ` + allowed + `the string "2147483648"`},
		"all inside a list":  {`["all"]`, `mig-configs.c[0].devices[0]: ` + allowed + `the string "all" (for every GPU, write devices: all instead of a list)`},
		"a string, not all":  {`"0"`, `mig-configs.c[0].devices: must be "all" or a list of GPU indices, got the string "0"`},
		"a list in the list": {`[["0"]]`, `mig-configs.c[0].devices[0]: ` + allowed + `a list`},
		"true is not a GPU":  {`[true]`, `mig-configs.c[0].devices[0]: ` + allowed + `true`},
	}
	for name, tc := range rejected {
		t.Run(name, func(t *testing.T) {
			if got := docErrors(t, entryDoc("devices: "+tc.devices, "mig-enabled: false")); !cmp.Equal(got, []string{tc.want}) {
				t.Errorf("errors %q\nwant %s", got, tc.want)
			}
		})
	}
}

// TestParseRunAIAnnotation is the annotation as fake-gpu-operator's users
// write it: Run:ai's placement form with string indices.
func TestParseRunAIAnnotation(t *testing.T) {
	doc := `version: v1
mig-configs:
  selected:
  - devices: ["0"]
    mig-enabled: true
    mig-devices:
    - name: 4g.20gb
      position: 0
      size: 4
  - devices: ["1"]
    mig-enabled: true
    mig-devices:
    - {name: 1g.5gb, position: 0, size: 1}
    - {name: 1g.5gb, position: 1, size: 1}
`
	spec, err := Parse([]byte(doc))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := &Spec{Version: "v1", Configs: map[string]Config{"selected": {Name: "selected", Entries: []Entry{
		{Devices: []int{0}, MigEnabled: true, Placements: []Placement{{"4g.20gb", 0, 4}}},
		{Devices: []int{1}, MigEnabled: true, Placements: []Placement{{"1g.5gb", 0, 1}, {"1g.5gb", 1, 1}}},
	}}}}
	if diff := cmp.Diff(want, spec); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	desired, err := Validate(spec.Configs["selected"], gpus(2, a100x40))
	if err != nil || len(desired) != 2 {
		t.Fatalf("Validate on two A100-40GB: %v, %v", desired, err)
	}
}

// TestParseDeviceFilter reads device-filter as mig-parted does (issue 16
// points 1 and 2): api/spec/v1/spec_test.go accepts model names
// ("MODEL", ["MODEL1", "MODEL2"]), helpers_test.go matches "" as every GPU
// and ids with a subsystem, device_test.go parses "0x25B610DE:0x14A910DE"
// and treats a malformed id as matching nothing.
func TestParseDeviceFilter(t *testing.T) {
	id := func(dev, sub uint32, hasSub bool, text string) DeviceID {
		return DeviceID{Device: dev, Subsystem: sub, HasSubsystem: hasSub, Valid: true, Text: text}
	}
	bad := func(text string) DeviceID { return DeviceID{Text: text} }
	tests := map[string]struct {
		filter string
		want   []DeviceID
	}{
		"absent-like: empty string":     {`""`, nil},
		"empty list":                    {`[]`, nil},
		"null":                          {`null`, nil},
		"one id":                        {`"0x233010DE"`, []DeviceID{id(0x233010DE, 0, false, "0x233010DE")}},
		"lower case hex":                {`"0x233010de"`, []DeviceID{id(0x233010DE, 0, false, "0x233010de")}},
		"with a subsystem":              {`"0x233010DE:0x16C010DE"`, []DeviceID{id(0x233010DE, 0x16C010DE, true, "0x233010DE:0x16C010DE")}},
		"a list, repeats once":          {`["0x233010DE", "0x20B210DE", "0x233010DE"]`, []DeviceID{id(0x233010DE, 0, false, "0x233010DE"), id(0x20B210DE, 0, false, "0x20B210DE")}},
		"decimal, as strconv base 0":    {`"590352606"`, []DeviceID{id(0x233010DE, 0, false, "590352606")}},
		"unquoted hex is the same id":   {`0x233010DE`, []DeviceID{id(0x233010DE, 0, false, "0x233010DE")}},
		"a model name matches nothing":  {`"MODEL"`, []DeviceID{bad("MODEL")}},
		"model names in a list":         {`["MODEL1", "MODEL2"]`, []DeviceID{bad("MODEL1"), bad("MODEL2")}},
		"an empty item matches nothing": {`[""]`, []DeviceID{bad("")}},
		"extra separators":              {`"0x233010DE:0x16C010DE:extra"`, []DeviceID{bad("0x233010DE:0x16C010DE:extra")}},
		"bad subsystem":                 {`"0x25B610DE:not-a-subsystem"`, []DeviceID{bad("0x25B610DE:not-a-subsystem")}},
		"past 32 bits":                  {`"0x1233010DE"`, []DeviceID{bad("0x1233010DE")}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			spec, err := Parse([]byte(entryDoc("device-filter: "+tc.filter, "devices: all", "mig-enabled: false")))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			c, err := spec.Select("c")
			if err != nil {
				t.Fatalf("Select: %v", err)
			}
			if diff := cmp.Diff(tc.want, c.Entries[0].DeviceFilter); diff != "" {
				t.Errorf("device-filter (-want +got):\n%s", diff)
			}
		})
	}
}

// TestParseScopedErrors: a problem inside one configuration fails that
// configuration only (issue 16 point 3); one with the document fails it
// whole, as in mig-parted.
func TestParseScopedErrors(t *testing.T) {
	doc := `version: v1
mig-configs:
  good:
  - {devices: all, mig-enabled: true, mig-devices: {1g.10gb: 7}}
  unknown-field:
  - {devices: all, mig-enabled: false, bogus: 1}
  ci-profiles:
  - {devices: all, mig-enabled: true, mig-devices: {1c.7g.40gb: 7}}
  bad-profile:
  - {devices: all, mig-enabled: true, mig-devices: {bogus: 1}}
  twice:
  - {devices: all, mig-enabled: false}
  twice:
  - {devices: all, mig-enabled: true, mig-devices: {}}
  not-a-list: {devices: all}
  no-entries: []
  unknown-profile:
  - {devices: all, mig-enabled: true, mig-devices: {0g.0gb: 100}}
`
	spec, err := Parse([]byte(doc))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	wantErr := map[string]string{
		"good":            "",
		"unknown-profile": "", // well formed: no GPU has it, Validate's question
		"unknown-field":   `mig-configs.unknown-field[0]: unknown field "bogus" (known: devices, device-filter, mig-enabled, mig-devices)`,
		"ci-profiles":     `mig-configs.ci-profiles[0].mig-devices: profile "1c.7g.40gb": compute-instance profiles (1 of the 7 compute slices of a GPU instance) are not supported: migflex gives each GPU instance one compute instance spanning it, and serves that; name the GPU-instance profile ("7g.40gb") instead, or keep this configuration for mig-parted`,
		"bad-profile":     `mig-configs.bad-profile[0].mig-devices: profile "bogus": not a MIG profile name (want [<c>c.]<g>g.<m>gb with optional attributes, e.g. 2g.20gb, 1g.10gb+me, 1g.24gb-me)`,
		"twice":           "mig-configs.twice: the configuration is given twice (lines 11 and 13), and only the last would count; give each name once",
		"not-a-list":      "mig-configs.not-a-list: must be a list of entries, got a map",
		"no-entries":      "mig-configs.no-entries: no entries",
	}
	if diff := cmp.Diff(slices.Sorted(maps.Keys(wantErr)), spec.Names()); diff != "" {
		t.Fatalf("configurations (-want +got):\n%s", diff)
	}
	for name, want := range wantErr {
		c, err := spec.Select(name)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != want {
			t.Errorf("Select(%q) error %q\nwant %q", name, got, want)
		}
		if err == nil && (c.Name != name || len(c.Entries) != 1) {
			t.Errorf("Select(%q) = %+v", name, c)
		}
	}

	for name, doc := range map[string]string{
		"unknown top-level field": "version: v1\nbogus: 1\nmig-configs:\n  c: [{devices: all, mig-enabled: false}]\n",
		"wrong version":           "version: v2\nmig-configs:\n  c: [{devices: all, mig-enabled: false}]\n",
		"no configurations":       "version: v1\nmig-configs: {}\n",
		"YAML syntax":             "version: v1\nmig-configs: [\n",
	} {
		if _, err := Parse([]byte(doc)); err == nil {
			t.Errorf("%s: Parse accepted it", name)
		}
	}
}

// TestProfileNames: names read as mig-parted reads them (go-nvlib's
// parseMigProfile), kept in canonical form (issue 16 points 4 and 5).
func TestProfileNames(t *testing.T) {
	good := map[string]string{
		"1g.10gb":        "1g.10gb",
		"1g.05gb":        "1g.5gb", // mig-parted applies it as 1g.5gb
		"01g.5gb":        "1g.5gb",
		"1c.1g.5gb":      "1g.5gb", // a compute instance spanning its GPU instance
		"7c.7g.40gb":     "7g.40gb",
		"1g.10gb+me":     "1g.10gb+me",
		"1g.24gb+me.all": "1g.24gb+me.all",
		"1g.24gb-me":     "1g.24gb-me",
		"1g.24gb+gfx":    "1g.24gb+gfx",
		"1g.10gb+me,gfx": "1g.10gb+gfx,me",
		"0g.0gb":         "0g.0gb", // well formed; no GPU has it
		"1g.10gb+ME":     "1g.10gb+ME",
	}
	for in, want := range good {
		if got, err := profileOf(in); err != nil || got != want {
			t.Errorf("profileOf(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	bad := map[string]string{
		"1c.7g.40gb":                `profile "1c.7g.40gb": compute-instance profiles (1 of the 7 compute slices of a GPU instance) are not supported`,
		"1c.1g.5gb+me":              "", // spans its GPU instance: fine
		"1g.5gb+me-x":               `profile "1g.5gb+me-x": both '+' and '-' attributes`,
		"1g.5gb+me,me":              `profile "1g.5gb+me,me": attribute "me" given twice`,
		"1g.5gb+1me":                `profile "1g.5gb+1me": attribute "1me" starts with a digit`,
		"1g.5gb+.me":                `profile "1g.5gb+.me": attribute ".me" starts or ends with a dot`,
		"1G.5GB":                    `profile "1G.5GB": profile names are lower case ("1g.5gb")`,
		"1g.5":                      `profile "1g.5": "5" is not a number followed by "gb"`,
		"1g.5gb.me":                 `profile "1g.5gb.me": "1g" is not a number followed by "c"`,
		"g.5gb":                     `profile "g.5gb": "g" is not a number followed by "g"`,
		"1g.99999999999999999999gb": `profile "1g.99999999999999999999gb": "99999999999999999999gb" is too large`,
	}
	for in, want := range bad {
		_, err := profileOf(in)
		switch {
		case want == "" && err != nil:
			t.Errorf("profileOf(%q): %v", in, err)
		case want != "" && (err == nil || !strings.HasPrefix(err.Error(), want)):
			t.Errorf("profileOf(%q) error %v\nwant %s...", in, err, want)
		}
	}
}
