package subcmd

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestRunModels(t *testing.T) {
	dir := t.TempDir()
	custom := filepath.Join(dir, "models.yaml")
	os.WriteFile(custom, []byte(`version: v1
models:
- name: H100-PCIE-70GB
  pciDeviceID: 0x233110DE
  memoryMiB: 71680
  sms: 114
  architecture: hopper
  profiles:
  - {name: 3g.30gb, slices: 3, memorySlices: 4, memoryMiB: 30720, sms: 42, maxCount: 2, placements: [0, 4]}
`), 0o644)
	clash := filepath.Join(dir, "clash.yaml")
	os.WriteFile(clash, []byte(strings.Replace(mustRead(t, custom), "H100-PCIE-70GB", "A100-SXM4-40GB", 1)), 0o644)
	twice := filepath.Join(dir, "twice.yaml")
	os.WriteFile(twice, []byte(mustRead(t, custom)+strings.SplitN(mustRead(t, custom), "models:\n", 2)[1]), 0o644)
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("version: v1\nmodels:\n- name: X\n  colour: red\n"), 0o644)

	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantOut    []string
		notOut     []string
		wantStderr string
	}{
		{
			name: "built-in",
			wantOut: []string{
				"A100-SXM4-40GB (built-in)\n  product NVIDIA A100-SXM4-40GB\n  PCI device id 0x20B010DE, 40960 MiB, 108 SMs, ampere: MIG mode changes need a GPU reset\n  8 memory slices, 7 compute slices\n",
				"H100-SXM5-80GB (built-in)", "H200-SXM-141GB (built-in)", "A100-SXM4-80GB (built-in)",
				"hopper: MIG mode changes at once",
				"  1g.5gb     19  1_SLICE       1       1              4864        14   7    {0,1,2,3,4,5,6}:1  1/0/0/0/0\n",
				"  1g.10gb    15  1_SLICE_REV2  1       2              9856        14   4    {0,2,4,6}:2        1/1/0/0/0\n",
				"  7g.141gb",
				"RTX-PRO-6000-Server-96GB (built-in)", "  12 memory slices, 4 compute slices\n",
				"  1g.24gb+me.all  65  1_SLICE_ALL_ME  1       3              24192       46   1    {0,3,6,9}:3  1/4/4/4/1\n",
			},
			notOut: []string{"custom"},
		},
		{
			name:    "custom file",
			args:    []string{"--models-file", custom},
			wantOut: []string{"H100-PCIE-70GB (custom)\n  PCI device id 0x233110DE, 71680 MiB, 114 SMs, hopper", "  3g.30gb  9   3_SLICE  3       4              30720       42   2    {0,4}:4     0/0/0/0/0\n"},
		},
		{name: "bad file", args: []string{"--models-file", bad}, wantCode: 2, wantStderr: `unknown field "colour"`},
		{
			name:    "custom replaces a built-in",
			args:    []string{"--models-file", clash},
			wantOut: []string{"A100-SXM4-40GB (custom, replaces the built-in model)\n  PCI device id 0x233110DE"},
			notOut:  []string{"A100-SXM4-40GB (built-in)"},
		},
		{name: "two custom models of one name", args: []string{"--models-file", twice}, wantCode: 2, wantStderr: `model "H100-PCIE-70GB": name used by two custom models`},
		{name: "missing file", args: []string{"--models-file", filepath.Join(dir, "nope")}, wantCode: 2, wantStderr: "reading models file"},
		{name: "extra argument", args: []string{"A100"}, wantCode: 2, wantStderr: "unexpected arguments"},
		{name: "unknown flag", args: []string{"--gpus", "x"}, wantCode: 2, wantStderr: "flag provided but not defined"},
		{name: "help", args: []string{"-h"}, wantCode: 0, wantStderr: "usage: device-plugin models"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			if code := Models(tc.args, &stdout, &stderr); code != tc.wantCode {
				t.Fatalf("Models() = %d, want %d; stderr:\n%s", code, tc.wantCode, stderr.String())
			}
			// Column widths are the tabwriter's business: compare with runs
			// of spaces squashed.
			for _, w := range tc.wantOut {
				if !strings.Contains(squashSpaces(stdout.String()), squashSpaces(w)) {
					t.Errorf("stdout lacks %q; got:\n%s", w, stdout.String())
				}
			}
			for _, w := range tc.notOut {
				if strings.Contains(stdout.String(), w) {
					t.Errorf("stdout has %q", w)
				}
			}
			if !strings.Contains(stderr.String(), tc.wantStderr) {
				t.Errorf("stderr lacks %q; got:\n%s", tc.wantStderr, stderr.String())
			}
		})
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

var spaces = regexp.MustCompile(` +`)

func squashSpaces(s string) string { return spaces.ReplaceAllString(s, " ") }
