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

// TestRun runs the command on the trace samples: one file with times, one
// without (only the fill runs), and reports both files.
func TestRun(t *testing.T) {
	data := "../../replay/testdata/"
	for name, tc := range map[string]struct {
		pods   string
		extra  []string
		timed  bool
		inText string
	}{
		"with times": {pods: "openb_pod_list_default.head.csv", timed: true, inText: "## Load 2 "},
		"no times":   {pods: "openb_pod_list_multigpu30.head.csv", inText: "No timed replay"},
		"times lent": {pods: "openb_pod_list_multigpu30.head.csv", extra: []string{"-times-from", data + "openb_pod_list_default.head.csv"}, timed: true, inText: "resampled"},
		"fill only":  {pods: "openb_pod_list_default.head.csv", extra: []string{"-fill-only"}, inText: "only the fill experiment"},
	} {
		t.Run(name, func(t *testing.T) {
			out := t.TempDir()
			var stderr bytes.Buffer
			args := append([]string{"-pods", data + tc.pods, "-nodes", data + "openb_node_list.head.csv", "-loads", "1,2", "-out", out, "-fgd-fleet", "1"}, tc.extra...)
			if err := run(args, &stderr); err != nil {
				t.Fatalf("run: %v\n%s", err, stderr.String())
			}
			md, err := os.ReadFile(filepath.Join(out, "replay.md"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(md), tc.inText) || !strings.Contains(string(md), "## Fill") {
				t.Errorf("replay.md lacks %q or the fill:\n%s", tc.inText, md)
			}
			plots := []string{"fill.svg"}
			if tc.timed {
				plots = append(plots, "served.svg", "wait.svg")
			}
			for _, name := range plots {
				b, err := os.ReadFile(filepath.Join(out, name))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.HasPrefix(b, []byte("<svg")) || !bytes.Contains(b, []byte("migflex")) {
					t.Errorf("%s is not a plot of the policies:\n%.200s", name, b)
				}
			}
			var r struct {
				Loads []struct {
					Results []struct{ Policy string } `json:"results"`
				} `json:"loads"`
			}
			b, err := os.ReadFile(filepath.Join(out, "replay.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &r); err != nil {
				t.Fatal(err)
			}
			if tc.timed != (len(r.Loads) == 2) || tc.timed && len(r.Loads[0].Results) != len(replay.AllPolicies) {
				t.Errorf("timed %v: %d loads in replay.json", tc.timed, len(r.Loads))
			}
		})
	}
	for _, bad := range [][]string{
		{"-pods", "nope.csv"},
		{"-pods", data + "openb_pod_list_default.head.csv", "-nodes", data + "openb_node_list.head.csv", "-loads", "x"},
		{"-pods", data + "openb_pod_list_default.head.csv", "-nodes", data + "openb_node_list.head.csv", "-policies", "magic"},
		{"-pods", data + "openb_pod_list_default.head.csv", "-nodes", data + "openb_node_list.head.csv", "-models", "G2=Nope"},
		{"-pods", data + "openb_pod_list_default.head.csv", "-nodes", data + "openb_node_list.head.csv", "-fill-only", "-fgd=false"},
	} {
		if err := run(append(bad, "-out", t.TempDir()), &bytes.Buffer{}); err == nil {
			t.Errorf("run(%q) succeeded", bad)
		}
	}
}
