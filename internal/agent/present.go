package agent

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/migflex/migflex/internal/deviceplugin"
	"github.com/migflex/migflex/internal/migconfig"
	"github.com/migflex/migflex/internal/nodeinfo"
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
//   - success only once the kubelet publishes the served layout in the
//     Node's allocatable (see awaitPublication).
//
// It keeps what it needs to tell news from repetition in the Agent (the
// loop owns it).
func (a *Agent) present(node *corev1.Node, out outcome) presentation {
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
	p.status, evs, p.retry = a.awaitPublication(node, winner, p.status)
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

// publication is a wait for the kubelet to publish a served layout in the
// Node's allocatable.
type publication struct {
	// layout identifies the served devices waited for.
	layout   string
	since    time.Time
	timedOut bool
}

// awaitPublication holds a success back until the Node's allocatable shows
// what the device plugin serves: the kubelet publishes device-plugin
// resources only at its next node status update, several seconds after the
// devices changed, and a pod created on the word "success" before then
// would be refused by the scheduler (or rewritten by the fallback webhook,
// which reads the Node). Meanwhile the state is pending; after
// AllocatableTimeout it is failed, with a Warning Event, until the kubelet
// publishes it after all. A layout once published is not waited for again
// (a device turning unhealthy later changes allocatable, not the config
// state). A zero AllocatableTimeout turns the wait off.
func (a *Agent) awaitPublication(node *corev1.Node, src nodeinfo.Source, st status) (status, []event, bool) {
	if st.State != nodeinfo.StateSuccess || a.opts.AllocatableTimeout <= 0 {
		a.awaiting = nil
		return st, nil, false
	}
	served := a.opts.DevicePlugin.Resources()
	layout := servedLayout(served)
	if layout == a.published {
		a.awaiting = nil
		return st, nil, false
	}
	missing := unpublished(node.Status.Allocatable, served)
	if len(missing) == 0 {
		var evs []event
		if a.awaiting != nil && a.awaiting.timedOut {
			evs = append(evs, event{corev1.EventTypeNormal, ReasonApplied,
				fmt.Sprintf("%s: the kubelet now publishes the layout in the Node's allocatable", src)})
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
		msg := fmt.Sprintf("%s: the layout is in place and served; waiting for the kubelet to publish it in the Node's allocatable (%s)", src, detail)
		return status{nodeinfo.StatePending, joinReasons(msg, st.Reason)}, nil, true
	}
	msg := fmt.Sprintf("%s: the layout is in place and served, but the kubelet has not published it in the Node's allocatable within %v (%s): is the kubelet running, and did it accept the device plugin's registration?", src, a.opts.AllocatableTimeout, detail)
	var evs []event
	if !a.awaiting.timedOut {
		a.awaiting.timedOut = true
		evs = append(evs, event{corev1.EventTypeWarning, ReasonNotPublished, msg})
	}
	return status{nodeinfo.StateFailed, joinReasons(msg, st.Reason)}, evs, true
}

// servedLayout identifies the served devices, health aside: it changes when
// the layout does.
func servedLayout(served []deviceplugin.ResourceStatus) string {
	var b strings.Builder
	for _, r := range sortedResources(served) {
		b.WriteString(r.Name)
		for _, d := range r.Devices {
			b.WriteByte(' ')
			b.WriteString(d.ID)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// unpublished lists, sorted by resource, where the Node's allocatable is not
// what the kubelet would publish for the served devices (each resource's
// healthy devices that are not draining), as "nvidia.com/mig-1g.10gb 0 of
// 4". A resource the kubelet refused is said so.
func unpublished(allocatable corev1.ResourceList, served []deviceplugin.ResourceStatus) []string {
	var out []string
	for _, r := range sortedResources(served) {
		want := int64(0)
		for _, d := range r.Devices {
			if d.Healthy && !d.Draining {
				want++
			}
		}
		q := allocatable[corev1.ResourceName(r.Name)]
		if got := q.Value(); got != want {
			s := fmt.Sprintf("%s %d of %d", r.Name, got, want)
			if r.RegisterError != "" {
				s += fmt.Sprintf(" (registration refused: %s)", r.RegisterError)
			}
			out = append(out, s)
		}
	}
	return out
}

func sortedResources(rs []deviceplugin.ResourceStatus) []deviceplugin.ResourceStatus {
	return slices.SortedFunc(slices.Values(rs), func(a, b deviceplugin.ResourceStatus) int { return strings.Compare(a.Name, b.Name) })
}

// allocatableChanged tells whether a Node update changed its allocatable,
// which a wait for publication is waiting on.
func allocatableChanged(o, n *corev1.Node) bool {
	return !maps.EqualFunc(o.Status.Allocatable, n.Status.Allocatable, func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })
}
