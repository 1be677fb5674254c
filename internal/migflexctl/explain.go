package migflexctl

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/migflex/migflex/internal/domain/dracel"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/planner"
	"github.com/migflex/migflex/internal/planner/plansnap"
	"github.com/migflex/migflex/internal/planner/solver"
	"github.com/migflex/migflex/internal/webhook"
	"github.com/migflex/migflex/internal/webhook/fallback"
)

// Explanation is what `explain` reports on a pod, and its -o json|yaml
// form.
type Explanation struct {
	Pod   string `json:"pod"`
	Phase string `json:"phase"`
	// Node is where it is bound; empty while it waits for one.
	Node string `json:"node,omitempty"`
	// Requested is its GPU request as written (before the webhook),
	// Effective as admitted: the pod spec now. Resource to count.
	Requested map[string]int64 `json:"requested"`
	Effective map[string]int64 `json:"effective"`
	// ClaimDevices are the devices its ResourceClaims ask of migflex's
	// driver, as the planner reads them (by the extended resource the
	// same device is on the device-plugin path).
	ClaimDevices map[string]int64 `json:"claimDevices,omitempty"`
	// Claims are its ResourceClaims: what each asks, and its allocation
	// or why it has none.
	Claims []ClaimView `json:"claims,omitempty"`
	// ClaimsTogether says whether the claims' pending requests, two or
	// more, can be allocated at once on one node (each request's free
	// count is its own alone).
	ClaimsTogether string `json:"claimsTogether,omitempty"`
	// Webhook is the decision the webhook recorded on the pod.
	Webhook WebhookDecision `json:"webhook"`
	// Devices are the devices it holds, as its node's agent reports.
	Devices []HeldDevice `json:"devices,omitempty"`
	// Waiting: the pod waits for GPUs, or for its ResourceClaims.
	Waiting bool `json:"waiting"`
	// Reservations are the nodes' reservations (migflex.io/reservation):
	// the one held for the pod, and, while it waits, those held for
	// others.
	Reservations []ReservationView `json:"reservations,omitempty"`
	// Events are the planner's Events on the pod and the scheduler's
	// latest word.
	Events []EventLine `json:"events,omitempty"`
	// Planner is what the planner's next round would do for it, when it
	// waits.
	Planner *PlannerView `json:"planner,omitempty"`
	// Notes say what else keeps it waiting.
	Notes []string `json:"notes,omitempty"`
}

// WebhookDecision is the fallback webhook's record on a pod.
type WebhookDecision struct {
	// Rewrites is gpu-webhook.k8s.io/fallback ("2g.20gb->1g.10gb").
	Rewrites string `json:"rewrites,omitempty"`
	// Reason is migflex.io/fallback-reason.
	Reason string `json:"reason,omitempty"`
	// Policy is the pod's own migflex.io/fallback-policy.
	Policy string `json:"policy,omitempty"`
	// Reshape is migflex.io/reshape: the webhook left the request for the
	// planner to serve.
	Reshape string `json:"reshape,omitempty"`
}

// HeldDevice is one device a pod holds.
type HeldDevice struct {
	Node      string `json:"node"`
	GPU       int    `json:"gpu"`
	Profile   string `json:"profile"`
	Placement string `json:"placement,omitempty"`
	UUID      string `json:"uuid"`
	Health    string `json:"health"`
}

// ReservationView is a node's reservation: GPUs the planner holds for a
// pod waiting for several whole GPUs.
type ReservationView struct {
	Node string `json:"node"`
	GPUs []int  `json:"gpus"`
	// Pod is who it is for; ForThisPod whether that is the pod explained.
	Pod        string `json:"pod"`
	ForThisPod bool   `json:"forThisPod"`
	// Ready is when its GPUs were expected free, Deadline when it lapses;
	// Lapsed that the deadline has passed (the agent offers the GPUs
	// again).
	Ready    time.Time `json:"ready"`
	Deadline time.Time `json:"deadline"`
	Lapsed   bool      `json:"lapsed,omitempty"`
}

// reservations are the nodes' reservations that concern the pod, by
// node name: the one for it, and all of them while it waits. One that
// does not parse is a note.
func reservations(key string, waiting bool, nodes []corev1.Node, now time.Time) ([]ReservationView, []string) {
	var out []ReservationView
	var notes []string
	for _, n := range nodes {
		v, ok := n.Annotations[nodeinfo.AnnotationReservation]
		if !ok {
			continue
		}
		r, err := nodeinfo.ParseReservation(v)
		if err != nil {
			if waiting {
				notes = append(notes, fmt.Sprintf("node %s: %v", n.Name, err))
			}
			continue
		}
		mine := r.Pod == key
		if !mine && !waiting {
			continue
		}
		out = append(out, ReservationView{Node: n.Name, GPUs: r.GPUs, Pod: r.Pod, ForThisPod: mine, Ready: r.Ready, Deadline: r.Deadline, Lapsed: !r.Active(now)})
	}
	slices.SortFunc(out, func(a, b ReservationView) int {
		return cmp.Or(-cmp.Compare(boolRank(a.ForThisPod), boolRank(b.ForThisPod)), cmp.Compare(a.Node, b.Node))
	})
	return out, notes
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// describeReservation says what is held, for whom, until when.
func describeReservation(r ReservationView) string {
	res := nodeinfo.Reservation{Pod: r.Pod, GPUs: r.GPUs, Deadline: r.Deadline}
	s := "node " + r.Node + " " + res.String()
	if r.ForThisPod {
		s = strings.Replace(s, "reserved for pod "+r.Pod, "held for it", 1)
	}
	if r.Lapsed {
		return s + " (lapsed: its GPUs are offered again)"
	}
	if !r.Ready.IsZero() {
		s += " (expected free at " + r.Ready.UTC().Format(time.RFC3339) + ")"
	}
	return s
}

// EventLine is one Event on the pod.
type EventLine struct {
	Type    string    `json:"type"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Count   int32     `json:"count,omitempty"`
	Last    time.Time `json:"last"`
}

// PlannerView is the planner's answer for one pod in a dry-run round.
type PlannerView struct {
	// Considered: the pod is among the pods the planner plans for (the
	// scheduler marked it unschedulable).
	Considered bool   `json:"considered"`
	Action     string `json:"action,omitempty"`
	Node       string `json:"node,omitempty"`
	// Event is the Event the round would record on the pod (a
	// reservation's aside).
	Event string `json:"event,omitempty"`
	// Reason explains action none.
	Reason string `json:"reason,omitempty"`
	// Reservation is what the round does with a reservation for the pod:
	// keeps it, writes it, or ends it (and why).
	Reservation *ReservationPlan `json:"reservation,omitempty"`
}

// plannerEventReasons are the Event reasons shown from the pod's Events:
// the planner's, and the scheduler's.
var plannerEventReasons = []string{planner.ReasonPlanned, planner.ReasonImpossible, planner.ReasonReserved, planner.ReasonReservationEnded, "FailedScheduling", "Scheduled"}

// requestAsWritten is the pod's GPU devices before the webhook rewrote
// it: its containers with the resources fallback.AnnotationOriginal
// recorded put back.
func requestAsWritten(p *corev1.Pod) (map[corev1.ResourceName]int64, error) {
	raw, ok := p.Annotations[fallback.AnnotationOriginal]
	if !ok {
		return schedview.Devices(p), nil
	}
	var orig fallback.OriginalResources
	if err := json.Unmarshal([]byte(raw), &orig); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", fallback.AnnotationOriginal, err)
	}
	before := p.DeepCopy()
	restore := func(cs []corev1.Container, rec map[string]fallback.ContainerResources) {
		for i := range cs {
			r, ok := rec[cs[i].Name]
			if !ok {
				continue
			}
			cs[i].Resources.Requests = withGPUs(cs[i].Resources.Requests, r.Requests)
			cs[i].Resources.Limits = withGPUs(cs[i].Resources.Limits, r.Limits)
		}
	}
	restore(before.Spec.Containers, orig.Containers)
	restore(before.Spec.InitContainers, orig.InitContainers)
	return schedview.Devices(before), nil
}

// withGPUs is l with its GPU resources replaced by gpus.
func withGPUs(l, gpus corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{}
	for k, v := range l {
		if !resourcename.IsGPU(k) {
			out[k] = v
		}
	}
	maps.Copy(out, gpus)
	return out
}

func counts(m map[corev1.ResourceName]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[string(k)] = v
	}
	return out
}

// Explain explains pod from the cluster: nodes and every pod (for the
// planner's round), events on the pod, the DRA objects (nil: none read),
// at now.
func Explain(ctx context.Context, pod *corev1.Pod, nodes []corev1.Node, pods []corev1.Pod, events []corev1.Event, dra *DRAObjects, now time.Time) (Explanation, error) {
	key := pod.Namespace + "/" + pod.Name
	asked, err := requestAsWritten(pod)
	if err != nil {
		return Explanation{}, err
	}
	ex := Explanation{
		Pod: key, Phase: string(pod.Status.Phase), Node: pod.Spec.NodeName,
		Requested: counts(asked), Effective: counts(schedview.Devices(pod)),
		Webhook: WebhookDecision{
			Rewrites: pod.Annotations[fallback.AnnotationFallback],
			Reason:   pod.Annotations[fallback.AnnotationReason],
			Policy:   pod.Annotations[fallback.AnnotationPolicy],
			Reshape:  pod.Annotations[webhook.AnnotationReshape],
		},
		Waiting: pod.Status.Phase == corev1.PodPending && pod.Spec.NodeName == "" && (plansnap.AsksForGPUs(pod) || hasClaims(pod)),
	}
	var view planner.DRAView
	var unread []string
	if dra != nil {
		v := dra.view()
		view = v
		d := v.classes.PodClaims(pod, v)
		if len(d.Devices) > 0 {
			ex.ClaimDevices = counts(d.Devices)
		}
		unread = d.Unknown
		ex.Claims, ex.ClaimsTogether = claimViews(ctx, pod, dra)
	}
	st, _ := BuildStatus(nodes, nil, plansnap.Options{FieldManager: plansnap.DefaultFieldManager, ManualHold: plansnap.DefaultManualHold, Now: now}, dra)
	for _, n := range st.Nodes {
		for _, g := range n.GPUs {
			if slices.Contains(g.UsedBy, key) {
				ex.Devices = append(ex.Devices, HeldDevice{Node: n.Name, GPU: g.Index, Profile: "whole GPU", UUID: g.UUID, Health: g.Health})
			}
			for _, in := range g.Instances {
				if slices.Contains(in.UsedBy, key) {
					ex.Devices = append(ex.Devices, HeldDevice{Node: n.Name, GPU: g.Index, Profile: in.Profile,
						Placement: fmt.Sprintf("%d:%d", in.Placement.Start, in.Placement.Size), UUID: in.UUID, Health: in.Health})
				}
			}
		}
	}
	ex.Events = podEvents(pod, events)
	resv, resvNotes := reservations(key, ex.Waiting, nodes, now)
	ex.Reservations = resv
	if !ex.Waiting {
		return ex, nil
	}
	ex.Notes = append(inUseNotes(pod, st), resvNotes...)
	for _, u := range unread {
		ex.Notes = append(ex.Notes, "the planner does not read "+u)
	}
	ex.Notes = append(ex.Notes, extendedClassNotes(schedview.Devices(pod), dra)...)
	nodePtrs := make([]*corev1.Node, len(nodes))
	for i := range nodes {
		nodePtrs[i] = &nodes[i]
	}
	podPtrs := make([]*corev1.Pod, 0, len(pods))
	for i := range pods {
		podPtrs = append(podPtrs, &pods[i])
	}
	preview, err := planner.PreviewRound(previewOptions(), now, nodePtrs, podPtrs, view)
	if err != nil {
		return ex, fmt.Errorf("the planner's round: %w", err)
	}
	ex.Planner = plannerView(preview, pod)
	if !ex.Planner.Considered && plansnap.WaitsForScheduler(pod) {
		ex.Planner.Reason = "it reads no GPU request of the pod that it can plan for"
	}
	return ex, nil
}

// podEvents are the pod's Events the explanation shows, oldest first.
func podEvents(pod *corev1.Pod, events []corev1.Event) []EventLine {
	var out []EventLine
	for _, e := range events {
		if e.InvolvedObject.Name != pod.Name || e.InvolvedObject.Namespace != pod.Namespace ||
			(e.InvolvedObject.UID != "" && e.InvolvedObject.UID != pod.UID) || !slices.Contains(plannerEventReasons, e.Reason) {
			continue
		}
		last := e.LastTimestamp.Time
		if last.IsZero() {
			last = cmp.Or(e.EventTime.Time, e.CreationTimestamp.Time)
		}
		out = append(out, EventLine{Type: e.Type, Reason: e.Reason, Message: e.Message, Count: e.Count, Last: last})
	}
	slices.SortStableFunc(out, func(a, b EventLine) int { return a.Last.Compare(b.Last) })
	return out
}

// inUseNotes say, for each resource the pod asks for, when the cluster
// has such devices but every one is held or unhealthy: what the webhook's
// existence mode cannot see (it rewrites to a type that exists, in use or
// not), and why the pod then waits anyway.
func inUseNotes(pod *corev1.Pod, st Status) []string {
	holders := map[corev1.ResourceName][]string{}
	for _, n := range st.Nodes {
		devices(n.GPUs, func(d servedDevice) {
			holders[d.res] = append(holders[d.res], d.usedBy...)
		})
	}
	var notes []string
	devs := schedview.Devices(pod)
	for _, res := range slices.Sorted(maps.Keys(devs)) {
		i := slices.IndexFunc(st.Free, func(c FreeCount) bool { return c.Resource == string(res) })
		if i < 0 {
			notes = append(notes, fmt.Sprintf("no node serves %s", res))
			continue
		}
		c := st.Free[i]
		if int64(c.Free) >= devs[res] {
			continue
		}
		h := slices.Compact(slices.Sorted(slices.Values(holders[res])))
		note := fmt.Sprintf("%d of the cluster's %d %s are free, it asks for %d", c.Free, c.Total, res, devs[res])
		if len(h) > 0 {
			note += " (held by " + clip(strings.Join(h, ", "), 120) + ")"
		}
		if pod.Annotations[fallback.AnnotationFallback] != "" {
			note += "; the webhook rewrote it to a type that exists, but whose devices are in use"
		}
		notes = append(notes, note)
	}
	return notes
}

// plannerView is the round's answer for pod.
func plannerView(p planner.Preview, pod *corev1.Pod) *PlannerView {
	key := pod.Namespace + "/" + pod.Name
	v := &PlannerView{}
	i := slices.IndexFunc(p.Pending, func(q *corev1.Pod) bool { return q.Namespace == pod.Namespace && q.Name == pod.Name })
	if i < 0 {
		return v
	}
	v.Considered = true
	pp := p.Result.Pods[i]
	v.Action, v.Node, v.Reason = string(pp.Action), pp.Node, pp.Reason
	for _, e := range p.Events {
		// A reservation's Events are said by Reservation.
		if e.Pod == key && e.Reason != planner.ReasonReserved && e.Reason != planner.ReasonReservationEnded {
			v.Event = e.Reason + ": " + e.Message
		}
	}
	for _, r := range reservationPlans(p) {
		if r.Pod == key {
			v.Reservation = &r
			break
		}
	}
	return v
}

func explainCommand() command {
	return command{
		name: "explain", args: "POD", outputs: []string{"json", "yaml"},
		run: func(ctx context.Context, r *runner, args []string) int {
			if len(args) != 1 {
				return r.usageError(&command{name: "explain", args: "POD"}, "explain takes one pod, got %d arguments", len(args))
			}
			client, ns, err := r.kube()
			if err != nil {
				return r.fail(err)
			}
			pod, err := client.CoreV1().Pods(ns).Get(ctx, args[0], metav1.GetOptions{})
			if err != nil {
				return r.fail(fmt.Errorf("pod %s/%s: %w", ns, args[0], err))
			}
			nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err != nil {
				return r.fail(fmt.Errorf("listing nodes: %w", err))
			}
			pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			if err != nil {
				return r.fail(fmt.Errorf("listing pods: %w", err))
			}
			sel := fields.Set{"involvedObject.kind": "Pod", "involvedObject.name": pod.Name}.AsSelector().String()
			events, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
			if err != nil {
				return r.fail(fmt.Errorf("listing the pod's events: %w", err))
			}
			// A pod's claims need every DRA object; a pod asking for GPUs
			// by extended resource, the DeviceClasses that may hand its
			// request to DRA, and the slices and claims of DRA nodes
			// (what a dynamic node can still make).
			var dra *DRAObjects
			unbound := pod.Status.Phase == corev1.PodPending && pod.Spec.NodeName == ""
			if hasClaims(pod) || (unbound && plansnap.AsksForGPUs(pod)) {
				full := hasClaims(pod) || slices.ContainsFunc(nodes.Items, func(n corev1.Node) bool { return schedview.IsDRANode(n.Labels) })
				if dra, err = readDRA(ctx, client, full); err != nil {
					return r.fail(err)
				}
			}
			ex, err := Explain(ctx, pod, nodes.Items, pods.Items, events.Items, dra, r.Now())
			if err != nil {
				return r.fail(err)
			}
			if r.g.Output == "text" {
				renderExplanation(r.Out, ex, r.style)
			} else if err := printData(r.Out, r.g.Output, ex); err != nil {
				return r.fail(err)
			}
			if ex.Waiting {
				return ExitAttention
			}
			return ExitOK
		},
	}
}

// reasonText says a fallback reason (several, comma-separated, when
// several types were rewritten) in words.
func reasonText(reason string) string {
	if reason == "" {
		return "no reason recorded"
	}
	var parts []string
	for _, r := range strings.Split(reason, ",") {
		switch r = strings.TrimSpace(r); r {
		case fallback.ReasonAbsent:
			parts = append(parts, "no node it may land on has the type it asked for")
		case fallback.ReasonExhausted:
			parts = append(parts, "nodes have the type it asked for, none a free one")
		default:
			parts = append(parts, r)
		}
	}
	return strings.Join(slices.Compact(parts), "; ")
}

// describeAsked is what a pod asks for: its extended resources as
// written, and what its ResourceClaims ask of migflex's driver.
func describeAsked(ex Explanation) string {
	switch {
	case len(ex.Claims) == 0:
		return describeCounts(ex.Requested)
	case len(ex.ClaimDevices) == 0 && len(ex.Requested) == 0:
		return "devices through its ResourceClaims (below)"
	case len(ex.ClaimDevices) == 0:
		return describeCounts(ex.Requested) + ", and devices through its ResourceClaims (below)"
	case len(ex.Requested) == 0:
		return describeCounts(ex.ClaimDevices) + " through its ResourceClaims"
	}
	return describeCounts(ex.Requested) + ", and " + describeCounts(ex.ClaimDevices) + " through its ResourceClaims"
}

// describeCounts is "1 x nvidia.com/mig-3g.40gb, 2 x nvidia.com/gpu".
func describeCounts(m map[string]int64) string {
	if len(m) == 0 {
		return "no GPU"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%d x %s", m[k], k))
	}
	return strings.Join(parts, ", ")
}

func renderExplanation(w io.Writer, ex Explanation, s style) {
	put := func(first, text string) {
		for _, l := range wrap(first, text) {
			fmt.Fprintln(w, l)
		}
	}
	where := "waits for a node"
	switch {
	case ex.Node != "":
		where = "on node " + ex.Node
	case !ex.Waiting:
		where = "not bound to a node"
	}
	fmt.Fprintf(w, "POD %s  %s, %s\n", ex.Pod, ex.Phase, where)
	put("  asked for:   ", describeAsked(ex))
	admitted := describeCounts(ex.Effective)
	switch {
	case len(ex.Effective) == 0 && len(ex.Claims) > 0:
		admitted = "its ResourceClaims as written (the webhook does not rewrite claims)"
	case ex.Webhook.Rewrites != "":
		admitted += fmt.Sprintf(" (webhook rewrote %s: %s)", ex.Webhook.Rewrites, reasonText(ex.Webhook.Reason))
	case ex.Webhook.Reshape != "":
		admitted += " (webhook left it for the planner to reshape: " + webhook.AnnotationReshape + "=" + ex.Webhook.Reshape + ")"
	default:
		admitted += " (the webhook did not change it)"
	}
	put("  admitted as: ", admitted)
	if ex.Webhook.Policy != "" {
		put("  its policy:  ", fallback.AnnotationPolicy+"="+ex.Webhook.Policy)
	}
	for _, d := range ex.Devices {
		at := ""
		if d.Placement != "" {
			at = " at " + d.Placement
		}
		put("  holds:       ", fmt.Sprintf("%s on %s GPU %d%s, %s (%s)", d.Profile, d.Node, d.GPU, at, d.UUID, s.health(d.Health)))
	}
	for _, c := range ex.Claims {
		put("  claim:       ", describeClaim(c))
		for _, rq := range c.Requests {
			put("  request:     ", describeRequest(c.Name, rq))
			if rq.Why != "" {
				put("  unallocated: ", c.Name+"/"+rq.Name+": "+rq.Why)
			}
		}
		for _, a := range c.Allocated {
			at := a.Device + " on node " + a.Pool
			if a.Driver != dracel.Driver {
				at = a.Driver + " device " + a.Device + " of pool " + a.Pool
			}
			put("  allocated:   ", c.Name+"/"+a.Request+": "+at)
		}
	}
	if ex.ClaimsTogether != "" {
		put("  together:    ", ex.ClaimsTogether)
	}
	for _, r := range ex.Reservations {
		put("  reserved:    ", describeReservation(r))
	}
	for _, e := range ex.Events {
		count := ""
		if e.Count > 1 {
			count = fmt.Sprintf(" (x%d)", e.Count)
		}
		put("  event:       ", fmt.Sprintf("%s %s%s: %s", e.Type, e.Reason, count, e.Message))
	}
	for _, n := range ex.Notes {
		put("  note:        ", n)
	}
	if p := ex.Planner; p != nil {
		r := p.Reservation
		if r != nil && (r.Action == ReservationEnd || p.Action != string(solver.ActionNone)) {
			put("  planner now: ", describeReservationPlan(*r, "it"))
		}
		switch {
		case r != nil && r.Action != ReservationEnd && p.Action == string(solver.ActionNone):
			// The round gives the reserved GPUs to no other pod; the pod
			// waits for the scheduler to bind it once they are free.
			put("  planner now: ", describeReservationPlan(*r, "it")+
				": they go to no other pod, and the node's agent offers them once all are free and whole")
		case !p.Considered:
			put("  planner now: ", "does not plan for it: "+cmp.Or(p.Reason, "the scheduler has not marked it unschedulable (yet)"))
		case p.Action == string(solver.ActionExisting):
			put("  planner now: ", "free devices that exist serve it; nothing to change (the scheduler should place it)")
		case p.Action == string(solver.ActionReshape):
			put("  planner now: ", cmp.Or(p.Event, "would reshape node "+p.Node+" for it"))
		default:
			put("  planner now: ", "no change it may make serves it: "+p.Reason)
		}
	}
}
