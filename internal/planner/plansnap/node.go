// Package plansnap builds what the planner sees of a cluster from the
// Kubernetes objects: each Node as a solver.Node (its GPUs and the
// instances pods hold, from the agent's publication; whether the planner
// may change it, and if not why), the GPU models' profile tables, and which
// pods wait for GPUs. The planner's controller and the webhook's
// reshape-first mode both read the cluster through it, from their informer
// caches, so they agree on what the planner could do. It does no I/O.
package plansnap

import (
	"cmp"
	"encoding/json"
	"fmt"
	"iter"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/migconfig"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/planner/solver"
	"github.com/migflex/migflex/internal/platform/textcut"
)

// The planner's defaults that the webhook's reshape-first mode must read
// Nodes with too, so that both tell a human's edit from the planner's alike.
const (
	// DefaultFieldManager is the planner's field manager.
	DefaultFieldManager = "migflex-planner"
	// DefaultManualHold is how long the planner leaves an opted-in node
	// alone after someone else changed its nvidia.com/mig.config.
	DefaultManualHold = 10 * time.Minute
)

// Options say how to read the Nodes.
type Options struct {
	// FieldManager is the planner's: a nvidia.com/mig.config written by
	// any other manager is a human's (or another tool's) edit.
	FieldManager string
	// ManualHold is how long the planner leaves an opted-in node alone
	// after someone else changed its nvidia.com/mig.config.
	ManualHold time.Duration
	// Now is the time of the reading.
	Now time.Time
	// Cache, when set, keeps the decoded annotations between readings.
	Cache *Cache
	// Pools, when set, is a DRA node's pool read from its slices and the
	// claims allocated in it (drawatch.Watch.Pool): on a dynamic node the
	// placements the scheduler allocated and the kubelet has not prepared
	// yet are in use too, though the agent's layout has no instance
	// there yet.
	Pools func(node string) *schedview.Pool
	// Reuse, with Cache, hands back a Node's previous view while what it
	// was read from is the same (see Cache). The views then share their
	// slices and maps: the caller must change none of them in place
	// (clone first), nor a Node it read (an informer's objects are not).
	Reuse bool
}

// Node is one Node as the planner sees it.
type Node struct {
	solver.Node
	// Models are the profile tables the node's agent published.
	Models []solver.Model
	// InFlight lists the GPUs whose nvidia.com/mig.config layout is not in
	// place yet; they are shown at that layout, as pods will find them.
	InFlight []int
	// Config is the node's nvidia.com/mig.config, and ConfigOwner the field
	// manager that last set it ("" when unknown or unset), at ConfigTime.
	Config      string
	ConfigOwner string
	ConfigTime  time.Time
	// Layout is the agent's layout annotation, decoded (nil when absent
	// or unreadable).
	Layout []nodeinfo.GPU
	// Warnings say what of the Node could not be read.
	Warnings []string
}

// FromAPI reads a Node.
func FromAPI(n *corev1.Node, o Options) Node {
	dec := o.Cache.entry(n.Name)
	reuse := o.Reuse && o.Cache != nil
	if reuse {
		if v, ok := dec.reuse(n, o); ok {
			return v
		}
	}
	out := read(n, o, dec)
	if reuse {
		dec.keep(n, o, out)
	}
	return out
}

func read(n *corev1.Node, o Options, dec *decoded) Node {
	out := Node{Node: solver.Node{Node: schedview.NodeFromAPI(n), OptedIn: n.Labels[nodeinfo.LabelPlanner] == nodeinfo.PlannerEnabled,
		Dynamic: IsDynamic(n)}}
	// The round's scheduling view matches pods' node affinity against n
	// itself rather than a copy (schedview.Node.API).
	out.API = n
	out.Config = n.Annotations[nodeinfo.AnnotationMigConfig]
	out.ConfigOwner, out.ConfigTime = AnnotationOwner(n, nodeinfo.AnnotationMigConfig)
	freeze := func(format string, args ...any) {
		if out.Frozen == "" {
			out.Frozen = fmt.Sprintf(format, args...)
		}
	}

	if s, ok := n.Annotations[nodeinfo.AnnotationProfiles]; ok {
		models, err := o.Cache.profiles(s)
		if err != nil {
			out.Warnings = append(out.Warnings, err.Error())
		}
		out.Models = models
	}
	raw, ok := n.Annotations[nodeinfo.AnnotationLayout]
	if !ok {
		freeze("its agent has not reported its GPUs (no %s)", nodeinfo.AnnotationLayout)
		return out
	}
	layout, err := dec.decodeLayout(raw)
	if err != nil {
		out.Warnings = append(out.Warnings, err.Error())
		freeze("its agent's report is unreadable: %v", err)
		return out
	}
	out.Layout = layout
	if len(layout) > 0 {
		out.GPUs = make([]solver.GPU, 0, len(layout))
	}
	for _, g := range layout {
		pg := solver.GPU{Index: g.Index, Model: g.Model, MigEnabled: g.MigMode == nodeinfo.MigModeEnabled,
			InUse: len(g.UsedBy) > 0 || renamed(resourcename.GPU, g.Shared)}
		switch g.MigMode {
		case nodeinfo.MigModeEnabled, nodeinfo.MigModeDisabled, nodeinfo.MigModeNA:
		default:
			freeze("GPU %d's MIG mode change waits for a GPU reset (%s)", g.Index, g.MigMode)
		}
		if g.MigMode == nodeinfo.MigModeNA {
			// Not MIG capable: a whole GPU the planner never changes.
			pg.Model = ""
		}
		out.addReplicas(solver.Replicas{GPU: g.Index, Start: -1}, resourcename.GPU, g.Health, g.UsedBy, g.Shared)
		if len(g.Instances) > 0 {
			pg.Instances = make([]solver.Instance, 0, len(g.Instances))
		}
		for _, in := range g.Instances {
			pg.Instances = append(pg.Instances, solver.Instance{Profile: in.Profile, Start: in.Placement.Start,
				InUse: len(in.UsedBy) > 0 || renamed(resourcename.MIG(in.Profile), in.Shared)})
			if in.UUID != "" {
				out.addReplicas(solver.Replicas{GPU: g.Index, Profile: in.Profile, Start: in.Placement.Start}, resourcename.MIG(in.Profile), in.Health, in.UsedBy, in.Shared)
			}
		}
		out.GPUs = append(out.GPUs, pg)
	}

	if out.Dynamic && o.Pools != nil {
		out.allocated(o.Pools(n.Name))
	}

	state, reason := n.Labels[nodeinfo.LabelMigConfigState], n.Annotations[nodeinfo.AnnotationReason]
	switch {
	case state == nodeinfo.StatePending:
		freeze("its agent is changing its layout (state pending: %s)", clip(reason))
	case state == nodeinfo.StateFailed:
		freeze("its agent could not apply its layout (state failed: %s)", clip(reason))
	case state == "" && hasSource(n):
		freeze("its agent has not reported on its layout yet")
	case state != "" && state != nodeinfo.StateSuccess:
		freeze("its agent reports an unknown state %q", state)
	}
	if until, held := o.HeldUntil(out.ConfigOwner, out.ConfigTime); held {
		freeze("%s was changed by %s at %s: the planner leaves the node alone until %s", nodeinfo.AnnotationMigConfig, out.ConfigOwner,
			out.ConfigTime.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339))
	}
	if state != nodeinfo.StateFailed && out.Config != "" && !out.Dynamic {
		out.inFlight(layout, n.Annotations[nodeinfo.AnnotationProfiles] != "", o.Now)
		if len(out.InFlight) > 0 {
			freeze("the layout its %s asks for is not in place yet (GPUs %v)", nodeinfo.AnnotationMigConfig, out.InFlight)
		}
	}
	return out
}

// allocated adds to a dynamic node's GPUs, as instances in use, the
// devices allocated in its pool that its agent does not report as
// instances yet (allocated, not prepared), by GPU UUID; a whole GPU
// allocated is a GPU in use.
func (out *Node) allocated(p *schedview.Pool) {
	if p == nil || !p.Dynamic {
		return
	}
	for _, pg := range p.GPUs {
		li := slices.IndexFunc(out.Layout, func(g nodeinfo.GPU) bool { return g.UUID == pg.UUID })
		if pg.UUID == "" || li < 0 {
			continue
		}
		gi := slices.IndexFunc(out.GPUs, func(g solver.GPU) bool { return g.Index == out.Layout[li].Index })
		if gi < 0 {
			continue
		}
		g := &out.GPUs[gi]
		for _, u := range pg.Used {
			if u.Profile == "" {
				g.InUse = true
				continue
			}
			if !slices.ContainsFunc(g.Instances, func(in solver.Instance) bool { return in.Profile == u.Profile && in.Start == u.Start }) {
				g.Instances = append(g.Instances, solver.Instance{Profile: u.Profile, Start: u.Start, InUse: true})
			}
		}
	}
}

// renamed tells whether a device of resource res is shared under another
// name: it is then no device of res, which the planner may hand out or
// change, but only its replicas (see addReplicas), so the planner reads
// it as in use.
func renamed(res corev1.ResourceName, s *nodeinfo.Shared) bool {
	return s != nil && corev1.ResourceName(s.Resource) != res
}

// addReplicas lists a healthy shared device with replicas free, where
// x is: its free replicas serve pods as they are. One that pods use is in
// use, so the planner never changes it.
func (out *Node) addReplicas(x solver.Replicas, res corev1.ResourceName, health string, usedBy []string, s *nodeinfo.Shared) {
	if s == nil || health != nodeinfo.HealthHealthy {
		return
	}
	served, total, inUse := nodeinfo.Devices(res, usedBy, s)
	if x.Free = total - inUse; x.Free > 0 {
		x.Resource = served
		out.Replicas = append(out.Replicas, x)
	}
}

// IsDynamic tells whether a Node is served through DRA in dynamic mode,
// as its agent labels it: the scheduler allocates placements and the
// agent makes each instance at Prepare, so the planner counts what the
// node's instances leave free as free devices and never writes its
// nvidia.com/mig.config (its agent would refuse it).
func IsDynamic(n *corev1.Node) bool {
	return schedview.IsDRANode(n.Labels) && n.Labels[nodeinfo.LabelDRAMode] == nodeinfo.DRAModeDynamic
}

// HeldUntil is when the planner may change a node again whose
// nvidia.com/mig.config owner (a field manager) wrote at: the manual hold
// after an edit by anyone but the planner (o.FieldManager). held is false
// when the hold is over at o.Now, when the planner wrote it, when the
// writer is unknown, or when there is no hold (o.ManualHold not positive).
// kubectl migflex status says the same from this.
func (o Options) HeldUntil(owner string, at time.Time) (until time.Time, held bool) {
	if owner == "" || owner == o.FieldManager || o.ManualHold <= 0 {
		return time.Time{}, false
	}
	until = at.Add(o.ManualHold)
	return until, o.Now.Before(until)
}

// hasSource tells whether the node asks its agent for a layout, by the
// agent's own reading of its keys.
func hasSource(n *corev1.Node) bool { return len(nodeinfo.Sources(n.Labels, n.Annotations)) > 0 }

// inFlight finds the GPUs whose layout the node's mig.config changes, as
// the agent would plan it from their current layout, and shows them at
// that layout: a change written but not applied yet (the agent has not
// seen it, or is applying it) must count as done, or the next round would
// plan the same pods again elsewhere. Their cooldown starts now. A GPU
// whose change would destroy an instance in use stays as it is (the agent
// waits for the pod).
func (out *Node) inFlight(layout []nodeinfo.GPU, haveProfiles bool, now time.Time) {
	if !haveProfiles {
		return
	}
	gpus := make([]mig.GPU, 0, len(layout))
	for _, g := range layout {
		mg := mig.GPU{Index: g.Index, UUID: g.UUID, Model: g.Model, MigCapable: g.MigMode != nodeinfo.MigModeNA,
			MigEnabled: g.MigMode == nodeinfo.MigModeEnabled, MigPending: g.MigMode == nodeinfo.MigModeEnabled}
		if i := slices.IndexFunc(out.Models, func(m solver.Model) bool { return m.Name == g.Model }); i >= 0 {
			mg.Profiles = out.Models[i].Profiles
		}
		for i, in := range g.Instances {
			mg.Instances = append(mg.Instances, mig.Instance{Profile: in.Profile, Start: in.Placement.Start, Size: in.Placement.Size,
				GIID: cmp.Or(in.GI, uint32(1000+i)), HasCI: in.UUID != "", UUID: in.UUID})
		}
		gpus = append(gpus, mg)
	}
	spec, err := migconfig.Parse([]byte(out.Config))
	if err != nil {
		out.Warnings = append(out.Warnings, fmt.Sprintf("%s: %v", nodeinfo.AnnotationMigConfig, err))
		return
	}
	cfg, err := spec.Select("")
	if err != nil {
		out.Warnings = append(out.Warnings, fmt.Sprintf("%s: %v", nodeinfo.AnnotationMigConfig, err))
		return
	}
	v, err := migconfig.ValidateFor(cfg, gpus, migconfig.ScopeNode)
	if err != nil {
		out.Warnings = append(out.Warnings, fmt.Sprintf("%s: %v", nodeinfo.AnnotationMigConfig, err))
		return
	}
	plan, err := migconfig.MakePlan(gpus, v.Desired)
	if err != nil {
		out.Warnings = append(out.Warnings, fmt.Sprintf("%s: %v", nodeinfo.AnnotationMigConfig, err))
		return
	}
	for _, p := range plan.GPUs {
		if !p.Changed() {
			continue
		}
		gi := slices.IndexFunc(out.GPUs, func(g solver.GPU) bool { return g.Index == p.GPU })
		if gi < 0 {
			continue
		}
		g := &out.GPUs[gi]
		if slices.ContainsFunc(p.Destroy, func(d mig.Instance) bool { return instanceInUse(*g, d.Profile, d.Start) }) ||
			(p.Mode != migconfig.ModeUnchanged && (g.InUse || slices.ContainsFunc(g.Instances, func(in solver.Instance) bool { return in.InUse }))) {
			continue
		}
		next := solver.GPU{Index: g.Index, Model: g.Model, LastChanged: now,
			MigEnabled: p.Mode == migconfig.ModeEnable || (p.Mode == migconfig.ModeUnchanged && g.MigEnabled)}
		for _, pl := range p.After() {
			next.Instances = append(next.Instances, solver.Instance{Profile: pl.Profile, Start: pl.Start, InUse: instanceInUse(*g, pl.Profile, pl.Start)})
		}
		*g = next
		out.InFlight = append(out.InFlight, p.GPU)
	}
}

func instanceInUse(g solver.GPU, profile string, start int) bool {
	return slices.ContainsFunc(g.Instances, func(in solver.Instance) bool {
		return in.InUse && in.Profile == profile && in.Start == start
	})
}

// AnnotationOwner is the field manager that owns the annotation key on
// the Node and when it last changed its fields, from managedFields.
func AnnotationOwner(n *corev1.Node, key string) (string, time.Time) {
	want := "f:" + key
	for _, mf := range n.ManagedFields {
		if mf.FieldsV1 == nil || mf.Subresource != "" {
			continue
		}
		var fields struct {
			Metadata struct {
				Annotations map[string]json.RawMessage `json:"f:annotations"`
			} `json:"f:metadata"`
		}
		if json.Unmarshal(mf.FieldsV1.GetRawBytes(), &fields) != nil {
			continue
		}
		if _, ok := fields.Metadata.Annotations[want]; ok {
			var at time.Time
			if mf.Time != nil {
				at = mf.Time.Time
			}
			return mf.Manager, at
		}
	}
	return "", time.Time{}
}

// clip bounds a reason quoted in another message.
func clip(s string) string {
	const maxLen = 200
	if len(s) <= maxLen {
		return s
	}
	return textcut.Prefix(s, maxLen) + "..."
}

// GPUUsers are the pods holding devices of GPU index on the node, sorted.
func (n *Node) GPUUsers(index int) []string {
	var out []string
	for _, g := range n.Layout {
		if g.Index != index {
			continue
		}
		out = append(out, g.UsedBy...)
		for _, in := range g.Instances {
			out = append(out, in.UsedBy...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// AllUsers yields every pod holding a device of the node, a pod once per
// device it holds, without the copies Users makes.
func (n *Node) AllUsers() iter.Seq[string] {
	return func(yield func(string) bool) {
		for _, g := range n.Layout {
			for _, u := range g.UsedBy {
				if !yield(u) {
					return
				}
			}
			for _, in := range g.Instances {
				for _, u := range in.UsedBy {
					if !yield(u) {
						return
					}
				}
			}
		}
	}
}

// Users are every pod holding a device of the node.
func (n *Node) Users() []string {
	out := slices.Collect(n.AllUsers())
	slices.Sort(out)
	return slices.Compact(out)
}

// MergeModels gathers the nodes' profile tables, and sees that each node is
// planned with the table its own agent published. A model's table is the
// one most nodes publish (ties: the first node by name). Nodes publishing
// another table under that name, as during a rolling driver upgrade that
// adds profiles, keep theirs: their GPUs of that model are renamed, in
// nodes, to "MODEL (table N)", the name that table is returned under, and
// a warning names them. The planner then never plans a node with a table
// its agent would refuse.
func MergeModels(nodes []Node) ([]solver.Model, []string) {
	type variant struct {
		model solver.Model
		nodes []int // indices into nodes, in name order
	}
	order := make([]int, len(nodes))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(nodes[a].Name, nodes[b].Name) })
	byName := map[string][]*variant{}
	var names []string
	for _, i := range order {
		for _, m := range nodes[i].Models {
			vs := byName[m.Name]
			if vs == nil {
				names = append(names, m.Name)
			}
			k := slices.IndexFunc(vs, func(v *variant) bool { return profilesEqual(v.model.Profiles, m.Profiles) })
			if k < 0 {
				vs = append(vs, &variant{model: m})
				k = len(vs) - 1
				byName[m.Name] = vs
			}
			vs[k].nodes = append(vs[k].nodes, i)
		}
	}
	var out []solver.Model
	var warnings []string
	for _, name := range names {
		vs := byName[name]
		// Most nodes first; a stable sort keeps the first publisher's
		// order among equals.
		slices.SortStableFunc(vs, func(a, b *variant) int { return cmp.Compare(len(b.nodes), len(a.nodes)) })
		out = append(out, vs[0].model)
		for k, v := range vs[1:] {
			alias := fmt.Sprintf("%s (table %d)", name, k+2)
			m := v.model
			m.Name = alias
			out = append(out, m)
			var who []string
			for _, i := range v.nodes {
				who = append(who, nodes[i].Name)
				gpus := slices.Clone(nodes[i].GPUs)
				for g := range gpus {
					if gpus[g].Model == name {
						gpus[g].Model = alias
					}
				}
				nodes[i].GPUs = gpus
			}
			warnings = append(warnings, fmt.Sprintf("node(s) %s publish another profile table for %s than %d other node(s); they are planned with their own, as %q",
				strings.Join(who, ", "), name, len(vs[0].nodes), alias))
		}
	}
	return out, warnings
}

func profilesEqual(a, b []mig.Profile) bool {
	return slices.EqualFunc(a, b, func(x, y mig.Profile) bool {
		return x.Name == y.Name && x.Slices == y.Slices && x.MemorySlices == y.MemorySlices && x.MaxCount == y.MaxCount &&
			slices.Equal(x.Placements, y.Placements) && x.Engines == y.Engines
	})
}

// ManagedTime is a helper for tests and callers that build Nodes: the
// managedFields entry of manager owning annotation key at t.
func ManagedTime(manager, key string, t time.Time) metav1.ManagedFieldsEntry {
	raw, _ := json.Marshal(map[string]any{"f:metadata": map[string]any{"f:annotations": map[string]any{"f:" + key: map[string]any{}}}})
	mt := metav1.NewTime(t)
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1", Time: &mt,
		FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(string(raw))}
}

// HoldRecentChange holds every GPU of a node whose nvidia.com/mig.config
// the planner (fieldManager) wrote less than cooldown ago, as if each had
// changed then: whoever does not know which GPUs that write changed (a
// new leader, the webhook) may over-protect but never under-protects.
func HoldRecentChange(v *Node, fieldManager string, cooldown time.Duration, now time.Time) {
	if v.ConfigOwner != fieldManager || v.ConfigTime.IsZero() || now.Sub(v.ConfigTime) >= cooldown {
		return
	}
	// A copy: the view's GPUs may be shared with the cache's (Reuse).
	v.GPUs = slices.Clone(v.GPUs)
	for i := range v.GPUs {
		if v.GPUs[i].LastChanged.Before(v.ConfigTime) {
			v.GPUs[i].LastChanged = v.ConfigTime
		}
	}
}
