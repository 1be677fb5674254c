package planner

import (
	"encoding/json"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/planner/plansnap"
	"github.com/migflex/migflex/internal/planner/simmodels"
	"github.com/migflex/migflex/internal/planner/solver"
)

func testOptions(mods ...func(*Options)) *Options {
	o := &Options{Policy: solver.DefaultPolicy(), Client: nil}
	o.setDefaults()
	for _, m := range mods {
		m(o)
	}
	return o
}

func mustPlanner(t testing.TB, o *Options) *solver.Planner {
	t.Helper()
	pl, err := solver.New(o.Policy)
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

// events are a decision's Events, the write-bound ones included, as
// "reason pod: message".
func events(d decision) []string {
	var out []string
	all := d.events
	for _, w := range d.writes {
		all = append(all, w.eventsAfterward...)
	}
	for _, ev := range all {
		out = append(out, ev.reason+" "+ev.pod.Name+": "+ev.message)
	}
	return out
}

func TestRound(t *testing.T) {
	tests := []struct {
		name  string
		opts  []func(*Options)
		setup func(c *cluster)
		// claimed are pods holding devices through allocated claims, by
		// node, as asScheduled finds them (memory.claimed).
		claimed map[string][]string
		// wantWrites are "node key" per write, in order.
		wantWrites []string
		// wantConfig is in the (first) write's value.
		wantConfig string
		// wantEvents are substrings of the Events, one each, in order.
		wantEvents []string
		// laterWrites are what the next round writes (the rest of a
		// capped round); the one after writes nothing.
		laterWrites []string
	}{
		{
			name: "an all-1g node reshaped for a 3g pod",
			setup: func(c *cluster) {
				c.addNode("n1", simGPU(0, all1g...))
				c.pod("p", mig3g, 1)
			},
			wantWrites: []string{"n1 nvidia.com/mig.config"},
			wantConfig: `"3g.40gb": 1`,
			wantEvents: []string{"MigReshapePlanned p: will run on node n1: GPU 0 repartitioned 7x1g.10gb -> 4x1g.10gb + 3g.40gb"},
		},
		{
			// n1's agent publishes an H100 table without 3g.40gb (another
			// driver): n1 is planned with it, n2 with its own.
			name: "each node is planned with its own agent's table",
			setup: func(c *cluster) {
				n1 := c.addNode("n1", simGPU(0, all1g...))
				m, _ := simmodels.Get(h100)
				m.Profiles = slices.DeleteFunc(slices.Clone(m.Profiles), func(p mig.Profile) bool { return p.Name == "3g.40gb" })
				b, _ := json.Marshal([]nodeinfo.Model{nodeinfo.NewModel(h100, m.Profiles)})
				n1.Annotations[nodeinfo.AnnotationProfiles] = string(b)
				c.addNode("n2", simGPU(0, all1g...))
				c.pod("p", mig3g, 1)
			},
			wantWrites: []string{"n2 nvidia.com/mig.config"},
			wantConfig: `"3g.40gb": 1`,
			wantEvents: []string{"MigReshapePlanned p: will run on node n2: GPU 0 repartitioned 7x1g.10gb -> 4x1g.10gb + 3g.40gb"},
		},
		{
			// After a lost watch the pod informer may catch up later than
			// the Node informer: p still shows as waiting, but its agent
			// reports it holding the 3g.40gb. No second GPU is changed.
			name: "a pod a layout lists holding a device is not planned for",
			setup: func(c *cluster) {
				c.addNode("n1", simGPU(0, "1g.10gb@0", "1g.10gb@1", "1g.10gb@2", "1g.10gb@3", "3g.40gb@4=ns/p"), simGPU(1, all1g...))
				c.pod("p", mig3g, 1)
			},
		},
		{
			name: "a busy GPU is avoided while another can serve",
			setup: func(c *cluster) {
				c.addNode("n1", simGPU(0, "1g.10gb@0=ns/busy", "1g.10gb@1", "1g.10gb@2", "1g.10gb@3", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6"), simGPU(1, all1g...))
				c.pod("p", mig7g, 1)
			},
			wantWrites: []string{"n1 nvidia.com/mig.config"},
			wantConfig: "- devices: [1]\n    mig-enabled: true\n    mig-devices: {\"7g.80gb\": 1}",
			wantEvents: []string{"MigReshapePlanned p: will run on node n1: GPU 1 repartitioned 7x1g.10gb -> 7g.80gb"},
		},
		{
			name: "only a busy GPU could: impossible, naming the pod",
			setup: func(c *cluster) {
				c.addNode("n1", simGPU(0, "1g.10gb@0=ns/busy", "1g.10gb@1"), simGPU(1, "7g.80gb@0=ns/big"))
				c.pod("p", mig7g, 1)
			},
			wantEvents: []string{"MigReshapeImpossible p: no change the planner may make serves it: no GPU can take nvidia.com/mig-7g.80gb", "n1 GPU 0 (ns/busy), n1 GPU 1 (ns/big)"},
		},
		{
			// The scheduler allocates a 3g.40gb placement and the agent
			// makes it at Prepare: nothing to write, and an all-1g node
			// beside it is left as it is.
			name: "a dynamic DRA node makes the pod's instance on demand",
			setup: func(c *cluster) {
				n := c.addNode("dyn", simGPU(0, "1g.10gb@0=ns/a"))
				n.Labels[nodeinfo.LabelServing] = nodeinfo.ServingDRA
				n.Labels[nodeinfo.LabelDRAMode] = nodeinfo.DRAModeDynamic
				c.addNode("n1", simGPU(0, all1g...))
				c.pod("p", mig3g, 1)
			},
		},
		{
			// No placement of a 7g.80gb is left beside the held 1g.10gb:
			// the planner reshapes n1, never the dynamic node.
			name: "what a dynamic node cannot make is reshaped elsewhere",
			setup: func(c *cluster) {
				n := c.addNode("dyn", simGPU(0, "1g.10gb@0=ns/a"))
				n.Labels[nodeinfo.LabelServing] = nodeinfo.ServingDRA
				n.Labels[nodeinfo.LabelDRAMode] = nodeinfo.DRAModeDynamic
				c.addNode("n1", simGPU(0, all1g...))
				c.pod("p", mig7g, 1)
			},
			wantWrites: []string{"n1 nvidia.com/mig.config"},
			wantConfig: `"7g.80gb": 1`,
			wantEvents: []string{"MigReshapePlanned p: will run on node n1: GPU 0 repartitioned 7x1g.10gb -> 7g.80gb"},
		},
		{
			name: "an opted-out node is never touched",
			setup: func(c *cluster) {
				n := c.addNode("n1", simGPU(0, all1g...))
				n.Labels[nodeinfo.LabelPlanner] = "disabled"
				c.pod("p", mig3g, 1)
			},
			wantEvents: []string{"MigReshapeImpossible p:", "not opted in"},
		},
		{
			name: "a pending node is never touched",
			setup: func(c *cluster) {
				n := c.addNode("n1", simGPU(0, all1g...))
				n.Labels[nodeinfo.LabelMigConfigState] = nodeinfo.StatePending
				c.pod("p", mig3g, 1)
			},
			wantEvents: []string{"MigReshapeImpossible p:", "state pending"},
		},
		{
			name: "a failed node is never touched",
			setup: func(c *cluster) {
				n := c.addNode("n1", simGPU(0, all1g...))
				n.Labels[nodeinfo.LabelMigConfigState] = nodeinfo.StateFailed
				c.pod("p", mig3g, 1)
			},
			wantEvents: []string{"MigReshapeImpossible p:", "state failed"},
		},
		{
			name: "a node a human just changed is left alone",
			setup: func(c *cluster) {
				n := c.addNode("n1", simGPU(0, all1g...))
				n.Annotations[nodeinfo.AnnotationMigConfig] = "version: v1\nmig-configs:\n  selected:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {\"1g.10gb\": 7}\n"
				n.ManagedFields = append(n.ManagedFields, plansnap.ManagedTime("kubectl-annotate", nodeinfo.AnnotationMigConfig, c.now.Add(-time.Minute)))
				c.pod("p", mig3g, 1)
			},
			wantEvents: []string{"MigReshapeImpossible p:", "nvidia.com/mig.config was changed by kubectl-annotate"},
		},
		{
			name: "a node where a pod is starting is left alone",
			setup: func(c *cluster) {
				c.addNode("n1", simGPU(0, all1g...))
				s := c.pod("starting", mig1g, 1)
				s.Spec.NodeName = "n1"
				s.Status.Conditions = nil
				c.pod("p", mig3g, 1)
			},
			wantEvents: []string{"MigReshapeImpossible p:", "a pod is starting on it (ns/starting)"},
		},
		{
			name: "pods are starting",
			setup: func(c *cluster) {
				c.addNode("n1", simGPU(0, all1g...))
				for _, name := range []string{"s1", "s2"} {
					s := c.pod(name, mig1g, 1)
					s.Spec.NodeName = "n1"
					s.Status.Conditions = nil
				}
				c.pod("p", mig3g, 1)
			},
			wantEvents: []string{"MigReshapeImpossible p:", "pods are starting on it (ns/s1, ns/s2)"},
		},
		{
			// Its claims allocated, it asks for no more devices; its
			// devices are its before the agent reports them.
			name: "a node where a pod holds allocated claims is left alone",
			setup: func(c *cluster) {
				c.addNode("n1", simGPU(0, all1g...))
				c.pod("p", mig3g, 1)
			},
			claimed:    map[string][]string{"n1": {"ns/claims"}},
			wantEvents: []string{"MigReshapeImpossible p:", "a pod is starting on it (ns/claims)"},
		},
		{
			// As a new leader finds the node its predecessor just changed.
			name: "a frozen node's busy GPUs are named",
			setup: func(c *cluster) {
				n := c.addNode("n1", simGPU(0, "1g.10gb@0=ns/busy", "1g.10gb@1"), simGPU(1, "7g.80gb@0=ns/big"))
				n.Labels[nodeinfo.LabelMigConfigState] = nodeinfo.StatePending
				c.pod("p", mig7g, 1)
			},
			wantEvents: []string{"MigReshapeImpossible p:", "n1 GPU 0 (ns/busy), n1 GPU 1 (ns/big)"},
		},
		{
			name: "at most the round's nodes",
			opts: []func(*Options){func(o *Options) { o.MaxNodesPerRound = 2 }},
			setup: func(c *cluster) {
				for _, n := range []string{"n1", "n2", "n3"} {
					c.addNode(n, simGPU(0, all1g...))
				}
				c.pod("a", mig7g, 1)
				c.now = c.now.Add(time.Second)
				c.pod("b", mig7g, 1)
				c.now = c.now.Add(time.Second)
				c.pod("c", mig7g, 1)
			},
			wantWrites:  []string{"n1 nvidia.com/mig.config", "n2 nvidia.com/mig.config"},
			wantEvents:  []string{"MigReshapePlanned a: will run on node n1", "MigReshapePlanned b: will run on node n2"},
			laterWrites: []string{"n3 nvidia.com/mig.config"},
		},
		{
			name: "dry run: a proposal, no mig.config",
			opts: []func(*Options){func(o *Options) { o.DryRun = true }},
			setup: func(c *cluster) {
				c.addNode("n1", simGPU(0, all1g...))
				c.pod("p", mig3g, 1)
			},
			wantWrites: []string{"n1 migflex.io/mig.config.proposed"},
			wantConfig: `"3g.40gb": 1`,
			wantEvents: []string{"MigReshapePlanned p: would run on node n1: GPU 0 repartitioned 7x1g.10gb -> 4x1g.10gb + 3g.40gb", "(dry run: proposed in migflex.io/mig.config.proposed, nvidia.com/mig.config not changed)"},
		},
		{
			name: "a free device exists: nothing to do",
			setup: func(c *cluster) {
				c.addNode("n1", simGPU(0, all1g...))
				c.pod("p", mig1g, 1)
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions(tc.opts...)
			c := newCluster(t)
			tc.setup(c)
			m := newMemory(o.MixHalfLife)
			m.claimed = tc.claimed
			d := c.round(o, mustPlanner(t, o), m)
			var got []string
			for _, w := range d.writes {
				got = append(got, w.node.Name+" "+w.key)
			}
			if strings.Join(got, "|") != strings.Join(tc.wantWrites, "|") {
				t.Errorf("writes %q, want %q", got, tc.wantWrites)
			}
			if tc.wantConfig != "" && (len(d.writes) == 0 || !strings.Contains(d.writes[0].value, tc.wantConfig)) {
				t.Errorf("written %+v, want it to contain %q", d.writes, tc.wantConfig)
			}
			evs := events(d)
			all := strings.Join(evs, "\n")
			for _, want := range tc.wantEvents {
				if !strings.Contains(all, want) {
					t.Errorf("Events lack %q:\n%s", want, all)
				}
			}
			if len(tc.wantEvents) == 0 && len(evs) > 0 {
				t.Errorf("Events %q, want none", evs)
			}
			if tc.laterWrites != nil {
				later := c.round(o, mustPlanner(t, o), m)
				got = nil
				for _, w := range later.writes {
					got = append(got, w.node.Name+" "+w.key)
				}
				if strings.Join(got, "|") != strings.Join(tc.laterWrites, "|") {
					t.Errorf("next round writes %q, want %q", got, tc.laterWrites)
				}
			}
			// Idempotent: the same cluster again (the writes applied, the
			// agent not yet at it) writes nothing and says nothing new.
			again := c.round(o, mustPlanner(t, o), m)
			if len(again.writes) != 0 || len(events(again)) != 0 {
				t.Errorf("a second round wrote %d times, Events %q; want nothing", len(again.writes), events(again))
			}
		})
	}
}

// A new leader (no memory) finds the previous leader's change in flight
// and adds nothing: no lost and no doubled change.
func TestRoundAfterLeaderChange(t *testing.T) {
	o := testOptions()
	c := newCluster(t)
	c.addNode("n1", simGPU(0, all1g...), simGPU(1, all1g...))
	c.pod("p", mig3g, 1)
	first := c.round(o, mustPlanner(t, o), newMemory(o.MixHalfLife))
	if len(first.writes) != 1 {
		t.Fatalf("first leader wrote %d times, want 1", len(first.writes))
	}
	// The leader dies right after its write; the next one starts afresh.
	next := newMemory(o.MixHalfLife)
	if d := c.round(o, mustPlanner(t, o), next); len(d.writes) != 0 {
		t.Fatalf("the new leader wrote %v while the change was in flight", d.writes)
	}
	c.now = c.now.Add(time.Second)
	c.agent()
	if d := c.round(o, mustPlanner(t, o), next); len(d.writes) != 0 {
		t.Fatalf("the new leader wrote %v after the agent applied the change", d.writes)
	}
	c.schedule()
	if p := c.pods["p"]; p.Spec.NodeName != "n1" {
		t.Fatalf("the pod was not served by the change: %+v", p.Spec)
	}
	// The change's GPU stays in cooldown for the new leader too: a second
	// 3g pod goes to the other GPU's capacity rather than changing it again.
	c.pod("q", mig3g, 1)
	d := c.round(o, mustPlanner(t, o), next)
	if len(d.writes) == 1 && strings.Contains(d.writes[0].value, "devices: [0, 1]") {
		t.Errorf("the new leader changed both GPUs: %s", d.writes[0].value)
	}
	if len(c.changes) != 1 {
		t.Errorf("GPUs changed %v, want one", c.changes)
	}
}

// An adversarial arrival pattern: demand alternates between a whole-GPU
// profile and seven small ones, each wave ending before the next arrives,
// on one GPU, so every wave wants the other layout. Without a cooldown the
// planner follows each wave (the test would catch that); with one, a GPU
// changes at most once per cooldown, also across a leader change.
func TestNoFlapping(t *testing.T) {
	run := func(t *testing.T, cooldown time.Duration) map[gpuKey][]change {
		o := testOptions(func(o *Options) { o.Policy.Cooldown = cooldown })
		pl := mustPlanner(t, o)
		c := newCluster(t)
		c.addNode("n1", simGPU(0, all1g...))
		m := newMemory(o.MixHalfLife)
		const wave = 20 * time.Second
		end := c.now.Add(10 * time.Minute)
		running := map[string]time.Time{}
		for i := 0; c.now.Before(end); i++ {
			if c.now.Sub(t0)%wave == 0 {
				n := int((c.now.Sub(t0) / wave))
				if n%2 == 0 {
					c.pod(podName(n, 0), mig7g, 1)
				} else {
					for j := range 7 {
						c.pod(podName(n, j), mig1g, 1)
					}
				}
			}
			if c.now.Sub(t0) == 5*time.Minute {
				m = newMemory(o.MixHalfLife) // a leader change
			}
			c.round(o, pl, m)
			c.agent()
			c.schedule()
			for name, p := range c.pods {
				if p.Spec.NodeName == "" {
					continue
				}
				if _, ok := running[name]; !ok {
					running[name] = c.now
				}
				if c.now.Sub(running[name]) >= wave/2 {
					c.finish(name)
					delete(running, name)
				}
			}
			// Pods that never ran leave with their wave, as a job with a
			// deadline would.
			for name, p := range c.pods {
				if p.Spec.NodeName == "" && c.now.Sub(p.CreationTimestamp.Time) >= wave {
					c.finish(name)
				}
			}
			c.now = c.now.Add(time.Second)
		}
		return c.changes
	}
	t.Run("without a cooldown the pattern flaps", func(t *testing.T) {
		changes := run(t, 0)
		n := len(changes[gpuKey{"n1", 0}])
		t.Logf("%d changes in 10 minutes without a cooldown", n)
		if n < 10 {
			t.Fatalf("%d changes without a cooldown; the pattern is not adversarial", n)
		}
	})
	t.Run("with the cooldown", func(t *testing.T) {
		cooldown := solver.DefaultPolicy().Cooldown
		changes := run(t, cooldown)
		got := changes[gpuKey{"n1", 0}]
		if len(got) == 0 {
			t.Fatal("the GPU never changed: the test shows nothing")
		}
		t.Logf("%d changes in 10 minutes with a cooldown of %s", len(got), cooldown)
		for i := 1; i < len(got); i++ {
			if gap := got[i].at.Sub(got[i-1].at); gap < cooldown {
				t.Errorf("changes %d and %d %s apart (%s -> %s), under the cooldown %s", i-1, i, gap, got[i-1].layout, got[i].layout, cooldown)
			}
		}
		if max := int(10*time.Minute/cooldown) + 1; len(got) > max {
			t.Errorf("%d changes in 10 minutes, want at most %d", len(got), max)
		}
	})
}

func podName(wave, i int) string {
	return "w" + string(rune('a'+wave%26)) + string(rune('0'+wave/26)) + "-" + string(rune('0'+i))
}

// A proposal that no longer stands (the pod went) is removed.
func TestDryRunProposalRemoved(t *testing.T) {
	o := testOptions(func(o *Options) { o.DryRun = true })
	c := newCluster(t)
	c.addNode("n1", simGPU(0, all1g...))
	c.pod("p", mig3g, 1)
	m := newMemory(o.MixHalfLife)
	c.round(o, mustPlanner(t, o), m)
	if _, ok := c.nodes["n1"].Annotations[nodeinfo.AnnotationProposed]; !ok {
		t.Fatal("no proposal")
	}
	if _, ok := c.nodes["n1"].Annotations[nodeinfo.AnnotationMigConfig]; ok {
		t.Fatal("dry run wrote mig.config")
	}
	c.finish("p")
	d := c.round(o, mustPlanner(t, o), m)
	if len(d.writes) != 1 || d.writes[0].value != "" {
		t.Fatalf("writes %+v, want the proposal removed", d.writes)
	}
	if _, ok := c.nodes["n1"].Annotations[nodeinfo.AnnotationProposed]; ok {
		t.Error("the proposal stayed")
	}
	// Nor is one on a node opted out since: the planner may not write there.
	c.pod("q", mig3g, 1)
	c.round(o, mustPlanner(t, o), m)
	c.finish("q")
	c.nodes["n1"].Labels[nodeinfo.LabelPlanner] = "disabled"
	if d := c.round(o, mustPlanner(t, o), m); len(d.writes) != 0 {
		t.Errorf("wrote %+v on a node not opted in", d.writes)
	}
	c.nodes["n1"].Labels[nodeinfo.LabelPlanner] = nodeinfo.PlannerEnabled
	c.round(o, mustPlanner(t, o), m)
	// Someone else's annotation of that name is not the planner's to remove.
	c.nodes["n1"].Annotations[nodeinfo.AnnotationProposed] = "mine"
	if d := c.round(o, mustPlanner(t, o), m); len(d.writes) != 0 {
		t.Errorf("removed an annotation the planner does not own: %+v", d.writes)
	}
}

// The demand mix counts every GPU pod created, once, as the trace replay
// feeds it: not only pods that wait, but those placed at once (pending
// and bound, or already started and gone from the pending set by the
// round) too, or free capacity is kept usable for the waiting kind only.
func TestMixCountsEveryGPUPodOnce(t *testing.T) {
	type step struct {
		// arrive are pods the informer saw created since the last round
		// that have left the pending set already.
		arrive []string
		// leaderChange starts the round with a new memory.
		leaderChange bool
		want         map[corev1.ResourceName]float64
	}
	tests := []struct {
		name  string
		setup func(c *cluster)
		steps []step
	}{
		{
			name: "waiting, starting and started pods",
			setup: func(c *cluster) {
				c.addNode("n1", simGPU(0, all1g...))
				c.pod("waits", mig3g, 1)
				s := c.pod("starting", mig1g, 1)
				s.Spec.NodeName = "n1"
				s.Status.Conditions = nil
			},
			steps: []step{
				{arrive: []string{"gone"}, want: map[corev1.ResourceName]float64{mig3g: 1, mig1g: 2}},
				{want: map[corev1.ResourceName]float64{mig3g: 1, mig1g: 2}},
			},
		},
		{
			name: "an arrival still pending is counted once",
			setup: func(c *cluster) {
				c.addNode("n1", simGPU(0, all1g...))
				c.pod("waits", mig3g, 1)
			},
			steps: []step{
				{arrive: []string{"waits"}, want: map[corev1.ResourceName]float64{mig3g: 1}},
				{arrive: []string{"waits"}, want: map[corev1.ResourceName]float64{mig3g: 1}},
			},
		},
		{
			name: "a new leader counts the pending set",
			setup: func(c *cluster) {
				c.addNode("n1", simGPU(0, all1g...))
				c.pod("waits", mig3g, 1)
			},
			steps: []step{
				{arrive: []string{"gone"}, want: map[corev1.ResourceName]float64{mig3g: 1, mig1g: 1}},
				{leaderChange: true, want: map[corev1.ResourceName]float64{mig3g: 1}},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// A half-life long enough that weights are counts.
			o := testOptions(func(o *Options) { o.MixHalfLife = 1e6 * time.Hour })
			c := newCluster(t)
			tc.setup(c)
			m := newMemory(o.MixHalfLife)
			for i, s := range tc.steps {
				if s.leaderChange {
					m = newMemory(o.MixHalfLife)
				}
				for _, name := range s.arrive {
					p := c.pods[name]
					if p == nil {
						p = c.pod(name, mig1g, 1)
						delete(c.pods, name) // started: no longer pending
					}
					m.arrived = append(m.arrived, arrival{pod: p.DeepCopy(), at: c.now})
				}
				c.round(o, mustPlanner(t, o), m)
				got := map[corev1.ResourceName]float64{}
				for _, d := range m.mix.Mix(c.now) {
					got[d.Resource] += math.Round(d.Weight*1000) / 1000 * float64(d.Count)
				}
				if !maps.Equal(got, s.want) {
					t.Errorf("round %d: mix %v, want %v", i, got, s.want)
				}
				c.now = c.now.Add(time.Second)
			}
		})
	}
}

// A pod a round reshaped a GPU for is planned again, until its change
// lands, onto the instance it was planned for: the written layout shows on
// the frozen node (plansnap), so the pod keeps that instance from pods
// that came after it, and is given no second change nor a second Event.
func TestPlannedPodKeepsItsInstanceUntilTheChangeLands(t *testing.T) {
	o := testOptions()
	c := newCluster(t)
	c.addNode("n1", simGPU(0, all1g...))
	c.addNode("n2", simGPU(0, all1g...))
	c.pod("first", mig3g, 1)
	m := newMemory(o.MixHalfLife)
	d := c.round(o, mustPlanner(t, o), m)
	if len(d.writes) != 1 {
		t.Fatalf("first round: writes %+v, want one", d.writes)
	}
	planned := d.writes[0].node.Name
	c.now = c.now.Add(time.Second)
	c.pod("second", mig3g, 1)
	d = c.round(o, mustPlanner(t, o), m)
	var got []string
	for _, w := range d.writes {
		got = append(got, w.node.Name)
	}
	other := map[string]string{"n1": "n2", "n2": "n1"}[planned]
	if len(got) != 1 || got[0] != other {
		t.Errorf("second round (the first change not landed) writes to %q, want one to %s", got, other)
	}
	evs := strings.Join(events(d), "\n")
	if strings.Contains(evs, "first:") {
		t.Errorf("the first pod was told again:\n%s", evs)
	}
	if !strings.Contains(evs, "MigReshapePlanned second: will run on node "+other) {
		t.Errorf("Events lack the second pod planned on %s:\n%s", other, evs)
	}
}

// A pod that started and went before a round saw its agent report it
// freezes its node for the start grace; the round says when that ends, so
// that waiting pods are served then rather than at the next resync.
func TestStartGraceEndIsALook(t *testing.T) {
	o := testOptions()
	c := newCluster(t)
	c.addNode("n1", simGPU(0, all1g...))
	m := newMemory(o.MixHalfLife)
	m.started["n1"] = map[string]time.Time{"ns/short-lived": c.now}
	c.now = c.now.Add(time.Second)
	c.pod("p", mig3g, 1)
	d := c.round(o, mustPlanner(t, o), m)
	if len(d.writes) != 0 || !d.waiting {
		t.Fatalf("within the start grace: writes %+v, waiting %v; want none, waiting", d.writes, d.waiting)
	}
	if want := t0.Add(o.StartGrace); !d.lifts.Equal(want) {
		t.Fatalf("lifts %v, want the grace's end %v", d.lifts, want)
	}
	c.now = d.lifts
	d = c.round(o, mustPlanner(t, o), m)
	if len(d.writes) != 1 || !d.lifts.IsZero() {
		t.Errorf("at the grace's end: writes %+v, lifts %v; want one write, nothing left to lift", d.writes, d.lifts)
	}
}

// A pod the agent reported holding a device, even if gone by the next
// round, ends its node's start grace: the node is not frozen for it.
func TestReportedPodEndsItsStartGrace(t *testing.T) {
	tests := []struct {
		name       string
		notLeading bool
		sameLayout bool
		wantFrozen bool
		wantWrites int
	}{
		{name: "reported while leading", wantWrites: 1},
		{name: "a follower keeps nothing", notLeading: true, wantFrozen: true},
		{name: "an update without a new layout reports nothing", sameLayout: true, wantFrozen: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions()
			c := newCluster(t)
			before := c.addNode("n1", simGPU(0, all1g...)).DeepCopy()
			reporting := before.DeepCopy()
			c.setLayout(reporting, []nodeinfo.GPU{simGPU(0, "1g.10gb@0=ns/short-lived", "1g.10gb@1", "1g.10gb@2", "1g.10gb@3", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6")})
			if tc.sameLayout {
				reporting = before.DeepCopy()
			}
			ctl := &Controller{}
			ctl.leading.Store(!tc.notLeading)
			ctl.noteReported(before, reporting)

			m := newMemory(o.MixHalfLife)
			m.merge([]departure{{node: "n1", pod: "ns/short-lived", at: c.now}}, ctl.reported)
			c.now = c.now.Add(time.Second)
			c.pod("p", mig3g, 1)
			d := c.round(o, mustPlanner(t, o), m)
			if frozen := !d.lifts.IsZero(); frozen != tc.wantFrozen || len(d.writes) != tc.wantWrites {
				t.Errorf("frozen %v with %d writes, want frozen %v with %d; Events %q", frozen, len(d.writes), tc.wantFrozen, tc.wantWrites, events(d))
			}
		})
	}
}

// A GPU pod's creation is noted for the mix but starts no batch until the
// scheduler marks it unschedulable; one created marked (an informer's
// first list) starts one at once.
func TestPodAddedStartsABatchOnlyWhenUnschedulable(t *testing.T) {
	tests := []struct {
		name          string
		unschedulable bool
		wantPoke      bool
	}{
		{name: "not marked yet", unschedulable: false, wantPoke: false},
		{name: "marked unschedulable", unschedulable: true, wantPoke: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			p := c.pod("p", mig3g, 1)
			if !tc.unschedulable {
				p.Status.Conditions = nil
			}
			ctl := &Controller{trigger: make(chan struct{}, 1), opts: Options{Now: func() time.Time { return c.now }}}
			ctl.leading.Store(true)
			ctl.podAdded(p)
			poked := len(ctl.trigger) == 1
			if poked != tc.wantPoke || len(ctl.arrivals) != 1 {
				t.Errorf("poked %v with %d arrivals, want poked %v with 1", poked, len(ctl.arrivals), tc.wantPoke)
			}
		})
	}
}
