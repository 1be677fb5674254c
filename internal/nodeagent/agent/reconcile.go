package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/migconfig"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
)

// outcome is what one reconcile found and did.
type outcome struct {
	status status
	events []event
	// retry asks for another reconcile after RetryInterval.
	retry bool
	// result is the metrics label.
	result string
	// gpus is the layout NVML reports at the end.
	gpus []mig.GPU
}

// reconcile brings the GPUs to the layout the Node asks for, as far as
// busy GPUs allow, and serves the result. prev is the status reported
// before, which decides whether the outcome is news worth an Event. It
// does the I/O; decidePlan, decideBusy and conclude decide.
//
// The plan is always made from what NVML reports now, never from what an
// earlier run did, so an agent killed half way converges when it starts
// again, and an agent restarted with the same layout changes nothing.
func (a *Agent) reconcile(ctx context.Context, node *corev1.Node, prev status) outcome {
	gpus, err := a.guard.discover(a.opts.NVML)
	if err != nil {
		a.countError(stageDiscover)
		msg := fmt.Sprintf("reading the GPUs through NVML: %v; the devices served before are still served", err)
		return finish(prev, outcome{status: status{nodeinfo.StateFailed, msg}, retry: true, result: resultFailed, gpus: a.gpus}, ReasonFailed, "")
	}
	// Serve what exists first: whatever happens below, the kubelet sees
	// the devices NVML has.
	in := planInput{gpus: gpus, serveErr: a.serve(ctx, gpus), servable: a.opts.Server.Servable, holds: a.held, stuck: a.guard.outstanding(), now: time.Now()}
	in.src = nodeinfo.Deciding(node.Labels, node.Annotations)
	if in.src.Kind != nodeinfo.SourceNone {
		in.doc, in.docErr = a.document(in.src)
	}
	d := decidePlan(in)
	a.held = d.holds
	a.countError(d.stage)
	switch {
	case d.done && d.report:
		return finish(prev, d.out, d.reason, d.message)
	case d.done:
		return d.out
	}
	src, todo, reasons := in.src, d.todo, d.heldReasons

	busyCheckFailed := func(err error) outcome {
		a.countError(stageBusyCheck)
		msg := fmt.Sprintf("cannot tell which GPUs pods use, so none is changed: %v", err)
		st := status{nodeinfo.StateFailed, fmt.Sprintf("%s: %s", src, joinReasons(append(reasons, msg)...))}
		return finish(prev, outcome{status: st, retry: true, result: resultFailed, gpus: gpus}, ReasonFailed, "")
	}
	assignments, err := a.opts.PodResources.List(ctx)
	if err != nil {
		return busyCheckFailed(err)
	}
	a.noteAssignments(assignments)
	busy := busyGPUs(todo, gpus, assignments)
	// Between that List and the apply, the kubelet could still hand a
	// device of a free GPU to a new pod, whose instance the apply would
	// then destroy under it. So the devices of the free GPUs that change
	// are drained first and the kubelet is asked again: a GPU a pod took
	// meanwhile is busy after all (see drainFree).
	late, draining, err := a.drainFree(ctx, withoutGPUs(todo, busy), gpus)
	if err != nil {
		return busyCheckFailed(err)
	}
	// Whatever happens to them, the GPUs still draining are served again
	// once the apply is done: the instances it destroyed are gone from the
	// layout it serves (which ends their draining), and those of a GPU
	// that failed, or that it kept, can be handed out again.
	if len(draining) > 0 {
		defer a.opts.Server.Undrain(draining)
	}
	maps.Copy(busy, late)
	b := decideBusy(busyInput{src: src, todo: todo, gpus: gpus, busy: busy, policy: a.opts.BusyPolicy, servable: a.opts.Server.Servable})
	// Only the GPUs about to change are announced: a GPU that waits for
	// its pods is not changing, and announcing it at every retry only to
	// report the wait again would write the Node twice a reconcile for as
	// long as the pods run.
	a.announce(ctx, node, src, withoutGPUs(b.free, d.retrying))
	failed := len(reasons) > 0
	if len(b.evict) > 0 {
		note, err := a.evict(ctx, b.evict)
		if err != nil {
			a.countError(stageEvict)
			failed = true
			reasons = append(reasons, err.Error())
		}
		b.busyNote = evictedNote(note, a.opts.BusyPolicy, busy)
	}

	applied := a.applyFree(ctx, src, d.srcID, d.resolved.Desired, b.free)
	if ctx.Err() != nil {
		return applied
	}
	out, reason := conclude(concludeInput{
		src: src, notes: d.resolved.Notes, reasons: reasons, failed: failed,
		busy: len(busy) > 0, retry: b.retry, waitNote: joinReasons(b.busyNote, b.serveNote), applied: applied,
	})
	return finish(prev, out, reason, "")
}

// countError counts an error of a reconcile stage ("" is none).
func (a *Agent) countError(stage string) {
	if stage != "" {
		a.metrics.errors.WithLabelValues(stage).Inc()
	}
}

// successWith is the success status; its reason says what of the
// configuration does not apply to this node and was left out (an entry for
// another GPU model; in a shared config file, GPUs the node lacks, or the
// whole configuration), so that an operator sees it on the Node.
func successWith(src nodeinfo.Source, notes []string) status {
	if len(notes) == 0 {
		return status{State: nodeinfo.StateSuccess}
	}
	return status{nodeinfo.StateSuccess, fmt.Sprintf("%s: %s", src, strings.Join(notes, "; "))}
}

// drainFree drains the devices of the GPUs plan changes (free at the busy
// check) and asks the kubelet again (see Server.Drain). It
// returns the GPUs pods took in between, whose devices it serves again at
// once, and the IDs it leaves draining, which the caller undrains once the
// apply is done.
func (a *Agent) drainFree(ctx context.Context, plan migconfig.Plan, gpus []mig.GPU) (late map[int][]string, draining []string, err error) {
	byGPU := drainIDs(plan, gpus)
	if len(byGPU) == 0 {
		return nil, nil, nil
	}
	all := slices.Concat(slices.Collect(maps.Values(byGPU))...)
	if err := a.opts.Server.Drain(ctx, all); err != nil {
		return nil, nil, fmt.Errorf("draining the devices of GPUs %v before repartitioning them: %w", slices.Sorted(maps.Keys(byGPU)), err)
	}
	assignments, err := a.opts.PodResources.List(ctx)
	if err != nil {
		a.opts.Server.Undrain(all)
		return nil, nil, err
	}
	a.noteAssignments(assignments)
	late = busyGPUs(plan, gpus, assignments)
	for gpu := range late {
		a.opts.Server.Undrain(byGPU[gpu])
		delete(byGPU, gpu)
	}
	if len(late) > 0 {
		a.log.Info("Pods took devices of GPUs about to be repartitioned; those GPUs wait for them", "gpus", describeBusy(late))
	}
	return late, slices.Concat(slices.Collect(maps.Values(byGPU))...), nil
}

// drainIDs returns, for each GPU plan changes, the IDs of its devices a
// pod must not get before the change: those busyGPUs would count. That is
// the GPU itself (served whole when MIG is off, or under the none
// strategy) and every MIG device the change destroys, which is all of
// them when the MIG mode changes. MIG devices the plan keeps stay
// allocatable.
func drainIDs(plan migconfig.Plan, gpus []mig.GPU) map[int][]string {
	out := map[int][]string{}
	for _, p := range plan.GPUs {
		if !p.Changed() {
			continue
		}
		i := slices.IndexFunc(gpus, func(g mig.GPU) bool { return g.Index == p.GPU })
		if i < 0 {
			continue
		}
		g := gpus[i]
		ids := []string{g.UUID}
		for _, in := range g.Instances {
			if in.UUID != "" && (p.Mode != migconfig.ModeUnchanged || destroys(p, in.GIID)) {
				ids = append(ids, in.UUID)
			}
		}
		out[p.GPU] = ids
	}
	return out
}

// hold is a GPU on which applying a document failed.
type hold struct {
	// key is the document and the GPU's layout after the failure.
	key    string
	reason string
	// inUse: NVML refused because something uses the GPU, which may end
	// without any sign the agent could see.
	inUse bool
	// srcID is the document's identity; attempts how many applies of it
	// failed in a row, and retryAt when the next one is due.
	srcID    string
	attempts int
	retryAt  time.Time
}

// maxRetryBackoff caps the wait between two applies of a document to a
// GPU on which it keeps failing.
const maxRetryBackoff = 5 * time.Minute

// retryBackoff is the wait after the attempts-th failure in a row: base,
// doubled at each failure after the first, at most maxRetryBackoff.
func retryBackoff(base time.Duration, attempts int) time.Duration {
	d := base
	for i := 1; i < attempts && d < maxRetryBackoff; i++ {
		d *= 2
	}
	return min(d, maxRetryBackoff)
}

// nextRetry is when the loop should reconcile again, now, after a
// reconcile that began at began: after RetryInterval when soon, and when
// the first hold is due, at once for one that fell due during the
// reconcile. A hold already due when it began was tried then or waits on
// something else (its GPU is busy, or a call on it has not returned),
// which wakes the loop on its own; a timer for it would fire at once,
// again and again.
func (a *Agent) nextRetry(soon bool, began, now time.Time) (time.Duration, bool) {
	var next time.Duration
	ok := false
	if soon {
		next, ok = a.opts.RetryInterval, true
	}
	for _, h := range a.held {
		if !h.retryAt.After(began) {
			continue
		}
		if d := max(h.retryAt.Sub(now), 0); !ok || d < next {
			next, ok = d, true
		}
	}
	return next, ok
}

// liftBusyHolds forgets the holds of GPUs that failed because they were in
// use, so the next reconcile tries them again.
func (a *Agent) liftBusyHolds() {
	maps.DeleteFunc(a.held, func(_ int, h hold) bool { return h.inUse })
}

// holdKey identifies a document and one GPU's layout, instance ids
// included.
func holdKey(srcID string, gpus []mig.GPU, index int) string {
	for _, g := range gpus {
		if g.Index == index {
			b, _ := json.Marshal(g)
			sum := sha256.Sum256(b)
			return srcID + "/" + hex.EncodeToString(sum[:])
		}
	}
	return srcID + "/missing"
}

// applyFree applies plan, which leaves out busy and held GPUs, resets GPUs
// whose MIG mode change waits for a reset where it can, and serves the
// layout that results. Its status is success, or failed with every GPU's
// reason (without the source: the caller adds it); GPUs that failed are
// held. An Applied Event records what changed.
func (a *Agent) applyFree(ctx context.Context, src nodeinfo.Source, srcID string, desired []migconfig.Desired, plan migconfig.Plan) outcome {
	res, _ := migconfig.Apply(ctx, a.part, plan)
	var errs, applied []string
	failedGPUs := map[int]hold{}
	for i, r := range res.GPUs {
		if r.Outcome == migconfig.OutcomeResetRequired {
			r = a.resetAndApply(ctx, desired, r)
			res.GPUs[i] = r
		}
		switch {
		case r.Outcome == migconfig.OutcomeApplied:
			applied = append(applied, plan.GPUs[i].Summary())
		case r.Outcome == migconfig.OutcomeAbandoned:
			// Not held: the GPU is left alone while its call runs
			// (callGuard.outstanding), and reconciled once it returns.
			// The reason is the one the reconciles meanwhile give, so
			// that they have nothing new to report.
			if why, ok := a.guard.outstanding()[r.GPU]; ok {
				errs = append(errs, why)
			} else {
				errs = append(errs, r.Err.Error())
			}
		case r.Err != nil:
			errs = append(errs, r.Err.Error())
			failedGPUs[r.GPU] = hold{reason: r.Err.Error(), inUse: r.Busy || errors.Is(r.Err, mig.ErrInUse)}
		}
	}
	gpus, err := a.guard.discover(a.opts.NVML)
	if err != nil {
		a.metrics.errors.WithLabelValues(stageDiscover).Inc()
		errs = append(errs, fmt.Sprintf("reading the GPUs after the change: %v", err))
		gpus = a.gpus
	} else if err := a.serve(ctx, gpus); err != nil {
		errs = append(errs, err.Error())
	}
	if ctx.Err() == nil {
		now := time.Now()
		for _, r := range res.GPUs {
			if r.Err == nil {
				delete(a.held, r.GPU) // a success ends the backoff
			}
		}
		for gpu, h := range failedGPUs {
			h.key, h.srcID, h.attempts = holdKey(srcID, gpus, gpu), srcID, 1
			if prev, ok := a.held[gpu]; ok && prev.srcID == srcID {
				h.attempts = prev.attempts + 1
			}
			h.retryAt = now.Add(retryBackoff(a.opts.RetryInterval, h.attempts))
			a.held[gpu] = h
		}
	}
	out := outcome{status: status{State: nodeinfo.StateSuccess}, result: resultSuccess, gpus: gpus}
	if len(applied) > 0 {
		out.events = append(out.events, event{corev1.EventTypeNormal, ReasonApplied, fmt.Sprintf("%s: %s", src, strings.Join(applied, "; "))})
	}
	if len(errs) > 0 {
		if ctx.Err() == nil {
			a.metrics.errors.WithLabelValues(stageApply).Inc()
		}
		out.status = status{nodeinfo.StateFailed, strings.Join(errs, "; ")}
		out.result = resultFailed
	}
	return out
}

// resetAndApply finishes a GPU whose MIG mode change waits for a reset
// (Ampere): when the backend can reset GPUs it resets this one (nothing
// uses it: pods on it made it busy, and NVML refuses to reset a GPU with
// processes) and applies the rest of the plan, as mig-parted does with
// nvidia-smi -r. Otherwise the result says what the operator must do.
func (a *Agent) resetAndApply(ctx context.Context, desired []migconfig.Desired, r migconfig.GPUResult) migconfig.GPUResult {
	if err := a.part.ResetGPU(r.GPU); err != nil {
		if errors.Is(err, mig.ErrNotSupported) {
			r.Err = fmt.Errorf("%w; the agent cannot reset GPUs with this NVML backend: drain the node, reset GPU %d (nvidia-smi -r -i %d) or reboot the node, and the agent completes the layout", r.Err, r.GPU, r.GPU)
		} else {
			a.metrics.errors.WithLabelValues(stageReset).Inc()
			r.Err = fmt.Errorf("%w; resetting the GPU failed: %w", r.Err, err)
		}
		return r
	}
	a.log.Info("Reset the GPU so its MIG mode change takes effect", "gpu", r.GPU)
	gpus, err := a.guard.discover(a.opts.NVML)
	if err != nil {
		r.Err = fmt.Errorf("GPU %d: reading it after the reset: %w", r.GPU, err)
		return r
	}
	var mine []migconfig.Desired
	for _, d := range desired {
		if d.GPU == r.GPU {
			mine = append(mine, d)
		}
	}
	plan, err := migconfig.MakePlan(gpus, mine)
	if err != nil {
		r.Err = fmt.Errorf("GPU %d: planning after the reset: %w", r.GPU, err)
		return r
	}
	res, _ := migconfig.Apply(ctx, a.part, plan)
	if len(res.GPUs) != 1 {
		r.Err = fmt.Errorf("GPU %d: no plan after the reset", r.GPU)
		return r
	}
	after := res.GPUs[0]
	if after.Outcome == migconfig.OutcomeUnchanged {
		after.Outcome = migconfig.OutcomeApplied
	}
	return after
}

// serve hands the layout to the server of the devices.
func (a *Agent) serve(ctx context.Context, gpus []mig.GPU) error {
	if err := a.opts.Server.Serve(ctx, gpus); err != nil {
		a.metrics.errors.WithLabelValues(stageServe).Inc()
		return err
	}
	return nil
}

// document returns the mig.config text of src: the annotation's, or the
// config file's for the label.
func (a *Agent) document(src nodeinfo.Source) (string, error) {
	switch src.Kind {
	case nodeinfo.SourceAnnotation, nodeinfo.SourceRunAIAnnotation:
		return src.Document, nil
	}
	if a.opts.ConfigFile == "" {
		return "", fmt.Errorf("%s names a configuration, but the agent has no --config-file to find it in", src)
	}
	f, err := os.Open(a.opts.ConfigFile)
	if err != nil {
		return "", fmt.Errorf("%s: reading the config file: %w", src, err)
	}
	defer f.Close()
	data, err := migconfig.ReadDocument(f)
	if err != nil {
		return "", fmt.Errorf("%s: reading the config file %s: %w", src, a.opts.ConfigFile, err)
	}
	return string(data), nil
}

// summarize is one line per GPU of the plan.
func summarize(plan migconfig.Plan) string {
	parts := make([]string, len(plan.GPUs))
	for i, p := range plan.GPUs {
		parts[i] = p.Summary()
	}
	return strings.Join(parts, "; ")
}

func joinReasons(parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, "; ")
}
