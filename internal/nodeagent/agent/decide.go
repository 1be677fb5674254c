package agent

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/migconfig"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
)

// The decisions of a reconcile, apart from its I/O (reconcile.go): what
// to change is decided from what NVML, the Node, the config file and the
// kubelet said, so every branch is a table test (decide_test.go).

// planInput is what a reconcile knows before it asks the kubelet which
// GPUs pods use.
type planInput struct {
	src nodeinfo.Source
	// doc is the source's document; docErr why it could not be read (a
	// config file not mounted yet).
	doc    string
	docErr error
	// gpus are what NVML reports now; serveErr is why the server cannot
	// serve them as they are, if it cannot.
	gpus     []mig.GPU
	serveErr error
	// servable is Server.Servable: why a layout could not be served.
	servable func([]mig.GPU) error
	// holds are the GPUs whose apply of a document failed on their layout.
	holds map[int]hold
	// stuck are the GPUs a call has not returned on, with why they are
	// left alone (callGuard.outstanding).
	stuck map[int]string
	// now decides which holds are due for a retry.
	now time.Time
}

// planDecision is what to do next. With done, the reconcile ends with out
// (through finish, with reason and message, when report is set); otherwise
// it changes the GPUs of todo.
type planDecision struct {
	done    bool
	report  bool
	out     outcome
	reason  string
	message string
	// stage names the error counter the decision bumps; "" none.
	stage string
	// holds replace the agent's holds.
	holds map[int]hold

	resolved migconfig.Resolved
	// todo is the plan without the held GPUs; heldReasons say why those
	// are not changed.
	todo        migconfig.Plan
	heldReasons []string
	srcID       string
	// retrying are the GPUs of todo tried again after their hold's
	// backoff: the Node keeps showing their failure meanwhile rather than
	// announcing the change, so that a failure that recurs writes nothing.
	retrying map[int]bool
}

// decidePlan resolves the source's document on the GPUs and leaves out the
// GPUs on hold. It changes nothing on the GPUs when the Node asks for no
// layout, when the document cannot be read or does not fit the node, or
// when every GPU it changes is on hold.
func decidePlan(in planInput) planDecision {
	failed := func(st status, result, reason, stage string, retry bool) planDecision {
		return planDecision{done: true, report: true, out: outcome{status: st, retry: retry, result: result, gpus: in.gpus}, reason: reason, stage: stage, holds: in.holds}
	}
	if in.src.Kind == nodeinfo.SourceNone {
		d := planDecision{done: true, out: outcome{result: resultNone, gpus: in.gpus}, holds: map[int]hold{}}
		if in.serveErr != nil {
			d.report = true
			d.out.status, d.out.result, d.reason = status{nodeinfo.StateFailed, in.serveErr.Error()}, resultFailed, ReasonFailed
		}
		return d
	}
	if in.docErr != nil {
		return failed(status{nodeinfo.StateFailed, in.docErr.Error()}, resultFailed, ReasonFailed, stageConfig, true)
	}
	r, err := migconfig.Resolve([]byte(in.doc), in.src.ConfigName, in.gpus, scopeOf(in.src))
	if err == nil {
		err = in.servable(r.Plan.Projected(in.gpus))
	}
	if err != nil {
		msg := fmt.Sprintf("%s: %v; the GPUs are left as they are", in.src, err)
		return failed(status{nodeinfo.StateFailed, msg}, resultInvalid, ReasonInvalid, stageConfig, false)
	}
	if !slices.ContainsFunc(r.Plan.GPUs, migconfig.GPUPlan.Changed) {
		d := planDecision{done: true, report: true, out: outcome{status: successWith(in.src, r.Notes), result: resultSuccess, gpus: in.gpus}, reason: ReasonApplied, holds: map[int]hold{}}
		if in.serveErr != nil {
			d.out.status, d.out.result, d.reason = status{nodeinfo.StateFailed, in.serveErr.Error()}, resultFailed, ReasonFailed
			return d
		}
		msg := fmt.Sprintf("%s: the layout is in place: %s", in.src, summarize(r.Plan))
		if len(r.Plan.GPUs) == 0 {
			msg = fmt.Sprintf("%s: nothing to change on this node", in.src)
		}
		d.message = joinReasons(msg, strings.Join(r.Notes, "; "))
		return d
	}

	// A GPU whose apply of this document failed on its very layout is
	// held: it is tried again only after a backoff (--retry-interval,
	// doubling up to maxRetryBackoff), since a rollback recreates
	// instances with new ids and each retry churns the GPU. The failure
	// may have been transient (the driver answered an error once). A new
	// document or a GPU changed behind the agent's back (a reset) lifts
	// the hold, and with it the backoff; so does a resync for a GPU that
	// failed because processes the kubelet does not know of use it (see
	// liftBusyHolds).
	//
	// A GPU a call has not returned on is not touched at all: the call may
	// still change it, and NVML must not be called on it meanwhile.
	d := planDecision{resolved: r, srcID: sourceIdentity(in.src, in.doc), holds: map[int]hold{}, retrying: map[int]bool{}}
	held := map[int]bool{}
	for _, p := range r.Plan.GPUs {
		if why, ok := in.stuck[p.GPU]; ok && p.Changed() {
			held[p.GPU] = true
			d.heldReasons = append(d.heldReasons, why)
			continue
		}
		if h, ok := in.holds[p.GPU]; ok && p.Changed() && h.key == holdKey(d.srcID, in.gpus, p.GPU) {
			d.holds[p.GPU] = h
			if in.now.Before(h.retryAt) {
				held[p.GPU] = true
				d.heldReasons = append(d.heldReasons, h.reason)
			} else {
				d.retrying[p.GPU] = true
			}
		}
	}
	d.todo = withoutGPUs(r.Plan, held)
	if !slices.ContainsFunc(d.todo.GPUs, migconfig.GPUPlan.Changed) {
		d.done = true
		d.out = outcome{status: status{nodeinfo.StateFailed, fmt.Sprintf("%s: %s", in.src, strings.Join(d.heldReasons, "; "))}, result: resultHeld, gpus: in.gpus}
	}
	return d
}

// busyInput is what the kubelet said about the GPUs todo changes.
type busyInput struct {
	src  nodeinfo.Source
	todo migconfig.Plan
	gpus []mig.GPU
	// busy are the GPUs pods hold (by index, the pods), at either check.
	busy   map[int][]string
	policy BusyPolicy
	// servable is Server.Servable: why a layout could not be served.
	servable func([]mig.GPU) error
}

// busyDecision is what to do about busy GPUs.
type busyDecision struct {
	// free is the plan to apply now: todo without the busy GPUs, or nothing
	// when the free GPUs' share alone cannot be served.
	free migconfig.Plan
	// evict are the pods to evict (--busy-policy=evict).
	evict []string
	retry bool
	// busyNote says which GPUs wait for which pods, serveNote why the
	// free GPUs wait too; "" when none does.
	busyNote, serveNote string
}

// decideBusy leaves busy GPUs out of the plan: they wait for their pods,
// which are evicted under --busy-policy=evict.
func decideBusy(in busyInput) busyDecision {
	d := busyDecision{free: in.todo}
	if len(in.busy) > 0 {
		d.retry = true
		d.busyNote = fmt.Sprintf("waiting for pods to release GPUs before they are repartitioned (--busy-policy=%s): %s", in.policy, describeBusy(in.busy))
		if in.policy == BusyEvict {
			d.evict = busyPods(in.busy)
		}
		d.free = withoutGPUs(in.todo, in.busy)
	}
	// The whole layout can be served (checked before), but the free GPUs'
	// share of it alone may not: with --mig-strategy=single, one GPU on the
	// new profile beside a busy one on the old. Then nothing changes until
	// every GPU can.
	if err := in.servable(d.free.Projected(in.gpus)); err != nil {
		d.serveNote = fmt.Sprintf("the free GPUs are left as they are too: %v", err)
		d.free = migconfig.Plan{}
	}
	return d
}

// evictedNote is the wait note once the busy GPUs' pods were asked to go.
func evictedNote(note string, policy BusyPolicy, busy map[int][]string) string {
	return fmt.Sprintf("%s; waiting for them to stop before repartitioning (--busy-policy=%s): %s", note, policy, describeBusy(busy))
}

// concludeInput is what a reconcile that changed GPUs found and did.
type concludeInput struct {
	src   nodeinfo.Source
	notes []string
	// reasons say why GPUs were not changed (held, busy-check or eviction
	// failures); failed is set when any of them is a failure.
	reasons  []string
	failed   bool
	busy     bool
	retry    bool
	waitNote string
	// applied is applyFree's outcome.
	applied outcome
}

// conclude is the reconcile's status and the Event reason for it.
func conclude(in concludeInput) (outcome, string) {
	out := in.applied
	out.retry = in.retry
	failed, reasons := in.failed, in.reasons
	if out.status.State == nodeinfo.StateFailed {
		failed = true
		reasons = append(slices.Clone(reasons), out.status.Reason)
	}
	switch {
	case failed:
		out.status = status{nodeinfo.StateFailed, fmt.Sprintf("%s: %s", in.src, joinReasons(append(reasons, in.waitNote)...))}
		out.result = resultFailed
		return out, ReasonFailed
	case in.busy:
		out.status = status{nodeinfo.StatePending, fmt.Sprintf("%s: %s", in.src, in.waitNote)}
		out.result = resultPending
		return out, ReasonPending
	}
	out.status = successWith(in.src, in.notes)
	out.events = slices.Clone(out.events)
	for i, ev := range out.events {
		if ev.Reason == ReasonApplied {
			out.events[i].Message = joinReasons(ev.Message, strings.Join(in.notes, "; "))
		}
	}
	return out, ReasonApplied
}

// finish adds the Event an outcome is worth, given what was reported
// before: a changed state or reason is news, the same one again is not,
// so a restarted agent that finds everything in place records nothing.
// An Applied Event the outcome already carries (GPUs were changed) is
// always kept. reason is the Event reason for the outcome's state and
// message the Applied message for a success that changed nothing.
func finish(prev status, out outcome, reason, message string) outcome {
	if out.status == prev {
		return out
	}
	switch out.status.State {
	case nodeinfo.StateSuccess:
		if len(out.events) == 0 && message != "" {
			out.events = append(out.events, event{corev1.EventTypeNormal, ReasonApplied, message})
		}
	case nodeinfo.StatePending:
		out.events = append(out.events, event{corev1.EventTypeNormal, ReasonPending, out.status.Reason})
	case nodeinfo.StateFailed:
		out.events = append(out.events, event{corev1.EventTypeWarning, reason, out.status.Reason})
	}
	return out
}
