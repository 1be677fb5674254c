package fallback

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/schedview"
)

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
