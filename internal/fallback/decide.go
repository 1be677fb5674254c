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
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/migflex/migflex/internal/resourcename"
	"github.com/migflex/migflex/internal/schedview"
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
	if !schedview.HasGPURequest(pod) {
		return Decision{Outcome: OutcomeNoGPU, Allowed: true}
	}
	if _, done := pod.Annotations[AnnotationOriginal]; done {
		return Decision{Outcome: OutcomeAlreadyProcessed, Allowed: true}
	}
	podPolicy := PodPolicyAny
	if s, ok := pod.Annotations[AnnotationPolicy]; ok {
		pp, err := parsePodPolicy(s)
		if err != nil {
			return Decision{Outcome: OutcomeDenied, Message: err.Error()}
		}
		podPolicy = pp
	}
	g := gather(pod, d.opts.MaxTypes)
	switch {
	case g.tooMany:
		msg := fmt.Sprintf("the pod names more than %d GPU resource types (nvidia.com/gpu, nvidia.com/mig-*), the most the migflex GPU webhook decides on; its GPU requests are left as they are", d.opts.MaxTypes)
		return Decision{Outcome: OutcomeTooManyTypes, Allowed: true, Message: msg, Warnings: []string{msg}}
	case g.invalid != "":
		// The API server rejects the pod with its own message, which names
		// what the user wrote; a rewrite would only change that.
		return Decision{Outcome: OutcomeInvalid, Allowed: true, Message: clip(g.invalid, maxMessage)}
	}
	var requested, unknown []corev1.ResourceName
	for _, r := range g.types {
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
	if len(requested) == 0 {
		if len(unknown) > 0 {
			return Decision{Outcome: OutcomeUnknown, Allowed: true, Warnings: warnings}
		}
		return Decision{Outcome: OutcomeUnchanged, Allowed: true}
	}

	filter := schedview.NewFilter(pod, snap)
	v := viewFor(snap, filter, d.opts.Mode == ModeCapacity)
	var fit *fitting
	if d.opts.Mode == ModeCapacity {
		fit = newFitting(pod)
	}

	var rewrites []Rewrite
	// explained are the denial's explanations of the first unsatisfied
	// types; unsatisfied counts them all.
	var explained []string
	unsatisfied := 0
	// chosen is the type decided for each requested type (itself when kept).
	chosen := make(map[corev1.ResourceName]corev1.ResourceName, len(requested))
	for _, r := range requested {
		if err := ctx.Err(); err != nil {
			return Decision{Outcome: OutcomeCanceled, Err: err}
		}
		c := d.candidates(r, &v, podPolicy)
		to, reason, ok := d.choose(r, c, &v, fit)
		switch {
		case !ok:
			if unsatisfied < maxListed {
				explained = append(explained, d.explain(r, c, &v, snap, filter, podPolicy))
			}
			unsatisfied++
		case to != r:
			rewrites = append(rewrites, Rewrite{From: r, To: to, Reason: reason})
			chosen[r] = to
		default:
			chosen[r] = r
		}
	}

	dec := Decision{Outcome: OutcomeUnchanged, Allowed: true, Rewrites: rewrites}
	if unsatisfied > 0 {
		msg := "no GPU type fits: " + strings.Join(explained, "; ")
		more := ""
		if n := unsatisfied - maxListed; n > 0 {
			more = "; and " + count(n, "more type")
		}
		if d.opts.OnUnsatisfiable == UnsatisfiableDeny {
			return Decision{Outcome: OutcomeDenied, Message: clip(msg, maxMessage-len(more)) + more, Warnings: warnings}
		}
		dec.Outcome = OutcomeUnsatisfiable
		more += " (left unchanged)"
		warnings = append(warnings, clip(msg, maxWarning-len(more))+more)
	}
	if short := insufficient(pod, chosen, &v, func() view { return viewFor(snap, filter, true) }); short != "" {
		if d.opts.OnInsufficientCount == UnsatisfiableDeny {
			return Decision{Outcome: OutcomeDenied, Message: clip(short, maxMessage), Warnings: warnings}
		}
		warnings = append(warnings, clip(short, maxWarning))
	}
	if err := ctx.Err(); err != nil {
		return Decision{Outcome: OutcomeCanceled, Err: err}
	}
	if len(rewrites) > 0 {
		patch, err := buildPatch(pod, rewrites, d.marshal)
		var large *annotationsTooLarge
		switch {
		case errors.As(err, &large):
			msg := fmt.Sprintf("rewriting the GPU requests (%s) needs %d bytes of annotations, over the API server's limit of %d for all of a pod's annotations; the pod is left as it was",
				rewriteLabels(rewrites), large.size, large.limit)
			return Decision{Outcome: OutcomeTooLarge, Allowed: true, Message: msg, Warnings: append(warnings, clip(msg, maxWarning))}
		case err != nil:
			return Decision{Outcome: OutcomeError, Err: fmt.Errorf("building the patch: %w", err)}
		}
		if dec.Outcome == OutcomeUnchanged {
			dec.Outcome = OutcomeRewritten
		}
		dec.Patch = patch
	}
	dec.Warnings = warnings
	return dec
}

// understood reports whether the webhook knows what r is: a whole GPU, a
// MIG profile of a GPU NVIDIA makes, a type some node has, or a type the
// policy names. Any other name is left alone with a warning: rewriting
// nvidia.com/mig-9g.99gb to whatever is near would be a guess.
func (d *Decider) understood(r corev1.ResourceName, snap *schedview.Snapshot) bool {
	return Known(r) || d.policyNames[r] || snap.Has(r)
}

func unknownWarning(unknown []corev1.ResourceName) string {
	names := make([]string, len(unknown))
	for i, r := range unknown {
		names[i] = name(r)
	}
	if len(unknown) == 1 {
		return clip("unknown GPU resource "+names[0]+" left as it is: no node has it and it is no MIG profile of an NVIDIA GPU", maxWarning)
	}
	return clip("unknown GPU resources "+listed(names)+" left as they are: no node has them and they are no MIG profiles of NVIDIA GPUs", maxWarning)
}

// rewriteLabels is the rewrites in the annotation's form, bounded.
func rewriteLabels(rewrites []Rewrite) string {
	labels := make([]string, len(rewrites))
	for i, rw := range rewrites {
		labels[i] = rw.Label()
	}
	return listed(labels)
}

// insufficient says why no node the pod can be scheduled to can ever give
// it the devices it asks for of the types decided (chosen), by their
// allocatable counts, used or not; or returns "". Such a pod is admitted
// and stays Pending until some node has more (the planner may reshape
// one), unless --on-insufficient-count=deny. withGroups is v with its
// nodes, for a need of several types when v has none.
func insufficient(pod *corev1.Pod, chosen map[corev1.ResourceName]corev1.ResourceName, v *view, withGroups func() view) string {
	if len(chosen) == 0 {
		return ""
	}
	to := make(map[corev1.ResourceName]corev1.ResourceName, len(chosen))
	decided := make(map[corev1.ResourceName]bool, len(chosen))
	for r, t := range chosen {
		if r != t {
			to[r] = t
		}
		decided[t] = true
	}
	all := podNeeds(pod, to)
	need := make(map[corev1.ResourceName]int64, len(decided))
	for t := range decided {
		if n := all[t]; n > 0 {
			need[t] = n
		}
	}
	short := false
	for t, n := range need {
		short = short || n > v.most[t]
	}
	switch {
	case len(need) == 0:
		return ""
	case !short && len(need) == 1:
		return ""
	case !short && v.groups == nil:
		// Each type alone fits on some node: whether one node holds them
		// all takes the nodes, which existence mode did not collect.
		if wv := withGroups(); wv.fitsAllocatable(need) {
			return ""
		}
	case !short && v.fitsAllocatable(need):
		return ""
	}
	items := make([]string, 0, len(need))
	for _, t := range slices.Sorted(maps.Keys(need)) {
		item := fmt.Sprintf("%d %s", need[t], t)
		if need[t] > v.most[t] {
			item += fmt.Sprintf(" (at most %d on one node)", v.most[t])
		}
		items = append(items, item)
	}
	return "no node this pod can be scheduled to has the GPU devices it needs on one node: " + listed(items) +
		"; it stays Pending until one has"
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

// candidate is one fallback type in chain order, or a type that is present
// but ruled out (why says by what).
type candidate struct {
	to  corev1.ResourceName
	why string
}

// candidates returns the fallback chain for r, in order, with the present
// types the policies rule out appended with their reason (for the message).
// The explicit chain replaces the derived one. The derived chain is built
// from the types present on the pod's nodes with the same attribute suffix
// (a 1g.10gb.me request falls back among .me profiles only: media
// extensions are part of the type): smaller MIG profiles nearest first,
// larger ones nearest first, then a whole GPU, which has every engine.
func (d *Decider) candidates(r corev1.ResourceName, v *view, pp PodPolicy) []candidate {
	from, _ := ParseResource(r)
	pol := d.opts.Policy
	var order []corev1.ResourceName
	if chain, ok := pol.Chains[r]; ok {
		order = chain
	} else {
		var down, up []Profile
		for t := range v.free {
			p, ok := ParseResource(t)
			if !ok || t == r || p.WholeGPU() || p.Suffix != from.Suffix {
				continue
			}
			if direction(from, p) == Down {
				down = append(down, p)
			} else {
				up = append(up, p)
			}
		}
		slices.SortFunc(down, func(a, b Profile) int { return compare(b, a) })
		slices.SortFunc(up, compare)
		for _, p := range append(down, up...) {
			order = append(order, p.Resource)
		}
		if r != resourcename.GPU {
			order = append(order, resourcename.GPU)
		}
	}
	var ok, ruledOut []candidate
	for _, t := range order {
		tp, _ := ParseResource(t)
		dir := direction(from, tp)
		switch why := pol.forbids(dir, tp); {
		case why != "":
			ruledOut = append(ruledOut, candidate{t, why})
		case !pp.allows(dir):
			ruledOut = append(ruledOut, candidate{t, fmt.Sprintf("%s is %s, pod annotation %s is %q", resourcename.Short(t), dir, AnnotationPolicy, pp)})
		default:
			ok = append(ok, candidate{to: t})
		}
	}
	return append(ok, ruledOut...)
}

// choose picks the type for r: r itself when it fits, else the first
// allowed candidate that does. In capacity mode (fit not nil) "fits" first
// means that one eligible node has free devices for everything the pod then
// needs of the types chosen so far (fitting.try); when no type does, the
// existence rule decides, and the scheduler queues the pod until devices
// free up.
func (d *Decider) choose(r corev1.ResourceName, cands []candidate, v *view, fit *fitting) (corev1.ResourceName, string, bool) {
	if fit != nil {
		if v.present(r) && fit.try(v, r, r) {
			return r, "", true
		}
		reason := ReasonAbsent
		if v.present(r) {
			reason = ReasonExhausted
		}
		for _, c := range cands {
			if c.why == "" && v.present(c.to) && fit.try(v, r, c.to) {
				return c.to, reason, true
			}
		}
	}
	to, reason, ok := r, "", v.present(r)
	for _, c := range cands {
		if ok {
			break
		}
		if c.why == "" && v.present(c.to) {
			to, reason, ok = c.to, ReasonAbsent, true
		}
	}
	if ok && fit != nil {
		fit.settle(r, to)
	}
	return to, reason, ok
}

// fitting is capacity mode's record of the choices made for one pod so far,
// so that each further choice is tested against the pod's whole need on one
// node rather than each type's need alone: a pod asking for a 2g.20gb and a
// 1g.10gb must not become two 1g.10gb where one node has one free.
type fitting struct {
	pod *corev1.Pod
	// to is the type chosen for each requested type decided so far (itself
	// when kept); the pod's need is computed with these renamed.
	to map[corev1.ResourceName]corev1.ResourceName
	// placed are the chosen types that a node had free devices for. Types
	// left to the existence rule are not tested again: the pod waits for
	// them anyway.
	placed map[corev1.ResourceName]bool
}

func newFitting(pod *corev1.Pod) *fitting {
	return &fitting{pod: pod, to: map[corev1.ResourceName]corev1.ResourceName{}, placed: map[corev1.ResourceName]bool{}}
}

// try reports whether, with r moved to t, one eligible node has free devices
// for the pod's need of t and of every type placed before; if so the choice
// is recorded. What the pod requests of t already (directly, or through an
// earlier rewrite) adds to the need.
func (f *fitting) try(v *view, r, t corev1.ResourceName) bool {
	prev, had := f.to[r]
	f.to[r] = t
	need := podNeeds(f.pod, f.to)
	check := map[corev1.ResourceName]int64{t: max(need[t], 1)}
	for p := range f.placed {
		check[p] = max(need[p], 1)
	}
	if v.fits(check) {
		f.placed[t] = true
		return true
	}
	if had {
		f.to[r] = prev
	} else {
		delete(f.to, r)
	}
	return false
}

// settle records a choice the existence rule made.
func (f *fitting) settle(r, t corev1.ResourceName) { f.to[r] = t }

// explain names the requested type and what was checked, for a denial.
func (d *Decider) explain(r corev1.ResourceName, cands []candidate, v *view, snap *schedview.Snapshot, f *schedview.Filter, pp PodPolicy) string {
	var b strings.Builder
	if f.NodeName() != "" {
		if !explainPinned(&b, r, v, snap, f) {
			return b.String()
		}
	} else {
		eligible := snap.EligibleNodes(f)
		fmt.Fprintf(&b, "%s is on no node this pod can be scheduled to (%s of the cluster's %d)",
			r, count(eligible, "node"), snap.Nodes())
		subject := "they have"
		if eligible == 1 {
			subject = "it has"
		}
		writeTypes(&b, v, subject)
	}
	var ruled []string
	for _, c := range cands {
		if c.why != "" && v.present(c.to) {
			ruled = append(ruled, fmt.Sprintf("%s (%s)", c.to, c.why))
		}
	}
	switch {
	case pp == PodPolicyNone:
		fmt.Fprintf(&b, "; fallback disabled by pod annotation %s=none", AnnotationPolicy)
	case len(ruled) > 0:
		fmt.Fprintf(&b, "; ruled out by policy: %s", listed(ruled))
	}
	if chain, ok := d.opts.Policy.Chains[r]; ok {
		names := make([]string, len(chain))
		for i, t := range chain {
			names[i] = string(t)
		}
		b.WriteString("; explicit fallback chain: " + strings.Join(names, " -> "))
	}
	return b.String()
}

// explainPinned explains a denial for a pod bound to one node by
// spec.nodeName: that node alone counts, so the message is about it. It
// returns false when the node itself is out (unknown, or its filters exclude
// the pod), where the fallback chain is beside the point.
func explainPinned(b *strings.Builder, r corev1.ResourceName, v *view, snap *schedview.Snapshot, f *schedview.Filter) bool {
	name := f.NodeName()
	g, m := snap.Find(name)
	switch {
	case m == nil:
		fmt.Fprintf(b, "%s: the pod's spec.nodeName %s names no node in the cluster (of %s)", r, quote(name), count(snap.Nodes(), "node"))
		return false
	case !f.GroupAllowed(g):
		t, _ := f.UntoleratedTaint(g)
		fmt.Fprintf(b, "%s: node %s (the pod's spec.nodeName) has the taint %s, which the pod does not tolerate", r, quote(name), clip(t.ToString(), 2*maxQuoted))
		return false
	case !f.Matches(m):
		fmt.Fprintf(b, "%s: node %s (the pod's spec.nodeName) does not match its nodeSelector or required node affinity", r, quote(name))
		return false
	}
	fmt.Fprintf(b, "%s is not on node %s (the pod's spec.nodeName)", r, quote(name))
	writeTypes(b, v, "it has")
	return true
}

// writeTypes lists the GPU types of the view; subject is "they have" or "it has".
func writeTypes(b *strings.Builder, v *view, subject string) {
	types := slices.Sorted(maps.Keys(v.free))
	if len(types) == 0 {
		fmt.Fprintf(b, "; %s no GPU types", subject)
		return
	}
	names := make([]string, len(types))
	for i, t := range types {
		names[i] = string(t)
	}
	fmt.Fprintf(b, "; GPU types there: %s", listed(names))
}

// podNeeds is the devices of each GPU type the pod needs on one node, by the
// scheduler's rules (init containers take the max, sidecars add up), after
// renaming the types in to as the patch would (a container's quantities of
// two types moved to one add up). A GPU limit without a request counts as
// the request, as API defaulting makes it.
func podNeeds(pod *corev1.Pod, to map[corev1.ResourceName]corev1.ResourceName) map[corev1.ResourceName]int64 {
	gpuOnly := func(c *corev1.Container) corev1.Container {
		out := corev1.Container{Name: c.Name, RestartPolicy: c.RestartPolicy}
		requests := map[corev1.ResourceName]resource.Quantity{}
		for _, l := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
			for name, q := range l {
				if resourcename.IsGPU(name) {
					requests[name] = q
				}
			}
		}
		for name, q := range requests {
			if t, ok := to[name]; ok {
				name = t
			}
			if out.Resources.Requests == nil {
				out.Resources.Requests = corev1.ResourceList{}
			}
			sum := out.Resources.Requests[name]
			sum.Add(q)
			out.Resources.Requests[name] = sum
		}
		return out
	}
	p := &corev1.Pod{}
	for i := range pod.Spec.Containers {
		p.Spec.Containers = append(p.Spec.Containers, gpuOnly(&pod.Spec.Containers[i]))
	}
	for i := range pod.Spec.InitContainers {
		p.Spec.InitContainers = append(p.Spec.InitContainers, gpuOnly(&pod.Spec.InitContainers[i]))
	}
	return schedview.Devices(p)
}
