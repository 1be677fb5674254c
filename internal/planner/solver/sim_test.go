package solver_test

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/migconfig"
	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim/simtest"
	"github.com/migflex/migflex/internal/nvml/nvmlmig"
	"github.com/migflex/migflex/internal/planner/solver"
)

// TestPlanAppliesOnSimulator runs the planner's documents through the
// agent's own code path (parse, validate, plan, apply through mig on the
// simulated NVML) with processes on some instances: every apply succeeds,
// every busy instance survives as the same GPU instance, and the pods'
// devices exist afterwards.
func TestPlanAppliesOnSimulator(t *testing.T) {
	lib := simtest.New(t, simtest.GPUs("planner-test", sim.GPUSpec{Model: h100Name, Count: 4}))
	part := nvmlmig.NewPartitioner(lib)
	apply := func(doc string) {
		t.Helper()
		spec, err := migconfig.Parse([]byte(doc))
		if err != nil {
			t.Fatalf("parse %q: %v", doc, err)
		}
		cfg, err := spec.Select("")
		if err != nil {
			t.Fatal(err)
		}
		gpus, err := nvmlmig.Discover(lib)
		if err != nil {
			t.Fatal(err)
		}
		desired, err := migconfig.Validate(cfg, gpus)
		if err != nil {
			t.Fatalf("validate:\n%s\n%v", doc, err)
		}
		plan, err := migconfig.MakePlan(gpus, desired)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := migconfig.Apply(context.Background(), part, plan); err != nil {
			t.Fatalf("apply:\n%s\n%v", doc, err)
		}
	}
	apply(`version: v1
mig-configs:
  selected:
  - {devices: [0], mig-enabled: true, mig-devices: {"1g.10gb": 7}}
  - {devices: [1], mig-enabled: true, mig-devices: {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}}
  - {devices: [2], mig-enabled: true, mig-devices: {"4g.40gb": 1, "3g.40gb": 1}}
  - {devices: [3], mig-enabled: false}
`)
	gpus, err := nvmlmig.Discover(lib)
	if err != nil {
		t.Fatal(err)
	}
	// Processes on GPU 0's 1g at 3, GPU 1's 2g and GPU 2's 4g.
	busy := map[int]map[int]bool{0: {3: true}, 1: {}, 2: {0: true}}
	for _, in := range gpus[1].Instances {
		if in.Profile == "2g.20gb" {
			busy[1][in.Start] = true
		}
	}
	var busyGI []mig.Instance
	node := solver.Node{OptedIn: true}
	node.Name, node.Labels = "sim", map[string]string{corev1.LabelHostname: "sim"}
	for _, g := range gpus {
		pg := solver.GPU{Index: g.Index, Model: g.Model, MigEnabled: g.MigEnabled}
		for _, in := range g.Instances {
			use := busy[g.Index][in.Start]
			if use {
				if err := lib.SetBusy(g.Index, in.GIID, true); err != nil {
					t.Fatal(err)
				}
				busyGI = append(busyGI, in)
			}
			pg.Instances = append(pg.Instances, solver.Instance{Profile: in.Profile, Start: in.Start, InUse: use})
		}
		node.GPUs = append(node.GPUs, pg)
	}
	pl, err := solver.New(solver.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	snap := snapshot([]solver.Node{node},
		pod("a", mig7g, "1"), pod("b", mig3g, "1"), pod("c", mig3g, "1"),
		pod("d", mig2g, "1"), pod("e", mig2g, "1"), pod("f", mig1g, "1"))
	res, err := pl.Plan(snap)
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, snap, pl.Policy(), res)
	if len(res.Nodes) != 1 {
		t.Fatalf("changes %+v, want one node", res.Nodes)
	}
	apply(res.Nodes[0].Config)
	after, err := nvmlmig.Discover(lib)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range busyGI {
		if !slices.ContainsFunc(after[gpuOf(gpus, b)].Instances, func(in mig.Instance) bool { return in.GIID == b.GIID && in.UUID == b.UUID }) {
			t.Errorf("busy instance %s@%d (GI %d) did not survive", b.Profile, b.Start, b.GIID)
		}
	}
	served := 0
	for _, p := range res.Pods {
		if p.Action == solver.ActionNone {
			t.Logf("%s: %s", p.Pod, p.Reason)
			continue
		}
		served++
		for _, d := range p.Devices {
			g := after[d.GPU]
			if d.Resource == "nvidia.com/gpu" {
				if g.MigEnabled {
					t.Errorf("pod %s: GPU %d still has MIG enabled", p.Pod, d.GPU)
				}
				continue
			}
			if !slices.ContainsFunc(g.Instances, func(in mig.Instance) bool {
				return in.Start == d.Start && resourcename.MIG(in.Profile) == d.Resource
			}) {
				t.Errorf("pod %s: no %s at %d on GPU %d after the apply: %+v", p.Pod, d.Resource, d.Start, d.GPU, g.Instances)
			}
		}
	}
	// GPU 3 (whole) takes the 7g; 3g, 2g and 1g fit around the busy
	// instances: all six pods are served.
	if served != 6 {
		t.Errorf("%d pods served, want 6", served)
	}
}

func gpuOf(gpus []mig.GPU, in mig.Instance) int {
	for _, g := range gpus {
		if slices.ContainsFunc(g.Instances, func(x mig.Instance) bool { return x.UUID == in.UUID }) {
			return g.Index
		}
	}
	return -1
}
