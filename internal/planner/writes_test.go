package planner

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
)

// applies is a fake API server's answer to the planner's Node applies:
// answer says what each Node's apply returns, and hold, when set, keeps
// every apply in flight until it returns.
type applies struct {
	mu             sync.Mutex
	sent           []string
	inFlight, most int
	hold           func(inFlight, sent int)
	answer         map[string]error
	cond           *sync.Cond
}

func newApplies() *applies {
	a := &applies{answer: map[string]error{}}
	a.cond = sync.NewCond(&a.mu)
	return a
}

// controller returns a Controller on a fake client whose Node applies go
// to a, with parallelism writes at once.
func (a *applies) controller(t *testing.T, parallelism int) (*Controller, *record.FakeRecorder) {
	t.Helper()
	client := applyClient{Clientset: fake.NewClientset(), a: a}
	c, err := New(Options{Client: client, Policy: testOptions().Policy, WriteParallelism: parallelism})
	if err != nil {
		t.Fatal(err)
	}
	rec := record.NewFakeRecorder(100)
	c.recorder = rec
	return c, rec
}

// applyClient answers Node applies from applies, outside the fake
// clientset, whose reactors run one at a time under its lock.
type applyClient struct {
	*fake.Clientset
	a *applies
}

func (c applyClient) CoreV1() typedcorev1.CoreV1Interface {
	return applyCore{CoreV1Interface: c.Clientset.CoreV1(), a: c.a}
}

type applyCore struct {
	typedcorev1.CoreV1Interface
	a *applies
}

func (c applyCore) Nodes() typedcorev1.NodeInterface {
	return applyNodes{NodeInterface: c.CoreV1Interface.Nodes(), a: c.a}
}

type applyNodes struct {
	typedcorev1.NodeInterface
	a *applies
}

func (n applyNodes) Apply(_ context.Context, node *corev1ac.NodeApplyConfiguration, _ metav1.ApplyOptions) (*corev1.Node, error) {
	a := n.a
	name := *node.Name
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sent = append(a.sent, name)
	a.inFlight++
	a.most = max(a.most, a.inFlight)
	a.cond.Broadcast()
	if a.hold != nil {
		a.hold(a.inFlight, len(a.sent))
	}
	a.inFlight--
	a.cond.Broadcast()
	if err := a.answer[name]; err != nil {
		return nil, err
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, nil
}

func testWrite(name string) nodeWrite {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name), ResourceVersion: "1"}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-" + name, Namespace: "default", UID: types.UID("pod-" + name)}}
	return nodeWrite{node: n, key: nodeinfo.AnnotationMigConfig, value: "all-1g.10gb", gpus: []int{0}, pods: 1,
		eventsAfterward: []podEvent{{pod: pod, typ: corev1.EventTypeNormal, reason: "MigReshapePlanned", message: "on " + name}}}
}

func testWrites(n int) []nodeWrite {
	var ws []nodeWrite
	for i := range n {
		ws = append(ws, testWrite(fmt.Sprintf("node-%02d", i)))
	}
	return ws
}

// TestSendWritesBounded: a round's writes overlap up to
// Options.WriteParallelism and never beyond. In a synctest bubble every
// apply is held until the test lets one go; synctest.Wait returns once the
// sender can start no more, so the applies in flight then are all it sends
// at once.
func TestSendWritesBounded(t *testing.T) {
	for _, tc := range []struct {
		name               string
		parallelism, total int
	}{
		{"bound below the writes", 4, 20},
		{"bound of one", 1, 5},
		{"bound above the writes", 16, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := newApplies()
				let := 0
				a.hold = func(int, int) {
					for let == 0 {
						a.cond.Wait()
					}
					let--
				}
				c, _ := a.controller(t, tc.parallelism)
				done := make(chan []error, 1)
				go func() { done <- c.sendWrites(t.Context(), testWrites(tc.total)) }()
				for finished := 0; finished < tc.total; finished++ {
					synctest.Wait()
					a.mu.Lock()
					if want := min(tc.parallelism, tc.total-finished); a.inFlight != want {
						t.Errorf("after %d writes done, %d in flight; want %d", finished, a.inFlight, want)
					}
					let++
					a.cond.Broadcast()
					a.mu.Unlock()
				}
				for i, err := range <-done {
					if err != nil {
						t.Errorf("write %d: %v", i, err)
					}
				}
				if len(a.sent) != tc.total || a.most != min(tc.parallelism, tc.total) {
					t.Errorf("%d writes sent, at most %d at once; want %d, at most %d", len(a.sent), a.most, tc.total, min(tc.parallelism, tc.total))
				}
			})
		})
	}
}

// TestSendWritesStopsWithContext: once the context ends (the replica no
// longer leads) no write is started; those in flight finish.
func TestSendWritesStopsWithContext(t *testing.T) {
	const parallelism, total = 3, 12
	a := newApplies()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	reached := false
	a.hold = func(inFlight, sent int) {
		for !reached && inFlight < parallelism && sent < total {
			a.cond.Wait()
			inFlight, sent = a.inFlight, len(a.sent)
		}
		reached = true
		cancel()
	}
	c, _ := a.controller(t, parallelism)
	errs := c.sendWrites(ctx, testWrites(total))
	if len(a.sent) != parallelism {
		t.Errorf("%d writes sent, want the %d in flight when the context ended: %v", len(a.sent), parallelism, a.sent)
	}
	notSent := 0
	for _, err := range errs {
		if err == errNotSent {
			notSent++
		}
	}
	if notSent != total-parallelism {
		t.Errorf("%d writes reported not sent, want %d: %v", notSent, total-parallelism, errs)
	}
}

// TestWriteAllOutcomes: a conflict and a refusal in one write change
// nothing of the others' outcomes, whatever order the answers come in,
// and the outcomes are taken in the decision's order.
func TestWriteAllOutcomes(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, parallelism := range []int{1, 3, 8} {
		t.Run(fmt.Sprint("parallelism ", parallelism), func(t *testing.T) {
			a := newApplies()
			gr := schema.GroupResource{Resource: "nodes"}
			a.answer["node-01"] = apierrors.NewConflict(gr, "node-01", fmt.Errorf("the object has been modified"))
			a.answer["node-03"] = apierrors.NewForbidden(gr, "node-03", fmt.Errorf("denied by a policy"))
			c, rec := a.controller(t, parallelism)
			m := newMemory(c.opts.MixHalfLife)
			ws := testWrites(6)
			for _, w := range ws {
				m.told[w.eventsAfterward[0].pod.UID] = "told"
			}
			// node-05's last write was refused a moment ago: not sent.
			m.backoff.failed("node-05", now)
			blockedUntil, _ := m.backoff.blocked("node-05", now)

			result, waiting, lifts := c.writeAll(t.Context(), m, now, decision{writes: ws}, resultUnchanged)

			if result != resultFailed || !waiting {
				t.Errorf("result %q, waiting %v; want %q, true", result, waiting, resultFailed)
			}
			slices.Sort(a.sent)
			if want := []string{"node-00", "node-01", "node-02", "node-03", "node-04"}; !slices.Equal(a.sent, want) {
				t.Errorf("sent %v, want %v", a.sent, want)
			}
			until, ok := m.backoff.blocked("node-03", now)
			if !ok || until != now.Add(minWriteBackoff) {
				t.Errorf("node-03 backed off until %v (%v), want %v", until, ok, now.Add(minWriteBackoff))
			}
			// node-03 refused now and node-05 a moment ago: both may be
			// written again a second from now.
			if want := now.Add(minWriteBackoff); !lifts.Equal(want) || !blockedUntil.Equal(want) {
				t.Errorf("next round at %v, want %v", lifts, want)
			}
			for _, n := range []string{"node-00", "node-01", "node-02", "node-04"} {
				if _, ok := m.backoff.blocked(n, now); ok {
					t.Errorf("%s backed off", n)
				}
			}
			for i, w := range ws {
				_, told := m.told[w.eventsAfterward[0].pod.UID]
				if wantTold := i != 1 && i != 3 && i != 5; told != wantTold {
					t.Errorf("pod of %s told %v, want %v", w.node.Name, told, wantTold)
				}
				_, changed := m.changed[gpuKey{w.node.Name, 0}]
				if wantChanged := i == 0 || i == 2 || i == 4; changed != wantChanged {
					t.Errorf("%s's GPU 0 remembered changed %v, want %v", w.node.Name, changed, wantChanged)
				}
			}
			select {
			case <-c.trigger:
			default:
				t.Error("the conflict did not ask for another round")
			}
			close(rec.Events)
			var got []string
			for ev := range rec.Events {
				got = append(got, ev)
			}
			want := []string{"Normal MigReshapePlanned on node-00", "Normal MigReshapePlanned on node-02", "Normal MigReshapePlanned on node-04"}
			if !slices.Equal(got, want) {
				t.Errorf("Events %q, want %q (in the decision's order)", got, want)
			}
		})
	}
}
