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

	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/planner"
	"github.com/migflex/migflex/internal/planner/solver"
)

// PlanView is what `plan` reports, and its -o json|yaml form.
type PlanView struct {
	// Policy names the policy planned with.
	Policy string     `json:"policy"`
	Pods   []PodView  `json:"pods"`
	Nodes  []NodeView `json:"nodes"`
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
	// Key is the annotation written: nvidia.com/mig.config, or
	// migflex.io/mig.config.proposed removed.
	Key     string    `json:"key"`
	Removed bool      `json:"removed,omitempty"`
	GPUs    []GPUView `json:"gpus,omitempty"`
	Config  string    `json:"config,omitempty"`
}

// GPUView is one GPU's change.
type GPUView struct {
	Index  int      `json:"index"`
	Model  string   `json:"model"`
	Layout string   `json:"layout"`
	For    []string `json:"for,omitempty"`
}

// describePolicy names the policy a round is planned with.
func describePolicy(p solver.Policy) string {
	return fmt.Sprintf("the planner's defaults (cooldown %s, at most %d GPUs per round)", p.Cooldown, p.MaxGPUsPerRound)
}

// BuildPlan is the planner's next round on the cluster at now, with its
// DRA objects (nil: none read).
func BuildPlan(nodes []corev1.Node, pods []corev1.Pod, dra *DRAObjects, now time.Time) (PlanView, error) {
	pol := solver.DefaultPolicy()
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
	p, err := planner.PreviewRound(planner.Options{Policy: pol}, now, nodePtrs, podPtrs, view)
	if err != nil {
		return PlanView{}, fmt.Errorf("the planner's round: %w", err)
	}
	v := PlanView{Policy: describePolicy(pol), Events: p.Events, Warnings: p.Warnings, Pods: []PodView{}, Nodes: []NodeView{}}
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
