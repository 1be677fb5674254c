package migflexctl

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/planner"
	"github.com/migflex/migflex/internal/planner/reserve"
	"github.com/migflex/migflex/internal/planner/solver"
)

// PlanView is what `plan` reports, and its -o json|yaml form.
type PlanView struct {
	// Policy names the policy planned with.
	Policy string     `json:"policy"`
	Pods   []PodView  `json:"pods"`
	Nodes  []NodeView `json:"nodes"`
	// Reservations are the reservations the round would hold (kept or
	// written) and those it would end.
	Reservations []ReservationPlan `json:"reservations,omitempty"`
	// Events are the Events the round would record on pods.
	Events   []planner.PreviewEvent `json:"events,omitempty"`
	Warnings []string               `json:"warnings,omitempty"`
}

// PodView is one pending pod and the planner's answer.
type PodView struct {
	Pod    string           `json:"pod"`
	Asks   map[string]int64 `json:"asks"`
	Action string           `json:"action"`
	Node   string           `json:"node,omitempty"`
	Reason string           `json:"reason,omitempty"`
}

// NodeView is one node the round would write.
type NodeView struct {
	Node string `json:"node"`
	// Key is the annotation written: nvidia.com/mig.config,
	// migflex.io/reservation, or migflex.io/mig.config.proposed removed.
	Key     string    `json:"key"`
	Removed bool      `json:"removed,omitempty"`
	GPUs    []GPUView `json:"gpus,omitempty"`
	// Config is the value written.
	Config string `json:"config,omitempty"`
}

// ReservationPlan is a reservation a round would hold or end.
type ReservationPlan struct {
	reserve.Reservation
	// Action is keep (the Node carries it), write (a new one) or end.
	Action string `json:"action"`
	// Why says why it ends.
	Why string `json:"why,omitempty"`
}

// What a round does with a reservation (ReservationPlan.Action).
const (
	ReservationKeep  = "keep"
	ReservationWrite = "write"
	ReservationEnd   = "end"
)

// reservationPlans are the round's reservations: those held (kept, then
// new), then those ended.
func reservationPlans(p planner.Preview) []ReservationPlan {
	var out []ReservationPlan
	for _, r := range p.Reservations {
		action := ReservationKeep
		if r.Written {
			action = ReservationWrite
		}
		out = append(out, ReservationPlan{Reservation: r.Reservation, Action: action})
	}
	for _, e := range p.ReservationsEnded {
		out = append(out, ReservationPlan{Reservation: e.Reservation, Action: ReservationEnd, Why: e.Why})
	}
	return out
}

// describeReservationPlan says what a round does with a reservation; who
// names its pod ("pod ns/big", or "it" in the pod's own explanation).
func describeReservationPlan(r ReservationPlan, who string) string {
	held := "node " + r.Node + " " + gpuList(r.GPUs)
	until := r.Deadline.UTC().Format(time.RFC3339)
	switch r.Action {
	case ReservationEnd:
		return fmt.Sprintf("would end the reservation of %s for %s: %s", held, who, r.Why)
	case ReservationWrite:
		return fmt.Sprintf("would reserve %s for %s until %s (expected free at %s)", held, who, until, r.Ready.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("keeps %s reserved for %s until %s", held, who, until)
}

// GPUView is one GPU's change.
type GPUView struct {
	Index  int      `json:"index"`
	Model  string   `json:"model"`
	Layout string   `json:"layout"`
	For    []string `json:"for,omitempty"`
}

// previewOptions are what `plan` and `explain` plan with: the planner's
// defaults, its policy and its reservations' (the command's --reserve-*
// defaults), so that a dry run holds and ends reservations as the
// planner's rounds do.
func previewOptions() planner.Options {
	return planner.Options{Policy: solver.DefaultPolicy(), Reserve: reserve.DefaultPolicy()}
}

// describePolicy names the policy a round is planned with.
func describePolicy(o planner.Options) string {
	return fmt.Sprintf("the planner's defaults (cooldown %s, at most %d GPUs per round, at most %d reservations)",
		o.Policy.Cooldown, o.Policy.MaxGPUsPerRound, o.Reserve.Max)
}

// BuildPlan is the planner's next round on the cluster at now, with its
// DRA objects (nil: none read).
func BuildPlan(nodes []corev1.Node, pods []corev1.Pod, dra *DRAObjects, now time.Time) (PlanView, error) {
	o := previewOptions()
	nodePtrs := make([]*corev1.Node, len(nodes))
	for i := range nodes {
		nodePtrs[i] = &nodes[i]
	}
	podPtrs := make([]*corev1.Pod, len(pods))
	for i := range pods {
		podPtrs[i] = &pods[i]
	}
	var view planner.DRAView
	if dra != nil {
		view = dra.view()
	}
	p, err := planner.PreviewRound(o, now, nodePtrs, podPtrs, view)
	if err != nil {
		return PlanView{}, fmt.Errorf("the planner's round: %w", err)
	}
	v := PlanView{Policy: describePolicy(o), Events: p.Events, Warnings: p.Warnings, Pods: []PodView{}, Nodes: []NodeView{},
		Reservations: reservationPlans(p)}
	for i, pp := range p.Result.Pods {
		pod := p.Pending[i]
		v.Pods = append(v.Pods, PodView{Pod: pp.Pod, Asks: counts(schedview.Devices(pod)), Action: string(pp.Action), Node: pp.Node, Reason: pp.Reason})
	}
	changes := map[string]solver.NodeChange{}
	for _, nc := range p.Result.Nodes {
		changes[nc.Node] = nc
	}
	for _, w := range p.Writes {
		nv := NodeView{Node: w.Node, Key: w.Key, Removed: w.Value == "", Config: w.Value}
		if w.Key == nodeinfo.AnnotationReservation {
			// The layout's GPUs are the node's other write's.
			v.Nodes = append(v.Nodes, nv)
			continue
		}
		for _, g := range changes[w.Node].GPUs {
			nv.GPUs = append(nv.GPUs, GPUView{Index: g.Index, Model: g.Model, Layout: layoutText(g), For: g.Pods})
		}
		v.Nodes = append(v.Nodes, nv)
	}
	return v, nil
}

// layoutText is a GPU's layout after a change, "4g.40gb@0 3g.40gb@4".
func layoutText(g solver.GPUChange) string {
	if !g.MigEnabled {
		return "MIG off (whole GPU)"
	}
	if len(g.Layout) == 0 {
		return "no instances"
	}
	var parts []string
	for _, in := range g.Layout {
		parts = append(parts, fmt.Sprintf("%s@%d", in.Profile, in.Start))
	}
	return strings.Join(parts, " ")
}

func planCommand() command {
	return command{
		name: "plan", args: "", outputs: []string{"json", "yaml"},
		run: func(ctx context.Context, r *runner, args []string) int {
			if len(args) != 0 {
				return r.usageError(&command{name: "plan"}, "plan takes no arguments, got %q", args)
			}
			client, _, err := r.kube()
			if err != nil {
				return r.fail(err)
			}
			nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err != nil {
				return r.fail(fmt.Errorf("listing nodes: %w", err))
			}
			pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			if err != nil {
				return r.fail(fmt.Errorf("listing pods: %w", err))
			}
			// Pods' claims are read as the planner reads them when any
			// pod names one.
			var dra *DRAObjects
			if slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool { return hasClaims(&p) }) {
				if dra, err = readDRA(ctx, client, true); err != nil {
					return r.fail(err)
				}
			}
			v, err := BuildPlan(nodes.Items, pods.Items, dra, r.Now())
			if err != nil {
				return r.fail(err)
			}
			if r.g.Output == "text" {
				renderPlan(r.Out, v)
			} else if err := printData(r.Out, r.g.Output, v); err != nil {
				return r.fail(err)
			}
			for _, p := range v.Pods {
				if p.Action == string(solver.ActionNone) {
					return ExitAttention
				}
			}
			return ExitOK
		},
	}
}

func renderPlan(w io.Writer, v PlanView) {
	put := func(first, text string) {
		for _, l := range wrap(first, text) {
			fmt.Fprintln(w, l)
		}
	}
	put("", "Dry run of the planner's next round with "+v.Policy+"; nothing is written.")
	fmt.Fprintln(w)
	if len(v.Pods) == 0 {
		fmt.Fprintln(w, "No pod waits for GPUs: the round has nothing to do.")
	} else {
		fmt.Fprintf(w, "PENDING PODS (%d)\n", len(v.Pods))
		for _, p := range v.Pods {
			line := fmt.Sprintf("%s asks %s: %s", p.Pod, describeCounts(p.Asks), p.Action)
			if p.Node != "" {
				line += " on " + p.Node
			}
			if p.Reason != "" {
				line += ": " + p.Reason
			}
			put("  ", line)
		}
	}
	if len(v.Nodes) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "NODE WRITES (%d)\n", len(v.Nodes))
		for _, n := range v.Nodes {
			if n.Removed {
				put("  ", fmt.Sprintf("%s: remove %s", n.Node, n.Key))
				continue
			}
			put("  ", fmt.Sprintf("%s: %s", n.Node, n.Key))
			for _, g := range n.GPUs {
				line := fmt.Sprintf("GPU %d (%s) -> %s", g.Index, g.Model, g.Layout)
				if len(g.For) > 0 {
					line += " for " + strings.Join(g.For, ", ")
				}
				put("    ", line)
			}
		}
	}
	if len(v.Reservations) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "RESERVATIONS (%d)\n", len(v.Reservations))
		for _, r := range v.Reservations {
			put("  ", describeReservationPlan(r, "pod "+r.Pod))
		}
	}
	if len(v.Events) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "EVENTS IT WOULD RECORD")
		for _, e := range v.Events {
			put("  ", fmt.Sprintf("%s %s %s: %s", e.Pod, e.Type, e.Reason, e.Message))
		}
	}
	for _, wn := range v.Warnings {
		put("warning: ", wn)
	}
}
