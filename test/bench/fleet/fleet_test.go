package fleet

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/webhook/fallback"
)

// snapshot builds what the webhook's informer source would hold for the
// first n nodes and the given bound pods.
func snapshot(n int, pods []*corev1.Pod) *schedview.Snapshot {
	b := schedview.NewBuilder(nil)
	for i := range n {
		node := Node(i)
		node.Status = Status(i)
		b.SetNode(schedview.NodeFromAPI(node))
	}
	for _, p := range pods {
		b.SetPod(p.Namespace+"/"+p.Name, p.Spec.NodeName, schedview.Devices(p))
	}
	return b.Snapshot()
}

func decide(t *testing.T, mode fallback.Mode, snap *schedview.Snapshot, pod *corev1.Pod) Class {
	t.Helper()
	d, err := fallback.NewDecider(fallback.Options{Policy: fallback.DefaultPolicy(), Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	dec := d.Decide(pod, snap)
	switch {
	case !dec.Allowed:
		return Denied
	case len(dec.Patch) > 0:
		return Patched
	default:
		return Unchanged
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		resp admissionv1.AdmissionResponse
		want Class
	}{
		{admissionv1.AdmissionResponse{Allowed: true}, Unchanged},
		{admissionv1.AdmissionResponse{Allowed: true, Patch: []byte(`[{"op":"add"}]`)}, Patched},
		{admissionv1.AdmissionResponse{Allowed: false}, Denied},
	} {
		if got := Classify(&tc.resp); got != tc.want {
			t.Errorf("Classify(allowed=%v, patch=%q) = %s, want %s", tc.resp.Allowed, tc.resp.Patch, got, tc.want)
		}
	}
}

// TestMixOutcomes is what makes the benchmark's mix honest: every kind of
// pod gets the class it is counted under, at every cluster size the
// benchmark runs, in both modes.
func TestMixOutcomes(t *testing.T) {
	for _, n := range []int{100, 1000, 5000} {
		pods, err := BoundPods(n, 10*n)
		if err != nil {
			t.Fatal(err)
		}
		snaps := map[fallback.Mode]*schedview.Snapshot{
			fallback.ModeExistence: snapshot(n, nil),
			fallback.ModeCapacity:  snapshot(n, pods),
		}
		for _, a := range Mix() {
			for mode, want := range a.Want {
				t.Run(fmt.Sprintf("%d/%s/%s", n, mode, a.Name), func(t *testing.T) {
					if got := decide(t, mode, snaps[mode], a.Pod); got != want {
						t.Errorf("class %s, want %s", got, want)
					}
				})
			}
		}
	}
}

func TestMixShares(t *testing.T) {
	share := map[fallback.Mode]map[Class]int{}
	for _, a := range Mix() {
		for mode, c := range a.Want {
			if share[mode] == nil {
				share[mode] = map[Class]int{}
			}
			share[mode][c] += a.Weight * 100 / MixWeight
		}
	}
	want := map[fallback.Mode]map[Class]int{
		fallback.ModeExistence: {Unchanged: 50, Patched: 30, Denied: 20},
		fallback.ModeCapacity:  {Unchanged: 40, Patched: 40, Denied: 20},
	}
	if diff := cmp.Diff(want, share); diff != "" {
		t.Errorf("shares in %% (-want +got):\n%s", diff)
	}
	seq, err := Sequence(Mix())
	if err != nil {
		t.Fatal(err)
	}
	count := make([]int, len(Mix()))
	for _, i := range seq {
		count[i]++
	}
	for i, a := range Mix() {
		if count[i] != a.Weight {
			t.Errorf("%s appears %d times in the sequence, weight %d", a.Name, count[i], a.Weight)
		}
	}
}

func TestSequenceRejectsWrongWeights(t *testing.T) {
	if _, err := Sequence([]Admission{{Name: "a", Weight: 3}}); err == nil {
		t.Error("Sequence accepted weights summing to 3")
	}
}

func TestKindShares(t *testing.T) {
	got := map[string]int{}
	cordoned, tainted := 0, 0
	for i := range 1000 {
		got[KindOf(i).Name]++
		n := Node(i)
		if n.Spec.Unschedulable {
			cordoned++
		}
		if len(n.Spec.Taints) > 0 {
			tainted++
		}
	}
	want := map[string]int{"h100-small": 250, "h100-mixed": 200, "h100-large": 100, "a100-40gb": 150, "v100": 100, "cpu": 200}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("kinds in 1000 nodes (-want +got):\n%s", diff)
	}
	if cordoned != 20 || tainted != 27 {
		t.Errorf("%d cordoned, %d tainted in 1000 nodes; want 20 and 27", cordoned, tainted)
	}
}

func TestStatusAllocatable(t *testing.T) {
	for i := range len(kindBuckets) {
		k := KindOf(i)
		st := Status(i)
		for r, want := range k.Devices {
			q := st.Allocatable[r]
			if q.Value() != want {
				t.Errorf("node %d (%s): allocatable %s = %s, want %d", i, k.Name, r, q.String(), want)
			}
		}
		gpu := schedview.NodeFromAPI(&corev1.Node{Status: st}).Allocatable
		if len(gpu) != len(k.Devices) {
			t.Errorf("node %d (%s): GPU allocatable %v, want %v", i, k.Name, gpu, k.Devices)
		}
	}
}

func TestBoundPods(t *testing.T) {
	pods, err := BoundPods(100, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 1000 {
		t.Fatalf("%d pods, want 1000", len(pods))
	}
	used := map[string]map[corev1.ResourceName]int64{}
	names := map[string]bool{}
	for _, p := range pods {
		key := p.Namespace + "/" + p.Name
		if names[key] {
			t.Fatalf("pod %s twice", key)
		}
		names[key] = true
		if used[p.Spec.NodeName] == nil {
			used[p.Spec.NodeName] = map[corev1.ResourceName]int64{}
		}
		for r, v := range schedview.Devices(p) {
			used[p.Spec.NodeName][r] += v
		}
	}
	for i := range 100 {
		k := KindOf(i)
		for r, v := range used[NodeName(i)] {
			if v > k.Devices[r] {
				t.Errorf("%s (%s): %d pods hold %s, it has %d", NodeName(i), k.Name, v, r, k.Devices[r])
			}
		}
		if k.Devices[exhausted] > 0 && used[NodeName(i)][exhausted] != k.Devices[exhausted] {
			t.Errorf("%s: %s not exhausted: %d of %d used", NodeName(i), exhausted, used[NodeName(i)][exhausted], k.Devices[exhausted])
		}
	}
	if _, err := BoundPods(10, 100000); err == nil {
		t.Error("BoundPods placed more pods than the fleet has devices")
	}
}
