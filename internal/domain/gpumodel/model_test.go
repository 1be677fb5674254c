package gpumodel_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/internal/domain/mig"
)

func TestBuiltinModels(t *testing.T) {
	// PCI ids and profile names from ../shared/mig-profiles.md.
	want := map[string]struct {
		pci      uint32
		arch     gpumodel.Architecture
		profiles []string // by query constant
	}{
		"A100-SXM4-40GB": {0x20B010DE, gpumodel.Ampere, []string{"1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb", "1g.5gb+me", "1g.10gb"}},
		"A100-SXM4-80GB": {0x20B210DE, gpumodel.Ampere, []string{"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.10gb+me", "1g.20gb"}},
		"H100-SXM5-80GB": {0x233010DE, gpumodel.Hopper, []string{"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.10gb+me", "1g.20gb"}},
		"H200-SXM-141GB": {0x233510DE, gpumodel.Hopper, []string{"1g.18gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb", "1g.18gb+me", "1g.35gb"}},
		// PCI ids from mig-parted's config-default.yaml device filters, names
		// from its configs and NVIDIA's MIG user guide (docs/MODELS.md).
		"A30-24GB":       {0x20B710DE, gpumodel.Ampere, []string{"1g.6gb", "2g.12gb", "4g.24gb", "1g.6gb+me", "2g.12gb+me"}},
		"A100-PCIE-40GB": {0x20F110DE, gpumodel.Ampere, []string{"1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb", "1g.5gb+me", "1g.10gb"}},
		"A100-PCIE-80GB": {0x20B510DE, gpumodel.Ampere, []string{"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.10gb+me", "1g.20gb"}},
		"H100-PCIE-80GB": {0x233110DE, gpumodel.Hopper, []string{"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.10gb+me", "1g.20gb"}},
		"H100-NVL-94GB":  {0x232110DE, gpumodel.Hopper, []string{"1g.12gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb", "1g.12gb+me", "1g.24gb"}},
		"H20-96GB":       {0x232910DE, gpumodel.Hopper, []string{"1g.12gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb", "1g.12gb+me", "1g.24gb"}},
		"H200-NVL-141GB": {0x233B10DE, gpumodel.Hopper, []string{"1g.18gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb", "1g.18gb+me", "1g.35gb"}},
		"B200-180GB":     {0x290110DE, gpumodel.Blackwell, []string{"1g.23gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb", "1g.23gb+me", "1g.45gb"}},
		"GB200-186GB":    {0x294110DE, gpumodel.Blackwell, []string{"1g.23gb", "2g.47gb", "3g.93gb", "4g.93gb", "7g.186gb", "1g.23gb+me", "1g.47gb"}},
		"RTX-PRO-6000-Server-96GB": {0x2BB510DE, gpumodel.Blackwell, []string{"1g.24gb", "2g.48gb", "4g.96gb", "1g.24gb+me", "1g.24gb+gfx", "2g.48gb+gfx", "4g.96gb+gfx",
			"1g.24gb-me", "2g.48gb-me", "1g.24gb+me.all", "2g.48gb+me.all"}},
	}
	models := gpumodel.Builtin()
	if len(models) != len(want) {
		t.Fatalf("got %d built-in models, want %d", len(models), len(want))
	}
	for _, m := range models {
		t.Run(m.Name, func(t *testing.T) {
			if err := m.Validate(); err != nil {
				t.Fatal(err)
			}
			w, ok := want[m.Name]
			if !ok {
				t.Fatalf("unexpected model %s", m.Name)
			}
			var names []string
			for _, p := range m.Profiles {
				names = append(names, p.Name)
			}
			if m.PCIDeviceID != w.pci || m.Architecture != w.arch {
				t.Errorf("pci %#x arch %s, want %#x %s", m.PCIDeviceID, m.Architecture, w.pci, w.arch)
			}
			if diff := cmp.Diff(w.profiles, names); diff != "" {
				t.Errorf("profiles ordered by query (-want +got):\n%s", diff)
			}
			if !slices.IsSortedFunc(m.Profiles, func(a, b gpumodel.Profile) int { return a.Query - b.Query }) {
				t.Error("profiles not ordered by query")
			}
		})
	}
	// A copy: callers cannot change the simulator's tables.
	models[0].Profiles[0].MaxCount = 99
	if gpumodel.Builtin()[0].Profiles[0].MaxCount == 99 {
		t.Error("Builtin returned shared tables")
	}
}

const customModels = `version: v1
models:
- name: H100-PCIE-70GB
  productName: Example 70 GB card
  pciDeviceID: "0x233110DE"
  memoryMiB: 71680
  sms: 114
  architecture: Hopper
  profiles:
  - {name: 1g.9gb, slices: 1, memorySlices: 1, memoryMiB: 8960, sms: 14, maxCount: 7, placements: [0, 1, 2, 3, 4, 5, 6]}
  - {name: 3g.30gb, slices: 3, memorySlices: 4, memoryMiB: 30720, sms: 42, maxCount: 2, placements: [0, 4]}
  - {name: 1g.9gb+me, query: 1_SLICE_REV1, slices: 1, memorySlices: 1, memoryMiB: 8960, sms: 14, maxCount: 1, placements: [0, 1, 2, 3, 4, 5, 6]}
  - {name: 7g.70gb, id: 42, query: GPU_INSTANCE_PROFILE_7_SLICE, slices: 7, memorySlices: 8, memoryMiB: 70000, sms: 98, maxCount: 1, placements: [0]}
`

func TestParseModels(t *testing.T) {
	models, err := gpumodel.Parse([]byte(customModels))
	if err != nil {
		t.Fatal(err)
	}
	want := []gpumodel.Model{{
		Name:         "H100-PCIE-70GB",
		ProductName:  "Example 70 GB card",
		PCIDeviceID:  0x233110DE,
		MemoryMiB:    71680,
		SMs:          114,
		Architecture: gpumodel.Hopper,
		// The 8 memory and 7 compute slices of A100 and H100 by default.
		MemorySlices:  8,
		ComputeSlices: 7,
		Profiles: []gpumodel.Profile{ // ordered by query; ids defaulted from it
			{Name: "1g.9gb", ID: 19, Query: mig.GIProfile1Slice, Slices: 1, MemorySlices: 1, MemoryMiB: 8960, SMs: 14, MaxCount: 7, Placements: []int{0, 1, 2, 3, 4, 5, 6}},
			{Name: "3g.30gb", ID: 9, Query: mig.GIProfile3Slice, Slices: 3, MemorySlices: 4, MemoryMiB: 30720, SMs: 42, MaxCount: 2, Placements: []int{0, 4}},
			{Name: "7g.70gb", ID: 42, Query: mig.GIProfile7Slice, Slices: 7, MemorySlices: 8, MemoryMiB: 70000, SMs: 98, MaxCount: 1, Placements: []int{0}},
			{Name: "1g.9gb+me", ID: 20, Query: mig.GIProfile1SliceRev1, Slices: 1, MemorySlices: 1, MemoryMiB: 8960, SMs: 14, MaxCount: 1, Placements: []int{0, 1, 2, 3, 4, 5, 6}},
		},
	}}
	if diff := cmp.Diff(want, models); diff != "" {
		t.Errorf("Parse() (-want +got):\n%s", diff)
	}
}

func TestParseModelsErrors(t *testing.T) {
	const header = "version: v1\nmodels:\n- name: X\n  pciDeviceID: 0x233110DE\n  memoryMiB: 40960\n  sms: 100\n  architecture: ampere\n  profiles:\n"
	const okProfile = "  - {name: 1g.5gb, slices: 1, memorySlices: 1, memoryMiB: 4864, sms: 14, maxCount: 7, placements: [0, 1, 2, 3, 4, 5, 6]}\n"
	tests := []struct {
		name string
		yaml string
		want []string // substrings of the error
	}{
		{"unknown top-level field", "version: v1\nmodel: []\n", []string{`unknown field "model"`}},
		{"unknown profile field", header + "  - {name: a, slice: 1}\n", []string{`unknown field "slice"`}},
		{"missing version", "models: []\n", []string{`version: got "", want "v1"`}},
		{"wrong version", "version: v2\nmodels: []\n", []string{`want "v1"`}},
		{"no models", "version: v1\nmodels: []\n", []string{"at least one model"}},
		{"placement past the end", header + "  - {name: 2g, slices: 2, memorySlices: 2, memoryMiB: 9000, sms: 28, maxCount: 1, placements: [7]}\n",
			[]string{"start 7 with size 2 does not fit in 8 memory slices"}},
		{"negative placement", header + "  - {name: 1g, slices: 1, memorySlices: 1, memoryMiB: 4000, sms: 14, maxCount: 1, placements: [-1]}\n",
			[]string{"start -1"}},
		{"duplicate placement", header + "  - {name: 1g, slices: 1, memorySlices: 1, memoryMiB: 4000, sms: 14, maxCount: 1, placements: [0, 0]}\n",
			[]string{"start 0 listed twice"}},
		{"no placements", header + "  - {name: 1g, slices: 1, memorySlices: 1, memoryMiB: 4000, sms: 14, maxCount: 1}\n",
			[]string{"placements: at least one start", "maxCount: 1 is not in 1..0"}},
		{"max count above placements", header + "  - {name: 3g, slices: 3, memorySlices: 4, memoryMiB: 19000, sms: 42, maxCount: 3, placements: [0, 4]}\n",
			[]string{"maxCount: 3 is not in 1..2"}},
		{"zero counts", header + "  - {name: 3g, slices: 3, memorySlices: 4, memoryMiB: 0, sms: 0, maxCount: 0, placements: [0]}\n",
			[]string{"memoryMiB: 0", "sms: 0", "maxCount: 0"}},
		{"no compute instance profile for 5 slices", header + "  - {name: 5g, query: 3_SLICE, id: 1, slices: 5, memorySlices: 4, memoryMiB: 19000, sms: 70, maxCount: 1, placements: [0]}\n",
			[]string{"slices: 5 is not one of 1, 2, 3, 4, 6, 7"}},
		{"memory above the GPU's", header + "  - {name: 7g, slices: 7, memorySlices: 8, memoryMiB: 50000, sms: 98, maxCount: 1, placements: [0]}\n",
			[]string{"memoryMiB: 50000 is not in 1..40960"}},
		{"duplicate name", header + okProfile + "  - {name: 1g.5gb, query: 1_SLICE_REV1, slices: 1, memorySlices: 1, memoryMiB: 4864, sms: 14, maxCount: 1, placements: [0]}\n",
			[]string{`profile "1g.5gb": name used twice`}},
		{"duplicate query", header + okProfile + "  - {name: 1g.5gb-other, id: 30, slices: 1, memorySlices: 1, memoryMiB: 4864, sms: 14, maxCount: 1, placements: [0]}\n",
			[]string{"query 1_SLICE already used"}},
		{"duplicate id", header + okProfile + "  - {name: 2g, id: 19, slices: 2, memorySlices: 2, memoryMiB: 9000, sms: 28, maxCount: 1, placements: [0]}\n",
			[]string{"id 19 already used"}},
		{"unknown query", header + "  - {name: 1g, query: 9_SLICE, slices: 1, memorySlices: 1, memoryMiB: 4000, sms: 14, maxCount: 1, placements: [0]}\n",
			[]string{`unknown GPU instance profile query "9_SLICE"`}},
		{"query without default id", header + "  - {name: 1g, query: 1_SLICE_GFX, slices: 1, memorySlices: 1, memoryMiB: 4000, sms: 14, maxCount: 1, placements: [0]}\n",
			[]string{"id: no default for query 1_SLICE_GFX, set it"}},
		{"bad architecture", strings.Replace(header, "ampere", "volta", 1) + okProfile, []string{`architecture: "volta" is not one of`}},
		{"bad name", strings.Replace(header, "name: X", "name: 'A:B'", 1) + okProfile, []string{"must not contain ':'"}},
		{"bad pci id", strings.Replace(header, "0x233110DE", `"0xZZ"`, 1) + okProfile, []string{`"0xZZ"`}},
		{"no pci id", strings.Replace(header, "  pciDeviceID: 0x233110DE\n", "", 1) + okProfile, []string{"pciDeviceID: must be set"}},
		{"no profiles", header, []string{"at least one profile"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := gpumodel.Parse([]byte(tc.yaml))
			if err == nil {
				t.Fatal("Parse() succeeded, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}
