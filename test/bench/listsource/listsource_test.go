package listsource

import (
	"errors"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/migflex/migflex/internal/webhook/fallback"
	"github.com/migflex/migflex/test/bench/fleet"
)

const nodes = 40

func fakeFleet(t *testing.T) *fake.Clientset {
	t.Helper()
	var objs []runtime.Object
	for i := range nodes {
		n := fleet.Node(i)
		n.Status = fleet.Status(i)
		objs = append(objs, n)
	}
	pods, err := fleet.BoundPods(nodes, 10*nodes)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		objs = append(objs, p)
	}
	return fake.NewClientset(objs...)
}

func countLists(c *fake.Clientset) map[string]int {
	lists := map[string]int{}
	for _, a := range c.Actions() {
		if a.GetVerb() == "list" {
			lists[a.GetResource().Resource]++
		}
	}
	return lists
}

func TestSnapshotListsEveryCall(t *testing.T) {
	for name, tc := range map[string]struct {
		withPods  bool
		mode      fallback.Mode
		wantLists map[string]int
	}{
		"existence": {mode: fallback.ModeExistence, wantLists: map[string]int{"nodes": 3}},
		"capacity":  {withPods: true, mode: fallback.ModeCapacity, wantLists: map[string]int{"nodes": 3, "pods": 3}},
	} {
		t.Run(name, func(t *testing.T) {
			c := fakeFleet(t)
			s := New(c, tc.withPods, ktesting.NewLogger(t, ktesting.DefaultConfig))
			d, err := fallback.NewDecider(fallback.Options{Policy: fallback.DefaultPolicy(), Mode: tc.mode})
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				snap, ok := s.Snapshot()
				if !ok {
					t.Fatal("Snapshot not ok")
				}
				if snap.Nodes() != nodes {
					t.Errorf("snapshot of %d nodes, want %d", snap.Nodes(), nodes)
				}
				// The same outcomes as the informer-backed view: the
				// mix's expectations hold on the listed snapshot.
				for _, a := range fleet.Mix() {
					dec := d.Decide(a.Pod, snap)
					got := fleet.Classify(responseOf(dec))
					if want := a.Want[tc.mode]; got != want {
						t.Errorf("%s: class %s, want %s", a.Name, got, want)
					}
				}
			}
			if got := countLists(c); got["nodes"] != tc.wantLists["nodes"] || got["pods"] != tc.wantLists["pods"] {
				t.Errorf("lists %v, want %v", got, tc.wantLists)
			}
			if s.Errors() != 0 {
				t.Errorf("%d errors", s.Errors())
			}
		})
	}
}

func TestSnapshotListError(t *testing.T) {
	for _, resource := range []string{"nodes", "pods"} {
		t.Run(resource, func(t *testing.T) {
			c := fakeFleet(t)
			c.PrependReactor("list", resource, func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, errors.New("etcd is gone")
			})
			s := New(c, true, ktesting.NewLogger(t, ktesting.DefaultConfig))
			if snap, ok := s.Snapshot(); ok || snap != nil {
				t.Errorf("Snapshot = %v, %v after a failed list; want nil, false", snap, ok)
			}
			if s.Errors() != 1 {
				t.Errorf("Errors() = %d, want 1", s.Errors())
			}
		})
	}
}

func responseOf(d fallback.Decision) *admissionv1.AdmissionResponse {
	r := &admissionv1.AdmissionResponse{Allowed: d.Allowed}
	if len(d.Patch) > 0 {
		r.Patch = []byte("[...]")
	}
	return r
}
