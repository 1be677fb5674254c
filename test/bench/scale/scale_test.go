package scale

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/testsupport/testenv"
)

// The fleet's nodes read as their agents would write them.
func TestFleet(t *testing.T) {
	kinds := map[kind]int{}
	for i := range 20 {
		kinds[kindOf(i)]++
		n, err := Node(i)
		if err != nil {
			t.Fatal(err)
		}
		gs, err := nodeinfo.ParseLayout(n.Annotations[nodeinfo.AnnotationLayout])
		if err != nil || len(gs) != gpus {
			t.Fatalf("node %d: layout of %d GPUs, %v", i, len(gs), err)
		}
		if _, err := nodeinfo.ParseProfiles(n.Annotations[nodeinfo.AnnotationProfiles]); err != nil {
			t.Fatalf("node %d: profiles: %v", i, err)
		}
		st, err := Status(i)
		if err != nil {
			t.Fatal(err)
		}
		devices := 0
		for _, g := range gs {
			devices += len(g.Instances)
		}
		var alloc int64
		for r, q := range st.Allocatable {
			if strings.HasPrefix(string(r), "nvidia.com/mig-") {
				alloc += q.Value()
			}
		}
		if alloc != int64(devices) {
			t.Errorf("node %d: %d MIG devices allocatable, %d in the layout", i, alloc, devices)
		}
		a, _, _ := Annotations(i, 0)
		b, _, _ := Annotations(i, 1)
		if a[nodeinfo.AnnotationLayout] == b[nodeinfo.AnnotationLayout] {
			t.Errorf("node %d: a new generation (new pods) does not change the layout", i)
		}
	}
	if kinds[kindSmall] != 10 || kinds[kindMixed] != 6 || kinds[kindWhole] != 4 {
		t.Errorf("kinds %v, want 10 small, 6 mixed, 4 whole in 20", kinds)
	}
}

func TestPlannedNode(t *testing.T) {
	for msg, want := range map[string]string{
		"will run on node gpu-00012: GPU 7 repartitioned 7x1g.10gb -> 7g.80gb": "gpu-00012",
		"would run on node n: GPU 0 (3g.40gb free already) (dry run: ...)":     "n",
		"no change the planner may make serves it":                             "",
	} {
		if got := plannedNode(msg); got != want {
			t.Errorf("plannedNode(%q) = %q, want %q", msg, got, want)
		}
	}
}

// A small run of the whole benchmark, for correctness, not time: the real
// planner and webhook processes on a real API server; every pod told, one
// write per changed node, none failed, a reshape-first answer for the
// pods no node offers.
func TestSmallRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the planner and webhook")
	}
	assets := envtestAssets(t)
	dir := t.TempDir()
	bins := map[string]string{}
	for _, cmd := range []string{"planner", "webhook"} {
		bins[cmd] = filepath.Join(dir, cmd)
		out, err := exec.Command("go", "build", "-o", bins[cmd], "github.com/migflex/migflex/cmd/"+cmd).CombinedOutput()
		if err != nil {
			t.Fatalf("building %s: %v\n%s", cmd, err, out)
		}
	}
	var log strings.Builder
	r, err := Run(context.Background(), Options{
		Assets: assets, PlannerBin: bins["planner"], WebhookBin: bins["webhook"], WorkDir: filepath.Join(dir, "work"),
		Nodes: 30, Pods: 20, Burst: 10, BurstGap: 500 * time.Millisecond, ChurnShare: 0.2,
		PlannerArgs: []string{"--max-nodes-per-round=0", "--batch-idle=100ms", "--batch-max=1s"},
		Settle:      15 * time.Second, SetupWorkers: 4, Progress: &log,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if p := r.Problems(); len(p) > 0 {
		for _, name := range []string{"planner.log", "webhook.log"} {
			data, _ := os.ReadFile(filepath.Join(dir, "work", name))
			t.Logf("%s:\n%s", name, tail(string(data), 40))
		}
		t.Fatalf("invalid run:\n%s", strings.Join(p, "\n"))
	}
	if r.Planned != r.Pods || r.WriteLatency.Count == 0 {
		t.Errorf("%d of %d pods planned, %d write latencies", r.Planned, r.Pods, r.WriteLatency.Count)
	}
	// 4g.40gb pods: no node offers one, the planner can make it.
	if r.ReshapeExpected == 0 {
		t.Errorf("no pod left for the planner by the webhook (%d admissions, %d rewritten)", r.Admissions, r.Rewritten)
	}
	if r.Planner.RSSNodes == 0 || r.Webhook.RSSNodes == 0 || r.Churn == nil || r.Churn.Rounds == 0 {
		t.Errorf("missing measurements: planner %+v webhook %+v churn %+v", r.Planner, r.Webhook, r.Churn)
	}
	// Churn with every pod told changes nothing more.
	if r.Churn != nil && r.Churn.NodeWrites != 0 {
		t.Errorf("%d Node writes after the churn, want none", r.Churn.NodeWrites)
	}
}

func tail(s string, lines int) string {
	l := strings.Split(s, "\n")
	return strings.Join(l[max(len(l)-lines, 0):], "\n")
}

// envtestAssets is $KUBEBUILDER_ASSETS or the module's .cache/envtest;
// without them the test skips, or fails under MIGFLEX_REQUIRE_ENVTEST=1.
func envtestAssets(t *testing.T) string {
	t.Helper()
	dir := os.Getenv(testenv.EnvAssets)
	if dir == "" {
		root, err := moduleRoot()
		if err == nil {
			dir = filepath.Join(root, ".cache", "envtest")
		}
	}
	for _, name := range []string{"etcd", "kube-apiserver", "kubectl"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			if os.Getenv(testenv.EnvRequire) == "1" {
				t.Fatalf("no control plane binaries: %v (run `make envtest-assets`)", err)
			}
			t.Skipf("no control plane binaries: %v (run `make envtest-assets` to run this test)", err)
		}
	}
	return dir
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && slices.Contains(strings.Split(string(b), "\n"), "module github.com/migflex/migflex") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the github.com/migflex/migflex module")
		}
		dir = parent
	}
}
