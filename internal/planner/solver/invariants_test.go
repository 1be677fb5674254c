package solver_test

import (
	"cmp"
	"fmt"
	"slices"
	"testing"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/migconfig"
	"github.com/migflex/migflex/internal/planner/solver"
)

// checkInvariants checks what must hold of every round, whatever the
// snapshot: the rules the planner may never break.
func checkInvariants(t *testing.T, snap solver.Snapshot, pol solver.Policy, res solver.Result) {
	t.Helper()
	nodes := map[string]*solver.Node{}
	for i := range snap.Nodes {
		nodes[snap.Nodes[i].Name] = &snap.Nodes[i]
	}
	profiles := map[string][]mig.Profile{}
	for _, m := range snap.Models {
		profiles[m.Name] = m.Profiles
	}
	changed := 0
	for _, nc := range res.Nodes {
		n := nodes[nc.Node]
		if n == nil {
			t.Errorf("change for unknown node %s", nc.Node)
			continue
		}
		if !n.OptedIn {
			t.Errorf("node %s is not opted in and was changed", nc.Node)
		}
		if n.Frozen != "" {
			t.Errorf("node %s is frozen (%s) and was changed", nc.Node, n.Frozen)
		}
		// The document goes through migconfig exactly as the agent runs it.
		var current []mig.GPU
		for _, g := range n.GPUs {
			if _, ok := profiles[g.Model]; ok {
				current = append(current, agentGPU(g, profiles[g.Model]))
			}
		}
		spec, err := migconfig.Parse([]byte(nc.Config))
		if err != nil {
			t.Errorf("node %s: config does not parse: %v\n%s", nc.Node, err, nc.Config)
			continue
		}
		cfg, err := spec.Select("")
		if err != nil {
			t.Errorf("node %s: %v", nc.Node, err)
			continue
		}
		desired, err := migconfig.Validate(cfg, current)
		if err != nil {
			t.Errorf("node %s: config does not validate: %v\n%s", nc.Node, err, nc.Config)
			continue
		}
		plan, err := migconfig.MakePlan(current, desired)
		if err != nil {
			t.Errorf("node %s: config does not plan: %v", nc.Node, err)
			continue
		}
		byIndex := map[int]solver.GPU{}
		for _, g := range n.GPUs {
			byIndex[g.Index] = g
		}
		changes := map[int]solver.GPUChange{}
		for _, gc := range nc.GPUs {
			changes[gc.Index] = gc
		}
		for _, gp := range plan.GPUs {
			g := byIndex[gp.GPU]
			for _, d := range gp.Destroy {
				for _, in := range g.Instances {
					if in.InUse && in.Profile == d.Profile && in.Start == d.Start {
						t.Errorf("node %s GPU %d: the agent would destroy %s@%d, which is in use", nc.Node, gp.GPU, in.Profile, in.Start)
					}
				}
			}
			if gp.Mode == migconfig.ModeDisable && (g.InUse || anyInUse(g)) {
				t.Errorf("node %s GPU %d: MIG disabled under a pod", nc.Node, gp.GPU)
			}
			gc, isChange := changes[gp.GPU]
			if !isChange {
				if gp.Changed() {
					t.Errorf("node %s GPU %d: not reported as changed, but the agent would: %s", nc.Node, gp.GPU, gp.Summary())
				}
				continue
			}
			if gc.MigEnabled {
				var want []migconfig.Placement
				for _, in := range gc.Layout {
					p, _ := profileOf(profiles[g.Model], in.Profile)
					want = append(want, migconfig.Placement{Profile: in.Profile, Start: in.Start, Size: p.MemorySlices})
				}
				if got := gp.After(); !slices.Equal(got, want) {
					t.Errorf("node %s GPU %d: agent lays out %v, planner reports %v", nc.Node, gp.GPU, got, want)
				}
			}
		}
		for _, gc := range nc.GPUs {
			changed++
			g := byIndex[gc.Index]
			if !g.LastChanged.IsZero() && snap.Now.Sub(g.LastChanged) < pol.Cooldown {
				t.Errorf("node %s GPU %d changed %s ago, inside its cooldown of %s", nc.Node, gc.Index, snap.Now.Sub(g.LastChanged), pol.Cooldown)
			}
			for _, in := range g.Instances {
				if in.InUse && !slices.ContainsFunc(gc.Layout, func(o solver.Instance) bool { return o.Profile == in.Profile && o.Start == in.Start }) {
					t.Errorf("node %s GPU %d: instance in use %s@%d missing from the new layout", nc.Node, gc.Index, in.Profile, in.Start)
				}
			}
			for _, d := range gc.Destroyed {
				if d.InUse {
					t.Errorf("node %s GPU %d: destroys %s@%d in use", nc.Node, gc.Index, d.Profile, d.Start)
				}
			}
			if g.Reserved && (gc.MigEnabled || !gc.Reclaimed) {
				t.Errorf("node %s GPU %d is reserved and changed to other than whole: %+v", nc.Node, gc.Index, gc)
			}
			switch {
			case gc.Reclaimed && (gc.MigEnabled || len(gc.Pods) > 0 || anyInUse(g)):
				t.Errorf("node %s GPU %d: reclaimed, but MIG stays on, or it has pods or instances in use: %+v", nc.Node, gc.Index, gc)
			case !gc.Reclaimed && len(gc.Pods) == 0:
				t.Errorf("node %s GPU %d changed for no pod", nc.Node, gc.Index)
			}
		}
	}
	if pol.MaxGPUsPerRound > 0 && changed > pol.MaxGPUsPerRound {
		t.Errorf("%d GPUs changed, over the cap of %d", changed, pol.MaxGPUsPerRound)
	}
	if len(res.Pods) != len(snap.Pending) {
		t.Fatalf("%d pod plans for %d pending pods", len(res.Pods), len(snap.Pending))
	}
	// No device is promised twice.
	type devKey struct {
		node       string
		gpu, start int
		res        string
	}
	seen := map[devKey]string{}
	for i, p := range res.Pods {
		want := fmt.Sprintf("%s/%s", snap.Pending[i].Namespace, snap.Pending[i].Name)
		if p.Pod != want {
			t.Errorf("pod plan %d is for %s, want %s", i, p.Pod, want)
		}
		if p.Action == solver.ActionNone {
			if p.Reason == "" {
				t.Errorf("pod %s: no action and no reason", p.Pod)
			}
			continue
		}
		for _, d := range p.Devices {
			if n := nodes[p.Node]; n != nil && slices.ContainsFunc(n.GPUs, func(g solver.GPU) bool { return g.Index == d.GPU && g.Reserved }) {
				t.Errorf("pod %s given reserved GPU %s/%d", p.Pod, p.Node, d.GPU)
			}
			k := devKey{p.Node, d.GPU, d.Start, string(d.Resource)}
			if d.Resource == "nvidia.com/gpu" {
				k.start = -1
			}
			if other, dup := seen[k]; dup {
				t.Errorf("device %+v promised to %s and %s", k, other, p.Pod)
			}
			seen[k] = p.Pod
		}
	}
}

func anyInUse(g solver.GPU) bool {
	return slices.ContainsFunc(g.Instances, func(in solver.Instance) bool { return in.InUse })
}

func profileOf(ps []mig.Profile, name string) (mig.Profile, bool) {
	for _, p := range ps {
		if p.Name == name {
			return p, true
		}
	}
	return mig.Profile{}, false
}

// agentGPU is the GPU as the agent's discovery reports it.
func agentGPU(g solver.GPU, profiles []mig.Profile) mig.GPU {
	out := mig.GPU{Index: g.Index, Model: g.Model, MigCapable: true, MigEnabled: g.MigEnabled, MigPending: g.MigEnabled, Profiles: profiles}
	for i, in := range g.Instances {
		p, _ := profileOf(profiles, in.Profile)
		out.Instances = append(out.Instances, mig.Instance{Profile: in.Profile, Start: in.Start, Size: p.MemorySlices, GIID: uint32(i + 1), HasCI: true, UUID: fmt.Sprintf("MIG-%d", i)})
	}
	slices.SortFunc(out.Instances, func(a, b mig.Instance) int { return cmp.Compare(a.Start, b.Start) })
	return out
}
