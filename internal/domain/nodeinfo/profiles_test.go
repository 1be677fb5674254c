package nodeinfo

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/migflex/migflex/internal/domain/mig"
)

func TestEncodeProfiles(t *testing.T) {
	h := func(i int) mig.GPU {
		g := h100(i, true)
		g.Profiles = []mig.Profile{{Name: "1g.10gb", Slices: 1, MemorySlices: 1, MaxCount: 7, Placements: []int{0, 1, 2, 3, 4, 5, 6}}}
		return g
	}
	a100 := mig.GPU{Index: 2, Model: "A100-SXM4-40GB", MigCapable: true, Profiles: []mig.Profile{{Name: "7g.40gb", Slices: 7, MemorySlices: 8, MaxCount: 1, Placements: []int{0}}}}
	t4 := mig.GPU{Index: 3, Model: "Tesla T4"}
	tests := []struct {
		name string
		gpus []mig.GPU
		want []Model
	}{
		{name: "no MIG-capable GPU: no annotation", gpus: []mig.GPU{t4}},
		{
			name: "each model once, by name",
			gpus: []mig.GPU{h(0), h(1), t4, a100},
			want: []Model{NewModel("A100-SXM4-40GB", a100.Profiles), NewModel("NVIDIA H100 80GB HBM3", h(0).Profiles)},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := EncodeProfiles(tc.gpus)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == nil {
				if got != "" {
					t.Fatalf("annotation %q, want none", got)
				}
				return
			}
			decoded, err := ParseProfiles(got)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, decoded); diff != "" {
				t.Errorf("profiles (-want +got):\n%s", diff)
			}
		})
	}
}

// The profiles annotation's wire form is pinned: agents and planners of
// other releases read it, memory in MiB under the key "memoryMB".
func TestProfilesWireForm(t *testing.T) {
	p := mig.Profile{Name: "1g.10gb+me", ID: 20, Query: 7, Slices: 1, MemorySlices: 1, MemoryMiB: 9856, SMs: 16, MaxCount: 1,
		Placements: []int{0, 1}, Engines: mig.Engines{CopyEngines: 1, Decoders: 1, JPEGs: 1, OFAs: 1}}
	g := h100(0, true)
	g.Profiles = []mig.Profile{p, {Name: "7g.80gb", Slices: 7, MemorySlices: 8, MemoryMiB: 80000, MaxCount: 1, Placements: []int{0}}}
	got, err := EncodeProfiles([]mig.GPU{g})
	if err != nil {
		t.Fatal(err)
	}
	const want = `[{"model":"NVIDIA H100 80GB HBM3","profiles":[` +
		`{"name":"1g.10gb+me","id":20,"query":7,"slices":1,"memorySlices":1,"memoryMB":9856,"sms":16,"maxCount":1,"placements":[0,1],"engines":{"copyEngines":1,"decoders":1,"jpegs":1,"ofas":1}},` +
		`{"name":"7g.80gb","id":0,"query":0,"slices":7,"memorySlices":8,"memoryMB":80000,"sms":0,"maxCount":1,"placements":[0]}]}]`
	if got != want {
		t.Errorf("EncodeProfiles() =\n%s\nwant\n%s", got, want)
	}
}

// The domain table survives the wire unchanged.
func TestProfilesRoundTrip(t *testing.T) {
	g := h100(0, true)
	g.Profiles = []mig.Profile{
		{Name: "1g.10gb", ID: 19, Query: 0, Slices: 1, MemorySlices: 1, MemoryMiB: 9856, SMs: 16, MaxCount: 7, Placements: []int{0, 1, 2, 3, 4, 5, 6}, Engines: mig.Engines{CopyEngines: 1}},
		{Name: "3g.40gb", ID: 9, Query: 2, Slices: 3, MemorySlices: 4, MemoryMiB: 40192, SMs: 60, MaxCount: 2, Placements: []int{0, 4}, Engines: mig.Engines{CopyEngines: 3, Decoders: 2, JPEGs: 0}},
	}
	s, err := EncodeProfiles([]mig.GPU{g})
	if err != nil {
		t.Fatal(err)
	}
	models, err := ParseProfiles(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(models) != 1 || models[0].Name != g.Model {
		t.Fatalf("decoded %+v", models)
	}
	if diff := cmp.Diff(g.Profiles, models[0].MIGProfiles()); diff != "" {
		t.Errorf("MIGProfiles(ParseProfiles(EncodeProfiles())) (-want +got):\n%s", diff)
	}
}

func TestParseProfilesHostile(t *testing.T) {
	// Many models with many placements, up to the API server's 256 KiB
	// of annotations, decode whole.
	model := func(i int) Model {
		return Model{Name: fmt.Sprintf("model-%08d", i), Profiles: []Profile{{Name: "1g.10gb", Slices: 1, MemorySlices: 1, MaxCount: 7, Placements: []int{0, 1, 2, 3, 4, 5, 6}}}}
	}
	one, _ := json.Marshal(model(0))
	models := make([]Model, (256<<10)/(len(one)+1))
	for i := range models {
		models[i] = model(i)
	}
	b, _ := json.Marshal(models)
	got, err := ParseProfiles(string(b))
	if err != nil || len(got) != len(models) {
		t.Fatalf("a %d-byte table of %d models: decoded %d, error %v", len(b), len(models), len(got), err)
	}

	for _, tc := range []struct{ name, value, says string }{
		{"empty", "", AnnotationProfiles},
		{"not JSON", "H100: 1g.10gb", AnnotationProfiles},
		{"a model without a name", `[{"model":"A100","profiles":[]},{"profiles":[]}]`, "model 1 has no name"},
		{"memory past uint64", `[{"model":"x","profiles":[{"memoryMB":1e30}]}]`, AnnotationProfiles},
		{"negative memory", `[{"model":"x","profiles":[{"memoryMB":-1}]}]`, AnnotationProfiles},
		{"placements not numbers", `[{"model":"x","profiles":[{"placements":["0"]}]}]`, AnnotationProfiles},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseProfiles(tc.value)
			if err == nil || got != nil {
				t.Fatalf("ParseProfiles() = %v, %v; want nothing and an error", got, err)
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("error %q does not say %q", err, tc.says)
			}
		})
	}
}
