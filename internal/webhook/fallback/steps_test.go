package fallback

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/resourcename"
)

// The steps of DecideContext, each on its own; decide_test.go runs them
// together.

func TestScreen(t *testing.T) {
	d, err := NewDecider(Options{Policy: DefaultPolicy(), MaxTypes: 2})
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		pod       *corev1.Pod
		outcome   Outcome // "" goes on
		wantTypes []corev1.ResourceName
		policy    PodPolicy
	}{
		"no GPU":            {pod: newPod(withContainer("a", both("cpu", "1"))), outcome: OutcomeNoGPU},
		"decided before":    {pod: gpuPod(mig2g20, "1", withAnnotation(AnnotationOriginal, "{}")), outcome: OutcomeAlreadyProcessed},
		"a bad pod policy":  {pod: gpuPod(mig2g20, "1", withAnnotation(AnnotationPolicy, "sideways")), outcome: OutcomeDenied},
		"too many types":    {pod: newPod(withContainer("a", both(string(mig1g10), "1", string(mig2g20), "1", string(mig3g40), "1"))), outcome: OutcomeTooManyTypes},
		"a fraction of one": {pod: gpuPod(mig2g20, "500m"), outcome: OutcomeInvalid},
		"goes on, with the pod's policy": {pod: gpuPod(mig2g20, "1", withAnnotation(AnnotationPolicy, "down")),
			wantTypes: []corev1.ResourceName{mig2g20}, policy: PodPolicyDown},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			in, early := d.screen(tc.pod)
			if tc.outcome != "" {
				if early == nil || early.Outcome != tc.outcome {
					t.Fatalf("screen() = %+v, %+v; want outcome %s", in, early, tc.outcome)
				}
				return
			}
			if early != nil || !cmp.Equal(tc.wantTypes, in.types) || in.policy != tc.policy {
				t.Errorf("screen() = %+v, %+v; want types %v, policy %s", in, early, tc.wantTypes, tc.policy)
			}
		})
	}
}

func TestSortTypes(t *testing.T) {
	pol := DefaultPolicy()
	pol.Chains = map[corev1.ResourceName][]corev1.ResourceName{resourcename.GPU: {mig7g80}}
	d, err := NewDecider(Options{Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	snap := snapshotOf(node("n", alloc{mig1g10: 7}))
	const odd corev1.ResourceName = "nvidia.com/mig-9g.99gb"
	tests := map[string]struct {
		types   []corev1.ResourceName
		want    []corev1.ResourceName
		warns   int
		outcome Outcome
	}{
		"MIG types, in order":               {types: []corev1.ResourceName{mig3g40, mig1g10}, want: []corev1.ResourceName{mig3g40, mig1g10}},
		"a whole GPU with a chain":          {types: []corev1.ResourceName{resourcename.GPU}, want: []corev1.ResourceName{resourcename.GPU}},
		"an unknown name beside a MIG type": {types: []corev1.ResourceName{odd, mig2g20}, want: []corev1.ResourceName{mig2g20}, warns: 1},
		"only an unknown name":              {types: []corev1.ResourceName{odd}, outcome: OutcomeUnknown},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, warnings, early := d.sortTypes(tc.types, snap)
			if tc.outcome != "" {
				if early == nil || early.Outcome != tc.outcome || len(early.Warnings) != 1 {
					t.Fatalf("sortTypes() ended with %+v, want %s with a warning", early, tc.outcome)
				}
				return
			}
			if early != nil || !cmp.Equal(tc.want, got) || len(warnings) != tc.warns {
				t.Errorf("sortTypes() = %v, %q, %+v; want %v with %d warnings", got, warnings, early, tc.want, tc.warns)
			}
		})
	}
	// Without a chain, nvidia.com/gpu is not the decider's to rewrite.
	plain, err := NewDecider(Options{Policy: DefaultPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, early := plain.sortTypes([]corev1.ResourceName{resourcename.GPU}, snap); early == nil || early.Outcome != OutcomeUnchanged {
		t.Errorf("a whole GPU without a chain: %+v, want unchanged", early)
	}
}

func TestJudge(t *testing.T) {
	snap := snapshotOf(node("n", alloc{mig1g10: 2}))
	pod := gpuPod(mig1g10, "4")
	for _, tc := range []struct {
		name         string
		opts         Options
		unsatisfied  int
		wantDone     bool
		wantOutcome  Outcome
		wantWarnings int
	}{
		{name: "too few on any node: a warning", opts: Options{}, wantOutcome: OutcomeUnchanged, wantWarnings: 1},
		{name: "too few on any node, deny", opts: Options{OnInsufficientCount: UnsatisfiableDeny}, wantDone: true, wantOutcome: OutcomeDenied},
		{name: "a type nothing fits, deny", opts: Options{}, unsatisfied: 1, wantDone: true, wantOutcome: OutcomeDenied},
		{name: "a type nothing fits, allow", opts: Options{OnUnsatisfiable: UnsatisfiableAllow}, unsatisfied: 6, wantOutcome: OutcomeUnsatisfiable, wantWarnings: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Policy = DefaultPolicy()
			d, err := NewDecider(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			c, err := d.chooseAll(context.Background(), pod, snap, []corev1.ResourceName{mig1g10}, PodPolicyAny, nil)
			if err != nil {
				t.Fatal(err)
			}
			c.unsatisfied = tc.unsatisfied
			for range min(tc.unsatisfied, maxListed) {
				c.explained = append(c.explained, "x is nowhere")
			}
			dec, done := d.judge(c, nil)
			if done != tc.wantDone || dec.Outcome != tc.wantOutcome || len(dec.Warnings) != tc.wantWarnings {
				t.Errorf("judge() = %+v, done %v; want %s, done %v, %d warnings", dec, done, tc.wantOutcome, tc.wantDone, tc.wantWarnings)
			}
			if tc.unsatisfied > maxListed && !strings.Contains(dec.Warnings[0], "and 2 more types") {
				t.Errorf("warning %q does not count the types left out", dec.Warnings[0])
			}
		})
	}
}

func TestChooseAllStopsWhenAsked(t *testing.T) {
	d, err := NewDecider(Options{Policy: DefaultPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := d.chooseAll(ctx, gpuPod(mig2g20, "1"), snapshotOf(node("n", alloc{mig1g10: 7})), []corev1.ResourceName{mig2g20}, PodPolicyAny, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("chooseAll() with a canceled context: %v", err)
	}
}

func TestWithPatch(t *testing.T) {
	d, err := NewDecider(Options{Policy: DefaultPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	pod := gpuPod(mig2g20, "1")
	rw := []Rewrite{{From: mig2g20, To: mig1g10, Reason: ReasonAbsent}}
	if got := d.withPatch(pod, Decision{Outcome: OutcomeUnchanged, Allowed: true}); got.Patch != nil || got.Outcome != OutcomeUnchanged {
		t.Errorf("no rewrites: %+v", got)
	}
	if got := d.withPatch(pod, Decision{Outcome: OutcomeUnchanged, Allowed: true, Rewrites: rw}); len(got.Patch) == 0 || got.Outcome != OutcomeRewritten {
		t.Errorf("a rewrite: %+v", got)
	}
	if got := d.withPatch(pod, Decision{Outcome: OutcomeUnsatisfiable, Allowed: true, Rewrites: rw}); len(got.Patch) == 0 || got.Outcome != OutcomeUnsatisfiable {
		t.Errorf("a rewrite beside a type nothing fits keeps its outcome: %+v", got)
	}
	d.marshal = func(any) ([]byte, error) { return nil, errors.New("no JSON today") }
	if got := d.withPatch(pod, Decision{Outcome: OutcomeUnchanged, Allowed: true, Rewrites: rw}); got.Outcome != OutcomeError || got.Err == nil {
		t.Errorf("a failing encoder: %+v", got)
	}
}
