package fallback

import (
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/resourcename"
)

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

// choice is what choose decided for one requested type.
type choice struct {
	to     corev1.ResourceName
	reason string
	how    how
	ok     bool
	// served is the planner's answer a planned choice counts on; asked
	// its answer on the type as asked, when it was asked.
	served, asked Served
}

// choose picks the type for r: the first of r and its allowed candidates
// that can run now, else one to wait for. "Runs now" is free devices on one
// eligible node for everything the pod then needs of the types chosen so
// far (fitting.try), or, with a planner (ask), the planner serving the pod
// with it in its next round. In existence mode without a planner, r fits
// where it exists, used or not, as it always did.
//
// When nothing runs now: r when it exists (the pod waits for a device of
// its own type), or when the planner could make it later; else the nearest
// candidate that exists, one that holds the pod's need on one node by
// allocatable before one that does not (the pod waits for it to free); else
// nothing fits r.
func (d *Decider) choose(r corev1.ResourceName, cands []candidate, v *view, fit *fitting, ask *asker) choice {
	present := v.present(r)
	reason := ReasonAbsent
	if present {
		reason = ReasonExhausted
	}
	if present && d.opts.Mode == ModeExistence && ask == nil {
		if fit.try(v, r, r) {
			return choice{to: r, how: runsNow, ok: true}
		}
		fit.settle(r, r)
		return choice{to: r, how: waits, ok: true}
	}
	if present && fit.try(v, r, r) {
		return choice{to: r, how: runsNow, ok: true}
	}
	asked := ask.serve(fit, r, r)
	if asked.Now {
		fit.settle(r, r)
		return choice{to: r, how: planned, ok: true, served: asked, asked: asked}
	}
	for _, c := range cands {
		if c.why != "" {
			continue
		}
		if v.present(c.to) && fit.try(v, r, c.to) {
			return choice{to: c.to, reason: reason, how: runsNow, ok: true, asked: asked}
		}
		if s := ask.serve(fit, r, c.to); s.Now {
			fit.settle(r, c.to)
			return choice{to: c.to, reason: reason, how: planned, ok: true, served: s, asked: asked}
		}
	}
	if present {
		fit.settle(r, r)
		return choice{to: r, how: waits, ok: true, asked: asked}
	}
	to, ok := d.existing(r, cands, v, fit)
	switch {
	case !ok:
		return choice{to: r, asked: asked}
	case asked.Later:
		fit.settle(r, r)
		return choice{to: r, how: waits, ok: true, asked: asked}
	}
	fit.settle(r, to)
	return choice{to: to, reason: ReasonAbsent, how: waits, ok: true, asked: asked}
}

// existing is the nearest allowed candidate for r that exists on the
// pod's nodes, one with as many allocatable devices on one node as the
// pod would need of it before one without.
func (d *Decider) existing(r corev1.ResourceName, cands []candidate, v *view, fit *fitting) (corev1.ResourceName, bool) {
	var first corev1.ResourceName
	for _, c := range cands {
		if c.why != "" || !v.present(c.to) {
			continue
		}
		if fit.holds(v, r, c.to) {
			return c.to, true
		}
		if first == "" {
			first = c.to
		}
	}
	return first, first != ""
}

// fitting is the record of the choices made for one pod so far, so that
// each further choice is tested against the pod's whole need on one node
// rather than each type's need alone: a pod asking for a 2g.20gb and a
// 1g.10gb must not become two 1g.10gb where one node has one free.
type fitting struct {
	need *needs
	// to is the type chosen for each requested type decided so far (itself
	// when kept); the pod's need is computed with these renamed.
	to map[corev1.ResourceName]corev1.ResourceName
	// placed are the chosen types that a node had free devices for. Types
	// that wait are not tested again: the pod waits for them anyway.
	placed map[corev1.ResourceName]bool
	// withGroups is the view with its nodes, for a need of several types
	// when the view has none (existence mode).
	withGroups func() view
}

func newFitting(need *needs, withGroups func() view) *fitting {
	return &fitting{need: need, to: map[corev1.ResourceName]corev1.ResourceName{}, placed: map[corev1.ResourceName]bool{}, withGroups: withGroups}
}

// try reports whether, with r moved to t, one eligible node has free devices
// for the pod's need of t and of every type placed before; if so the choice
// is recorded. What the pod requests of t already (directly, or through an
// earlier rewrite) adds to the need.
func (f *fitting) try(v *view, r, t corev1.ResourceName) bool {
	prev, had := f.to[r]
	f.to[r] = t
	need := f.need.of(f.to)
	check := map[corev1.ResourceName]int64{t: max(need[t], 1)}
	for p := range f.placed {
		check[p] = max(need[p], 1)
	}
	if len(check) > 1 && v.groups == nil {
		// Collected once: none eligible is an empty list, not nil.
		v.groups = append([]eligibleGroup{}, f.withGroups().groups...)
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

// holds reports whether, with r moved to t, one eligible node has as many
// allocatable devices of t, used or not, as the pod would need of it.
func (f *fitting) holds(v *view, r, t corev1.ResourceName) bool {
	to := maps.Clone(f.to)
	to[r] = t
	n, ok := v.most[t]
	return ok && n >= f.need.of(to)[t]
}

// settle records a choice that no free devices back.
func (f *fitting) settle(r, t corev1.ResourceName) { f.to[r] = t }
