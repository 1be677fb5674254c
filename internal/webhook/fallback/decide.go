// Package fallback decides how to rewrite a pod's MIG request to a GPU type
// that exists on the nodes the pod can land on. It is pure: the pod, a
// Snapshot of the nodes and the policy go in, a Decision with a JSON patch
// comes out. The HTTP, TLS and informer adapter lives in internal/webhook.
package fallback

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/domain/schedview"
)

// Annotations the webhook reads and writes.
const (
	// AnnotationFallback lists the rewrites, as the original webhook did:
	// "2g.20gb->1g.10gb", comma-separated when there are several.
	AnnotationFallback = "gpu-webhook.k8s.io/fallback"
	// AnnotationOriginal holds the rewritten containers' GPU resources before
	// the rewrite (JSON, OriginalResources). A pod carrying it is never
	// rewritten again, so reinvocation and re-admission are no-ops.
	AnnotationOriginal = "migflex.io/original-resources"
	// AnnotationReason says why each rewrite happened.
	AnnotationReason = "migflex.io/fallback-reason"
	// AnnotationPolicy is the pod's own restriction: none, down, up or any.
	AnnotationPolicy = "migflex.io/fallback-policy"
)

// Outcome classifies a decision, for metrics and logs.
type Outcome string

const (
	OutcomeNoGPU            Outcome = "no_gpu"
	OutcomeAlreadyProcessed Outcome = "already_processed"
	OutcomeUnchanged        Outcome = "unchanged"
	OutcomeRewritten        Outcome = "rewritten"
	OutcomeDenied           Outcome = "denied"
	// OutcomeUnsatisfiable: nothing fits a requested type and
	// --on-unsatisfiable=allow let the pod through (other types may still
	// have been rewritten).
	OutcomeUnsatisfiable Outcome = "unsatisfiable_allowed"
	// OutcomeUnknown: the pod's only GPU types the webhook may change are
	// names it does not understand (no NVIDIA GPU's MIG profile, on no
	// node, not in the policy); left as they are, with a warning.
	OutcomeUnknown Outcome = "unknown_type"
	// OutcomeTooManyTypes: the pod names more GPU types than the cap
	// (Options.MaxTypes); left as it is, with a warning.
	OutcomeTooManyTypes Outcome = "too_many_types"
	// OutcomeInvalid: the pod's extended-resource quantities are ones the
	// API server rejects (not whole, negative, requests unequal to limits);
	// left as it is, for the API server to say so.
	OutcomeInvalid Outcome = "invalid_quantity"
	// OutcomeTooLarge: the rewrite's annotations would take the pod over
	// the API server's limit on annotations; left as it is, with a warning.
	OutcomeTooLarge Outcome = "annotations_too_large"
	// OutcomeCanceled: the context ended before the decision did
	// (Decision.Err says how); nobody waits for the answer.
	OutcomeCanceled Outcome = "canceled"
	// OutcomeError: the decision failed for a fault of the decider, not of
	// the pod (Decision.Err says which); the caller answers with a server
	// error, so that the webhook's failure policy applies.
	OutcomeError Outcome = "error"
)

// Reasons for a rewrite, as written into AnnotationReason and logs.
const (
	// ReasonAbsent: no node the pod can land on has the requested type.
	ReasonAbsent = "absent"
	// ReasonExhausted (capacity mode): nodes have the type, none has enough free.
	ReasonExhausted = "exhausted"
)

// Decision is the result for one pod.
type Decision struct {
	Outcome Outcome
	Allowed bool
	// Message explains a denial (the API server shows it to the user), or
	// why a pod was left alone (for the log). It is bounded, whatever the pod.
	Message string
	// Warnings are returned to the client (kubectl prints them).
	Warnings []string
	// Rewrites are the distinct type changes, in the order of the pod spec.
	Rewrites []Rewrite
	// Patch is the RFC 6902 JSON patch; empty when the pod is unchanged.
	Patch []Operation
	// Err is set with OutcomeError and OutcomeCanceled only.
	Err error
	// Planned is the planner's answer the decision counts on (reshape-first,
	// DecideWith): the pod, as patched, is served by what the planner makes
	// or sees free in its next round. Nil when it counts on none.
	Planned *Served
}

// Rewrite is one type change applied to every container that requests From.
type Rewrite struct {
	From, To corev1.ResourceName
	// Reason is ReasonAbsent or ReasonExhausted.
	Reason string
}

// Label is the annotation form of the rewrite: "2g.20gb->1g.10gb".
func (r Rewrite) Label() string { return resourcename.Short(r.From) + "->" + resourcename.Short(r.To) }

// Options configure a Decider.
type Options struct {
	Policy          Policy
	Mode            Mode
	OnUnsatisfiable Unsatisfiable
	// OnInsufficientCount is what to do with a pod whose GPU types exist
	// but of which no node it can be scheduled to has as many devices as it
	// needs on one node, by Allocatable: allow it with a warning (the
	// default; it stays Pending until a node has them, which the planner
	// may arrange) or deny it.
	OnInsufficientCount Unsatisfiable
	// MaxTypes caps the distinct GPU types a pod may name for the webhook
	// to decide on it; 0 means DefaultMaxTypes.
	MaxTypes int
}

// Decider applies one validated configuration to pods. It holds no state
// besides its options and is safe for concurrent use.
type Decider struct {
	opts Options
	// policyNames are the types the policy names, as keys or in chains.
	policyNames map[corev1.ResourceName]bool
	// marshal encodes the annotation JSON; json.Marshal, replaced in tests.
	marshal func(any) ([]byte, error)
}

// NewDecider validates the options; empty Mode, OnUnsatisfiable and
// OnInsufficientCount take the defaults (existence, deny, allow).
func NewDecider(o Options) (*Decider, error) {
	if o.Mode == "" {
		o.Mode = ModeExistence
	}
	if o.OnUnsatisfiable == "" {
		o.OnUnsatisfiable = UnsatisfiableDeny
	}
	if o.OnInsufficientCount == "" {
		o.OnInsufficientCount = UnsatisfiableAllow
	}
	if o.MaxTypes == 0 {
		o.MaxTypes = DefaultMaxTypes
	}
	if _, err := Modes.Parse(string(o.Mode)); err != nil {
		return nil, err
	}
	if _, err := Unsatisfiables.Parse(string(o.OnUnsatisfiable)); err != nil {
		return nil, fmt.Errorf("on unsatisfiable: %w", err)
	}
	if _, err := Unsatisfiables.Parse(string(o.OnInsufficientCount)); err != nil {
		return nil, fmt.Errorf("on insufficient count: %w", err)
	}
	if o.MaxTypes < 0 {
		return nil, fmt.Errorf("max types %d is negative", o.MaxTypes)
	}
	if err := o.Policy.Validate(); err != nil {
		return nil, fmt.Errorf("invalid fallback policy: %w", err)
	}
	names := map[corev1.ResourceName]bool{}
	for from, chain := range o.Policy.Chains {
		names[from] = true
		for _, t := range chain {
			names[t] = true
		}
	}
	return &Decider{opts: o, policyNames: names, marshal: json.Marshal}, nil
}

// Mode is the decider's mode; the server needs it to know whether to watch pods.
func (d *Decider) Mode() Mode { return d.opts.Mode }

// Decide decides for one pod at admission. snap must not be nil.
func (d *Decider) Decide(pod *corev1.Pod, snap *schedview.Snapshot) Decision {
	return d.DecideContext(context.Background(), pod, snap)
}

// DecideContext is Decide that stops, with OutcomeCanceled, once ctx is
// done: the API server that asked has given up, so the answer is wasted.
func (d *Decider) DecideContext(ctx context.Context, pod *corev1.Pod, snap *schedview.Snapshot) Decision {
	return d.DecideWith(ctx, pod, snap, nil)
}

// DecideWith is DecideContext in reshape-first mode when p is not nil:
// each requested type becomes the first of itself and its fallback chain
// that can run now, on free devices on one node or by what the planner
// makes in its next round (Decision.Planned), so that a pod is cut neither
// while the planner can serve it at its size nor to a type that still
// waits. Its steps: a first look at the pod (screen), its GPU types sorted
// into those the decider may rewrite and those it does not know
// (sortTypes), a type chosen for each (chooseAll), the verdict on what fits
// nowhere and what waits (judge), and the patch (withPatch).
func (d *Decider) DecideWith(ctx context.Context, pod *corev1.Pod, snap *schedview.Snapshot, p Planner) Decision {
	in, early := d.screen(pod)
	if early != nil {
		return *early
	}
	requested, warnings, early := d.sortTypes(in.types, snap)
	if early != nil {
		return *early
	}
	c, err := d.chooseAll(ctx, pod, snap, requested, in.policy, p)
	if err != nil {
		return Decision{Outcome: OutcomeCanceled, Err: err}
	}
	dec, done := d.judge(c, warnings)
	if done {
		return dec
	}
	if err := ctx.Err(); err != nil {
		return Decision{Outcome: OutcomeCanceled, Err: err}
	}
	return d.withPatch(pod, dec)
}

// screened is what a first look at a pod found: its own fallback policy
// and the GPU types it names.
type screened struct {
	policy PodPolicy
	types  []corev1.ResourceName
}

// screen takes a first look at the pod: whether it asks for GPUs at all,
// was decided on already, carries a valid policy of its own, and names
// GPU types the decider may look at (not too many, with quantities the
// API server accepts). A pod the decision ends for comes back as early.
func (d *Decider) screen(pod *corev1.Pod) (screened, *Decision) {
	if !schedview.HasGPURequest(pod) {
		return screened{}, &Decision{Outcome: OutcomeNoGPU, Allowed: true}
	}
	if _, done := pod.Annotations[AnnotationOriginal]; done {
		return screened{}, &Decision{Outcome: OutcomeAlreadyProcessed, Allowed: true}
	}
	in := screened{policy: PodPolicyAny}
	if s, ok := pod.Annotations[AnnotationPolicy]; ok {
		pp, err := parsePodPolicy(s)
		if err != nil {
			return screened{}, &Decision{Outcome: OutcomeDenied, Message: err.Error()}
		}
		in.policy = pp
	}
	g := gather(pod, d.opts.MaxTypes)
	switch {
	case g.tooMany:
		msg := fmt.Sprintf("the pod names more than %d GPU resource types (nvidia.com/gpu, nvidia.com/mig-*), the most the migflex GPU webhook decides on; its GPU requests are left as they are", d.opts.MaxTypes)
		return screened{}, &Decision{Outcome: OutcomeTooManyTypes, Allowed: true, Message: msg, Warnings: []string{msg}}
	case g.invalid != "":
		// The API server rejects the pod with its own message, which names
		// what the user wrote; a rewrite would only change that.
		return screened{}, &Decision{Outcome: OutcomeInvalid, Allowed: true, Message: clip(g.invalid, maxMessage)}
	}
	in.types = g.types
	return in, nil
}

// sortTypes keeps the types the decider may rewrite (managed), in order,
// and warns of those it does not understand, which stay as they are. A pod
// with nothing to rewrite comes back as early.
func (d *Decider) sortTypes(types []corev1.ResourceName, snap *schedview.Snapshot) ([]corev1.ResourceName, []string, *Decision) {
	var requested, unknown []corev1.ResourceName
	for _, r := range types {
		switch {
		case !d.understood(r, snap):
			unknown = append(unknown, r)
		case d.managed(r):
			requested = append(requested, r)
		}
	}
	var warnings []string
	if len(unknown) > 0 {
		warnings = append(warnings, unknownWarning(unknown))
	}
	switch {
	case len(requested) > 0:
		return requested, warnings, nil
	case len(unknown) > 0:
		return nil, nil, &Decision{Outcome: OutcomeUnknown, Allowed: true, Warnings: warnings}
	}
	return nil, nil, &Decision{Outcome: OutcomeUnchanged, Allowed: true}
}

// choices are the types chosen for a pod's requested types.
type choices struct {
	rewrites []Rewrite
	// chosen is the type decided for each requested type (itself when
	// kept).
	chosen map[corev1.ResourceName]corev1.ResourceName
	// explained are the denial's explanations of the first unsatisfied
	// types; unsatisfied counts them all.
	explained   []string
	unsatisfied int
	// waits are the choices that cannot run now (nothing in their chain
	// can), in order.
	waits []waiting
	// planned is the planner's answer the choices count on; forPlanner
	// are the chosen types it serves or will make, which the allocatable
	// counts do not judge.
	planned    *Served
	forPlanner map[corev1.ResourceName]bool
	// reshapeFirst: a planner was asked.
	reshapeFirst bool
	// to is the type chosen for each requested type decided (fitting.to).
	to map[corev1.ResourceName]corev1.ResourceName
	// need is the pod's needs under renamings.
	need *needs
	// v is what the pod can use; withGroups is v with its nodes.
	v          view
	withGroups func() view
}

// waiting is a choice that waits: from kept, or rewritten to the nearest
// type that exists; asked is the planner's answer on from as asked.
type waiting struct {
	from, to corev1.ResourceName
	asked    Served
}

// how says how a type was chosen.
type how uint8

const (
	// runsNow: free devices on one node, or, in existence mode without a
	// planner, a requested type that exists.
	runsNow how = iota
	// planned: the planner serves it in its next round.
	planned
	// waits: nothing in its chain can run now; the pod waits for it.
	waits
)

// chooseAll picks a type for each requested type, in order, on the nodes
// the pod can land on (chooseEach). With a planner, choices that count on
// it for a pod of several types are asked about once more with the pod's
// final need: a type decided after them may have changed it. When the
// planner no longer serves that, the choices are made again without its
// word.
func (d *Decider) chooseAll(ctx context.Context, pod *corev1.Pod, snap *schedview.Snapshot, requested []corev1.ResourceName, pp PodPolicy, p Planner) (*choices, error) {
	need := newNeeds(pod)
	ask := newAsker(p, pod, need)
	c, err := d.chooseEach(ctx, pod, need, snap, requested, pp, ask)
	if err != nil || c.planned == nil || len(requested) == 1 {
		return c, err
	}
	if final := ask.final(c.to); final.Now {
		c.planned = &final
		return c, nil
	}
	ask.left = 0
	return d.chooseEach(ctx, pod, need, snap, requested, pp, ask)
}

// chooseEach picks a type for each requested type, in order: itself when
// it fits, else the first candidate of its chain that does (choose); a
// type nothing fits is explained.
// need is the pod's needs.
func (d *Decider) chooseEach(ctx context.Context, pod *corev1.Pod, need *needs, snap *schedview.Snapshot, requested []corev1.ResourceName, pp PodPolicy, ask *asker) (*choices, error) {
	filter := schedview.NewAdmissionFilter(pod, snap)
	c := &choices{
		v:            viewFor(snap, filter, d.opts.Mode == ModeCapacity),
		chosen:       make(map[corev1.ResourceName]corev1.ResourceName, len(requested)),
		withGroups:   func() view { return viewFor(snap, filter, true) },
		reshapeFirst: ask != nil,
		need:         need,
	}
	fit := newFitting(need, c.withGroups)
	for _, r := range requested {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		cands := d.candidates(r, &c.v, pp)
		ch := d.choose(r, cands, &c.v, fit, ask)
		switch {
		case !ch.ok:
			if c.unsatisfied < maxListed {
				c.explained = append(c.explained, d.explain(r, cands, &c.v, snap, filter, pp))
			}
			c.unsatisfied++
			continue
		case ch.to != r:
			c.rewrites = append(c.rewrites, Rewrite{From: r, To: ch.to, Reason: ch.reason})
		}
		c.chosen[r] = ch.to
		switch ch.how {
		case planned:
			c.planned = &ch.served
			c.planFor(ch.to)
		case waits:
			c.waits = append(c.waits, waiting{from: r, to: ch.to, asked: ch.asked})
			if ch.to == r && !c.v.present(r) {
				// Kept for the planner to make later.
				c.planFor(r)
			}
		}
	}
	c.to = fit.to
	return c, nil
}

func (c *choices) planFor(t corev1.ResourceName) {
	if c.forPlanner == nil {
		c.forPlanner = map[corev1.ResourceName]bool{}
	}
	c.forPlanner[t] = true
}

// judge is the decision on the choices before the patch: a type nothing
// fits denies the pod or, with --on-unsatisfiable=allow, warns; a choice
// that waits warns (existence mode, from the agents' reports; any mode
// with a planner); a need no node can ever hold on one node warns, or
// denies with --on-insufficient-count=deny. done is set for a denial.
func (d *Decider) judge(c *choices, warnings []string) (dec Decision, done bool) {
	dec = Decision{Outcome: OutcomeUnchanged, Allowed: true, Rewrites: c.rewrites, Planned: c.planned}
	if c.unsatisfied > 0 {
		msg := "no GPU type fits: " + strings.Join(c.explained, "; ")
		more := ""
		if n := c.unsatisfied - maxListed; n > 0 {
			more = "; and " + count(n, "more type")
		}
		if d.opts.OnUnsatisfiable == UnsatisfiableDeny {
			return Decision{Outcome: OutcomeDenied, Message: clip(msg, maxMessage-len(more)) + more, Warnings: warnings}, true
		}
		dec.Outcome = OutcomeUnsatisfiable
		more += " (left unchanged)"
		warnings = append(warnings, clip(msg, maxWarning-len(more))+more)
	}
	switch {
	case c.reshapeFirst:
		warnings = append(warnings, waitsForPlanner(c)...)
	case d.opts.Mode == ModeExistence:
		warnings = append(warnings, allInUse(c)...)
	}
	if short := insufficient(c.need, c.chosen, c.forPlanner, &c.v, c.withGroups); short != "" {
		if d.opts.OnInsufficientCount == UnsatisfiableDeny {
			return Decision{Outcome: OutcomeDenied, Message: clip(short, maxMessage), Warnings: warnings}, true
		}
		warnings = append(warnings, clip(short, maxWarning))
	}
	dec.Warnings = warnings
	return dec, false
}

// allInUse warns, in existence mode, of each choice that waits for a type
// whose devices on the nodes the pod may land on are all held, as the
// nodes' agents last reported (the webhook watches no pods in this mode):
// a type that exists fits, so the pod is admitted with it, and waits for
// a device to free. Where no agent reports use (another source), no type
// is all in use.
func allInUse(c *choices) []string {
	var out []string
	for _, w := range c.waits {
		if free, ok := c.v.free[w.to]; !ok || free != 0 {
			continue
		}
		what := fmt.Sprintf("%s was rewritten to %s", w.from, w.to)
		if w.to == w.from {
			what = fmt.Sprintf("%s was left as asked", w.from)
		}
		out = append(out, clip(fmt.Sprintf("%s, but every %s device on the nodes this pod may land on is in use, as their agents last reported: the pod waits until one is free (kubectl migflex explain shows who holds them)",
			what, resourcename.Short(w.to)), maxWarning))
	}
	return out
}

// maxReason is the most bytes of the planner's reason a warning quotes.
const maxReason = 400

// waitsForPlanner warns, in reshape-first mode, of each choice that waits:
// neither it nor a type of its chain has free devices for the pod on one
// node, and the planner cannot serve it now.
func waitsForPlanner(c *choices) []string {
	var out []string
	for _, w := range c.waits {
		why := "the planner cannot serve it now"
		if w.asked.Reason != "" {
			why += " (" + clip(w.asked.Reason, maxReason) + ")"
		}
		var msg string
		switch {
		case w.to != w.from:
			msg = fmt.Sprintf("%s was rewritten to %s, the nearest type that exists: no type in its fallback chain has free devices for this pod on one node, %s, and it cannot make %s on a node the pod may land on; the pod waits until a %s device is free",
				w.from, w.to, why, resourcename.Short(w.from), resourcename.Short(w.to))
		case c.v.present(w.from):
			msg = fmt.Sprintf("%s was left as asked: neither it nor a type in its fallback chain has free devices for this pod on one node, and %s; the pod waits until a device of it is free or the planner makes one",
				w.from, why)
		default:
			msg = fmt.Sprintf("%s was left as asked: no node the pod may land on has it, no type in its fallback chain has free devices for this pod on one node, and %s; the pod waits until the planner makes one",
				w.from, why)
		}
		out = append(out, clip(msg, maxWarning))
	}
	return out
}

// withPatch adds the patch of dec's rewrites; a rewrite whose annotations
// would take the pod over the API server's limit leaves the pod as it is,
// with a warning.
func (d *Decider) withPatch(pod *corev1.Pod, dec Decision) Decision {
	if len(dec.Rewrites) == 0 {
		return dec
	}
	patch, err := buildPatch(pod, dec.Rewrites, d.marshal)
	var large *annotationsTooLarge
	switch {
	case errors.As(err, &large):
		msg := fmt.Sprintf("rewriting the GPU requests (%s) needs %d bytes of annotations, over the API server's limit of %d for all of a pod's annotations; the pod is left as it was",
			rewriteLabels(dec.Rewrites), large.size, large.limit)
		return Decision{Outcome: OutcomeTooLarge, Allowed: true, Message: msg, Warnings: append(dec.Warnings, clip(msg, maxWarning))}
	case err != nil:
		return Decision{Outcome: OutcomeError, Err: fmt.Errorf("building the patch: %w", err)}
	}
	if dec.Outcome == OutcomeUnchanged {
		dec.Outcome = OutcomeRewritten
	}
	dec.Patch = patch
	return dec
}

// understood reports whether the webhook knows what r is: a whole GPU, a
// MIG profile of a GPU NVIDIA makes, a type some node has, or a type the
// policy names. Any other name is left alone with a warning: rewriting
// nvidia.com/mig-9g.99gb to whatever is near would be a guess.
func (d *Decider) understood(r corev1.ResourceName, snap *schedview.Snapshot) bool {
	return Known(r) || d.policyNames[r] || snap.Has(r)
}

// LabelOther is MetricLabel's name for every type it does not name.
const LabelOther = "other"

// MetricLabel is the short name of r (as in the fallback annotation) for a
// metric label, or LabelOther. Any pod creator can ask for any resource name,
// and a dry run costs nothing, so a label taken from the pod would let anyone
// add series without bound. The names kept form a set bounded by the
// cluster and its configuration instead: nvidia.com/gpu, a type some node of
// snap has, a type the policy's chains name, and the MIG profiles of the
// GPUs NVIDIA makes (with their +me, +gfx attributes). A rewrite's target is
// always on a node, so it always keeps its name.
func (d *Decider) MetricLabel(r corev1.ResourceName, snap *schedview.Snapshot) string {
	if d.understood(r, snap) {
		return resourcename.Short(r)
	}
	return LabelOther
}

// managed reports whether the decider may rewrite r: a MIG type always
// qualifies; nvidia.com/gpu and any other name only with an explicit chain,
// as the webhook never changed whole-GPU requests by itself.
func (d *Decider) managed(r corev1.ResourceName) bool {
	if _, ok := d.opts.Policy.Chains[r]; ok {
		return true
	}
	p, ok := ParseResource(r)
	return ok && !p.WholeGPU()
}
