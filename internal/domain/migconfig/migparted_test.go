package migconfig

import (
	"bufio"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
)

// The mig-parted agreement harness (issue 16): the inputs of NVIDIA
// mig-parted's own tests, at the commit in testdata/mig-parted/SOURCE, each
// with what mig-parted does with it, run through migflex. Test inputs are
// transcribed with the file and test they come from; no mig-parted code is
// copied. Run it with
//
//	go test -count 1 -run '^TestMigPartedAgreement$' -v ./internal/domain/migconfig | grep -E 'agree|^    migparted'
//
// Cases migflex disagrees with on purpose carry the reason (docs/INSTALL.md,
// "Differences from mig-parted") and must keep disagreeing; every other
// disagreement must be listed in testdata/mig-parted/disagreements.txt
// (rewritten by -update-mig-parted), so each change to the count shows in
// that file's history.

var updateMigParted = flag.Bool("update-mig-parted", false, "rewrite testdata/mig-parted/disagreements.txt")

const disagreementsFile = "testdata/mig-parted/disagreements.txt"

// mpCase is one input of mig-parted's tests.
type mpCase struct {
	// source is the mig-parted file and test (or fixture) it comes from.
	source string
	name   string
	doc    string
	// config is the configuration applied; "" for the only one.
	config string
	// node is the GPUs it is applied to; nil asks only whether the
	// configuration parses (mig-parted's spec tests).
	node []mig.GPU
	// want is what mig-parted does with it.
	want mpOutcome
	// why, when set, is why migflex does otherwise on purpose.
	why string
	// memory is the memory slices a layout takes, where that decides why.
	memory int
}

// The deliberate differences (docs/INSTALL.md, "Differences from
// mig-parted").
const (
	whyNoConfigs = "a document without configurations has nothing to apply: mig-parted reads it and fails when asked " +
		"for a configuration; migflex says so at once"
	whyComputeInstances = "compute-instance profiles (several compute instances sharing one GPU instance) are refused, " +
		"in their configuration only: migflex creates one compute instance per GPU instance and serves that"
	whyOverfull = "the GPU cannot hold the layout (more memory slices than it has); mig-parted's test applies it " +
		"to the go-nvml mock, which does not count memory slices, and on a GPU the create fails"
	whyTwoEntries = "a GPU two entries match is an error: mig-parted applies both in turn, and the last silently " +
		"replaces the first"
	whyTwice   = "a configuration name given twice fails that configuration: mig-parted silently keeps the last"
	whyLenient = "migflex reads more than mig-parted (a broken configuration fails alone, unquoted hex filters, " +
		"string indices, the list and Run:ai forms): a file mig-parted refuses whole may have usable parts here"
)

// mpOutcome is a tool's answer: it refuses, or it accepts and sets the
// layout of the GPUs in covers (for an apply; nil for a parse).
type mpOutcome struct {
	reject bool
	covers []int
}

func (o mpOutcome) String() string {
	if o.reject {
		return "reject"
	}
	if o.covers == nil {
		return "accept"
	}
	return fmt.Sprintf("accept, sets GPUs %v", o.covers)
}

var mpReject = mpOutcome{reject: true}

func mpCovers(gpus ...int) mpOutcome {
	if gpus == nil {
		gpus = []int{}
	}
	return mpOutcome{covers: gpus}
}

func (c mpCase) id() string { return c.source + "/" + c.name }

// migflexOutcome runs a case through migflex as the agent runs a config
// file selected by the GPU operator's label: parse, select, validate, plan.
func migflexOutcome(c mpCase, parsed map[string]parseResult) (mpOutcome, error) {
	r, ok := parsed[c.doc]
	if !ok {
		r.spec, r.err = Parse([]byte(c.doc))
		parsed[c.doc] = r // the fixture files serve hundreds of cases
	}
	spec, err := r.spec, r.err
	if err != nil {
		return mpReject, err
	}
	cfg, err := spec.Select(c.config)
	if err != nil {
		return mpReject, err
	}
	if c.node == nil {
		return mpOutcome{}, nil
	}
	v, err := ValidateFor(cfg, c.node, ScopeFleet)
	if err != nil {
		return mpReject, err
	}
	if _, err := MakePlan(c.node, v.Desired); err != nil {
		return mpReject, err
	}
	covers := []int{}
	for _, d := range v.Desired {
		covers = append(covers, d.GPU)
	}
	return mpOutcome{covers: covers}, nil
}

type parseResult struct {
	spec *Spec
	err  error
}

func agree(want, got mpOutcome) bool {
	if want.reject || got.reject {
		return want.reject == got.reject
	}
	return want.covers == nil || slices.Equal(want.covers, got.covers)
}

func TestMigPartedAgreement(t *testing.T) {
	cases := migPartedCases(t)
	type tally struct{ n, agree, deliberate int }
	bySource := map[string]*tally{}
	var open []string
	seen := map[string]bool{}
	parsed := map[string]parseResult{}
	for _, c := range cases {
		if seen[c.id()] {
			t.Fatalf("two cases named %s", c.id())
		}
		seen[c.id()] = true
		got, err := migflexOutcome(c, parsed)
		ok := agree(c.want, got)
		s := bySource[c.source]
		if s == nil {
			s = &tally{}
			bySource[c.source] = s
		}
		s.n++
		switch {
		case ok:
			s.agree++
			if c.why != "" {
				t.Errorf("%s: migflex now agrees with mig-parted (%v); drop the deliberate difference %q", c.id(), got, c.why)
			}
		case c.why != "":
			s.deliberate++
		default:
			open = append(open, c.id())
			if testing.Verbose() {
				t.Logf("migparted %s: mig-parted %v, migflex %v: %v", c.id(), c.want, got, firstLine(err))
			}
		}
	}
	total := tally{}
	for _, src := range slices.Sorted(maps.Keys(bySource)) {
		s := bySource[src]
		total.n += s.n
		total.agree += s.agree
		total.deliberate += s.deliberate
		t.Logf("%s: agree %d of %d (deliberate differences %d, open %d)", src, s.agree, s.n, s.deliberate, s.n-s.agree-s.deliberate)
	}
	t.Logf("all: agree %d of %d (deliberate differences %d, open %d)", total.agree, total.n, total.deliberate, len(open))

	slices.Sort(open)
	if *updateMigParted {
		data := strings.Join(open, "\n")
		if data != "" {
			data += "\n"
		}
		if err := os.WriteFile(disagreementsFile, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	listed := []string{}
	if data, err := os.ReadFile(disagreementsFile); err == nil {
		for line := range strings.Lines(string(data)) {
			if line = strings.TrimSpace(line); line != "" {
				listed = append(listed, line)
			}
		}
	}
	if diff := cmp.Diff(listed, append([]string{}, open...)); diff != "" {
		t.Errorf("disagreements with mig-parted changed (-%s +now); after a deliberate change run with -update-mig-parted:\n%s", disagreementsFile, diff)
	}
}

func firstLine(err error) string {
	if err == nil {
		return ""
	}
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// migPartedCases builds every case.
func migPartedCases(t *testing.T) []mpCase {
	var cases []mpCase
	cases = append(cases, specCases()...)
	cases = append(cases, filterCases()...)
	cases = append(cases, knownConfigCases()...)
	cases = append(cases, possibleConfigCases(t)...)
	cases = append(cases, balancedCases()...)
	cases = append(cases, fixtureCases(t)...)
	cases = append(cases, probeCases()...)
	return cases
}

// entryIn is a document of one configuration "c" with one entry.
func entryIn(entry string) string {
	return "version: v1\nmig-configs:\n  c:\n  - " + strings.ReplaceAll(strings.TrimSpace(entry), "\n", "\n    ") + "\n"
}

// specCases: api/spec/v1/spec_test.go. mig-parted's answer is whether
// yaml.Unmarshal into its Spec (TestSpec) or one MigConfigSpec
// (TestMigConfigSpec, wrapped here as the only entry of a configuration)
// fails: expectedFailure in the test.
func specCases() []mpCase {
	const src = "api/spec/v1/spec_test.go"
	var cases []mpCase
	spec := []struct {
		name   string
		doc    string
		reject bool
	}{
		{"Empty", "", false},
		{"Well formed", `{"version": "v1", "mig-configs": {"all-disabled": [{"devices": "all", "mig-enabled": false}]}}`, false},
		{"Only version field", `{"version": "v1"}`, false},
		{"Well formed - wrong version", `{"version": "v2", "mig-configs": {"all-disabled": [{"devices": "all", "mig-enabled": false}]}}`, true},
		{"Only version field - wrong versiomn", `{"version": "v2"}`, true},
		{"Missing version field", `{"mig-configs": {"all-disabled": [{"devices": "all", "mig-enabled": false}]}}`, true},
		{"Erroneous field", `{"bogus": "field", "version": "v1", "mig-configs": {"all-disabled": [{"devices": "all", "mig-enabled": false}]}}`, true},
		{"Empty 'mig-configs'", `{"version": "v1", "mig-configs": {}}`, true},
	}
	for _, s := range spec {
		c := mpCase{source: src + " TestSpec", name: s.name, doc: s.doc}
		if s.reject {
			c.want = mpReject
		}
		if s.name == "Empty" || s.name == "Only version field" {
			c.why = whyNoConfigs
		}
		cases = append(cases, c)
	}
	// Its "Empty" case (yaml.Unmarshal of "" into one MigConfigSpec, no
	// error) has no counterpart in a file: an empty entry there is null,
	// which mig-parted's UnmarshalJSON refuses (missing devices), as
	// migflex does.
	entries := []struct {
		name   string
		entry  string
		reject bool
	}{
		{"Well formed", `{"devices": "all", "mig-enabled": true, "mig-devices": {"1g.5gb": 2}}`, false},
		{"Well formed with filter", `{"device-filter": "MODEL", "devices": "all", "mig-enabled": true, "mig-devices": {"1g.5gb": 2}}`, false},
		{"Well formed with multi-filter", `{"device-filter": ["MODEL1", "MODEL2"], "devices": "all", "mig-enabled": true, "mig-devices": {"1g.5gb": 2}}`, false},
		{"Missing 'devices'", `{"mig-enabled": true, "mig-devices": {"1g.5gb": 2}}`, true},
		{"Missing 'mig-enabled'", `{"devices": "all", "mig-devices": {"1g.5gb": 2}}`, true},
		{"Missing 'mig-devices', enabled: false", `{"devices": "all", "mig-enabled": false,}`, false},
		{"Missing 'mig-devices', enabled: true", `{"devices": "all", "mig-enabled": true,}`, true},
		{"'mig-devices' formatted correctly", `{"devices": "all", "mig-enabled": true, "mig-devices": {"1g.5gb": 2}}`, false},
		{"'mig-devices' formatted incorrectly", `{"devices": "all", "mig-enabled": true, "mig-devices": {"bogus": 2}}`, true},
		{"Erroneous field", `{"bogus": "field", "devices": "all", "mig-enabled": false,}`, true},
		{"'devices' string == all", `{"devices": "all", "mig-enabled": false,}`, false},
		{"'devices' string != all", `{"devices": "bogus", "mig-enabled": false,}`, true},
		{"'devices' []int", `{"devices": [0,1,2,3], "mig-enabled": false,}`, false},
		{"'devices' not string for []int", `{"devices": {}, "mig-enabled": false,}`, true},
	}
	for _, e := range entries {
		c := mpCase{source: src + " TestMigConfigSpec", name: e.name, doc: entryIn(e.entry)}
		if e.reject {
			c.want = mpReject
		}
		cases = append(cases, c)
	}

	// TestMarshallUnmarshall round-trips this Spec: mig-parted parses the
	// whole file. Applied on an A100-SXM4-40GB, the device-filters that are
	// model names match no GPU (NewDeviceIDFromString fails, leaving a zero
	// id; api/spec/v1/helpers.go MatchesDeviceFilter), so those
	// configurations change nothing; "0g.0gb" is a valid format but no GPU
	// has it, so that one fails to apply.
	const roundTrip = `version: v1
mig-configs:
  valid-format-non-existent-devices:
  - {devices: all, mig-enabled: true, mig-devices: {"0g.0gb": 100}}
  all-disabled:
  - {device-filter: A100-SXM4-40GB, devices: all, mig-enabled: false}
  all-1-slice:
  - {device-filter: A100-SXM4-40GB, devices: all, mig-enabled: true, mig-devices: {"1g.5gb": 7}}
  all-2-slice:
  - {device-filter: A100-SXM4-40GB, devices: all, mig-enabled: true, mig-devices: {"2g.10gb": 3}}
  all-3-slice:
  - {device-filter: A100-SXM4-40GB, devices: all, mig-enabled: true, mig-devices: {"3g.20gb": 2}}
  all-balanced-slices:
  - {device-filter: A100-SXM4-40GB, devices: all, mig-enabled: true, mig-devices: {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}}
  half-disabled-half-balanced-slices:
  - {device-filter: A100-SXM4-40GB, devices: [0, 1, 2, 3], mig-enabled: false}
  - {device-filter: A100-SXM4-40GB, devices: [4, 5, 6, 7], mig-enabled: true, mig-devices: {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}}
  multi-device-filter:
  - {device-filter: [A100-SXM4-40GB, A100-PCIE-40GB], devices: [0, 1, 2, 3], mig-enabled: false}
  - {device-filter: [A100-SXM4-40GB, A100-PCIE-40GB], devices: [4, 5, 6, 7], mig-enabled: true, mig-devices: {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}}
`
	const rt = src + " TestMarshallUnmarshall"
	cases = append(cases, mpCase{source: rt, name: "the file parses", doc: roundTrip, config: "all-disabled"})
	for _, name := range []string{"all-disabled", "all-1-slice", "all-2-slice", "all-3-slice", "all-balanced-slices", "half-disabled-half-balanced-slices", "multi-device-filter"} {
		cases = append(cases, mpCase{source: rt, name: name + " on 8 x A100-SXM4-40GB", doc: roundTrip, config: name, node: gpus(8, a100x40), want: mpCovers()})
	}
	cases = append(cases, mpCase{source: rt, name: "valid-format-non-existent-devices on 8 x A100-SXM4-40GB", doc: roundTrip,
		config: "valid-format-non-existent-devices", node: gpus(8, a100x40), want: mpReject})
	return cases
}

// filterCases: device-filter matching, from api/spec/v1/helpers_test.go
// (TestMigConfigSpecMatchesDeviceFilter: an H100 0x2330/0x10DE with
// subsystem 0x16C0/0x10DE) and pkg/types/device_test.go
// (TestNewDeviceIDFromString, TestDeviceIDMatches: an A16 and an A2, both
// 0x25B6/0x10DE, subsystems 0x14A9 and 0x157E). Each filter is the
// device-filter of an entry enabling MIG on every GPU of a one-GPU node;
// mig-parted sets the GPU when the filter matches and leaves it otherwise.
// The GPUs here are test models with those PCI ids and an A100's profiles:
// matching reads only the ids.
func filterCases() []mpCase {
	var cases []mpCase
	node := func(pci, sub uint32) []mig.GPU {
		m := a100x40
		m.name, m.pci = fmt.Sprintf("GPU-%08X", pci), pci
		return []mig.GPU{withSubsystem(gpu(0, m), sub)}
	}
	doc := func(filter string) string {
		return entryIn(`{device-filter: ` + filter + `, devices: all, mig-enabled: true, mig-devices: {}}`)
	}
	h100 := node(0x233010DE, 0x16C010DE)
	const helpers = "api/spec/v1/helpers_test.go TestMigConfigSpecMatchesDeviceFilter"
	for _, f := range []struct {
		name, filter string
		match        bool
	}{
		{"empty filter matches all devices", `""`, true},
		{"primary-only filter matches subsystem-aware hardware", `"0x233010DE"`, true},
		{"matching subsystem filter matches hardware", `"0x233010DE:0x16C010DE"`, true},
		{"sibling subsystem filter does not match hardware", `"0x233010DE:0x16C110DE"`, false},
		{"multiple filters stop at a matching subsystem entry", `["0x233010DE:0x16C110DE", "0x233010DE:0x16C010DE"]`, true},
		{"malformed filters with extra separators do not match", `"0x233010DE:0x16C010DE:extra"`, false},
	} {
		want := mpCovers()
		if f.match {
			want = mpCovers(0)
		}
		cases = append(cases, mpCase{source: helpers, name: f.name, doc: doc(f.filter), node: h100, want: want})
	}

	a16 := node(0x25B610DE, 0x14A910DE)
	a2 := node(0x25B610DE, 0x157E10DE)
	const fromString = "pkg/types/device_test.go TestNewDeviceIDFromString"
	for _, f := range []struct {
		name, filter string
		match        bool
	}{
		// An id that does not parse is an error there; as a filter it
		// matches nothing (MatchesDeviceFilter ignores the error).
		{"primary only", `"0x25B610DE"`, true},
		{"with subsystem", `"0x25B610DE:0x14A910DE"`, true},
		{"invalid primary", `"not-a-device-id"`, false},
		{"invalid subsystem", `"0x25B610DE:not-a-subsystem"`, false},
		{"too many separators", `"0x25B610DE:0x14A910DE:extra"`, false},
	} {
		want := mpCovers()
		if f.match {
			want = mpCovers(0)
		}
		cases = append(cases, mpCase{source: fromString, name: f.name, doc: doc(f.filter), node: a16, want: want})
	}
	const matches = "pkg/types/device_test.go TestDeviceIDMatches"
	for _, f := range []struct {
		name, filter string
		node         []mig.GPU
		match        bool
	}{
		{"primary only filter matches same primary id", `"0x25B610DE"`, a16, true},
		{"subsystem filter matches exact hardware", `"0x25B610DE:0x14A910DE"`, a16, true},
		{"subsystem filter rejects sibling subsystem", `"0x25B610DE:0x14A910DE"`, a2, false},
		{"subsystem filter does not match hardware with unknown subsystem", `"0x25B610DE:0x14A910DE"`, node(0x25B610DE, 0), false},
		{"zero subsystem filter matches hardware with unknown subsystem", `"0x25B610DE:0x00000000"`, node(0x25B610DE, 0), true},
		{"different primary id does not match", `"0x1E3010DE"`, a16, false},
	} {
		want := mpCovers()
		if f.match {
			want = mpCovers(0)
		}
		cases = append(cases, mpCase{source: matches, name: f.name, doc: doc(f.filter), node: f.node, want: want})
	}
	return cases
}

// knownConfigCases: pkg/mig/config/known_configs_test.go
// TestValidConfiguration, per-GPU layouts checked against an
// A100-SXM4-40GB; here each is the layout of every GPU of an 8-GPU node.
func knownConfigCases() []mpCase {
	const src = "pkg/mig/config/known_configs_test.go TestValidConfiguration"
	var cases []mpCase
	for _, k := range []struct {
		name, devices string
		valid         bool
	}{
		{"Empty config", `{}`, true},
		// A nil map and an empty one are the same document.
		{"Nil config", `{}`, true},
		{"Invalid device type (with count > 0)", `{"bogus": 1}`, false},
		{"Invalid device type (with count == 0)", `{"bogus": 0}`, false},
		{"Single device (equal to max)", `{"1g.5gb": 7}`, true},
		{"Single device (greater than max)", `{"1g.5gb": 8}`, false},
		{"Single device (less than max)", `{"1g.5gb": 6}`, true},
		{"Single device (equal to 0)", `{"1g.5gb": 0}`, false},
		{"Mix of devices (all at max)", `{"1g.5gb": 3, "2g.10gb": 2}`, true},
		{"Mix of devices (one smaller than max)", `{"1g.5gb": 2, "2g.10gb": 2}`, true},
		{"Mix of devices (all smaller than max)", `{"1g.5gb": 2, "2g.10gb": 1}`, true},
		{"Mix of devices (one greater than max)", `{"1g.5gb": 4, "2g.10gb": 2}`, false},
	} {
		c := mpCase{source: src, name: k.name, doc: entryIn(`{devices: all, mig-enabled: true, mig-devices: ` + k.devices + `}`),
			node: gpus(8, a100x40), want: mpCovers(seq(0, 7)...)}
		if !k.valid {
			c.want = mpReject
		}
		cases = append(cases, c)
	}
	return cases
}

// possibleConfigCases: every layout mig-parted's A100-SXM4-40GB config
// group generates (testdata/mig-parted/possible-configs-a100-sxm4-40gb.txt),
// which its TestGetSetMigConfig applies on the go-nvml dgxa100 mock and
// expects to succeed; here each is applied to every GPU of an 8-GPU node.
func possibleConfigCases(t *testing.T) []mpCase {
	const src = "pkg/mig/config/config_test.go TestGetSetMigConfig"
	f, err := os.Open(filepath.Join("testdata", "mig-parted", "possible-configs-a100-sxm4-40gb.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cases []mpCase
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		layout := sc.Text()
		c := mpCase{source: src, name: layout, doc: entryIn(`{devices: all, mig-enabled: true, mig-devices: ` + layout + `}`),
			node: gpus(8, a100x40), want: mpCovers(seq(0, 7)...)}
		a100 := gpu(0, a100x40)
		var counts map[string]int
		if err := yaml.Unmarshal([]byte(layout), &counts); err != nil {
			t.Fatalf("%s: %v", layout, err)
		}
		for name, n := range counts {
			if p, err := parseProfileName(name); err == nil && p.computeInstance() {
				c.why = whyComputeInstances
			} else if p, ok := a100.Profile(name); ok {
				c.memory += n * p.MemorySlices
			}
		}
		if c.why == "" && c.memory > 8 {
			c.why = whyOverfull
		}
		cases = append(cases, c)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return cases
}

// balancedCases: pkg/mig/builder/balanced_test.go expectedBalanced, the
// all-balanced layout mig-parted's builder generates per GPU type, for the
// types the simulator has; mig-parted writes it for that GPU, so it applies.
func balancedCases() []mpCase {
	const src = "pkg/mig/builder/balanced_test.go expectedBalanced"
	var cases []mpCase
	for _, b := range []struct {
		name, devices string
		m             model
	}{
		{"A100-40GB", `{"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}`, a100x40},
		{"A100-80GB", `{"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}`, a100x80},
		{"H100-80GB", `{"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}`, h100},
		{"H200-141GB", `{"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}`, h200},
	} {
		cases = append(cases, mpCase{source: src, name: b.name, doc: entryIn(`{devices: all, mig-enabled: true, mig-devices: ` + b.devices + `}`),
			node: gpus(8, b.m), want: mpCovers(seq(0, 7)...)})
	}
	return cases
}

// fixtureCases: every configuration of the upstream files
// (deployments/systemd/config-default.yaml, examples/config.yaml,
// examples/dgx-station-80gb-config.yaml) applied to an 8-GPU node of every
// simulated model, read through the simulator and nvmlmig.Discover as the agent
// reads a node. mig-parted's answer comes from mpApply, a model of what its
// apply does with a configuration.
func fixtureCases(t *testing.T) []mpCase {
	var nodes [][]mig.GPU
	for _, m := range gpumodel.Builtin() {
		nodes = append(nodes, discover(t, newSim(t, sim.GPUSpec{Model: m.Name, Count: 8})))
	}
	var cases []mpCase
	for _, file := range slices.Sorted(maps.Keys(fixtureFiles)) {
		data := readFixture(t, file)
		var doc mpDocument
		if err := yaml.Unmarshal(data, &doc); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for _, name := range slices.Sorted(maps.Keys(doc.MigConfigs)) {
			for _, node := range nodes {
				cases = append(cases, mpCase{source: file, name: name + " on 8 x " + node[0].Model, doc: string(data), config: name,
					node: node, want: mpApply(doc.MigConfigs[name], node)})
			}
		}
	}
	return cases
}

// mpDocument decodes a mig-parted file loosely, for mpApply.
type mpDocument struct {
	MigConfigs map[string][]mpEntry `json:"mig-configs"`
}

type mpEntry struct {
	DeviceFilter any            `json:"device-filter"`
	Devices      any            `json:"devices"`
	MigEnabled   bool           `json:"mig-enabled"`
	MigDevices   map[string]int `json:"mig-devices"`
}

// mpApply models what mig-parted's apply does with entries on gpus, as
// cmd/nvidia-mig-parted/apply/config.go and assert.go and
// api/spec/v1/helpers.go describe it: every entry in turn, every GPU its
// device-filter (ids parsed with strconv.ParseUint base 0, "" or none
// matching all) and devices ("all" or indices) match; a GPU without MIG is
// skipped under "all" or with MIG off; a layout is created profile by
// profile, which fails when the GPU has no such profile or cannot hold
// them (here: more of a profile than the GPU takes, or more memory slices
// than it has). It sets the GPUs it walked; any failure fails it.
//
// (It gives the answers the fixture files' configurations need; the
// placement of instances, which none of them gets wrong, is not modelled.)
func mpApply(entries []mpEntry, gpus []mig.GPU) mpOutcome {
	set := map[int]bool{}
	for _, e := range entries {
		for _, g := range gpus {
			if !mpFilterMatches(e.DeviceFilter, g) || !mpDevicesMatch(e.Devices, g.Index) {
				continue
			}
			if !g.MigCapable {
				if e.Devices == "all" || !e.MigEnabled {
					continue
				}
				return mpReject
			}
			set[g.Index] = true
			if !e.MigEnabled {
				continue
			}
			memory := 0
			for name, n := range e.MigDevices {
				if n == 0 {
					continue
				}
				p, ok := g.Profile(name)
				if !ok || n > p.MaxCount {
					return mpReject
				}
				memory += n * p.MemorySlices
			}
			if memory > totalSlices(g) {
				return mpReject
			}
		}
	}
	return mpCovers(slices.Sorted(maps.Keys(set))...)
}

func mpFilterMatches(filter any, g mig.GPU) bool {
	var ids []string
	switch f := filter.(type) {
	case nil:
	case string:
		if f != "" {
			ids = []string{f}
		}
	case []any:
		for _, x := range f {
			s, _ := x.(string)
			ids = append(ids, s)
		}
	}
	if len(ids) == 0 {
		return true
	}
	for _, id := range ids {
		parts := strings.Split(id, ":")
		if len(parts) > 2 {
			continue
		}
		primary, err := strconv.ParseUint(parts[0], 0, 32)
		if err != nil || uint32(primary) != g.PCIDeviceID {
			continue
		}
		if len(parts) == 2 {
			sub, err := strconv.ParseUint(parts[1], 0, 32)
			if err != nil || uint32(sub) != subsystemOf(g) {
				continue
			}
		}
		return true
	}
	return false
}

func mpDevicesMatch(devices any, index int) bool {
	switch d := devices.(type) {
	case string:
		return d == "all"
	case []any:
		for _, x := range d {
			if n, ok := x.(float64); ok && int(n) == index {
				return true
			}
		}
	}
	return false
}

// totalSlices is how many memory slices g has: where its profiles' last
// placement ends.
func totalSlices(g mig.GPU) int {
	n := 0
	for _, p := range g.Profiles {
		for _, start := range p.Placements {
			n = max(n, start+p.MemorySlices)
		}
	}
	return n
}

// probeCases are inputs no mig-parted test covers, with what its code does
// with them (issue 16 point 7 and the other points' edges), cited by file.
func probeCases() []mpCase {
	const src = "probes"
	h100s := gpus(8, h100)
	all := mpCovers(seq(0, 7)...)
	withT4 := []mig.GPU{gpu(0, h100), gpu(1, h100), gpu(2, t4)}
	return []mpCase{{
		// pkg/types/mig_config.go AssertValidFormat: counts >= 0, not all 0;
		// Flatten skips the zeros.
		source: src, name: "a zero count beside a positive one",
		doc: entryIn(`{devices: all, mig-enabled: true, mig-devices: {"1g.10gb": 0, "2g.20gb": 3}}`), node: h100s, want: all,
	}, {
		source: src, name: "every count zero",
		doc: entryIn(`{devices: all, mig-enabled: true, mig-devices: {"1g.10gb": 0}}`), node: h100s, want: mpReject,
	}, {
		// api/spec/v1/helpers.go MatchesDevices: no index matches.
		source: src, name: "devices: [] sets nothing",
		doc: entryIn(`{devices: [], mig-enabled: true, mig-devices: {"1g.10gb": 7}}`), node: h100s, want: mpCovers(),
	}, {
		source: src, name: "an index listed twice",
		doc: entryIn(`{devices: [0, 0], mig-enabled: true, mig-devices: {"1g.10gb": 7}}`), node: h100s, want: mpCovers(0),
	}, {
		// cmd/nvidia-mig-parted/assert WalkSelectedMigConfigForEachGPU
		// walks the node's GPUs; an index it lacks never comes up.
		source: src, name: "an index the node lacks",
		doc: entryIn(`{devices: [0, 9], mig-enabled: true, mig-devices: {"1g.10gb": 7}}`), node: h100s, want: mpCovers(0),
	}, {
		// apply/config.go: a GPU without MIG under "all" is skipped.
		source: src, name: "devices all skips a GPU without MIG",
		doc: entryIn(`{devices: all, mig-enabled: true, mig-devices: {"1g.10gb": 7}}`), node: withT4, want: mpCovers(0, 1),
	}, {
		source: src, name: "an index naming a GPU without MIG, for MIG",
		doc: entryIn(`{devices: [2], mig-enabled: true, mig-devices: {"1g.10gb": 7}}`), node: withT4, want: mpReject,
	}, {
		// go-nvlib parseMigProfile reads the numbers with strconv.Atoi.
		source: src, name: "1g.05gb is 1g.5gb",
		doc: entryIn(`{devices: all, mig-enabled: true, mig-devices: {"1g.05gb": 7}}`), node: gpus(8, a100x40), want: all,
	}, {
		// MigProfileInfo.String drops the compute part when C == G.
		source: src, name: "1c.1g.5gb is 1g.5gb",
		doc: entryIn(`{devices: all, mig-enabled: true, mig-devices: {"1c.1g.5gb": 7}}`), node: gpus(8, a100x40), want: all,
	}, {
		source: src, name: "a compute-instance profile",
		doc: entryIn(`{devices: all, mig-enabled: true, mig-devices: {"1c.7g.40gb": 7}}`), node: gpus(8, a100x40), want: all,
		why: whyComputeInstances,
	}, {
		// The other configuration of the file works on its own.
		source: src, name: "a configuration beside one with compute-instance profiles",
		doc: "version: v1\nmig-configs:\n  ci: [{devices: all, mig-enabled: true, mig-devices: {1c.7g.40gb: 7}}]\n" +
			"  gi: [{devices: all, mig-enabled: true, mig-devices: {7g.40gb: 1}}]\n",
		config: "gi", node: gpus(8, a100x40), want: all,
	}, {
		// spec.go: the whole file is one json.Unmarshal; the unknown
		// profile of the other configuration is a valid format.
		source: src, name: "a configuration beside one with an unknown profile",
		doc: "version: v1\nmig-configs:\n  odd: [{devices: all, mig-enabled: true, mig-devices: {0g.0gb: 100}}]\n" +
			"  gi: [{devices: all, mig-enabled: true, mig-devices: {7g.80gb: 1}}]\n",
		config: "gi", node: h100s, want: all,
	}, {
		source: src, name: "a configuration beside one with an unknown field",
		doc: "version: v1\nmig-configs:\n  odd: [{devices: all, mig-enabled: false, bogus: 1}]\n" +
			"  gi: [{devices: all, mig-enabled: true, mig-devices: {7g.80gb: 1}}]\n",
		config: "gi", node: h100s, want: mpReject, why: whyLenient,
	}, {
		// encoding/json keeps the last value of a key given twice.
		source: src, name: "a configuration name given twice",
		doc: "version: v1\nmig-configs:\n  c: [{devices: all, mig-enabled: false}]\n" +
			"  c: [{devices: all, mig-enabled: true, mig-devices: {7g.80gb: 1}}]\n",
		config: "c", node: h100s, want: all, why: whyTwice,
	}, {
		// assert.go WalkSelectedMigConfigForEachGPU applies each entry in
		// turn.
		source: src, name: "two entries for one GPU",
		doc: "version: v1\nmig-configs:\n  c:\n  - {devices: all, mig-enabled: true, mig-devices: {7g.80gb: 1}}\n" +
			"  - {devices: [0], mig-enabled: true, mig-devices: {1g.10gb: 7}}\n",
		node: h100s, want: all, why: whyTwoEntries,
	}, {
		// MigConfigSpec.UnmarshalJSON: device-filter must be a string or
		// []string, devices "all" or []int, mig-devices a map.
		source: src, name: "an unquoted hex device-filter",
		doc: entryIn(`{device-filter: 0x233010DE, devices: all, mig-enabled: true, mig-devices: {7g.80gb: 1}}`), node: h100s, want: mpReject,
		why: whyLenient,
	}, {
		source: src, name: "string indices",
		doc: entryIn(`{devices: ["0"], mig-enabled: true, mig-devices: {7g.80gb: 1}}`), node: h100s, want: mpReject, why: whyLenient,
	}, {
		source: src, name: "the list form",
		doc: entryIn(`{devices: all, mig-enabled: true, mig-devices: [7g.80gb]}`), node: h100s, want: mpReject, why: whyLenient,
	}}
}
