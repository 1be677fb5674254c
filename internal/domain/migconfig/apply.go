package migconfig

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/migflex/migflex/internal/domain/mig"
)

// Partitioner changes MIG state on a GPU; internal/domain/mig's Partitioner is the
// real one. CreateInstance creates a GPU instance at a memory-slice start with
// one compute instance spanning it.
type Partitioner interface {
	SetMigMode(gpu int, enabled bool) error
	CreateInstance(gpu int, profile string, start int) (mig.Instance, error)
	DestroyInstance(gpu int, gi uint32) error
}

// Outcome is how applying a plan went on one GPU.
type Outcome int

const (
	// OutcomeUnchanged: the GPU was already right; nothing was called.
	OutcomeUnchanged Outcome = iota
	// OutcomeApplied: every step succeeded.
	OutcomeApplied
	// OutcomeRolledBack: a step failed and the previous layout and mode
	// were restored.
	OutcomeRolledBack
	// OutcomeRollbackFailed: a step failed and so did part of the rollback;
	// GPUResult.Instances says what is left.
	OutcomeRollbackFailed
	// OutcomeSkipped: not started because the context ended first.
	OutcomeSkipped
	// OutcomeResetRequired: the MIG mode change is pending until the GPU is
	// reset (Ampere). What came before it stands and the creates did not
	// run; reset the GPU and apply again.
	OutcomeResetRequired
	// OutcomeAbandoned: a call did not return in time (mig.ErrNoReturn)
	// and may still change the GPU; nothing else was called on it, not
	// even a rollback. GPUResult.Instances is what the calls that did
	// return made.
	OutcomeAbandoned
)

func (o Outcome) String() string {
	switch o {
	case OutcomeUnchanged:
		return "unchanged"
	case OutcomeApplied:
		return "applied"
	case OutcomeRolledBack:
		return "rolled back"
	case OutcomeRollbackFailed:
		return "rollback failed"
	case OutcomeSkipped:
		return "skipped"
	case OutcomeResetRequired:
		return "reset required"
	case OutcomeAbandoned:
		return "abandoned"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// GPUResult is what Apply did to one GPU.
type GPUResult struct {
	GPU     int
	Outcome Outcome
	// Busy is true when a destroy failed because the instance is in use.
	Busy bool
	// Err is why the GPU is not in the planned state; nil when it is.
	Err error
	// Instances is the layout Apply believes the GPU has now, from the
	// calls it made, ordered by start. Recreated instances carry the ids the
	// Partitioner returned, which differ from the old ones.
	Instances []mig.Instance
	// MigEnabled is the MIG mode last requested on the GPU.
	MigEnabled bool
}

// Result is what Apply did, one GPUResult per GPU in the plan, in its order.
type Result struct {
	GPUs []GPUResult
}

// Apply carries out a plan: on each GPU it destroys, changes the MIG mode,
// then creates. When a step fails, or ctx ends between steps, it undoes what
// it did on that GPU (destroying what it created, restoring the mode,
// recreating what it destroyed at the old placements) and moves on to the
// next GPU. The rollback itself does not stop for ctx: a half-changed GPU is
// worse than a late return. A mode change that waits for a GPU reset
// (mig.ErrResetRequired) is not undone: the GPU ends OutcomeResetRequired,
// and the caller decides whether to reset it. Nor is a step whose call did
// not return (mig.ErrNoReturn): the GPU ends OutcomeAbandoned, as the call
// left it, since another call could race the one still running. The error
// joins every GPU's error.
func Apply(ctx context.Context, p Partitioner, plan Plan) (Result, error) {
	var res Result
	var errs []error
	for _, gp := range plan.GPUs {
		r := applyGPU(ctx, p, gp)
		if r.Err != nil {
			errs = append(errs, r.Err)
		}
		res.GPUs = append(res.GPUs, r)
	}
	return res, errors.Join(errs...)
}

// undoStep reverses one step that succeeded.
type undoStep struct {
	what string
	do   func() error
}

// applying is one GPU's apply in progress: the result so far, and how to
// undo what was done.
type applying struct {
	p    Partitioner
	gp   GPUPlan
	name string
	r    GPUResult
	undo []undoStep
}

// applyGPU applies gp in its order: destroy, then the MIG mode, then
// create; a step that fails rolls back the steps done, newest first.
func applyGPU(ctx context.Context, p Partitioner, gp GPUPlan) GPUResult {
	a := &applying{p: p, gp: gp, name: fmt.Sprintf("GPU %d (%s)", gp.GPU, gp.Model),
		r: GPUResult{GPU: gp.GPU, Instances: slices.Clone(gp.Before), MigEnabled: gp.BeforeMode}}
	if !gp.Changed() {
		a.r.Outcome = OutcomeUnchanged
		return a.r
	}
	if err := ctx.Err(); err != nil {
		a.r.Outcome = OutcomeSkipped
		a.r.Err = fmt.Errorf("%s: not started: %w", a.name, err)
		return a.r
	}
	for _, step := range []func(context.Context) *GPUResult{a.destroy, a.setMode, a.create} {
		if r := step(ctx); r != nil {
			return *r
		}
	}
	a.sortInstances()
	a.r.Outcome = OutcomeApplied
	return a.r
}

// destroy destroys the instances the plan removes; nil when it did.
func (a *applying) destroy(ctx context.Context) *GPUResult {
	for _, in := range a.gp.Destroy {
		step := "destroy " + instanceString(in)
		if err := ctx.Err(); err != nil {
			return a.fail("stopped before "+step, err)
		}
		if err := a.p.DestroyInstance(a.gp.GPU, in.GIID); err != nil {
			if inUse(err) {
				a.r.Busy = true
				step += ", instance busy"
			}
			return a.fail(step, err)
		}
		a.r.Instances = removeInstance(a.r.Instances, in.GIID)
		a.undo = append(a.undo, undoStep{
			what: fmt.Sprintf("recreate %s@%d:%d", in.Profile, in.Start, in.Size),
			do: func() error {
				got, err := a.p.CreateInstance(a.gp.GPU, in.Profile, in.Start)
				if err == nil {
					a.r.Instances = append(a.r.Instances, got)
				}
				return err
			},
		})
	}
	return nil
}

// setMode changes the MIG mode if the plan does; nil when it did.
func (a *applying) setMode(ctx context.Context) *GPUResult {
	gp := a.gp
	if gp.Mode == ModeUnchanged {
		return nil
	}
	enable := gp.Mode == ModeEnable
	if err := ctx.Err(); err != nil {
		return a.fail("stopped before "+gp.Mode.String(), err)
	}
	if err := a.p.SetMigMode(gp.GPU, enable); err != nil {
		if errors.Is(err, mig.ErrResetRequired) {
			// Not a failure to undo: the mode asked for is now pending,
			// which is the way to it. Undoing it would leave an Ampere
			// GPU unable ever to change mode; instances destroyed for a
			// disable would be gone after the reset anyway.
			a.r.MigEnabled = enable
			a.r.Outcome = OutcomeResetRequired
			a.sortInstances()
			a.r.Err = fmt.Errorf("%s: %s: %w; the change waits for a GPU reset, %d instance(s) still to create after it", a.name, gp.Mode, err, len(gp.Create))
			return &a.r
		}
		return a.fail(gp.Mode.String(), err)
	}
	a.r.MigEnabled = enable
	a.undo = append(a.undo, undoStep{
		what: fmt.Sprintf("restore MIG mode %s", onOff(gp.BeforeMode)),
		do: func() error {
			err := a.p.SetMigMode(gp.GPU, gp.BeforeMode)
			if err == nil {
				a.r.MigEnabled = gp.BeforeMode
			}
			return err
		},
	})
	return nil
}

// create creates the instances the plan adds; nil when it did.
func (a *applying) create(ctx context.Context) *GPUResult {
	for _, c := range a.gp.Create {
		step := "create " + c.String()
		if err := ctx.Err(); err != nil {
			return a.fail("stopped before "+step, err)
		}
		got, err := a.p.CreateInstance(a.gp.GPU, c.Profile, c.Start)
		if err != nil {
			return a.fail(step, err)
		}
		a.r.Instances = append(a.r.Instances, got)
		a.undo = append(a.undo, undoStep{
			what: "destroy " + instanceString(got),
			do: func() error {
				err := a.p.DestroyInstance(a.gp.GPU, got.GIID)
				if err == nil {
					a.r.Instances = removeInstance(a.r.Instances, got.GIID)
				}
				return err
			},
		})
	}
	return nil
}

// fail rolls back what was done after step failed, and says whether the
// previous layout is back.
func (a *applying) fail(step string, err error) *GPUResult {
	if errors.Is(err, mig.ErrNoReturn) {
		a.sortInstances()
		a.r.Outcome = OutcomeAbandoned
		a.r.Err = fmt.Errorf("%s: %s: %w; not rolled back while the call may still run", a.name, step, err)
		return &a.r
	}
	rbErrs := rollback(a.undo)
	a.sortInstances()
	if len(rbErrs) == 0 {
		a.r.Outcome = OutcomeRolledBack
		a.r.Err = fmt.Errorf("%s: %s: %w; rolled back, the previous layout is back (%s)", a.name, step, err, describeInstances(a.r.MigEnabled, a.r.Instances))
		return &a.r
	}
	a.r.Outcome = OutcomeRollbackFailed
	a.r.Err = fmt.Errorf("%s: %s: %w; rollback FAILED, the GPU is left with %s instead of the previous %s: %w",
		a.name, step, err, describeInstances(a.r.MigEnabled, a.r.Instances), describeInstances(a.gp.BeforeMode, a.gp.Before), errors.Join(rbErrs...))
	return &a.r
}

func (a *applying) sortInstances() {
	slices.SortFunc(a.r.Instances, func(a, b mig.Instance) int { return cmp.Compare(a.Start, b.Start) })
}

// rollback runs the undo steps newest first. It tries every step even after
// one fails, so as much as possible of the old layout comes back, and
// returns what failed.
func rollback(undo []undoStep) []error {
	var errs []error
	for i := len(undo) - 1; i >= 0; i-- {
		if err := undo[i].do(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", undo[i].what, err))
		}
	}
	return errs
}

func removeInstance(in []mig.Instance, gi uint32) []mig.Instance {
	return slices.DeleteFunc(in, func(x mig.Instance) bool { return x.GIID == gi })
}

func describeInstances(enabled bool, in []mig.Instance) string {
	pl := make([]Placement, len(in))
	for i, x := range in {
		pl[i] = Placement{Profile: x.Profile, Start: x.Start, Size: x.Size}
	}
	return describeLayout(enabled, pl)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// inUse reports whether err says the instance has running processes.
func inUse(err error) bool {
	return errors.Is(err, mig.ErrInUse)
}
