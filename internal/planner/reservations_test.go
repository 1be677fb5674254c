package planner

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/planner/plansnap"
	"github.com/migflex/migflex/internal/planner/reserve"
	"github.com/migflex/migflex/internal/testsupport/testutil"
)

// wholeGPUs are n whole H100s (MIG disabled); users[i], when given and
// not empty, holds GPU i.
func wholeGPUs(n int, users ...string) []nodeinfo.GPU {
	out := make([]nodeinfo.GPU, n)
	for i := range out {
		out[i] = nodeinfo.GPU{Index: i, UUID: fmt.Sprintf("GPU-%d", i), Model: h100, MigMode: nodeinfo.MigModeDisabled, Health: nodeinfo.HealthHealthy}
		if i < len(users) && users[i] != "" {
			out[i].UsedBy = []string{users[i]}
		}
	}
	return out
}

// notes are the writes' Events as "reason Kind name: message".
func notes(d decision) []string {
	var out []string
	for _, w := range d.writes {
		for _, ev := range w.notes {
			switch o := ev.obj.(type) {
			case *corev1.Pod:
				out = append(out, fmt.Sprintf("%s Pod %s: %s", ev.reason, o.Name, ev.message))
			case *corev1.Node:
				out = append(out, fmt.Sprintf("%s Node %s: %s", ev.reason, o.Name, ev.message))
			}
		}
	}
	return out
}

// writeKeys are "node key" per write, a removal as "node -key".
func writeKeys(d decision) []string {
	var out []string
	for _, w := range d.writes {
		k := w.key
		if w.value == "" {
			k = "-" + k
		}
		out = append(out, w.node.Name+" "+k)
	}
	return out
}

func withReservations(max int) func(*Options) {
	return func(o *Options) {
		o.Reserve = reserve.Policy{After: 5 * time.Minute, Max: max, Lead: 10 * time.Minute, Grace: 2 * time.Minute}
	}
}

// TestReservationWrites: the controller reserves through reserve.Decide,
// writes the reservation on the Node once (a round at rest writes
// nothing), with Events on the pod and the Node, and removes it when it
// ends.
func TestReservationWrites(t *testing.T) {
	type step struct {
		// before changes the cluster before the round; after is how long
		// after t0 the round runs.
		before func(c *cluster)
		after  time.Duration
		// want are the round's writes ("node key", "node -key" for a
		// removal) and its Events' substrings, one each, in order; reserved
		// is what each Node's annotation then says (String), absent: none.
		want, events []string
		reserved     map[string]string
	}
	deadline := t0.Add(8 * time.Minute).Format(time.RFC3339)
	tests := []struct {
		name  string
		opts  []func(*Options)
		setup func(c *cluster)
		steps []step
	}{
		{
			name: "reserved once, kept at rest, removed when the pod binds",
			opts: []func(*Options){withReservations(4)},
			setup: func(c *cluster) {
				c.addNode("n1", wholeGPUs(4, "ns/a", "", "ns/b", "")...)
				c.pod("big", resourcename.GPU, 2)
			},
			steps: []step{
				{after: 4 * time.Minute}, // not waited long enough
				{
					after: 6 * time.Minute,
					want:  []string{"n1 " + nodeinfo.AnnotationReservation},
					events: []string{
						"GPUsReserved Node n1: node n1 GPUs 1, 3 reserved for pod ns/big until " + deadline,
						"GPUsReserved Pod big: node n1 GPUs 1, 3 reserved for pod ns/big until " + deadline,
					},
					reserved: map[string]string{"n1": "GPUs 1, 3 reserved for pod ns/big until " + deadline},
				},
				{after: 7 * time.Minute, reserved: map[string]string{"n1": "GPUs 1, 3 reserved for pod ns/big until " + deadline}},
				{
					before: func(c *cluster) {
						p := c.pods["big"]
						p.Spec.NodeName = "n1"
						p.Status.Conditions = nil
					},
					after: 7*time.Minute + time.Second,
					want:  []string{"n1 -" + nodeinfo.AnnotationReservation},
					events: []string{
						"GPUReservationEnded Node n1: the reservation of node n1 GPUs 1, 3 reserved for pod ns/big until " + deadline + " ended: " + reserve.EndedNotPending,
					},
				},
				{after: 8 * time.Minute},
			},
		},
		{
			name: "the deadline ends it, and the node is left to others for a while",
			opts: []func(*Options){withReservations(4)},
			setup: func(c *cluster) {
				c.addNode("n1", wholeGPUs(2)...)
				c.pod("big", resourcename.GPU, 2)
			},
			steps: []step{
				{
					after:    6 * time.Minute,
					want:     []string{"n1 " + nodeinfo.AnnotationReservation},
					events:   []string{"GPUsReserved Node n1", "GPUsReserved Pod big"},
					reserved: map[string]string{"n1": "GPUs 0, 1 reserved for pod ns/big until " + deadline},
				},
				{
					after: 8 * time.Minute,
					want:  []string{"n1 -" + nodeinfo.AnnotationReservation},
					events: []string{
						"GPUReservationEnded Node n1: the reservation of node n1 GPUs 0, 1 reserved for pod ns/big until " + deadline + " ended: " + reserve.EndedLapsed,
						"GPUReservationEnded Pod big",
					},
				},
				{after: 9 * time.Minute},
			},
		},
		{
			name: "at most Max at once, in the scheduler's order",
			opts: []func(*Options){withReservations(2)},
			setup: func(c *cluster) {
				for _, n := range []string{"n1", "n2", "n3"} {
					c.addNode(n, wholeGPUs(2)...)
				}
				for i, name := range []string{"p1", "p2", "p3"} {
					p := c.pod(name, resourcename.GPU, 2)
					p.CreationTimestamp.Time = t0.Add(time.Duration(i) * time.Second)
				}
			},
			steps: []step{
				{
					after:  6 * time.Minute,
					want:   []string{"n1 " + nodeinfo.AnnotationReservation, "n2 " + nodeinfo.AnnotationReservation},
					events: []string{"Node n1: node n1 GPUs 0, 1 reserved for pod ns/p1", "Pod p1", "Node n2: node n2 GPUs 0, 1 reserved for pod ns/p2", "Pod p2"},
					reserved: map[string]string{
						"n1": "GPUs 0, 1 reserved for pod ns/p1 until " + deadline,
						"n2": "GPUs 0, 1 reserved for pod ns/p2 until " + deadline,
					},
				},
			},
		},
		{
			name: "a DRA node is reserved as a device-plugin node is: its agent taints the free devices",
			opts: []func(*Options){withReservations(4)},
			setup: func(c *cluster) {
				n := c.addNode("n1", wholeGPUs(2)...)
				n.Labels[nodeinfo.LabelServing] = nodeinfo.ServingDRA
				c.pod("big", resourcename.GPU, 2)
			},
			steps: []step{
				{
					after:    6 * time.Minute,
					want:     []string{"n1 " + nodeinfo.AnnotationReservation},
					events:   []string{"GPUsReserved Node n1: node n1 GPUs 0, 1 reserved for pod ns/big until " + deadline, "GPUsReserved Pod big"},
					reserved: map[string]string{"n1": "GPUs 0, 1 reserved for pod ns/big until " + deadline},
				},
				{after: 7 * time.Minute, reserved: map[string]string{"n1": "GPUs 0, 1 reserved for pod ns/big until " + deadline}},
			},
		},
		{
			name: "a dynamic DRA node's MIG GPUs are not reserved: nothing there makes them whole",
			opts: []func(*Options){withReservations(4)},
			setup: func(c *cluster) {
				gpus := wholeGPUs(2)
				gpus[1].MigMode = nodeinfo.MigModeEnabled
				n := c.addNode("n1", gpus...)
				n.Labels[nodeinfo.LabelServing] = nodeinfo.ServingDRA
				n.Labels[nodeinfo.LabelDRAMode] = nodeinfo.DRAModeDynamic
				c.pod("big", resourcename.GPU, 2)
			},
			steps: []step{{after: 6 * time.Minute}},
		},
		{
			name: "dry run reserves nothing",
			opts: []func(*Options){withReservations(4), func(o *Options) { o.DryRun = true }},
			setup: func(c *cluster) {
				c.addNode("n1", wholeGPUs(2)...)
				c.pod("big", resourcename.GPU, 2)
			},
			steps: []step{{after: 6 * time.Minute}},
		},
		{
			name: "reservations turned off remove the planner's",
			opts: []func(*Options){withReservations(0)},
			setup: func(c *cluster) {
				n := c.addNode("n1", wholeGPUs(2)...)
				c.pod("big", resourcename.GPU, 2)
				r := nodeinfo.Reservation{Pod: "ns/big", GPUs: []int{0, 1}, Since: t0, Ready: t0, Deadline: t0.Add(8 * time.Minute)}
				v, _ := r.Encode()
				n.Annotations[nodeinfo.AnnotationReservation] = v
				n.ManagedFields = append(n.ManagedFields, plansnap.ManagedTime(DefaultFieldManager+"-reservation", nodeinfo.AnnotationReservation, t0))
			},
			steps: []step{
				{after: 6 * time.Minute, want: []string{"n1 -" + nodeinfo.AnnotationReservation}, events: []string{"ended: reservations are off", "Pod big"}},
				{after: 7 * time.Minute},
			},
		},
		{
			name: "someone else's reservation is left as it is, and its node is not reserved again",
			opts: []func(*Options){withReservations(4)},
			setup: func(c *cluster) {
				n := c.addNode("n1", wholeGPUs(2)...)
				c.pod("big", resourcename.GPU, 2)
				r := nodeinfo.Reservation{Pod: "ns/other", GPUs: []int{0}, Deadline: t0.Add(time.Hour)}
				v, _ := r.Encode()
				n.Annotations[nodeinfo.AnnotationReservation] = v
				n.ManagedFields = append(n.ManagedFields, plansnap.ManagedTime("admin", nodeinfo.AnnotationReservation, t0))
			},
			steps: []step{{after: 6 * time.Minute, reserved: map[string]string{"n1": "GPU 0 reserved for pod ns/other until " + t0.Add(time.Hour).Format(time.RFC3339)}}},
		},
		{
			// An idle MIG GPU is made whole for the reserved pod in the same
			// round: the layout write goes first, the reservation after it
			// without the version the layout write changes.
			name: "a reserved idle MIG GPU is made whole in the same round",
			opts: []func(*Options){withReservations(4), func(o *Options) { o.Policy.ReclaimIdle = false }},
			setup: func(c *cluster) {
				gpus := wholeGPUs(2)
				gpus[1] = simGPU(1, all1g...)
				c.addNode("n1", gpus...)
				c.pod("big", resourcename.GPU, 2)
			},
			steps: []step{
				{
					after:    6 * time.Minute,
					want:     []string{"n1 " + nodeinfo.AnnotationMigConfig, "n1 " + nodeinfo.AnnotationReservation},
					events:   []string{"GPUsReserved Node n1: node n1 GPUs 0, 1 reserved for pod ns/big", "GPUsReserved Pod big"},
					reserved: map[string]string{"n1": "GPUs 0, 1 reserved for pod ns/big until " + deadline},
				},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions(tc.opts...)
			pl := mustPlanner(t, o)
			m := newMemory(time.Hour)
			c := newCluster(t)
			tc.setup(c)
			for i, s := range tc.steps {
				if s.before != nil {
					s.before(c)
				}
				c.now = t0.Add(s.after)
				d := c.round(o, pl, m)
				if got := writeKeys(d); !slices.Equal(got, s.want) {
					t.Errorf("step %d: writes %q, want %q", i, got, s.want)
				}
				got := notes(d)
				if len(got) != len(s.events) {
					t.Errorf("step %d: Events %q, want %d: %q", i, got, len(s.events), s.events)
				} else {
					for j := range got {
						if !strings.Contains(got[j], s.events[j]) {
							t.Errorf("step %d: Event %d %q, want it to contain %q", i, j, got[j], s.events[j])
						}
					}
				}
				for name, n := range c.nodes {
					v, ok := n.Annotations[nodeinfo.AnnotationReservation]
					want, wantOK := s.reserved[name]
					if ok != wantOK {
						t.Errorf("step %d: node %s reservation %q, want %q", i, name, v, want)
						continue
					}
					if !ok {
						continue
					}
					r, err := nodeinfo.ParseReservation(v)
					if err != nil {
						t.Errorf("step %d: node %s: %v", i, name, err)
					} else if r.String() != want {
						t.Errorf("step %d: node %s reservation %q, want %q", i, name, r, want)
					}
					if p := c.pods[strings.TrimPrefix(r.Pod, "ns/")]; p != nil && r.UID != "" && r.UID != p.UID {
						t.Errorf("step %d: node %s reservation's UID %s, the pod's %s", i, name, r.UID, p.UID)
					}
					// The round gives its GPUs to no pod: the reserved pod is
					// not told that no change serves it.
					for _, ev := range events(d) {
						if strings.HasPrefix(ev, ReasonImpossible+" "+strings.TrimPrefix(r.Pod, "ns/")+":") && r.Pod != "ns/other" {
							t.Errorf("step %d: the reserved pod is told %q", i, ev)
						}
					}
				}
			}
		})
	}
}

// TestControllerReserves: against a real API server, the controller
// writes a reservation for a pod waiting for two whole GPUs under its
// reservation field manager, with the pod's UID, records Events on the
// pod and the Node, writes nothing more in later rounds, and removes the
// reservation once the pod is gone.
func TestControllerReserves(t *testing.T) {
	e := startEnv(t)
	ctx := context.Background()
	e.node("resv-a", wholeGPUs(3, "default/small")...)
	r := e.start(t, func(o *Options) {
		o.Reserve = reserve.Policy{After: 0, Max: 4, Lead: 10 * time.Minute, Grace: 2 * time.Minute}
	})
	c := newCluster(t)
	p := c.pod("big", resourcename.GPU, 2)
	p.UID, p.Namespace, p.CreationTimestamp = "", "default", metav1.Time{}
	p.Spec.Containers[0].Image = "example.com/x:1"
	status := p.Status
	created, err := e.client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status = status
	created.Status.Conditions[0].LastTransitionTime = metav1.Now()
	pod, err := e.client.CoreV1().Pods("default").UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	n := e.waitNode("resv-a", "a reservation", func(n *corev1.Node) bool {
		_, ok := n.Annotations[nodeinfo.AnnotationReservation]
		return ok
	})
	got, err := nodeinfo.ParseReservation(n.Annotations[nodeinfo.AnnotationReservation])
	if err != nil {
		t.Fatal(err)
	}
	if got.Pod != "default/big" || got.UID != pod.UID || !slices.Equal(got.GPUs, []int{1, 2}) {
		t.Errorf("reservation %+v, want GPUs [1 2] for default/big, UID %s", got, pod.UID)
	}
	if owner, _ := plansnap.AnnotationOwner(n, nodeinfo.AnnotationReservation); owner != DefaultFieldManager+"-reservation" {
		t.Errorf("reservation owned by %q", owner)
	}
	e.waitEvent(pod, ReasonReserved, "node resv-a GPUs 1, 2 reserved for pod default/big until")
	nodeEvents := func() []string {
		list, err := e.client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, ev := range list.Items {
			if ev.InvolvedObject.Kind == "Node" && ev.InvolvedObject.Name == "resv-a" {
				out = append(out, ev.Reason+": "+ev.Message)
			}
		}
		return out
	}
	testutil.Eventually(t, "a GPUsReserved Event on the Node", func() bool {
		return slices.ContainsFunc(nodeEvents(), func(s string) bool { return strings.HasPrefix(s, ReasonReserved+": node resv-a GPUs 1, 2") })
	})

	// At rest: more rounds, no more writes.
	writes := r.value("migflex_planner_node_writes_total", "", "")
	rounds := r.value("migflex_planner_rounds_total", "", "")
	for i := range 3 {
		e.poke(pod, i)
	}
	testutil.Eventually(t, "three more rounds", func() bool { return r.value("migflex_planner_rounds_total", "", "") >= rounds+3 })
	if w := r.value("migflex_planner_node_writes_total", "", ""); w != writes {
		t.Errorf("%v Node writes in rounds at rest", w-writes)
	}

	if err := e.client.CoreV1().Pods("default").Delete(ctx, "big", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	e.waitNode("resv-a", "the reservation removed", func(n *corev1.Node) bool {
		_, ok := n.Annotations[nodeinfo.AnnotationReservation]
		return !ok
	})
	testutil.Eventually(t, "a GPUReservationEnded Event on the Node", func() bool {
		return slices.ContainsFunc(nodeEvents(), func(s string) bool { return strings.HasPrefix(s, ReasonReservationEnded+": ") })
	})
}
