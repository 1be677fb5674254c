package fallback

import (
	"fmt"
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
