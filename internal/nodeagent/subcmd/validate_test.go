package subcmd

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/migflex/migflex/internal/domain/migconfig"
)

// annotation is the kind of mig.config users put in a Node annotation.
const annotation = `version: v1
mig-configs:
  selected:
  - devices: [0, 1]
    mig-enabled: true
    mig-devices:
    - 2g.20gb
    - 2g.20gb
    - 3g.40gb
  - devices: [3]
    mig-enabled: false
`

const twoConfigs = `version: v1
mig-configs:
  small:
  - {devices: all, mig-enabled: true, mig-devices: {"1g.10gb": 7}}
  too-big:
  - {devices: all, mig-enabled: true, mig-devices: {"3g.40gb": 3}}
  pinned:
  - devices: [0]
    mig-enabled: true
    mig-devices: [{name: 3g.40gb, position: 4, size: 4}, 4g.40gb]
`

func TestRunValidate(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	annotationFile := write("annotation.yaml", annotation)
	twoFile := write("two.yaml", twoConfigs)
	// A config named "selected" among others is one of them: each is
	// checked, the broken one too.
	withSelected := write("with-selected.yaml", twoConfigs+`  selected:
  - {devices: all, mig-enabled: true, mig-devices: {"2g.20gb": 3}}
`)
	fixture := filepath.Join("..", "..", "..", "internal", "domain", "migconfig", "testdata", "mig-parted", "examples-config.yaml")
	bigFile := write("big.yaml", annotation+"# "+strings.Repeat("x", 256<<10)+"\n")
	stationFixture := filepath.Join("..", "..", "..", "internal", "domain", "migconfig", "testdata", "mig-parted", "examples-dgx-station-80gb-config.yaml")
	brokenSelected := write("broken-selected.yaml", twoConfigs+`  selected:
  - {devices: all, mig-enabled: true, mig-device: {}}
`)

	tests := map[string]struct {
		args       []string
		stdin      string
		wantCode   int
		wantOut    string
		wantErrSub string // a part of stderr; empty means stderr must be empty
	}{
		"selected config on a mixed node": {
			args:     []string{"-f", annotationFile, "--gpus", "H100-SXM5-80GB:4,A100-SXM4-40GB:1"},
			wantCode: 0,
			wantOut: `config "selected" on 4 x H100-SXM5-80GB, 1 x A100-SXM4-40GB (simulated): ok

GPU  MODEL           MIG  PROFILE  PLACEMENT
0    H100-SXM5-80GB  on   2g.20gb  0:2
0    H100-SXM5-80GB  on   2g.20gb  2:2
0    H100-SXM5-80GB  on   3g.40gb  4:4
1    H100-SXM5-80GB  on   2g.20gb  0:2
1    H100-SXM5-80GB  on   2g.20gb  2:2
1    H100-SXM5-80GB  on   3g.40gb  4:4
2    H100-SXM5-80GB  off  -        not in the config, left as it is
3    H100-SXM5-80GB  off  -        -
4    A100-SXM4-40GB  off  -        not in the config, left as it is

GPU 0 (H100-SXM5-80GB): enable MIG; create 2g.20gb@0:2, 2g.20gb@2:2, 3g.40gb@4:4
GPU 1 (H100-SXM5-80GB): enable MIG; create 2g.20gb@0:2, 2g.20gb@2:2, 3g.40gb@4:4
GPU 3 (H100-SXM5-80GB): unchanged, MIG disabled
`,
		},
		"stdin": {
			args:     []string{"-f", "-", "--gpus", "H100-SXM5-80GB"},
			stdin:    "version: v1\nmig-configs:\n  only:\n  - {devices: all, mig-enabled: true, mig-devices: {}}\n",
			wantCode: 0,
			wantOut: `config "only" on 1 x H100-SXM5-80GB (simulated): ok

GPU  MODEL           MIG  PROFILE  PLACEMENT
0    H100-SXM5-80GB  on   -        no instances

GPU 0 (H100-SXM5-80GB): enable MIG
`,
		},
		"config name, pinned placement and the search": {
			args:     []string{"-f", twoFile, "--gpus", "H100-SXM5-80GB:2", "--config-name", "pinned"},
			wantCode: 0,
			wantOut: `config "pinned" on 2 x H100-SXM5-80GB (simulated): ok

GPU  MODEL           MIG  PROFILE  PLACEMENT
0    H100-SXM5-80GB  on   4g.40gb  0:4
0    H100-SXM5-80GB  on   3g.40gb  4:4
1    H100-SXM5-80GB  off  -        not in the config, left as it is

GPU 0 (H100-SXM5-80GB): enable MIG; create 4g.40gb@0:4, 3g.40gb@4:4
`,
		},
		"every config, one line each": {
			args:     []string{"-f", twoFile, "--gpus", "H100-SXM5-80GB:2"},
			wantCode: 3,
			wantOut: `3 configs on 2 x H100-SXM5-80GB (simulated):
pinned: ok
small: ok
too-big: GPU 0 (H100-SXM5-80GB): 3g.40gb x3 needs 12 of 8 memory slices; GPU 1 (H100-SXM5-80GB): 3g.40gb x3 needs 12 of 8 memory slices
1 of 3 configs invalid: too-big
`,
		},
		"every config, selected among them": {
			args:     []string{"-f", withSelected, "--gpus", "H100-SXM5-80GB:2"},
			wantCode: 3,
			wantOut: `4 configs on 2 x H100-SXM5-80GB (simulated):
pinned: ok
selected: ok
small: ok
too-big: GPU 0 (H100-SXM5-80GB): 3g.40gb x3 needs 12 of 8 memory slices; GPU 1 (H100-SXM5-80GB): 3g.40gb x3 needs 12 of 8 memory slices
1 of 4 configs invalid: too-big
`,
		},
		"linting, the selected config invalid": {
			args:     []string{"-f", brokenSelected, "--gpus", "H100-SXM5-80GB:2"},
			wantCode: 1,
			wantOut: `4 configs on 2 x H100-SXM5-80GB (simulated):
pinned: ok
selected: mig-configs.selected[0]: unknown field "mig-device" (known: devices, device-filter, mig-enabled, mig-devices); mig-configs.selected[0]: missing required field "mig-devices" when mig-enabled is true (use mig-devices: {} for MIG without instances)
small: ok
too-big: GPU 0 (H100-SXM5-80GB): 3g.40gb x3 needs 12 of 8 memory slices; GPU 1 (H100-SXM5-80GB): 3g.40gb x3 needs 12 of 8 memory slices
2 of 4 configs invalid: selected, too-big
`,
		},
		"a broken configuration fails alone": {
			args:     []string{"-f", brokenSelected, "--gpus", "H100-SXM5-80GB:1", "--config-name", "small"},
			wantCode: 0,
			wantOut: `config "small" on 1 x H100-SXM5-80GB (simulated): ok

GPU  MODEL           MIG  PROFILE  PLACEMENT
0    H100-SXM5-80GB  on   1g.10gb  0:1
0    H100-SXM5-80GB  on   1g.10gb  1:1
0    H100-SXM5-80GB  on   1g.10gb  2:1
0    H100-SXM5-80GB  on   1g.10gb  3:1
0    H100-SXM5-80GB  on   1g.10gb  4:1
0    H100-SXM5-80GB  on   1g.10gb  5:1
0    H100-SXM5-80GB  on   1g.10gb  6:1

GPU 0 (H100-SXM5-80GB): enable MIG; create 1g.10gb@0:1, 1g.10gb@1:1, 1g.10gb@2:1, 1g.10gb@3:1, 1g.10gb@4:1, 1g.10gb@5:1, 1g.10gb@6:1
`,
		},
		"a config file for other GPUs, as the GPU operator's label reads it": {
			args:     []string{"-f", stationFixture, "--gpus", "H100-SXM5-80GB:2", "--source", "file", "--config-name", "all-1g.10gb-dgx-station-80"},
			wantCode: 0,
			wantOut: `config "all-1g.10gb-dgx-station-80" on 2 x H100-SXM5-80GB (simulated): ok
  note: mig-configs.all-1g.10gb-dgx-station-80[0]: its device-filter ("0x20B210DE") matches no GPU on this node (H100-SXM5-80GB is 0x233010DE:0x16C110DE)
  note: mig-configs.all-1g.10gb-dgx-station-80[1]: its device-filter ("0x1FB010DE") matches no GPU on this node (H100-SXM5-80GB is 0x233010DE:0x16C110DE)
  note: mig-configs.all-1g.10gb-dgx-station-80: no entry applies to this node's GPUs (H100-SXM5-80GB is 0x233010DE:0x16C110DE); they are left as they are

GPU  MODEL           MIG  PROFILE  PLACEMENT
0    H100-SXM5-80GB  off  -        not in the config, left as it is
1    H100-SXM5-80GB  off  -        not in the config, left as it is

`,
		},
		"the same as an annotation": {
			args:     []string{"-f", stationFixture, "--gpus", "H100-SXM5-80GB:2", "--config-name", "all-1g.10gb-dgx-station-80"},
			wantCode: 1,
			wantOut: `config "all-1g.10gb-dgx-station-80" on 2 x H100-SXM5-80GB (simulated): invalid:
  mig-configs.all-1g.10gb-dgx-station-80: no entry applies to this node's GPUs (H100-SXM5-80GB is 0x233010DE:0x16C110DE)
`,
		},
		"bad --source": {args: []string{"-f", annotationFile, "--source", "label"}, wantCode: 2, wantErrSub: `validate: --source must be annotation or file, got "label"`},
		"every config of an upstream file": {
			args:     []string{"-f", fixture, "--gpus", "H100-SXM5-80GB:8"},
			wantCode: 3,
			wantOut: `9 configs on 8 x H100-SXM5-80GB (simulated):
all-1g.10gb: ok
all-1g.5gb: ` + eachGPU(8, "unknown profile 1g.5gb (supported: 1g.10gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb, 1g.10gb+me, 1g.20gb)") + `
all-1g.5gb.me: ` + eachGPU(8, "unknown profile 1g.5gb+me (supported: 1g.10gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb, 1g.10gb+me, 1g.20gb)") + `
all-2g.10gb: ` + eachGPU(8, "unknown profile 2g.10gb (supported: 1g.10gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb, 1g.10gb+me, 1g.20gb)") + `
all-3g.20gb: ` + eachGPU(8, "unknown profile 3g.20gb (supported: 1g.10gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb, 1g.10gb+me, 1g.20gb)") + `
all-balanced: ` + eachGPU(8, "unknown profile 1g.5gb (supported: 1g.10gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb, 1g.10gb+me, 1g.20gb)",
				"unknown profile 2g.10gb (supported: 1g.10gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb, 1g.10gb+me, 1g.20gb)",
				"unknown profile 3g.20gb (supported: 1g.10gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb, 1g.10gb+me, 1g.20gb)") + `
all-disabled: ok
all-enabled: ok
custom-config: ` + strings.Join([]string{
				eachGPUFrom(4, 1, "unknown profile 1g.5gb (supported: 1g.10gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb, 1g.10gb+me, 1g.20gb)"),
				eachGPUFrom(5, 1, "unknown profile 2g.10gb (supported: 1g.10gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb, 1g.10gb+me, 1g.20gb)"),
				eachGPUFrom(6, 1, "unknown profile 3g.20gb (supported: 1g.10gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb, 1g.10gb+me, 1g.20gb)"),
				eachGPUFrom(7, 1, "unknown profile 1g.5gb (supported: 1g.10gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb, 1g.10gb+me, 1g.20gb)",
					"unknown profile 2g.10gb (supported: 1g.10gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb, 1g.10gb+me, 1g.20gb)",
					"unknown profile 3g.20gb (supported: 1g.10gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb, 1g.10gb+me, 1g.20gb)"),
			}, "; ") + "\n6 of 9 configs invalid: all-1g.5gb, all-1g.5gb.me, all-2g.10gb, all-3g.20gb, all-balanced, custom-config\n",
		},
		"invalid: every error, exit 1": {
			args:     []string{"-f", "-", "--gpus", "H100-SXM5-80GB:2"},
			stdin:    "version: v1\nmig-configs:\n  selected:\n  - {devices: [0], mig-enabled: true, mig-devices: [3g.40gb, 3g.40gb, 3g.40gb]}\n  - {devices: [1, 5], mig-enabled: true, mig-devices: [1g.5gb]}\n",
			wantCode: 1,
			wantOut: `config "selected" on 2 x H100-SXM5-80GB (simulated): invalid:
  mig-configs.selected[1]: GPU 5 does not exist (node has GPUs 0, 1)
  GPU 0 (H100-SXM5-80GB): 3g.40gb x3 needs 12 of 8 memory slices
  GPU 1 (H100-SXM5-80GB): unknown profile 1g.5gb (supported: 1g.10gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb, 1g.10gb+me, 1g.20gb)
`,
		},
		"parse errors": {
			args:     []string{"-f", "-"},
			stdin:    "version: v2\nmig-configs:\n  selected:\n  - {devices: all, mig-enabled: true, mig-device: {}}\n",
			wantCode: 1,
			wantOut: `standard input: invalid:
  version: unsupported version "v2" (want "v1")
`,
		},
		"the issue 14 document, bounded": {
			// One placement anchored and aliased 1,500 times: 1,125,751
			// lines before the limits.
			args:     []string{"-f", "-", "--gpus", "H100-SXM5-80GB:2"},
			stdin:    "version: v1\nmig-configs:\n  selected:\n  - devices: [0]\n    mig-enabled: true\n    mig-devices: [&p {name: 1g.10gb, position: 0, size: 1}," + strings.Repeat("*p,", 1499) + "*p]",
			wantCode: 1,
			wantOut:  "config \"selected\" on 2 x H100-SXM5-80GB (simulated): invalid:\n  GPU 0 (H100-SXM5-80GB): 1g.10gb@0:1 overlaps 1g.10gb@0:1 (1500 times)\n",
		},
		"the issue 14 document, twice as many aliases": {
			args:     []string{"-f", "-", "--gpus", "H100-SXM5-80GB:2"},
			stdin:    "version: v1\nmig-configs:\n  selected:\n  - devices: [0]\n    mig-enabled: true\n    mig-devices: [&p {name: 1g.10gb, position: 0, size: 1}," + strings.Repeat("*p,", 2999) + "*p]",
			wantCode: 1,
			wantOut:  "standard input: invalid:\n  the document has more than 16384 YAML values, counting what its aliases stand for, the limit (migconfig.MaxValues); the limits are in internal/domain/migconfig/limits.go, see docs/INSTALL.md#the-migconfig-document\n",
		},
		"a file past the size limit": {
			args:     []string{"-f", bigFile},
			wantCode: 1,
			wantOut:  bigFile + ": invalid:\n  reading " + bigFile + ": the document is more than 262144 bytes, the limit (migconfig.MaxDocumentBytes); the limits are in internal/domain/migconfig/limits.go, see docs/INSTALL.md#the-migconfig-document\n",
		},
		"unknown config name": {
			args:     []string{"-f", twoFile, "--config-name", "medium"},
			wantCode: 1,
			wantOut:  twoFile + `: mig-config "medium" not found (have: pinned, small, too-big)` + "\n",
		},
		"missing -f":        {args: []string{"--gpus", "H100-SXM5-80GB"}, wantCode: 2, wantErrSub: "validate: -f FILE is required (- reads standard input)\nusage: device-plugin validate"},
		"unknown flag":      {args: []string{"-f", annotationFile, "--gpu", "x"}, wantCode: 2, wantErrSub: "flag provided but not defined: -gpu"},
		"stray argument":    {args: []string{"-f", annotationFile, "extra"}, wantCode: 2, wantErrSub: `validate: unexpected arguments ["extra"]`},
		"file not found":    {args: []string{"-f", filepath.Join(dir, "nope.yaml")}, wantCode: 2, wantErrSub: "nope.yaml: no such file or directory"},
		"bad GPU list":      {args: []string{"-f", annotationFile, "--gpus", "H100-SXM5-80GB:0"}, wantCode: 2, wantErrSub: "validate: --gpus: "},
		"unknown GPU model": {args: []string{"-f", annotationFile, "--gpus", "T4:2"}, wantCode: 2, wantErrSub: `unknown GPU model "T4"`},
		"help":              {args: []string{"-h"}, wantCode: 0, wantErrSub: "usage: device-plugin validate -f FILE"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := validate(tc.args, strings.NewReader(tc.stdin), &stdout, &stderr)
			if code != tc.wantCode {
				t.Errorf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.wantCode, stdout.String(), stderr.String())
			}
			if diff := cmp.Diff(tc.wantOut, stdout.String()); diff != "" {
				t.Errorf("stdout (-want +got):\n%s", diff)
			}
			if tc.wantErrSub == "" && stderr.Len() > 0 {
				t.Errorf("unexpected stderr:\n%s", stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.wantErrSub) {
				t.Errorf("stderr does not contain %q:\n%s", tc.wantErrSub, stderr.String())
			}
		})
	}
}

// TestRunValidateReadsStdinThroughRunValidate checks the entry point the
// lead wires into main reads the real standard input for -f -.
func TestRunValidateReadsStdinThroughRunValidate(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdin
	os.Stdin = r
	t.Cleanup(func() { os.Stdin = old; _ = r.Close() })
	if _, err := w.WriteString(annotation); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	var stdout, stderr bytes.Buffer
	if code := Validate([]string{"-f", "-", "--gpus", "H100-SXM5-80GB:4"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit code %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), `config "selected" on 4 x H100-SXM5-80GB (simulated): ok`) {
		t.Errorf("stdout:\n%s", stdout.String())
	}
}

// eachGPU is one error per GPU 0..n-1, each with every message, joined as
// validate's one-line form joins them.
func eachGPU(n int, msgs ...string) string {
	return eachGPUFrom(0, n, msgs...)
}

func eachGPUFrom(first, n int, msgs ...string) string {
	var parts []string
	for i := first; i < first+n; i++ {
		for _, m := range msgs {
			parts = append(parts, fmt.Sprintf("GPU %d (H100-SXM5-80GB): %s", i, m))
		}
	}
	// A configuration's errors stop at migconfig.MaxErrors.
	if more := len(parts) - migconfig.MaxErrors; more > 0 {
		parts = append(parts[:migconfig.MaxErrors], fmt.Sprintf("... and %d more", more))
	}
	return strings.Join(parts, "; ")
}
