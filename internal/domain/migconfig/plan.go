package migconfig

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/migflex/migflex/internal/domain/mig"
)

// ModeChange is what a plan does to a GPU's MIG mode.
type ModeChange int

const (
	ModeUnchanged ModeChange = iota
	ModeEnable
	ModeDisable
)

func (m ModeChange) String() string {
	switch m {
	case ModeEnable:
		return "enable MIG"
	case ModeDisable:
		return "disable MIG"
	}
	return "keep MIG mode"
}

// Plan is what to change on each GPU a configuration covers, ordered by GPU
// index. GPUs already right have a GPUPlan with nothing to do.
type Plan struct {
	GPUs []GPUPlan
}

// GPUPlan changes one GPU. Apply runs Destroy, then Mode, then Create.
type GPUPlan struct {
	GPU   int
	Model string
	Mode  ModeChange
	// Before is the layout at planning time and BeforeMode the MIG mode then
	// requested (the pending mode): what a rollback restores.
	Before     []mig.Instance
	BeforeMode bool
	// Keep are current instances that stay as they are.
	Keep []mig.Instance
	// Destroy are current instances to remove.
	Destroy []mig.Instance
	// Create are new instances at explicit placements, in creation order.
	Create []Placement
}

// Changed reports whether the plan does anything to the GPU.
func (p GPUPlan) Changed() bool {
	return p.Mode != ModeUnchanged || len(p.Destroy) > 0 || len(p.Create) > 0
}

// After is the layout the plan leaves on the GPU, ordered by start.
func (p GPUPlan) After() []Placement {
	var out []Placement
	for _, in := range p.Keep {
		out = append(out, Placement{Profile: in.Profile, Start: in.Start, Size: in.Size})
	}
	out = append(out, p.Create...)
	slices.SortFunc(out, func(a, b Placement) int { return cmp.Compare(a.Start, b.Start) })
	return out
}

// Summary is one line for people: what happens to the GPU.
func (p GPUPlan) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "GPU %d (%s): ", p.GPU, p.Model)
	if !p.Changed() {
		b.WriteString("unchanged, ")
		b.WriteString(describeLayout(p.BeforeMode, p.After()))
		return b.String()
	}
	// In the order Apply runs them.
	var steps []string
	if len(p.Keep) > 0 {
		steps = append(steps, "keep "+instanceList(p.Keep))
	}
	if len(p.Destroy) > 0 {
		steps = append(steps, "destroy "+instanceList(p.Destroy))
	}
	if p.Mode != ModeUnchanged {
		steps = append(steps, p.Mode.String())
	}
	if len(p.Create) > 0 {
		parts := make([]string, len(p.Create))
		for i, c := range p.Create {
			parts[i] = c.String()
		}
		steps = append(steps, "create "+strings.Join(parts, ", "))
	}
	b.WriteString(strings.Join(steps, "; "))
	return b.String()
}

// Projected is the layout gpus have once the plan is applied, with a
// placeholder UUID for each MIG device: what a server of the devices is
// asked whether it can serve before any GPU changes.
func (p Plan) Projected(gpus []mig.GPU) []mig.GPU {
	byGPU := map[int]GPUPlan{}
	for _, gp := range p.GPUs {
		byGPU[gp.GPU] = gp
	}
	out := make([]mig.GPU, len(gpus))
	for i, g := range gpus {
		if gp, ok := byGPU[g.Index]; ok && gp.Changed() {
			on := gp.BeforeMode
			switch gp.Mode {
			case ModeEnable:
				on = true
			case ModeDisable:
				on = false
			}
			g.MigEnabled, g.MigPending = on, on
			g.Instances = nil
			for j, pl := range gp.After() {
				g.Instances = append(g.Instances, mig.Instance{
					Profile: pl.Profile, Start: pl.Start, Size: pl.Size,
					HasCI: true, UUID: fmt.Sprintf("MIG-planned-%d-%d", g.Index, j),
				})
			}
		}
		out[i] = g
	}
	return out
}

func describeLayout(enabled bool, layout []Placement) string {
	if !enabled {
		return "MIG disabled"
	}
	if len(layout) == 0 {
		return "MIG enabled, no instances"
	}
	parts := make([]string, len(layout))
	for i, pl := range layout {
		parts[i] = pl.String()
	}
	return strings.Join(parts, ", ")
}

func instanceList(in []mig.Instance) string {
	parts := make([]string, len(in))
	for i, x := range in {
		parts[i] = instanceString(x)
	}
	return strings.Join(parts, ", ")
}

func instanceString(in mig.Instance) string {
	return fmt.Sprintf("%s@%d:%d (GI %d)", in.Profile, in.Start, in.Size, in.GIID)
}

// MakePlan works out, per desired GPU, how to get from the GPU's current
// layout to the desired one. Current instances that fit the target where they
// are stay; the choice keeps as many as possible, and of equally good
// choices takes the lowest placements. It fails, with every reason, when a
// desired state names a GPU that is missing or cannot be laid out.
func MakePlan(gpus []mig.GPU, desired []Desired) (Plan, error) {
	byIndex := make(map[int]*mig.GPU, len(gpus))
	for i := range gpus {
		byIndex[gpus[i].Index] = &gpus[i]
	}
	var plan Plan
	var errs []error
	for _, d := range desired {
		g, ok := byIndex[d.GPU]
		if !ok {
			errs = append(errs, fmt.Errorf("GPU %d: not on this node (node has %s)", d.GPU, indexList(gpus)))
			continue
		}
		p, err := planGPU(g, d)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		plan.GPUs = append(plan.GPUs, p)
	}
	if err := errors.Join(errs...); err != nil {
		return Plan{}, err
	}
	slices.SortFunc(plan.GPUs, func(a, b GPUPlan) int { return cmp.Compare(a.GPU, b.GPU) })
	return plan, nil
}

func planGPU(g *mig.GPU, d Desired) (GPUPlan, error) {
	p := GPUPlan{
		GPU:        g.Index,
		Model:      g.Model,
		Before:     sortedInstances(g.Instances),
		BeforeMode: g.MigPending,
	}
	if g.MigEnabled != d.MigEnabled || g.MigPending != d.MigEnabled {
		p.Mode = ModeDisable
		if d.MigEnabled {
			p.Mode = ModeEnable
		}
	}
	if !d.MigEnabled {
		p.Destroy = slices.Clone(p.Before)
		return p, nil
	}
	var errs errorList
	if !checkGPU(g, d, &errs) {
		return GPUPlan{}, errs.err()
	}
	l := newLayout(g, d.Profiles, d.Placements)
	// Only a complete instance of a profile the GPU knows, at its proper
	// size, can stay; a GPU instance without its compute instance is rebuilt.
	for _, in := range p.Before {
		if prof, ok := g.Profile(in.Profile); ok && in.HasCI && in.Size == prof.MemorySlices {
			l.keepable[placementKey{in.Profile, in.Start}] = true
		}
	}
	starts, _, ok := l.solve()
	if !ok {
		return GPUPlan{}, fmt.Errorf("%s: no placement fits the request", gpuName(g))
	}
	kept := map[placementKey]bool{}
	for i, s := range l.slots {
		k := placementKey{s.prof.Name, starts[i]}
		if l.keepable[k] {
			kept[k] = true
			continue
		}
		p.Create = append(p.Create, Placement{Profile: s.prof.Name, Start: starts[i], Size: s.prof.MemorySlices})
	}
	for _, in := range p.Before {
		if kept[placementKey{in.Profile, in.Start}] && in.HasCI && in.Size == sizeOf(g, in.Profile) {
			p.Keep = append(p.Keep, in)
		} else {
			p.Destroy = append(p.Destroy, in)
		}
	}
	slices.SortFunc(p.Create, func(a, b Placement) int { return cmp.Compare(a.Start, b.Start) })
	return p, nil
}

func sortedInstances(in []mig.Instance) []mig.Instance {
	out := slices.Clone(in)
	slices.SortFunc(out, func(a, b mig.Instance) int { return cmp.Compare(a.Start, b.Start) })
	return out
}

func sizeOf(g *mig.GPU, profile string) int {
	p, _ := g.Profile(profile)
	return p.MemorySlices
}
