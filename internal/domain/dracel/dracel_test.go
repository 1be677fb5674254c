package dracel

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/migflex/migflex/internal/domain/dra"
)

// The driver and its attributes are the ones the agent publishes.
func TestDriverAttributesAreTheAgents(t *testing.T) {
	if Driver != dra.DriverName {
		t.Errorf("Driver %q, the agent's %q", Driver, dra.DriverName)
	}
	var published []string
	for _, d := range []resourceapi.Device{migDevice("3g.40gb"), wholeGPU()} {
		for name, a := range d.Attributes {
			if a.StringValue == nil {
				t.Errorf("attribute %s is not a string: the checks take every attribute for one", name)
			}
			if !slices.Contains(published, string(name)) {
				published = append(published, string(name))
			}
		}
	}
	slices.Sort(published)
	want := slices.Sorted(slices.Values(driverAttributes))
	if diff := cmp.Diff(want, published); diff != "" {
		t.Errorf("attributes (-checked,+published):\n%s", diff)
	}
}

func migDevice(profile string) resourceapi.Device {
	return dra.APIDevice(dra.Device{Name: "gpu-0-mig-" + profile, UUID: "MIG-1", MIG: true, Profile: profile, GPUUUID: "GPU-0",
		Model: "H100-SXM5-80GB", Start: 0, Size: 4, MemoryMB: 40960})
}

func wholeGPU() resourceapi.Device {
	return dra.APIDevice(dra.Device{Name: "gpu-1", UUID: "GPU-1", GPUIndex: 1, Minor: 1, Model: "H100-SXM5-80GB", MemoryMB: 81920})
}

func TestCheck(t *testing.T) {
	const attr = `device.attributes['gpu.migflex.io']`
	long := attr + `.profile == "` + strings.Repeat("x", MaxLength) + `"`
	tests := []struct {
		name, expr string
		want       []Finding
	}{
		{name: "a documented form", expr: attr + `.type == 'mig' && ` + attr + `.profile == '3g.40gb'`},
		{name: "a capacity", expr: `device.capacity['gpu.migflex.io'].memory.compareTo(quantity('40Gi')) >= 0`},
		{name: "another driver's attributes are not ours to know", expr: `device.attributes['gpu.nvidia.com'].profile == 3`},
		{
			name: "issue 35: a profile compared with an int", expr: attr + `.profile == 3`,
			want: []Finding{{Kind: NeverTrue, Expression: attr + `.profile == 3`,
				Detail: "profile == 3 is false on every device: profile is a string, 3 an int, and CEL finds values of two types unequal"}},
		},
		{
			name: "either side, the index form, a double", expr: `1.5 == ` + attr + `['type'] || true`,
			want: []Finding{{Kind: NeverTrue, Expression: `1.5 == ` + attr + `['type'] || true`,
				Detail: "type == 1.5 is false on every device: type is a string, 1.5 a double, and CEL finds values of two types unequal"}},
		},
		{
			name: "a string ordered against an int", expr: attr + `.profile > 3`,
			want: []Finding{{Kind: Fails, Expression: attr + `.profile > 3`,
				Detail: "profile > 3 fails on every device that has a profile: it orders a string against an int (no such overload)"}},
		},
		{
			name: "an attribute the driver does not publish", expr: attr + `.memory == '40Gi' && ` + attr + `.memory != ''`,
			want: []Finding{{Kind: Fails, Expression: attr + `.memory == '40Gi' && ` + attr + `.memory != ''`,
				Detail: `device.attributes["gpu.migflex.io"].memory fails on every device: gpu.migflex.io publishes no attribute memory (it has type, uuid, parentUUID, profile, productName; memory and engines are capacities)`}},
		},
		{name: "an attribute tested with has() first", expr: `has(` + attr + `.memory) && ` + attr + `.memory == '40Gi'`},
		{name: "an optional attribute", expr: attr + `.?memory.orValue('') == '40Gi'`},
		{
			name: "a compile error: a string compared with an int literal",
			expr: `device.driver == 3`,
			want: []Finding{{Kind: Compile, Expression: `device.driver == 3`, Detail: "1:15: found no matching overload for '_==_' applied to '(string, int)'"}},
		},
		{name: "a syntax error", expr: attr + `.profile ==`,
			want: []Finding{{Kind: Compile, Expression: attr + `.profile ==`,
				Detail: "1:47: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}"}}},
		{name: "not a bool", expr: `device.driver`,
			want: []Finding{{Kind: Compile, Expression: `device.driver`, Detail: "must evaluate to bool or the unknown type, not string"}}},
		{name: "longer than the API allows", expr: long,
			want: []Finding{{Kind: TooLong, Expression: Quote(long), Detail: "10289 bytes, more than the API's 10240: not read"}}},
	}
	c := NewChecker(4)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := c.Check(tt.expr)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Check(%s) (-want,+got):\n%s", Quote(tt.expr), diff)
			}
			// Asked again (kept): the same, whatever the caller did
			// with the first answer.
			for i := range got {
				got[i].Detail = "changed by the caller"
			}
			if diff := cmp.Diff(tt.want, c.Check(tt.expr)); diff != "" {
				t.Errorf("Check(%s) again (-want,+got):\n%s", Quote(tt.expr), diff)
			}
		})
	}
}

func TestFindingString(t *testing.T) {
	for f, want := range map[Finding]string{
		{Kind: Compile, Expression: "x ==", Detail: "1:5: Syntax error"}:                                "CEL compile error in `x ==`: 1:5: Syntax error",
		{Kind: NeverTrue, Expression: "p == 3", Detail: "profile == 3 is false on every device"}:        "`p == 3`: profile == 3 is false on every device",
		{Kind: Runtime, Expression: "p == 'a'", Device: "n1/gpu-1", Detail: "no such key: profile"}:     "CEL runtime error in `p == 'a'` on device n1/gpu-1: no such key: profile",
		{Kind: TooLong, Expression: "p...", Detail: "10300 bytes, more than the API's 10240: not read"}: "selector `p...`: 10300 bytes, more than the API's 10240: not read",
	} {
		if got := f.String(); got != want {
			t.Errorf("%+v: %q, want %q", f, got, want)
		}
	}
	if q := Quote(strings.Repeat("a ", 200)); len(q) != QuoteLength || !strings.HasSuffix(q, "...") {
		t.Errorf("Quote of 400 bytes: %d bytes %q", len(q), q)
	}
	if q := Quote("a  &&\n\tb"); q != "a && b" {
		t.Errorf("Quote keeps runs of white space: %q", q)
	}
}

// Match evaluates as the scheduler: the first false selector ends it, a
// runtime error on the device is named with the device.
func TestMatch(t *testing.T) {
	const attr = `device.attributes['gpu.migflex.io']`
	mig, whole := migDevice("3g.40gb"), wholeGPU()
	devs := map[string]Device{"mig": {Name: "n1/mig", Driver: Driver, Device: &mig}, "gpu": {Name: "n1/gpu-1", Driver: Driver, Device: &whole}}
	tests := []struct {
		name    string
		exprs   []string
		device  string
		match   bool
		finding *Finding
	}{
		{"no selector", nil, "gpu", true, nil},
		{"a profile", []string{attr + `.profile == '3g.40gb'`}, "mig", true, nil},
		{"a profile and a capacity", []string{attr + `.profile == '3g.40gb'`, `device.capacity['gpu.migflex.io'].memory.compareTo(quantity('40Gi')) >= 0`}, "mig", true, nil},
		{"issue 35's int", []string{attr + `.profile == 3`}, "mig", false, nil},
		{"a whole GPU has no profile", []string{attr + `.profile == '3g.40gb'`}, "gpu", false, &Finding{Kind: Runtime,
			Expression: attr + `.profile == '3g.40gb'`, Device: "n1/gpu-1",
			Detail: "no such key: profile. consider using CEL optional chaining (.? followed by orValue()) or guarding the check with has() for optional fields"}},
		{"the type tested first", []string{attr + `.type == 'mig' && ` + attr + `.profile == '3g.40gb'`}, "gpu", false, nil},
		{"a false selector ends it before one that fails", []string{attr + `.type == 'mig'`, attr + `.profile == '3g.40gb'`}, "gpu", false, nil},
		{"a compile error", []string{`device.driver == 3`}, "mig", false, &Finding{Kind: Compile, Expression: `device.driver == 3`,
			Detail: "1:15: found no matching overload for '_==_' applied to '(string, int)'"}},
	}
	c := NewChecker(2)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			match, f := c.Match(context.Background(), tt.exprs, devs[tt.device])
			if match != tt.match {
				t.Errorf("match %v, want %v", match, tt.match)
			}
			if diff := cmp.Diff(tt.finding, f); diff != "" {
				t.Errorf("finding (-want,+got):\n%s", diff)
			}
		})
	}
}
