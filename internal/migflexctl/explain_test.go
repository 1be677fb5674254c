package migflexctl

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/planner"
	"github.com/migflex/migflex/internal/webhook/fallback"
)

var (
	mig1g = resourcename.MIG("1g.10gb")
	mig3g = resourcename.MIG("3g.40gb")
	mig4g = resourcename.MIG("4g.40gb")
	mig7g = resourcename.MIG("7g.80gb")
)

// rewritten is p as the webhook leaves it after rewriting from to to.
func rewritten(t *testing.T, p *corev1.Pod, from, to corev1.ResourceName, reason string) *corev1.Pod {
	t.Helper()
	c := &p.Spec.Containers[0]
	orig := fallback.OriginalResources{Containers: map[string]fallback.ContainerResources{c.Name: {
		Requests: corev1.ResourceList{from: c.Resources.Requests[from]}, Limits: corev1.ResourceList{from: c.Resources.Limits[from]},
	}}}
	b, err := json.Marshal(orig)
	if err != nil {
		t.Fatal(err)
	}
	q := c.Resources.Requests[from]
	c.Resources.Requests = corev1.ResourceList{to: q}
	c.Resources.Limits = corev1.ResourceList{to: q}
	p.Annotations = map[string]string{
		fallback.AnnotationOriginal: string(b),
		fallback.AnnotationFallback: resourcename.Short(from) + "->" + resourcename.Short(to),
		fallback.AnnotationReason:   reason,
	}
	return p
}

func event(p *corev1.Pod, typ, reason, msg string, minutesAgo int) *corev1.Event {
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: p.Name + "." + reason, Namespace: p.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: p.Name, Namespace: p.Namespace, UID: p.UID},
		Type:           typ, Reason: reason, Message: msg, Count: 1,
		LastTimestamp: metav1.NewTime(now.Add(-time.Duration(minutesAgo) * time.Minute)),
	}
}

// TestExplainExistenceModeInUse: issue 29's case, a 7g pod rewritten to
// 4g while the only 4g is busy. explain says what was asked, what was
// admitted and why, that every 4g is held and by whom, and what the
// planner would do now.
func TestExplainExistenceModeInUse(t *testing.T) {
	n := node(t, "gpu-a", nodeinfo.StateSuccess, gpu(0, "4g.40gb@0:4=ns/busy", "3g.40gb@4:4=ns/other"))
	n.Labels[nodeinfo.LabelPlanner] = nodeinfo.PlannerEnabled
	p := rewritten(t, pendingPod("big", mig7g, 1), mig7g, mig4g, fallback.ReasonAbsent)
	ev := event(p, corev1.EventTypeWarning, "FailedScheduling", "0/1 nodes are available: 1 Insufficient nvidia.com/mig-4g.40gb.", 1)
	code, out, errOut := run(t, fakeClient(n, p, ev), "", "explain", "big")
	want := `POD ns/big  Pending, waits for a node
  asked for:   1 x nvidia.com/mig-7g.80gb
  admitted as: 1 x nvidia.com/mig-4g.40gb (webhook rewrote 7g.80gb->4g.40gb: no
               node it may land on has the type it asked for)
  event:       Warning FailedScheduling: 0/1 nodes are available: 1 Insufficient
               nvidia.com/mig-4g.40gb.
  note:        0 of the cluster's 1 nvidia.com/mig-4g.40gb are free, it asks for
               1 (held by ns/busy); the webhook rewrote it to a type that
               exists, but whose devices are in use
  planner now: no change it may make serves it: no GPU can take
               nvidia.com/mig-4g.40gb: of the 1 GPU on the 1 node it may be
               scheduled to, 1 has no room for it next to instances in use
`
	if out != want {
		t.Errorf("explain (-want +got):\n%s", cmp.Diff(want, out))
	}
	checkWidth(t, out)
	if code != ExitAttention || errOut != "" {
		t.Errorf("exit %d, stderr %q, want %d: the pod waits", code, errOut, ExitAttention)
	}
}

func TestExplainRunningPod(t *testing.T) {
	n := node(t, "gpu-a", nodeinfo.StateSuccess, gpu(0, "3g.40gb@0:4=ns/run", "4g.40gb@4:4"))
	p := pendingPod("run", mig3g, 1)
	p.Spec.NodeName, p.Status.Phase, p.Status.Conditions = "gpu-a", corev1.PodRunning, nil
	other := pendingPod("other", mig1g, 1)
	other.Namespace = "elsewhere"
	code, out, _ := run(t, fakeClient(n, p, other, event(p, corev1.EventTypeNormal, planner.ReasonPlanned, "will run on node gpu-a: GPU 0 repartitioned 7x1g.10gb -> 3g.40gb + 4g.40gb", 3)), "", "explain", "run", "-o", "json")
	if code != ExitOK {
		t.Errorf("exit %d, want %d: the pod runs", code, ExitOK)
	}
	var got Explanation
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	want := Explanation{
		Pod: "ns/run", Phase: "Running", Node: "gpu-a",
		Requested: map[string]int64{string(mig3g): 1}, Effective: map[string]int64{string(mig3g): 1},
		Devices: []HeldDevice{{Node: "gpu-a", GPU: 0, Profile: "3g.40gb", Placement: "0:4", UUID: "MIG-00000000-0000-5000-8000-000000000000", Health: "Healthy"}},
		Events:  []EventLine{{Type: "Normal", Reason: planner.ReasonPlanned, Message: "will run on node gpu-a: GPU 0 repartitioned 7x1g.10gb -> 3g.40gb + 4g.40gb", Count: 1, Last: now.Add(-3 * time.Minute)}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("explain -o json (-want +got):\n%s", diff)
	}
	_, text, _ := run(t, fakeClient(n, p), "", "explain", "run")
	if want := "  holds:       3g.40gb on gpu-a GPU 0 at 0:4,\n               MIG-00000000-0000-5000-8000-000000000000 (Healthy)\n"; !strings.Contains(text, want) {
		t.Errorf("explain run: no line %q:\n%s", want, text)
	}
	if code, _, errOut := run(t, fakeClient(n), "", "explain", "gone"); code != ExitError || !strings.Contains(errOut, `pod ns/gone`) {
		t.Errorf("a missing pod: exit %d, stderr %q", code, errOut)
	}
	if code, _, _ := run(t, fakeClient(n), "", "explain"); code != ExitUsage {
		t.Errorf("no pod: exit %d, want %d", code, ExitUsage)
	}
}

// TestExplainPlannerWouldReshape: a waiting pod an opted-in node can be
// reshaped for gets the Event the planner's round would record.
func TestExplainPlannerWouldReshape(t *testing.T) {
	n := node(t, "gpu-a", nodeinfo.StateSuccess, gpu(0, "1g.10gb@0:1", "1g.10gb@1:1", "1g.10gb@2:1", "1g.10gb@3:1", "1g.10gb@4:1", "1g.10gb@5:1", "1g.10gb@6:1"))
	n.Labels[nodeinfo.LabelPlanner] = nodeinfo.PlannerEnabled
	p := pendingPod("p", mig3g, 1)
	code, out, _ := run(t, fakeClient(n, p), "", "explain", "p")
	if code != ExitAttention || !strings.Contains(out, "planner now: MigReshapePlanned: will run on node gpu-a: GPU 0 repartitioned") {
		t.Errorf("exit %d:\n%s", code, out)
	}
	if !strings.Contains(out, "(the webhook did not change it)") {
		t.Errorf("no word on the webhook:\n%s", out)
	}
}

// TestExplainReplicas: a pod waiting for a 1g.10gb on a node whose one
// 1g.10gb is shared: explain counts its replicas, and the planner serves
// the pod from a free one with no change, or, all in use, makes another
// 1g.10gb beside it.
func TestExplainReplicas(t *testing.T) {
	for _, tc := range []struct {
		name   string
		usedBy []string
		inUse  int
		want   string
	}{
		{"a replica free", []string{"ns/a"}, 1, `POD ns/small  Pending, waits for a node
  asked for:   1 x nvidia.com/mig-1g.10gb
  admitted as: 1 x nvidia.com/mig-1g.10gb (the webhook did not change it)
  planner now: free devices that exist serve it; nothing to change (the
               scheduler should place it)
`},
		{"every replica in use", []string{"ns/a", "ns/b"}, 2, `POD ns/small  Pending, waits for a node
  asked for:   1 x nvidia.com/mig-1g.10gb
  admitted as: 1 x nvidia.com/mig-1g.10gb (the webhook did not change it)
  note:        0 of the cluster's 2 nvidia.com/mig-1g.10gb are free, it asks for
               1 (held by ns/a, ns/b)
  planner now: MigReshapePlanned: will run on node gpu-a: GPU 0 repartitioned
               1g.10gb -> 7x1g.10gb
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := gpu(0, "1g.10gb@6:1")
			g.Instances[0].UsedBy = tc.usedBy
			g.Instances[0].Shared = &nodeinfo.Shared{Resource: string(mig1g), Replicas: 2, InUse: tc.inUse}
			n := node(t, "gpu-a", nodeinfo.StateSuccess, g)
			n.Labels[nodeinfo.LabelPlanner] = nodeinfo.PlannerEnabled
			_, out, _ := run(t, fakeClient(n, pendingPod("small", mig1g, 1)), "", "explain", "small")
			if out != tc.want {
				t.Errorf("explain (-want +got):\n%s", cmp.Diff(tc.want, out))
			}
			checkWidth(t, out)
		})
	}
}

// TestExplainReservation: explain shows the reservation held for a pod
// (which node's GPUs, until when), those held for others while it waits,
// one lapsed as lapsed, and nothing of others' once it runs.
func TestExplainReservation(t *testing.T) {
	reserved := func(n *corev1.Node, pod string, gpus []int, deadline time.Time) *corev1.Node {
		v, err := nodeinfo.Reservation{Pod: pod, GPUs: gpus, Since: now.Add(-time.Minute), Ready: deadline.Add(-2 * time.Minute), Deadline: deadline}.Encode()
		if err != nil {
			t.Fatal(err)
		}
		n.Annotations[nodeinfo.AnnotationReservation] = v
		return n
	}
	a := reserved(node(t, "gpu-a", nodeinfo.StateSuccess, wholeGPU(0, "ns/small"), wholeGPU(1), wholeGPU(2)), "ns/big", []int{1, 2}, now.Add(5*time.Minute))
	b := reserved(node(t, "gpu-b", nodeinfo.StateSuccess, wholeGPU(0), wholeGPU(1)), "ns/other", []int{0, 1}, now.Add(-time.Minute))
	c := node(t, "gpu-c", nodeinfo.StateSuccess, wholeGPU(0))
	c.Annotations[nodeinfo.AnnotationReservation] = "{"
	big := pendingPod("big", resourcename.GPU, 2)
	ev := event(big, corev1.EventTypeNormal, planner.ReasonReserved, "node gpu-a GPUs 1, 2 reserved for pod ns/big until 2026-11-27T08:05:00Z", 1)
	for _, tc := range []struct {
		name      string
		pod       *corev1.Pod
		want      []string
		wantNot   []string
		wantViews int
	}{
		{
			name: "waiting",
			pod:  big,
			want: []string{
				"  reserved:    node gpu-a GPUs 1, 2 held for it until 2026-11-27T08:05:00Z\n               (expected free at 2026-11-27T08:03:00Z)\n",
				"  reserved:    node gpu-b GPUs 0, 1 reserved for pod ns/other until\n               2026-11-27T07:59:00Z (lapsed: its GPUs are offered again)\n",
				"  event:       Normal GPUsReserved: node gpu-a GPUs 1, 2 reserved for pod ns/big",
				"  note:        node gpu-c: migflex.io/reservation is not a reservation",
			},
			wantViews: 2,
		},
		{
			name: "running elsewhere: only its own",
			pod: func() *corev1.Pod {
				p := pendingPod("other", resourcename.GPU, 2)
				p.Spec.NodeName, p.Status.Phase, p.Status.Conditions = "gpu-b", corev1.PodRunning, nil
				return p
			}(),
			want:      []string{"  reserved:    node gpu-b GPUs 0, 1 held for it until 2026-11-27T07:59:00Z\n               (lapsed: its GPUs are offered again)\n"},
			wantNot:   []string{"gpu-a GPUs", "gpu-c"},
			wantViews: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, out, errOut := run(t, fakeClient(a, b, c, tc.pod, ev), "", "explain", tc.pod.Name)
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("explain: no %q in:\n%s%s", w, out, errOut)
				}
			}
			for _, w := range tc.wantNot {
				if strings.Contains(out, w) {
					t.Errorf("explain: %q in:\n%s", w, out)
				}
			}
			checkWidth(t, out)
			_, js, _ := run(t, fakeClient(a, b, c, tc.pod, ev), "", "explain", tc.pod.Name, "-o", "json")
			var got Explanation
			if err := json.Unmarshal([]byte(js), &got); err != nil {
				t.Fatal(err)
			}
			if len(got.Reservations) != tc.wantViews || !got.Reservations[0].ForThisPod {
				t.Errorf("-o json reservations %+v, want %d, the pod's first", got.Reservations, tc.wantViews)
			}
		})
	}
}
