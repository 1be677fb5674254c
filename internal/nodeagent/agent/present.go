package agent

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/migflex/migflex/internal/domain/migconfig"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
)

// reasonNoConfig is the reason a Node shows once its last mig.config
// source is gone.
const reasonNoConfig = "no mig.config on the node: the GPUs keep their layout as is"

// presentation is what the Node shows for one reconcile's outcome.
type presentation struct {
	status status
	events []event
	// retry: the status waits on time (the kubelet's publication).
	retry bool
}

// present turns a reconcile's outcome into what the Node shows, so that no
// state is silent:
//
//   - several sources set and differing: the reason says which one decides
//     and which are ignored, with a Normal Event when that changes;
//   - the deciding source changed (the winning key was removed and another
//     takes over): a Normal Event says so before the other's layout is
//     applied;
//   - the last source removed: the state stays, success, with a reason
//     saying the layout is kept as is, and a Normal Event;
//   - success only once the scheduler sees the served layout (for the
//     device plugin, the Node's allocatable; see awaitPublication).
//
// It keeps what it needs to tell news from repetition in the Agent (the
// loop owns it).
func (a *Agent) present(ctx context.Context, node *corev1.Node, out outcome) presentation {
	all := nodeinfo.Sources(node.Labels, node.Annotations)
	winner := nodeinfo.Source{Kind: nodeinfo.SourceNone}
	if len(all) > 0 {
		winner = all[0]
	}
	p := presentation{status: out.status}

	prevKey, known := a.lastSourceKey, a.lastSourceKnown
	a.lastSourceKey, a.lastSourceKnown = winner.Key(), true
	if known && prevKey != winner.Key() && prevKey != (nodeinfo.Source{Kind: nodeinfo.SourceNone}).Key() && winner.Kind != nodeinfo.SourceNone {
		p.events = append(p.events, event{corev1.EventTypeNormal, ReasonSourceChanged,
			fmt.Sprintf("%s is no longer set: %s decides the layout now", prevKey, winner)})
	}

	if winner.Kind == nodeinfo.SourceNone && p.status.State == "" && a.shown.State != "" {
		// A source was set before (the state label is there): say what
		// happens now rather than dropping the state without a word.
		p.status = status{State: nodeinfo.StateSuccess, Reason: reasonNoConfig}
		if !strings.HasPrefix(a.shown.Reason, reasonNoConfig) {
			what := "the mig.config source was removed"
			if known && prevKey != winner.Key() {
				what = prevKey + " was removed"
			}
			p.events = append(p.events, event{corev1.EventTypeNormal, ReasonRemoved,
				fmt.Sprintf("%s and no other is set: the GPUs keep their layout as is, and it stays served", what)})
		}
	}

	if note := sourcesNote(all); note != "" {
		if !strings.Contains(a.shown.Reason, note) {
			p.events = append(p.events, event{corev1.EventTypeNormal, ReasonSourceIgnored, note})
		}
		p.status.Reason = joinReasons(p.status.Reason, note)
	}

	p.events = append(p.events, out.events...)
	var evs []event
	p.status, evs, p.retry = a.awaitPublication(ctx, node, winner, p.status)
	p.events = append(p.events, evs...)
	return p
}

// announce shows on the Node that GPUs are about to change (state pending),
// before they do: until the change is reported, the Node would still show
// the previous layout's success, and a `kubectl wait` for success right
// after a new annotation would return at once. Best effort: a failed
// report only loses the announcement.
func (a *Agent) announce(ctx context.Context, node *corev1.Node, src nodeinfo.Source, plan migconfig.Plan) {
	var parts []string
	for _, p := range plan.GPUs {
		if p.Changed() {
			parts = append(parts, p.Summary())
		}
	}
	if len(parts) == 0 {
		return
	}
	note := sourcesNote(nodeinfo.Sources(node.Labels, node.Annotations))
	st := status{nodeinfo.StatePending, joinReasons(fmt.Sprintf("%s: changing the GPUs: %s", src, strings.Join(parts, "; ")), note)}
	if err := a.report(ctx, node, st, causeAnnounce); err != nil {
		a.metrics.errors.WithLabelValues(stageReport).Inc()
		a.log.Error(err, "Reporting the start of a change on the Node")
		return
	}
	a.metrics.setState(st.State)
}

// sourcesNote says which of the sources set decides and which are
// ignored, when they differ; empty otherwise.
func sourcesNote(all []nodeinfo.Source) string {
	if ignored := ignoredSources(all); len(ignored) > 0 {
		return ignoredNote(all[0], ignored)
	}
	return ""
}

// withoutNote is st, as the Node shows it, without the note present adds
// about ignored sources: the status a reconcile compares with.
func withoutNote(st status, node *corev1.Node) status {
	if note := sourcesNote(nodeinfo.Sources(node.Labels, node.Annotations)); note != "" {
		st.Reason = strings.TrimSuffix(strings.TrimSuffix(st.Reason, note), "; ")
	}
	return st
}

// ignoredNote says which source decides and which are set but ignored.
func ignoredNote(winner nodeinfo.Source, ignored []nodeinfo.Source) string {
	names := make([]string, len(ignored))
	for i, s := range ignored {
		names[i] = s.String()
	}
	verb := "is"
	if len(names) > 1 {
		verb = "are"
	}
	return fmt.Sprintf("%s decides the layout; %s %s set too and ignored", winner, strings.Join(names, " and "), verb)
}

// publication is a wait for the scheduler to see a served layout (see
// awaitPublication).
type publication struct {
	// layout identifies the served devices waited for.
	layout   string
	since    time.Time
	timedOut bool
}

// awaitPublication holds a success back until the scheduler sees what the
// server serves (Server.Visible): the device plugin's devices show in the
// Node's allocatable only at the kubelet's next node status update,
// several seconds after they changed, and a pod created on the word
// "success" before then would be refused by the scheduler (or rewritten by
// the fallback webhook, which reads the Node). Meanwhile the state is
// pending; after AllocatableTimeout it is failed, with a Warning Event,
// until the layout shows after all. A layout once visible is not waited
// for again (a device turning unhealthy later changes what is visible, not
// the config state). A zero AllocatableTimeout turns the wait off.
func (a *Agent) awaitPublication(ctx context.Context, node *corev1.Node, src nodeinfo.Source, st status) (status, []event, bool) {
	if st.State != nodeinfo.StateSuccess || a.opts.AllocatableTimeout <= 0 {
		a.awaiting = nil
		return st, nil, false
	}
	layout, missing, err := a.opts.Server.Visible(ctx, node)
	if err != nil {
		missing = append(missing, "cannot tell: "+err.Error())
	}
	if layout == a.published {
		a.awaiting = nil
		return st, nil, false
	}
	who, where, hint := a.opts.Server.Publisher()
	if len(missing) == 0 {
		var evs []event
		if a.awaiting != nil && a.awaiting.timedOut {
			evs = append(evs, event{corev1.EventTypeNormal, ReasonApplied,
				fmt.Sprintf("%s: %s now publishes the layout in %s", src, who, where)})
		}
		a.awaiting, a.published = nil, layout
		return st, evs, false
	}
	now := time.Now()
	if a.awaiting == nil || a.awaiting.layout != layout {
		a.awaiting = &publication{layout: layout, since: now}
	}
	detail := strings.Join(missing, ", ")
	if waited := now.Sub(a.awaiting.since); waited < a.opts.AllocatableTimeout {
		msg := fmt.Sprintf("%s: the layout is in place and served; waiting for %s to publish it in %s (%s)", src, who, where, detail)
		return status{nodeinfo.StatePending, joinReasons(msg, st.Reason)}, nil, true
	}
	msg := fmt.Sprintf("%s: the layout is in place and served, but %s has not published it in %s within %v (%s): %s", src, who, where, a.opts.AllocatableTimeout, detail, hint)
	var evs []event
	if !a.awaiting.timedOut {
		a.awaiting.timedOut = true
		evs = append(evs, event{corev1.EventTypeWarning, ReasonNotPublished, msg})
	}
	return status{nodeinfo.StateFailed, joinReasons(msg, st.Reason)}, evs, true
}

// allocatableChanged tells whether a Node update changed its allocatable,
// which a wait for publication may be waiting on (the device plugin's
// devices become visible there).
func allocatableChanged(o, n *corev1.Node) bool {
	return !maps.EqualFunc(o.Status.Allocatable, n.Status.Allocatable, func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })
}
