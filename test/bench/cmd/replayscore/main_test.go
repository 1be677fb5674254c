package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/migflex/migflex/test/bench/replay"
)

// TestRun scores the replay.json files found under a directory, merging
// the two of one pod list and seed.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	write := func(sub string, r replay.Report) {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, sub, "replay.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tr := replay.TraceInfo{File: "x.csv"}
	write("others", replay.Report{Trace: tr, Loads: []replay.LoadResult{{Load: 1.5, Results: []replay.Result{{Policy: replay.PolicyFirstFit, ServedShare: 0.9}}}}})
	write("migflex", replay.Report{Trace: tr, Loads: []replay.LoadResult{{Load: 1.5, Results: []replay.Result{{Policy: replay.PolicyMigflex, ServedShare: 0.95}}}}})
	var out bytes.Buffer
	if err := run([]string{"-json", filepath.Join(dir, "score.json"), dir}, &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "**1 wins, 0 ties, 0 losses** of 1") {
		t.Errorf("output:\n%s", out.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "score.json")); err != nil {
		t.Error(err)
	}
	if err := run([]string{t.TempDir()}, &out, &bytes.Buffer{}); err == nil {
		t.Error("scored a directory without replays")
	}
}
