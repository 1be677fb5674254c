package migconfig

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	gocmp "github.com/google/go-cmp/cmp"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/nvml/nvmlmig"
)

// fakePartitioner keeps MIG state per GPU with the hardware's rules (valid
// starts, no overlap, max counts, MIG on to create) and fails on request.
type fakePartitioner struct {
	gpus map[int]*fakeGPU
	// fail makes the n-th call (1-based) on GPU failGPU return failErr;
	// failAlso adds more call numbers, e.g. inside the rollback.
	failGPU  int
	fail     int
	failAlso []int
	failErr  error
	// afterCall runs after every call on failGPU with its number.
	afterCall func(n int)
	calls     map[int]int
	log       []string
}

type fakeGPU struct {
	profiles  []mig.Profile
	enabled   bool
	instances []mig.Instance
	nextGI    uint32
}

var errInjected = errors.New("injected failure")

func newFake(node []mig.GPU) *fakePartitioner {
	f := &fakePartitioner{gpus: map[int]*fakeGPU{}, failGPU: -1, failErr: errInjected, calls: map[int]int{}}
	for _, g := range node {
		fg := &fakeGPU{profiles: g.Profiles, enabled: g.MigPending, instances: slices.Clone(g.Instances), nextGI: 100}
		f.gpus[g.Index] = fg
	}
	return f
}

func (f *fakePartitioner) step(gpu int, what string) error {
	f.log = append(f.log, fmt.Sprintf("GPU %d: %s", gpu, what))
	f.calls[gpu]++
	n := f.calls[gpu]
	if gpu == f.failGPU && f.afterCall != nil {
		defer f.afterCall(n)
	}
	if gpu == f.failGPU && (n == f.fail || slices.Contains(f.failAlso, n)) {
		return f.failErr
	}
	if _, ok := f.gpus[gpu]; !ok {
		return fmt.Errorf("no GPU %d", gpu)
	}
	return nil
}

func (f *fakePartitioner) SetMigMode(gpu int, enabled bool) error {
	if err := f.step(gpu, fmt.Sprintf("mig %v", enabled)); err != nil {
		return err
	}
	g := f.gpus[gpu]
	if len(g.instances) > 0 {
		return errors.New("GPU has instances")
	}
	g.enabled = enabled
	return nil
}

func (f *fakePartitioner) CreateInstance(gpu int, profile string, start int) (mig.Instance, error) {
	if err := f.step(gpu, fmt.Sprintf("create %s@%d", profile, start)); err != nil {
		return mig.Instance{}, err
	}
	g := f.gpus[gpu]
	if !g.enabled {
		return mig.Instance{}, errors.New("MIG is off")
	}
	i := slices.IndexFunc(g.profiles, func(p mig.Profile) bool { return p.Name == profile })
	if i < 0 {
		return mig.Instance{}, fmt.Errorf("no profile %s", profile)
	}
	p := g.profiles[i]
	if !slices.Contains(p.Placements, start) {
		return mig.Instance{}, fmt.Errorf("bad start %d", start)
	}
	count := 0
	for _, in := range g.instances {
		if in.Start < start+p.MemorySlices && start < in.Start+in.Size {
			return mig.Instance{}, fmt.Errorf("insufficient resources: overlaps %s@%d", in.Profile, in.Start)
		}
		if in.Profile == profile {
			count++
		}
	}
	if count >= p.MaxCount {
		return mig.Instance{}, errors.New("insufficient resources: max count")
	}
	g.nextGI++
	in := mig.Instance{Profile: profile, Start: start, Size: p.MemorySlices, GIID: g.nextGI, HasCI: true, UUID: fmt.Sprintf("MIG-%d-%d", gpu, g.nextGI)}
	g.instances = append(g.instances, in)
	return in, nil
}

func (f *fakePartitioner) DestroyInstance(gpu int, gi uint32) error {
	if err := f.step(gpu, fmt.Sprintf("destroy GI %d", gi)); err != nil {
		return err
	}
	g := f.gpus[gpu]
	i := slices.IndexFunc(g.instances, func(in mig.Instance) bool { return in.GIID == gi })
	if i < 0 {
		return fmt.Errorf("no GI %d", gi)
	}
	g.instances = slices.Delete(g.instances, i, i+1)
	return nil
}

// layout is the fake GPU's instances as placements, ordered by start.
func (f *fakePartitioner) layout(gpu int) []Placement {
	var out []Placement
	for _, in := range f.gpus[gpu].instances {
		out = append(out, Placement{in.Profile, in.Start, in.Size})
	}
	slices.SortFunc(out, func(a, b Placement) int { return cmp.Compare(a.Start, b.Start) })
	return out
}

func (f *fakePartitioner) sortedInstances(gpu int) []mig.Instance {
	return sortedInstances(f.gpus[gpu].instances)
}

func placementsOf(in []mig.Instance) []Placement {
	var out []Placement
	for _, x := range sortedInstances(in) {
		out = append(out, Placement{x.Profile, x.Start, x.Size})
	}
	return out
}

// applyScenario is a node and what to ask of GPU 1; GPUs 0 and 2 always
// change too, so a failure on GPU 1 can be seen not to stop them.
type applyScenario struct {
	gpu1    mig.GPU
	desired Desired
	steps   int
}

func scenarioNode(gpu1 mig.GPU) ([]mig.GPU, []Desired) {
	node := []mig.GPU{gpu(0, h100, at("7g.80gb", 0)), gpu1, migOff(2, h100)}
	return node, []Desired{
		{GPU: 0, MigEnabled: true, Profiles: map[string]int{"3g.40gb": 2}},
		{GPU: 2, MigEnabled: true, Profiles: map[string]int{"4g.40gb": 1}},
	}
}

var applyScenarios = map[string]applyScenario{
	"destroy and create, keeping one": {
		gpu1:    gpu(1, h100, at("3g.40gb", 0), at("3g.40gb", 4)),
		desired: Desired{GPU: 1, MigEnabled: true, Profiles: map[string]int{"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}},
		steps:   3, // destroy 3g@4, create 2g@4, create 1g@6
	},
	"enable MIG and create": {
		gpu1:    migOff(1, h100),
		desired: Desired{GPU: 1, MigEnabled: true, Profiles: map[string]int{"4g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}},
		steps:   4,
	},
	"destroy all and disable MIG": {
		gpu1:    gpu(1, h100, at("1g.10gb", 0), at("1g.10gb", 1), at("3g.40gb", 4)),
		desired: Desired{GPU: 1},
		steps:   4,
	},
	"replace everything": {
		gpu1:    gpu(1, a100x40, at("1g.5gb", 0), at("1g.5gb", 3), at("2g.10gb", 4)),
		desired: Desired{GPU: 1, MigEnabled: true, Profiles: map[string]int{"4g.20gb": 1, "3g.20gb": 1}},
		steps:   5,
	},
}

func planScenario(t *testing.T, sc applyScenario) ([]mig.GPU, Plan) {
	t.Helper()
	node, desired := scenarioNode(sc.gpu1)
	desired = append(desired, sc.desired)
	plan, err := MakePlan(node, desired)
	if err != nil {
		t.Fatalf("MakePlan: %v", err)
	}
	return node, plan
}

func TestApply(t *testing.T) {
	for name, sc := range applyScenarios {
		t.Run(name, func(t *testing.T) {
			node, plan := planScenario(t, sc)
			f := newFake(node)
			res, err := Apply(context.Background(), f, plan)
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if f.calls[1] != sc.steps {
				t.Errorf("GPU 1 took %d calls, want %d: %v", f.calls[1], sc.steps, f.log)
			}
			for i, gp := range plan.GPUs {
				r := res.GPUs[i]
				if r.GPU != gp.GPU || r.Outcome != OutcomeApplied || r.Err != nil || r.Busy {
					t.Errorf("GPU %d: result %+v, want applied", gp.GPU, r)
				}
				if diff := gocmp.Diff(gp.After(), f.layout(gp.GPU)); diff != "" {
					t.Errorf("GPU %d layout (-plan +fake):\n%s", gp.GPU, diff)
				}
				if diff := gocmp.Diff(f.sortedInstances(gp.GPU), r.Instances); diff != "" {
					t.Errorf("GPU %d reported instances (-fake +result):\n%s", gp.GPU, diff)
				}
				if r.MigEnabled != f.gpus[gp.GPU].enabled {
					t.Errorf("GPU %d: result says MIG %v, fake has %v", gp.GPU, r.MigEnabled, f.gpus[gp.GPU].enabled)
				}
			}
		})
	}
}

// TestApplyFailureAtEveryStep fails GPU 1's plan at each of its steps in turn:
// GPU 1 must end on its old layout and mode, and GPUs 0 and 2 still change.
func TestApplyFailureAtEveryStep(t *testing.T) {
	for name, sc := range applyScenarios {
		for k := 1; k <= sc.steps; k++ {
			t.Run(fmt.Sprintf("%s/step %d", name, k), func(t *testing.T) {
				node, plan := planScenario(t, sc)
				f := newFake(node)
				f.failGPU, f.fail = 1, k
				res, err := Apply(context.Background(), f, plan)
				if err == nil {
					t.Fatal("Apply succeeded, want GPU 1's error")
				}
				if !errors.Is(err, errInjected) {
					t.Errorf("error does not wrap the failure: %v", err)
				}
				if !strings.HasPrefix(err.Error(), "GPU 1 (") || !strings.Contains(err.Error(), "; rolled back, the previous layout is back (") {
					t.Errorf("error = %q, want GPU 1's failure and its rollback", err)
				}
				before := node[1]
				if diff := gocmp.Diff(placementsOf(before.Instances), f.layout(1)); diff != "" {
					t.Errorf("GPU 1 not back on its old layout (-old +now):\n%s\nlog: %v", diff, f.log)
				}
				if f.gpus[1].enabled != before.MigPending {
					t.Errorf("GPU 1 MIG mode %v, want the old %v", f.gpus[1].enabled, before.MigPending)
				}
				r := res.GPUs[1]
				if r.Outcome != OutcomeRolledBack || r.Err == nil || r.Busy {
					t.Errorf("GPU 1 result %+v, want rolled back", r)
				}
				if diff := gocmp.Diff(f.sortedInstances(1), r.Instances); diff != "" {
					t.Errorf("GPU 1 reported instances (-fake +result):\n%s", diff)
				}
				for _, i := range []int{0, 2} {
					if res.GPUs[i].Outcome != OutcomeApplied {
						t.Errorf("GPU %d: %v, want applied despite GPU 1", i, res.GPUs[i].Outcome)
					}
					if diff := gocmp.Diff(plan.GPUs[i].After(), f.layout(i)); diff != "" {
						t.Errorf("GPU %d layout (-plan +fake):\n%s", i, diff)
					}
				}
			})
		}
	}
}

func TestApplyMessages(t *testing.T) {
	keepOne := applyScenarios["destroy and create, keeping one"]
	tests := map[string]struct {
		sc       applyScenario
		fail     int
		failAlso []int
		failErr  error
		outcome  Outcome
		busy     bool
		// calls, when set, is how many calls GPU 1 must see in all.
		calls int
		want  string
	}{
		"create fails, rolled back": {
			sc: keepOne, fail: 3, outcome: OutcomeRolledBack,
			want: "GPU 1 (H100-SXM5-80GB): create 1g.10gb@6:1: injected failure; rolled back, the previous layout is back (3g.40gb@0:4, 3g.40gb@4:4)",
		},
		"rollback fails too, and says so": {
			// Destroying the new 2g fails, so the old 3g cannot come back at 4.
			sc: keepOne, fail: 3, failAlso: []int{4}, outcome: OutcomeRollbackFailed,
			want: "GPU 1 (H100-SXM5-80GB): create 1g.10gb@6:1: injected failure; rollback FAILED, the GPU is left with 3g.40gb@0:4, 2g.20gb@4:2 instead of the previous 3g.40gb@0:4, 3g.40gb@4:4: destroy 2g.20gb@4:2 (GI 101): injected failure\n" +
				"recreate 3g.40gb@4:4: insufficient resources: overlaps 2g.20gb@4",
		},
		"destroy of a busy instance": {
			sc: keepOne, fail: 1, failErr: busyErr, outcome: OutcomeRolledBack, busy: true,
			want: "GPU 1 (H100-SXM5-80GB): destroy 3g.40gb@4:4 (GI 2), instance busy: GPU 1: destroy GPU instance 2: ERROR_IN_USE; rolled back, the previous layout is back (3g.40gb@0:4, 3g.40gb@4:4)",
		},
		"mode change fails": {
			sc: applyScenarios["destroy all and disable MIG"], fail: 4, outcome: OutcomeRolledBack,
			want: "GPU 1 (H100-SXM5-80GB): disable MIG: injected failure; rolled back, the previous layout is back (1g.10gb@0:1, 1g.10gb@1:1, 3g.40gb@4:4)",
		},
		"enable waits for a reset: not undone, creates left for later": {
			sc: applyScenarios["enable MIG and create"], fail: 1, outcome: OutcomeResetRequired,
			failErr: &nvmlmig.Error{GPU: 1, Op: "enable MIG mode: pending until GPU reset", Ret: nvml.ERROR_RESET_REQUIRED},
			calls:   1,
			want:    "GPU 1 (H100-SXM5-80GB): enable MIG: GPU 1: enable MIG mode: pending until GPU reset: ERROR_RESET_REQUIRED; the change waits for a GPU reset, 3 instance(s) still to create after it",
		},
		"a create that does not return: nothing else is called, not even the rollback": {
			sc: keepOne, fail: 3, outcome: OutcomeAbandoned, failErr: errNoReturn, calls: 3,
			want: "GPU 1 (H100-SXM5-80GB): create 1g.10gb@6:1: GPU 1: create has not returned for 2m0s: the call has not returned; not rolled back while the call may still run",
		},
		"enable fails": {
			sc: applyScenarios["enable MIG and create"], fail: 1, outcome: OutcomeRolledBack,
			want: "GPU 1 (H100-SXM5-80GB): enable MIG: injected failure; rolled back, the previous layout is back (MIG disabled)",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			node, plan := planScenario(t, tc.sc)
			f := newFake(node)
			f.failGPU, f.fail, f.failAlso = 1, tc.fail, tc.failAlso
			if tc.failErr != nil {
				f.failErr = tc.failErr
			}
			res, err := Apply(context.Background(), f, plan)
			if err == nil {
				t.Fatal("Apply succeeded")
			}
			if err.Error() != tc.want {
				t.Errorf("error:\n got %q\nwant %q", err, tc.want)
			}
			r := res.GPUs[1]
			if r.Outcome != tc.outcome || r.Busy != tc.busy {
				t.Errorf("GPU 1: outcome %v busy %v, want %v busy %v", r.Outcome, r.Busy, tc.outcome, tc.busy)
			}
			if diff := gocmp.Diff(f.sortedInstances(1), r.Instances); diff != "" {
				t.Errorf("GPU 1 reported instances (-fake +result):\n%s", diff)
			}
			if tc.calls != 0 && f.calls[1] != tc.calls {
				t.Errorf("GPU 1 saw %d calls, want %d: %v", f.calls[1], tc.calls, f.log)
			}
			if tc.failErr != nil && !errors.Is(err, tc.failErr) {
				t.Errorf("error does not wrap %v", tc.failErr)
			}
		})
	}
}

// errNoReturn is a call the caller stopped waiting for.
var errNoReturn = fmt.Errorf("GPU 1: create has not returned for 2m0s: %w", mig.ErrNoReturn)

// busyErr is what nvmlmig.Partitioner returns for an instance with processes.
var busyErr = &nvmlmig.Error{GPU: 1, Op: "destroy GPU instance 2", Ret: nvml.ERROR_IN_USE}

func TestApplyContext(t *testing.T) {
	sc := applyScenarios["destroy and create, keeping one"]

	t.Run("cancelled before: nothing is touched", func(t *testing.T) {
		node, plan := planScenario(t, sc)
		f := newFake(node)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		res, err := Apply(ctx, f, plan)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Apply error = %v, want context.Canceled", err)
		}
		if len(f.log) != 0 {
			t.Errorf("calls after cancellation: %v", f.log)
		}
		for _, r := range res.GPUs {
			if r.Outcome != OutcomeSkipped {
				t.Errorf("GPU %d: %v, want skipped", r.GPU, r.Outcome)
			}
		}
	})

	for k := 1; k < sc.steps; k++ {
		t.Run(fmt.Sprintf("cancelled after step %d: GPU 1 rolled back, GPU 2 skipped", k), func(t *testing.T) {
			node, plan := planScenario(t, sc)
			f := newFake(node)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			f.failGPU = 1
			f.afterCall = func(n int) {
				if n == k {
					cancel()
				}
			}
			res, err := Apply(ctx, f, plan)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Apply error = %v, want context.Canceled", err)
			}
			if !strings.Contains(err.Error(), "GPU 1 (H100-SXM5-80GB): stopped before ") {
				t.Errorf("error = %q, want GPU 1 stopped", err)
			}
			if got := res.GPUs[1].Outcome; got != OutcomeRolledBack {
				t.Errorf("GPU 1: %v, want rolled back", got)
			}
			if diff := gocmp.Diff(placementsOf(node[1].Instances), f.layout(1)); diff != "" {
				t.Errorf("GPU 1 not back on its old layout (-old +now):\n%s", diff)
			}
			if got := res.GPUs[0].Outcome; got != OutcomeApplied {
				t.Errorf("GPU 0: %v, want applied", got)
			}
			if got := res.GPUs[2].Outcome; got != OutcomeSkipped {
				t.Errorf("GPU 2: %v, want skipped", got)
			}
			if f.calls[2] != 0 {
				t.Errorf("GPU 2 was touched after cancellation: %v", f.log)
			}
		})
	}
}

func TestApplyUnchangedMakesNoCalls(t *testing.T) {
	node := []mig.GPU{gpu(0, h100, at("3g.40gb", 0), at("3g.40gb", 4)), migOff(1, h100)}
	plan, err := MakePlan(node, []Desired{
		{GPU: 0, MigEnabled: true, Profiles: map[string]int{"3g.40gb": 2}},
		{GPU: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	f := newFake(node)
	res, err := Apply(context.Background(), f, plan)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if len(f.log) != 0 {
		t.Errorf("calls for a plan with nothing to do: %v", f.log)
	}
	want := Result{GPUs: []GPUResult{
		{GPU: 0, Outcome: OutcomeUnchanged, Instances: sortedInstances(node[0].Instances), MigEnabled: true},
		{GPU: 1, Outcome: OutcomeUnchanged},
	}}
	if diff := gocmp.Diff(want, res); diff != "" {
		t.Errorf("Apply (-want +got):\n%s", diff)
	}
}
