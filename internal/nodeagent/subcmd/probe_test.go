package subcmd

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
)

func TestRunProbe(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	plain := write("plain.yaml", "version: v1\ngpus:\n- {model: A30-24GB, count: 1}\n- {model: RTX-PRO-6000-Server-96GB, count: 1}\n")
	// A GPU whose driver reports another 3g.40gb size than the built-in
	// H100 table: the dump's model replaces the built-in in the simulator.
	changed := write("changed.yaml", `version: v1
gpus: [{model: H100-SXM5-80GB, count: 1}]
models:
- name: H100-SXM5-80GB
  pciDeviceID: 0x233010DE
  memoryMiB: 81559
  sms: 132
  architecture: hopper
  profiles:
  - {name: 3g.40gb, slices: 3, memorySlices: 4, memoryMiB: 40192, sms: 60, maxCount: 2, placements: [0, 4]}
`)
	dump := filepath.Join(dir, "dump.yaml")
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantOut    []string
		wantStderr []string
	}{
		{name: "dump to stdout", args: []string{"--nvml-backend=simulated", "--sim-config", plain},
			wantOut: []string{"# device-plugin probe: 2 GPU(s), read-only.\n", "name: A30-24GB\n", "name: 1g.24gb+me.all\n"}},
		{name: "compare equal", args: []string{"--nvml-backend=simulated", "--sim-config", plain, "--compare", "-o", dump},
			wantStderr: []string{"probe: 2 model(s) equal to the built-in ones\n"}},
		{name: "compare differs", args: []string{"--nvml-backend=simulated", "--sim-config", changed, "--compare"}, wantCode: 1,
			wantOut: []string{"name: H100-SXM5-80GB\n"},
			wantStderr: []string{
				"H100-SXM5-80GB: profile 3g.40gb: memoryMiB: probe 40192, built-in 40448\n",
				"H100-SXM5-80GB: profile 1g.10gb: probe (none), built-in id 19\n",
				"difference(s) from the built-in models",
			}},
		{name: "bad config", args: []string{"--nvml-backend=simulated", "--sim-config", filepath.Join(dir, "nope")}, wantCode: 2,
			wantStderr: []string{"probe: reading simulator config"}},
		{name: "extra argument", args: []string{"x"}, wantCode: 2, wantStderr: []string{"unexpected arguments"}},
		{name: "help", args: []string{"-h"}, wantStderr: []string{"usage: device-plugin probe"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := Probe(tc.args, &stdout, &stderr)
			if code != tc.wantCode {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tc.wantCode, stderr.String())
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("stdout lacks %q:\n%s", w, stdout.String())
				}
			}
			for _, w := range tc.wantStderr {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
				}
			}
		})
	}
	// The file written with -o runs a simulated node, and a probe of it
	// gives the same dump.
	var first, second bytes.Buffer
	if code := Probe([]string{"--nvml-backend=simulated", "--sim-config", dump}, &second, &first); code != 0 {
		t.Fatalf("probe of the dump: exit %d: %s", code, first.String())
	}
	if got := mustRead(t, dump); got != second.String() {
		t.Errorf("probe of a simulator run from a dump differs from the dump:\n%s\n---\n%s", got, second.String())
	}
	if _, err := sim.LoadConfig(dump, ""); err != nil {
		t.Errorf("the dump does not load: %v", err)
	}
}
