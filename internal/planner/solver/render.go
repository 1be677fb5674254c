package solver

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/migconfig"
)

// result turns the round's assignments into node layouts and explanations.
func (r *round) result() Result {
	res := Result{Warnings: r.warnings}
	for ni := range r.nodes {
		n := &r.nodes[ni]
		changed := false
		for _, gi := range n.gpus {
			if r.gpus[gi].key.touched {
				changed = true
			}
		}
		if !changed {
			continue
		}
		nc, err := r.nodeChange(int32(ni))
		if err != nil {
			// The checks below catch a planner bug before the agent sees it:
			// the node is left alone and its pods say so.
			msg := fmt.Sprintf("node %s: planned layout failed its check, node left alone: %v", n.name, err)
			res.Warnings = append(res.Warnings, msg)
			for i := range r.pods {
				if p := &r.pods[i].plan; p.Node == n.name && p.Action == ActionReshape {
					*p = PodPlan{Pod: p.Pod, Action: ActionNone, Reason: msg}
				}
			}
			continue
		}
		res.Nodes = append(res.Nodes, nc)
	}
	res.Pods = make([]PodPlan, len(r.pods))
	for i := range r.pods {
		res.Pods[i] = r.pods[i].plan
	}
	return res
}

// target is the layout a touched GPU gets: what is occupied, the free
// instances kept, and new free instances filling the rest for the demand
// mix, so that the next pods of that mix find a device without another
// change.
func (r *round) target(g *gpuState) (enabled bool, set uint64) {
	k := g.key
	if g.toWhole || !k.migEnabled {
		return false, 0
	}
	t := r.tabs[k.tab]
	set = t.sets[k.occ] | k.free
	return true, r.fill(k.tab, set)
}

// fill adds free instances to a layout, one at a time: the profile whose
// mix weight per free instance already on the GPU is highest, at the
// placement that leaves most room for the mix. Profiles with attributes
// (+me) are left to those who ask for them.
func (r *round) fill(tab int32, set uint64) uint64 {
	t := r.tabs[tab]
	w := r.mix.prof[tab]
	id, _ := t.layoutOf(set)
	have := make([]int, len(t.profiles))
	for x, pl := range t.xs {
		if set&(1<<x) != 0 {
			have[pl.prof]++
		}
	}
	for {
		bestP, bestScore := -1, 0.0
		for p := range t.profiles {
			if w[p] <= 0 || t.attrs[p] || t.room(id, p) == 0 {
				continue
			}
			if s := w[p] / float64(1+have[p]); s > bestScore {
				bestP, bestScore = p, s
			}
		}
		if bestP < 0 {
			return set
		}
		bestX, bestNext, bestRoom := -1, int32(-1), -1.0
		for _, x := range t.byProfile[bestP] {
			next := t.add(id, x)
			if next < 0 {
				continue
			}
			room := 0.0
			for q := range t.profiles {
				room += w[q] * t.size[q] * float64(t.room(next, q))
			}
			if room > bestRoom {
				bestX, bestNext, bestRoom = x, next, room
			}
		}
		set |= 1 << bestX
		id = bestNext
		have[bestP]++
	}
}

// nodeChange renders a node's document. Each changed GPU's entry is
// checked with migconfig as the agent will run it (validate, then plan
// from the GPU's current layout): the GPU must end where the planner meant,
// and no instance in use may be destroyed. GPUs left as they are get their
// current layout, which the agent leaves alone. (The tests also parse every
// document and run it through the agent's whole path.)
func (r *round) nodeChange(ni int32) (NodeChange, error) {
	n := &r.nodes[ni]
	nc := NodeChange{Node: n.name}
	type entry struct {
		index int
		body  string
	}
	var entries []entry
	for _, gi := range n.gpus {
		g := &r.gpus[gi]
		if g.key.tab < 0 || g.key.block == blockUnknown {
			continue
		}
		t := r.tabs[g.key.tab]
		if !g.key.touched {
			bk := bodyKey{tab: g.key.tab, from: g.g.MigEnabled, initial: g.initial}
			body, ok := r.bodies[bk]
			if !ok {
				body = countBody(g.g.MigEnabled, t.placements(g.initial))
				r.bodies[bk] = body
			}
			entries = append(entries, entry{g.g.Index, body})
			continue
		}
		enabled, set := r.target(g)
		bk := bodyKey{tab: g.key.tab, from: g.g.MigEnabled, to: enabled, touched: true, initial: g.initial, busy: g.busy, set: set}
		body, ok := r.bodies[bk]
		if !ok {
			var err error
			if body, err = r.checkedBody(g, t, enabled, t.placements(set)); err != nil {
				return NodeChange{}, err
			}
			r.bodies[bk] = body
		}
		entries = append(entries, entry{g.g.Index, body})
		gc := GPUChange{Index: g.g.Index, Model: t.model, MigEnabled: enabled, Pods: g.pods, Reclaimed: g.reclaimed}
		for x := range t.xs {
			bit := uint64(1) << x
			in := Instance{Profile: t.profiles[t.xs[x].prof].Name, Start: t.xs[x].start, InUse: g.busy&bit != 0}
			if set&bit != 0 {
				gc.Layout = append(gc.Layout, in)
			} else if g.initial&bit != 0 {
				gc.Destroyed = append(gc.Destroyed, in)
			}
		}
		byStart := func(a, b Instance) int {
			return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(a.Profile, b.Profile))
		}
		slices.SortFunc(gc.Layout, byStart)
		slices.SortFunc(gc.Destroyed, byStart)
		nc.GPUs = append(nc.GPUs, gc)
	}
	// One entry per distinct body, listing its GPUs.
	var b strings.Builder
	b.WriteString("version: v1\nmig-configs:\n  selected:\n")
	done := map[int]bool{}
	for i, e := range entries {
		if done[i] {
			continue
		}
		idx := []string{fmt.Sprint(e.index)}
		for j := i + 1; j < len(entries); j++ {
			if !done[j] && entries[j].body == e.body {
				done[j] = true
				idx = append(idx, fmt.Sprint(entries[j].index))
			}
		}
		fmt.Fprintf(&b, "  - devices: [%s]\n%s", strings.Join(idx, ", "), e.body)
	}
	nc.Config = b.String()
	return nc, nil
}

// bodyKey is all a GPU's entry depends on: its model, its MIG mode and
// instances now (those in use among them), and where the round takes it.
// GPUs with the same key get the same entry, rendered and checked once a
// round: a round that reclaims thousands of idle GPUs has a few keys.
type bodyKey struct {
	tab                int32
	from, to, touched  bool
	initial, busy, set uint64
}

// countBody is an entry in mig-parted's count form.
func countBody(enabled bool, layout []migconfig.Placement) string {
	if !enabled {
		return "    mig-enabled: false\n"
	}
	counts := map[string]int{}
	for _, p := range layout {
		counts[p.Profile]++
	}
	parts := make([]string, 0, len(counts))
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%q: %d", name, counts[name]))
	}
	return "    mig-enabled: true\n    mig-devices: {" + strings.Join(parts, ", ") + "}\n"
}

// pinnedBody is an entry in the Run:ai form, every instance at its place.
func pinnedBody(layout []migconfig.Placement) string {
	parts := make([]string, len(layout))
	for i, p := range layout {
		parts[i] = fmt.Sprintf("{name: %q, position: %d, size: %d}", p.Profile, p.Start, p.Size)
	}
	return "    mig-enabled: true\n    mig-devices: [" + strings.Join(parts, ", ") + "]\n"
}

// checkedBody is a changed GPU's entry: mig-parted's count form when the
// agent's planning lands on exactly the planned placements from the GPU's
// current layout, the pinned form otherwise; an error when even the pinned
// form would not (a planner bug the caller reports).
func (r *round) checkedBody(g *gpuState, t *table, enabled bool, want []migconfig.Placement) (string, error) {
	cur := r.migGPU(g, t)
	busy := map[migconfig.Placement]bool{}
	for x := range t.xs {
		if g.busy&(1<<x) != 0 {
			busy[t.placementOf(x)] = true
		}
	}
	lands := func(e migconfig.Entry) error {
		e.Devices, e.MigEnabled = []int{cur.Index}, enabled
		desired, err := migconfig.Validate(migconfig.Config{Name: "check", Entries: []migconfig.Entry{e}}, []mig.GPU{cur})
		if err != nil {
			return err
		}
		plan, err := migconfig.MakePlan([]mig.GPU{cur}, desired)
		if err != nil {
			return err
		}
		gp := plan.GPUs[0]
		for _, d := range gp.Destroy {
			if busy[migconfig.Placement{Profile: d.Profile, Start: d.Start, Size: d.Size}] {
				return fmt.Errorf("the agent would destroy %s@%d, which is in use", d.Profile, d.Start)
			}
		}
		switch {
		case gp.Mode == migconfig.ModeDisable && enabled, gp.Mode == migconfig.ModeEnable && !enabled:
			return fmt.Errorf("the agent would %s", gp.Mode)
		case enabled && !slices.Equal(gp.After(), want):
			return fmt.Errorf("the agent would lay out %v, the planner meant %v", gp.After(), want)
		}
		return nil
	}
	if !enabled {
		if err := lands(migconfig.Entry{}); err != nil {
			return "", fmt.Errorf("GPU %d: %w", cur.Index, err)
		}
		return countBody(false, nil), nil
	}
	counts := map[string]int{}
	for _, p := range want {
		counts[p.Profile]++
	}
	if lands(migconfig.Entry{Profiles: counts}) == nil {
		return countBody(true, want), nil
	}
	if err := lands(migconfig.Entry{Placements: want}); err != nil {
		return "", fmt.Errorf("GPU %d: %w", cur.Index, err)
	}
	return pinnedBody(want), nil
}

// migGPU is the GPU as the agent's discovery would report it.
func (r *round) migGPU(g *gpuState, t *table) mig.GPU {
	out := mig.GPU{
		Index: g.g.Index, Model: t.model, MigCapable: true,
		MigEnabled: g.g.MigEnabled, MigPending: g.g.MigEnabled, Profiles: t.profiles,
	}
	for i, in := range g.g.Instances {
		x := t.find(in.Profile, in.Start)
		out.Instances = append(out.Instances, mig.Instance{
			Profile: in.Profile, Start: in.Start, Size: t.xs[x].size,
			GIID: uint32(i + 1), HasCI: true, UUID: fmt.Sprintf("MIG-planner-%d-%d", g.g.Index, i),
		})
	}
	slices.SortFunc(out.Instances, func(a, b mig.Instance) int { return cmp.Compare(a.Start, b.Start) })
	return out
}
