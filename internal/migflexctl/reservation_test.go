package migflexctl

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/planner"
	"github.com/migflex/migflex/internal/planner/plansnap"
)

// plannerReservation is the planner's field manager for reservations.
const plannerReservation = planner.DefaultFieldManager + "-reservation"

// withReservation puts a reservation for pod on n, of gpus, made a minute ago,
// expected free two minutes before its deadline, written by manager at
// since ("": no managedFields, as a client that sends none leaves it).
func withReservation(t *testing.T, n *corev1.Node, pod string, gpus []int, deadline time.Time, manager string) *corev1.Node {
	t.Helper()
	r := nodeinfo.Reservation{Pod: pod, UID: types.UID("uid-" + strings.TrimPrefix(pod, "ns/")), GPUs: gpus, Since: now.Add(-time.Minute), Ready: deadline.Add(-2 * time.Minute), Deadline: deadline}
	v, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	n.Annotations[nodeinfo.AnnotationReservation] = v
	if manager != "" {
		n.ManagedFields = append(n.ManagedFields, plansnap.ManagedTime(manager, nodeinfo.AnnotationReservation, r.Since))
	}
	return n
}

// waited is a pending pod asking for n of res, created ago.
func waited(name string, res corev1.ResourceName, n int64, ago time.Duration) *corev1.Pod {
	p := pendingPod(name, res, n)
	p.CreationTimestamp = metav1.NewTime(now.Add(-ago))
	return p
}

// TestStatusReservation: status shows a node's reservation (the GPUs, the
// pod, since, until, when they were expected free, who wrote it) and
// where it stands as the agent weighs it: ready once every GPU it holds
// is free and whole, waiting (with what keeps each GPU) until then,
// lapsed after its deadline; one that does not parse is a problem.
func TestStatusReservation(t *testing.T) {
	gpus := func() []nodeinfo.GPU {
		return []nodeinfo.GPU{wholeGPU(0, "ns/small"), wholeGPU(1), wholeGPU(2)}
	}
	tests := []struct {
		name  string
		node  func(t *testing.T) *corev1.Node
		code  int
		lines []string // lines of the text, in order, each whole
		state string
		// waiting is NodeReservation.WaitingFor; problem a substring of the
		// node's problem.
		waiting []string
		problem string
	}{
		{
			name: "ready: its GPUs free and whole",
			node: func(t *testing.T) *corev1.Node {
				return withReservation(t, node(t, "gpu-a", nodeinfo.StateSuccess, gpus()...), "ns/big", []int{1, 2}, now.Add(5*time.Minute), "admin")
			},
			code: ExitOK,
			lines: []string{
				"  reserved: GPUs 1, 2 for pod ns/big since 2026-11-27T07:59:00Z, until",
				"            2026-11-27T08:05:00Z (expected free at 2026-11-27T08:03:00Z),",
				"            written by admin",
				"  reserved: ready: its GPUs are all free and whole, offered at once",
				"  GPU 0  H100-SXM5-80GB  MIG Disabled",
				"  GPU 1  H100-SXM5-80GB  MIG Disabled  reserved",
				"  GPU 2  H100-SXM5-80GB  MIG Disabled  reserved",
			},
			state: ReservationReady,
		},
		{
			name: "waiting: a GPU held, a GPU with MIG instances, a GPU the node lacks",
			node: func(t *testing.T) *corev1.Node {
				g := gpus()
				g[2] = gpu(2, "1g.10gb@0:1", "1g.10gb@1:1=ns/tiny")
				return withReservation(t, node(t, "gpu-a", nodeinfo.StateSuccess, g...), "ns/big", []int{0, 2, 5}, now.Add(5*time.Minute), plannerReservation)
			},
			code: ExitOK,
			lines: []string{
				"NODE gpu-a  serving device-plugin  config success",
				"  source: no mig.config on the node",
				"  reserved: GPUs 0, 2, 5 for pod ns/big since 2026-11-27T07:59:00Z, until",
				"            2026-11-27T08:05:00Z (expected free at 2026-11-27T08:03:00Z),",
				"            written by migflex-planner-reservation",
				"  reserved: waiting, the free devices withheld: GPU 0: held by ns/small; GPU 2:",
				"            held by ns/tiny; MIG Enabled with 2 instances; GPU 5: not on the",
				"            node",
				"  GPU 0  H100-SXM5-80GB  MIG Disabled  reserved",
				"  GPU 1  H100-SXM5-80GB  MIG Disabled",
				"  GPU 2  H100-SXM5-80GB  MIG Enabled  reserved",
			},
			state:   ReservationWaiting,
			waiting: []string{"GPU 0: held by ns/small", "GPU 2: held by ns/tiny; MIG Enabled with 2 instances", "GPU 5: not on the node"},
		},
		{
			name: "lapsed: past its deadline, its GPUs not marked",
			node: func(t *testing.T) *corev1.Node {
				return withReservation(t, node(t, "gpu-a", nodeinfo.StateSuccess, gpus()...), "ns/big", []int{1, 2}, now.Add(-time.Second), "")
			},
			code: ExitOK,
			lines: []string{
				"  reserved: GPUs 1, 2 for pod ns/big since 2026-11-27T07:59:00Z, until",
				"            2026-11-27T07:59:59Z (expected free at 2026-11-27T07:57:59Z)",
				"  reserved: lapsed: its deadline passed, the GPUs are offered to any pod again",
				"  GPU 1  H100-SXM5-80GB  MIG Disabled",
			},
			state: ReservationLapsed,
		},
		{
			name: "one that does not parse is a problem",
			node: func(t *testing.T) *corev1.Node {
				n := node(t, "gpu-a", nodeinfo.StateSuccess, gpus()...)
				n.Annotations[nodeinfo.AnnotationReservation] = `{"pod": "big", "gpus": [1]}`
				return n
			},
			code: ExitAttention,
			lines: []string{
				`  problem: migflex.io/reservation: pod "big" is not namespace/name`,
				"           it has no deadline: the agent ignores it and withholds nothing",
				"  GPU 1  H100-SXM5-80GB  MIG Disabled",
			},
			problem: "the agent ignores it and withholds nothing",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fakeClient(tc.node(t))
			code, out, errOut := run(t, client, "", "status")
			if code != tc.code || errOut != "" {
				t.Errorf("exit %d, stderr %q, want %d", code, errOut, tc.code)
			}
			got := strings.Split(out, "\n")
			at := 0
			for _, want := range tc.lines {
				i := indexFrom(got, at, want)
				if i < 0 {
					t.Errorf("no line %q (in order) in:\n%s", want, out)
					break
				}
				at = i + 1
			}
			checkWidth(t, out)
			_, js, _ := run(t, client, "", "status", "-o", "json")
			var st Status
			if err := json.Unmarshal([]byte(js), &st); err != nil {
				t.Fatal(err)
			}
			n := st.Nodes[0]
			if tc.problem != "" {
				if n.Reservation != nil || len(n.Problems) != 1 || !strings.Contains(n.Problems[0], tc.problem) {
					t.Errorf("-o json: reservation %+v, problems %q; want none, and a problem with %q", n.Reservation, n.Problems, tc.problem)
				}
				return
			}
			if n.Reservation == nil {
				t.Fatalf("-o json: no reservation:\n%s", js)
			}
			if n.Reservation.State != tc.state || !cmp.Equal(n.Reservation.WaitingFor, tc.waiting) || n.Reservation.Pod != "ns/big" || n.Reservation.UID != "uid-big" {
				t.Errorf("-o json: reservation %+v, want state %s, waiting for %q, for ns/big (uid-big)", n.Reservation, tc.state, tc.waiting)
			}
		})
	}
}

// indexFrom is the index of the first line equal to want from i on, -1
// when none.
func indexFrom(lines []string, i int, want string) int {
	for ; i < len(lines); i++ {
		if lines[i] == want {
			return i
		}
	}
	return -1
}

// reservedCluster is an opted-in node whose GPU 0 a pod holds, GPU 1 has
// seven idle 1g.10gb and GPU 2 is whole and free; resv, when not nil,
// puts a reservation on it.
func reservedCluster(t *testing.T, resv func(*corev1.Node) *corev1.Node) *corev1.Node {
	n := node(t, "gpu-a", nodeinfo.StateSuccess, wholeGPU(0, "ns/run"), all1g(1), wholeGPU(2))
	n.Labels[nodeinfo.LabelPlanner] = nodeinfo.PlannerEnabled
	if resv != nil {
		n = resv(n)
	}
	return n
}

// TestExplainPlannerReservation: explain's "planner now" holds and ends
// reservations as the planner's round does (the same reserve.Decide,
// with the planner's default policy): the reserved pod is told its
// reservation is kept, or would be made, or would end and why, and
// another pod is told the reserved GPUs are not for it; someone else's
// reservation is left to its writer. (Planned with reservations off, as
// it once was, the kept one read as ended and its GPUs as free.)
func TestExplainPlannerReservation(t *testing.T) {
	const reservedForOthers = "2 are reserved for pods waiting for several GPUs on one node"
	const reshaped = `  planner now: MigReshapePlanned: will run on node gpu-a: GPU 2 (gpu free
               already); GPU 1 repartitioned 7x1g.10gb -> empty
`
	tests := []struct {
		name string
		resv func(*corev1.Node) *corev1.Node
		// big is the end of its explanation; wantResv the action on its
		// reservation in -o json ("": none); smallReserved whether
		// small's reason says the GPUs are reserved.
		big           string
		wantResv      string
		smallReserved bool
	}{
		{
			name: "the planner's reservation is kept",
			resv: func(n *corev1.Node) *corev1.Node {
				return withReservation(t, n, "ns/big", []int{1, 2}, now.Add(5*time.Minute), plannerReservation)
			},
			big: `  planner now: keeps node gpu-a GPUs 1, 2 reserved for it until
               2026-11-27T08:05:00Z: they go to no other pod, and the node's
               agent offers them once all are free and whole
`,
			wantResv:      ReservationKeep,
			smallReserved: true,
		},
		{
			name: "a new one",
			big: `  planner now: would reserve node gpu-a GPUs 1, 2 for it until
               2026-11-27T08:02:00Z (expected free at 2026-11-27T08:00:00Z):
               they go to no other pod, and the node's agent offers them once
               all are free and whole
`,
			wantResv:      ReservationWrite,
			smallReserved: true,
		},
		{
			name: "one past its deadline ends",
			resv: func(n *corev1.Node) *corev1.Node {
				return withReservation(t, n, "ns/big", []int{1, 2}, now.Add(-time.Minute), plannerReservation)
			},
			big: `  planner now: would end the reservation of node gpu-a GPUs 1, 2 for it: its
               deadline passed
` + reshaped,
			wantResv: ReservationEnd,
		},
		{
			name: "someone else's is left alone",
			resv: func(n *corev1.Node) *corev1.Node {
				return withReservation(t, n, "ns/big", []int{1, 2}, now.Add(5*time.Minute), "admin")
			},
			big: reshaped,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fakeClient(reservedCluster(t, tc.resv), waited("big", resourcename.GPU, 2, 6*time.Minute), pendingPod("small", mig1g, 1))
			code, out, errOut := run(t, client, "", "explain", "big")
			if code != ExitAttention || !strings.HasSuffix(out, tc.big) {
				t.Errorf("explain big: exit %d, want %d, ending (-want +got):\n%s%s", code, ExitAttention, cmp.Diff(tc.big, out[max(0, len(out)-len(tc.big)):]), errOut)
			}
			checkWidth(t, out)
			explained := func(pod string) Explanation {
				_, js, _ := run(t, client, "", "explain", pod, "-o", "json")
				var ex Explanation
				if err := json.Unmarshal([]byte(js), &ex); err != nil {
					t.Fatal(err)
				}
				return ex
			}
			got := ""
			if r := explained("big").Planner.Reservation; r != nil {
				got = r.Action
				if r.Node != "gpu-a" || r.Pod != "ns/big" || !cmp.Equal(r.GPUs, []int{1, 2}) {
					t.Errorf("-o json: reservation %+v, want gpu-a GPUs 1, 2 for ns/big", r)
				}
			}
			if got != tc.wantResv {
				t.Errorf("-o json: reservation action %q, want %q", got, tc.wantResv)
			}
			small := explained("small").Planner
			if small.Action != "none" || strings.Contains(small.Reason, reservedForOthers) != tc.smallReserved || small.Reservation != nil {
				t.Errorf("explain small: %+v; want action none, its reason saying %q: %v", small, reservedForOthers, tc.smallReserved)
			}
			for _, a := range client.Actions() {
				if a.GetVerb() != "list" && a.GetVerb() != "get" {
					t.Errorf("explain wrote: %s %s", a.GetVerb(), a.GetResource().Resource)
				}
			}
		})
	}
}

// TestPlanReservations: plan lists the reservations the round would keep,
// make or end, and writes only what the round writes: a reservation kept
// is not written, nor removed (planned with reservations off, as it once
// was, every reservation showed removed).
func TestPlanReservations(t *testing.T) {
	tests := []struct {
		name string
		resv func(*corev1.Node) *corev1.Node
		// want is the output from NODE WRITES to the Events; action the
		// reservation's in -o json.
		want, action string
	}{
		{
			name: "kept",
			resv: func(n *corev1.Node) *corev1.Node {
				return withReservation(t, n, "ns/big", []int{1, 2}, now.Add(5*time.Minute), plannerReservation)
			},
			want: `NODE WRITES (1)
  gpu-a: nvidia.com/mig.config
    GPU 1 (H100-SXM5-80GB) -> MIG off (whole GPU)

RESERVATIONS (1)
  keeps node gpu-a GPUs 1, 2 reserved for pod ns/big until 2026-11-27T08:05:00Z
`,
			action: ReservationKeep,
		},
		{
			name: "ended",
			resv: func(n *corev1.Node) *corev1.Node {
				return withReservation(t, n, "ns/big", []int{1, 2}, now.Add(-time.Minute), plannerReservation)
			},
			want: `NODE WRITES (2)
  gpu-a: nvidia.com/mig.config
    GPU 1 (H100-SXM5-80GB) -> MIG off (whole GPU) for ns/big
  gpu-a: remove migflex.io/reservation

RESERVATIONS (1)
  would end the reservation of node gpu-a GPUs 1, 2 for pod ns/big: its deadline
  passed
`,
			action: ReservationEnd,
		},
		{
			name: "new",
			want: `NODE WRITES (2)
  gpu-a: nvidia.com/mig.config
    GPU 1 (H100-SXM5-80GB) -> MIG off (whole GPU)
  gpu-a: migflex.io/reservation

RESERVATIONS (1)
  would reserve node gpu-a GPUs 1, 2 for pod ns/big until 2026-11-27T08:02:00Z
  (expected free at 2026-11-27T08:00:00Z)
`,
			action: ReservationWrite,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fakeClient(reservedCluster(t, tc.resv), waited("big", resourcename.GPU, 2, 6*time.Minute), pendingPod("small", mig1g, 1))
			_, out, _ := run(t, client, "", "plan")
			from, to := strings.Index(out, "NODE WRITES"), strings.Index(out, "\nEVENTS IT WOULD RECORD")
			if from < 0 || to < from {
				t.Fatalf("plan: no NODE WRITES before EVENTS:\n%s", out)
			}
			if diff := cmp.Diff(tc.want, out[from:to]); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
			checkWidth(t, out)
			_, js, _ := run(t, client, "", "plan", "-o", "json")
			var v PlanView
			if err := json.Unmarshal([]byte(js), &v); err != nil {
				t.Fatal(err)
			}
			if len(v.Reservations) != 1 || v.Reservations[0].Action != tc.action || v.Reservations[0].Node != "gpu-a" {
				t.Errorf("-o json reservations %+v, want one on gpu-a, %s", v.Reservations, tc.action)
			}
			for _, n := range v.Nodes {
				if n.Key == nodeinfo.AnnotationReservation && len(n.GPUs) > 0 {
					t.Errorf("-o json: the reservation's write lists the layout's GPUs: %+v", n)
				}
			}
		})
	}
}
