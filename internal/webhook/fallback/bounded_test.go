package fallback

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"

	"github.com/migflex/migflex/internal/domain/resourcename"
)

// Generated pods the size of the adversarial run in issue 14: what a pod
// creator can send is bounded only by the API server's request size.

// manyTypesPod has one container naming n distinct MIG profiles (well
// formed, so that every one would be a type to decide), in limits only, as
// the 1.9 MB pod of the issue did.
func manyTypesPod(n int, memoryBase int) *corev1.Pod {
	l := corev1.ResourceList{}
	for i := range n {
		l[corev1.ResourceName(fmt.Sprintf("nvidia.com/mig-%dg.%dgb", i%7+1, memoryBase+i))] = resource.MustParse("1")
	}
	return newPod(withContainer("main", corev1.ResourceRequirements{Limits: l}))
}

// wideTypes are eight known profiles an A100-only cluster lacks.
var wideTypes = []corev1.ResourceName{
	mig2g20, mig3g40, mig4g40, mig7g80, mig1g20,
	"nvidia.com/mig-2g.10gb", "nvidia.com/mig-3g.20gb", "nvidia.com/mig-4g.20gb",
}

// widePod has containers containers each asking for one of every wideTypes,
// with container names of nameLen bytes.
func widePod(containers, nameLen int) *corev1.Pod {
	p := newPod()
	for c := range containers {
		kv := make([]string, 0, 2*len(wideTypes))
		for _, r := range wideTypes {
			kv = append(kv, string(r), "1")
		}
		name := fmt.Sprintf("c%0*d", nameLen-1, c)
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: name, Image: "cuda", Resources: both(kv...)})
	}
	return p
}

// allocBytes is the bytes f allocates, averaged over runs (after one
// warm-up), by runtime.MemStats; testing.AllocsPerRun counts objects only.
func allocBytes(runs int, f func()) uint64 {
	f()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(runs)
}

func mustDecider(t testing.TB, o Options) *Decider {
	t.Helper()
	if o.Policy.Chains == nil && !o.Policy.AllowDown {
		o.Policy = DefaultPolicy()
	}
	d, err := NewDecider(o)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// A pod naming more GPU types than the cap is left as it is with a warning,
// after work that does not grow with the number of names: the decision for
// 55,000 distinct names (the pod) allocates no more than for one
// name over the cap, in objects and in bytes.
func TestDecideCapsTypesPerPod(t *testing.T) {
	snap := snapshotOf(node("a100", alloc{mig1g10: 28}))
	d := mustDecider(t, Options{})
	justOver := manyTypesPod(DefaultMaxTypes+1, 100)
	huge := manyTypesPod(55000, 100)

	for name, pod := range map[string]*corev1.Pod{"cap+1": justOver, "55000": huge} {
		got := d.Decide(pod, snap)
		if got.Outcome != OutcomeTooManyTypes || !got.Allowed || len(got.Patch) != 0 || len(got.Rewrites) != 0 {
			t.Fatalf("%s types: outcome %s, allowed %v, %d rewrites, patch %v: want %s, allowed, unchanged",
				name, got.Outcome, got.Allowed, len(got.Rewrites), got.Patch, OutcomeTooManyTypes)
		}
		if len(got.Warnings) != 1 || !strings.Contains(got.Warnings[0], fmt.Sprintf("more than %d GPU resource types", DefaultMaxTypes)) {
			t.Errorf("%s types: warnings %q, want one naming the cap", name, got.Warnings)
		}
	}

	base := testing.AllocsPerRun(5, func() { d.Decide(justOver, snap) })
	many := testing.AllocsPerRun(5, func() { d.Decide(huge, snap) })
	if many > base {
		t.Errorf("deciding on 55000 types allocates %v objects, on %d types %v: want no more", many, DefaultMaxTypes+1, base)
	}
	baseBytes := allocBytes(5, func() { d.Decide(justOver, snap) })
	manyBytes := allocBytes(5, func() { d.Decide(huge, snap) })
	t.Logf("bytes per decision: %d types %d, 55000 types %d", DefaultMaxTypes+1, baseBytes, manyBytes)
	// MemStats counts every goroutine's allocations: allow a little noise.
	if manyBytes > baseBytes+4<<10 {
		t.Errorf("deciding on 55000 types allocates %d bytes, on %d types %d: want no more", manyBytes, DefaultMaxTypes+1, baseBytes)
	}
}

// The cap counts distinct types across containers, init containers,
// requests and limits; a pod at the cap is decided.
func TestDecideCapCountsDistinctTypes(t *testing.T) {
	snap := snapshotOf(node("a100", alloc{mig1g10: 28}))
	kv := func(from, n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("nvidia.com/mig-%dg.%dgb", i%7+1, 100+from+i), "1")
		}
		return out
	}
	tests := map[string]struct {
		pod  *corev1.Pod
		max  int
		want Outcome
	}{
		"at the cap, repeated in every container": {
			pod:  newPod(withContainer("a", both(kv(0, 4)...)), withContainer("b", both(kv(0, 4)...)), withInit("i", both(kv(0, 4)...))),
			max:  4,
			want: OutcomeUnknown,
		},
		"over the cap across containers": {
			pod:  newPod(withContainer("a", both(kv(0, 3)...)), withContainer("b", both(kv(3, 2)...))),
			max:  4,
			want: OutcomeTooManyTypes,
		},
		"over the cap through an init container": {
			pod:  newPod(withContainer("a", both(kv(0, 4)...)), withInit("i", both(kv(4, 1)...))),
			max:  4,
			want: OutcomeTooManyTypes,
		},
		"zero quantities do not count": {
			pod:  newPod(withContainer("a", both(append(kv(0, 4), "nvidia.com/mig-1g.99gb", "0")...))),
			max:  4,
			want: OutcomeUnknown,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d := mustDecider(t, Options{MaxTypes: tc.max})
			if got := d.Decide(tc.pod, snap); got.Outcome != tc.want {
				t.Errorf("outcome %s (%q), want %s", got.Outcome, got.Warnings, tc.want)
			}
		})
	}
}

// Messages and warnings stay bounded whatever the pod and the cluster: a
// denial of every type at the cap, on a cluster with hundreds of GPU types,
// names the first few of each list and says how many more. (The issue's
// 20,000-name denial is over the cap and never reaches the explanation.)
func TestDecideMessagesAreBounded(t *testing.T) {
	present := alloc{}
	for i := range 300 {
		present[corev1.ResourceName(fmt.Sprintf("nvidia.com/mig-1g.%dgb", 1000+i))] = 1
	}
	snap := snapshotOf(node("n", present))
	noFallback := newPod(withAnnotation(AnnotationPolicy, "none"))
	var kv []string
	for _, r := range knownAbsentTypes(DefaultMaxTypes) {
		kv = append(kv, string(r), "1")
	}
	withContainer("main", both(kv...))(noFallback)
	huge := manyTypesPod(20000, 100)

	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		opts Options
	}{
		"denied":                 {noFallback, Options{}},
		"allowed with a warning": {noFallback, Options{OnUnsatisfiable: UnsatisfiableAllow}},
		"a 1 MiB pod policy":     {gpuPod(mig2g20, "1", withAnnotation(AnnotationPolicy, strings.Repeat("x", 1<<20))), Options{}},
		"20000 names":            {huge, Options{}},
		"20000 names, allowed":   {huge, Options{OnUnsatisfiable: UnsatisfiableAllow}},
	} {
		t.Run(name, func(t *testing.T) {
			got := mustDecider(t, tc.opts).Decide(tc.pod, snap)
			if len(got.Message) > maxMessage {
				t.Errorf("message is %d bytes, want at most %d", len(got.Message), maxMessage)
			}
			total := 0
			for _, w := range got.Warnings {
				if len(w) > maxWarning {
					t.Errorf("warning is %d bytes, want at most %d: %.200s...", len(w), maxWarning, w)
				}
				total += len(w)
			}
			// The API server keeps 4096 characters of warnings per request.
			if total > 4096 {
				t.Errorf("warnings total %d bytes", total)
			}
			if tc.pod == noFallback {
				text := got.Message + strings.Join(got.Warnings, "")
				for _, want := range []string{"; and 12 more types", "GPU types there: nvidia.com/mig-1g.1000gb, nvidia.com/mig-1g.1001gb, nvidia.com/mig-1g.1002gb, nvidia.com/mig-1g.1003gb and 296 more"} {
					if !strings.Contains(text, want) {
						t.Errorf("text %.300q... lacks %q", text, want)
					}
				}
			}
		})
	}
}

// knownAbsentTypes are n known MIG profiles (from the known table) for
// pods that must name real types.
func knownAbsentTypes(n int) []corev1.ResourceName {
	var out []corev1.ResourceName
	for _, s := range []string{"1g.5gb", "1g.6gb", "1g.12gb", "1g.18gb", "1g.20gb", "1g.23gb", "1g.24gb", "1g.34gb",
		"1g.35gb", "1g.36gb", "1g.45gb", "1g.47gb", "1g.67gb", "1g.70gb", "2g.10gb", "2g.12gb", "2g.20gb", "2g.24gb"} {
		if len(out) == n {
			break
		}
		out = append(out, corev1.ResourceName(resourcename.MIGPrefix+s))
	}
	return out
}

// The rewrite never makes a valid pod invalid: when its annotations would
// take the pod over the API server's limit on annotations (256 KiB for all
// of them), the pod is left as it was, with a warning. The pod, 500
// containers of 8 types each, needed 276 KB.
func TestDecideNeverExceedsAnnotationLimit(t *testing.T) {
	snap := snapshotOf(node("a100", alloc{mig1g10: 28 * 500}))
	d := mustDecider(t, Options{})
	bigAnnotation := strings.Repeat("x", apivalidation.TotalAnnotationSizeLimitB-len("team")-100)
	tests := map[string]struct {
		pod       *corev1.Pod
		rewritten bool
	}{
		"500 containers x 8 types, 40-byte container names: over": {widePod(500, 40), false},
		"500 containers x 8 types, 4-byte container names: under": {widePod(500, 4), true},
		"one rewrite beside large annotations of the pod's own":   {gpuPod(mig2g20, "1", withAnnotation("team", bigAnnotation)), false},
		"one rewrite beside annotations that leave room":          {gpuPod(mig2g20, "1", withAnnotation("team", bigAnnotation[:len(bigAnnotation)-1000])), true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := d.Decide(tc.pod, snap)
			if !tc.rewritten {
				if got.Outcome != OutcomeTooLarge || !got.Allowed || len(got.Patch) != 0 || len(got.Rewrites) != 0 {
					t.Fatalf("outcome %s, allowed %v, %d rewrites, %d patch ops: want %s, allowed, unchanged",
						got.Outcome, got.Allowed, len(got.Rewrites), len(got.Patch), OutcomeTooLarge)
				}
				if len(got.Warnings) != 1 || !strings.Contains(got.Warnings[0], "over the API server's limit of 262144") {
					t.Errorf("warnings %q", got.Warnings)
				}
				return
			}
			if got.Outcome != OutcomeRewritten {
				t.Fatalf("outcome %s (%q), want %s", got.Outcome, got.Warnings, OutcomeRewritten)
			}
			patched := applyPatch(t, tc.pod, got.Patch)
			// The API server's own check, on the pod as it would store it.
			if err := apivalidation.ValidateAnnotationsSize(patched.Annotations); err != nil {
				t.Errorf("patched pod: %v", err)
			}
		})
	}
}

// countdown is a context whose Err is nil for its first n calls and
// context.Canceled after, so a test can end it in the middle of a decision.
type countdown struct {
	context.Context
	n atomic.Int64
}

func (c *countdown) Err() error {
	if c.n.Add(-1) < 0 {
		return context.Canceled
	}
	return nil
}

// A decision stops once its context ends (the API server gave up): it
// answers OutcomeCanceled, with no patch, whether the context ended before
// it started or between the types it decides.
func TestDecideStopsWhenContextEnds(t *testing.T) {
	snap := snapshotOf(node("a100", alloc{mig1g10: 28}))
	d := mustDecider(t, Options{})
	var kv []string
	for _, r := range wideTypes {
		kv = append(kv, string(r), "1")
	}
	pod := newPod(withContainer("main", both(kv...)))
	if got := d.Decide(pod, snap); got.Outcome != OutcomeRewritten || len(got.Rewrites) != len(wideTypes) {
		t.Fatalf("with no deadline: %s with %d rewrites", got.Outcome, len(got.Rewrites))
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for name, ctx := range map[string]context.Context{
		"ended before":          done,
		"ends after two types":  newCountdown(2),
		"ends before the patch": newCountdown(int64(len(wideTypes))),
	} {
		got := d.DecideContext(ctx, pod, snap)
		if got.Outcome != OutcomeCanceled || got.Err == nil || len(got.Patch) != 0 {
			t.Errorf("%s: outcome %s, err %v, %d patch ops: want %s with the context's error and no patch", name, got.Outcome, got.Err, len(got.Patch), OutcomeCanceled)
		}
	}
}

func newCountdown(n int64) *countdown {
	c := &countdown{Context: context.Background()}
	c.n.Store(n)
	return c
}
