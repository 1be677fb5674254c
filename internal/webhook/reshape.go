package webhook

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/planner/plansnap"
	"github.com/migflex/migflex/internal/planner/solver"
	"github.com/migflex/migflex/internal/platform/intern"
	"github.com/migflex/migflex/internal/webhook/fallback"
)

// AnnotationReshape records on a pod that the webhook left its GPU request
// as asked because the planner can reshape a node for it (reshape-first).
const AnnotationReshape = "migflex.io/reshape"

// ReshapeExpected is AnnotationReshape's value.
const ReshapeExpected = "expected"

// Reshaper gives the planner's word on pods (fallback.Planner): whether
// it could serve a pod with a need, from free devices that exist, or by
// reshaping free capacity of an opted-in node without touching an
// instance in use. ok is false until it can answer.
type Reshaper interface {
	Planner() (p fallback.Planner, ok bool)
}

// Defaults of ReshapeView.
const (
	// DefaultReshapeRefresh is how stale the reshape view may be when
	// Nodes changed: it is rebuilt (the planner indexes every node) at
	// most this often.
	DefaultReshapeRefresh = time.Second
	// reshapeMaxAge rebuilds an unchanged view anyway, for what changes
	// with time alone (a human's hold on a node ends, a cooldown ends).
	reshapeMaxAge = 10 * time.Second
)

// ReshapeView answers Reshaper from the webhook's Node informer, with the
// planner's own reading of the Nodes (internal/planner/plansnap) and its pure
// Supplier: the same function the planner runs, on the webhook's cache.
type ReshapeView struct {
	mu    sync.Mutex
	nodes map[string]*corev1.Node
	// writes are the planner's writes of each node's
	// nvidia.com/mig.config, as seen (noteWrite).
	writes map[string]*plannerWrites
	dirty  bool
	built  time.Time
	sup    *solver.Supplier
	// maxAge is reshapeMaxAge; drop lets go of a Supplier that old
	// (dropOld).
	maxAge  time.Duration
	drop    *time.Timer
	pl      *solver.Planner
	refresh time.Duration
	opts    plansnap.Options
	// cooldown is the planner's (see NewReshapeView).
	cooldown time.Duration
	// read keeps each Node as the planner reads it (viewNode) from one
	// rebuild to the next while the Node stays the same; models shares
	// the decoded profile tables among them, by annotation text.
	read   map[string]*viewNode
	models map[string][]solver.Model
	// shapes shares equal GPU lists among nodes (shareGPUs).
	shapes map[string][]solver.GPU
	now    func() time.Time
	synced func() bool
	// classes are the DeviceClasses of our DRA driver: a pod asking for
	// a resource none serves cannot use a DRA node.
	classes func() *schedview.DRAClasses
	// pools reads a DRA node's pool, for a dynamic node's placements
	// allocated and not prepared yet (plansnap.Options.Pools); nil: not
	// read.
	pools func(node string) *schedview.Pool
}

// NewReshapeView returns an empty view; fieldManager, manualHold and
// cooldown are the planner's: a node a human just changed is not counted
// on, nor the GPUs the planner changed less than cooldown ago (the planner
// will not change them again before it ends, so a pod left for it would
// wait where a fallback runs at once). Which GPUs a write of the planner
// changed the view sees while the write is in flight (noteWrite); of a
// write it did not see so, it holds every GPU of the node, as a new leader
// of the planner does.
func NewReshapeView(fieldManager string, manualHold, cooldown, refresh time.Duration) (*ReshapeView, error) {
	pol := solver.DefaultPolicy()
	pol.Cooldown = cooldown
	pl, err := solver.New(pol)
	if err != nil {
		return nil, err
	}
	if refresh <= 0 {
		refresh = DefaultReshapeRefresh
	}
	return &ReshapeView{
		nodes: map[string]*corev1.Node{}, writes: map[string]*plannerWrites{}, pl: pl, refresh: refresh, now: time.Now, maxAge: reshapeMaxAge,
		opts: plansnap.Options{FieldManager: fieldManager, ManualHold: manualHold}, cooldown: cooldown,
		read: map[string]*viewNode{}, models: map[string][]solver.Model{}, shapes: map[string][]solver.GPU{},
	}, nil
}

// SetNode records a Node (as TransformNode keeps it in reshape mode).
func (v *ReshapeView) SetNode(n *corev1.Node) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.noteWrite(n)
	v.nodes[n.Name] = n
	delete(v.read, n.Name)
	v.dirty = true
}

// DeleteNode forgets a Node.
func (v *ReshapeView) DeleteNode(name string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.nodes, name)
	delete(v.writes, name)
	delete(v.read, name)
	v.dirty = true
}

// plannerWrites are the planner's recent writes of one node's
// nvidia.com/mig.config: the GPUs each changed, when the view saw it in
// flight, and the last it could not tell that of.
type plannerWrites struct {
	// config and at are the node's nvidia.com/mig.config last seen and
	// the time its manager last set it.
	config string
	at     time.Time
	// gpus is when the planner last changed each GPU, of writes seen in
	// flight; all is the last write whose GPUs are unknown.
	gpus map[int]time.Time
	all  time.Time
}

// noteWrite records a new nvidia.com/mig.config of the planner's: the
// GPUs whose layout it changes from the one the agent reports, read as the
// planner reads it (plansnap's in-flight GPUs), when the view saw the node
// before the write, and so the node as the write found it (an informer
// delivers a Node's versions in order). Of a node first seen with a write,
// or a write that changes no GPU the view can tell, every GPU is held.
func (v *ReshapeView) noteWrite(n *corev1.Node) {
	config := n.Annotations[nodeinfo.AnnotationMigConfig]
	owner, at := plansnap.AnnotationOwner(n, nodeinfo.AnnotationMigConfig)
	w, seen := v.writes[n.Name]
	if seen && w.config == config && w.at.Equal(at) {
		return
	}
	if !seen {
		w = &plannerWrites{}
		v.writes[n.Name] = w
	}
	w.config, w.at = config, at
	if owner != v.opts.FieldManager || at.IsZero() || config == "" {
		return
	}
	var changed []int
	if seen {
		o := v.opts
		o.Now = at
		changed = plansnap.FromAPI(n, o).InFlight
	}
	if len(changed) == 0 {
		w.all = at
		return
	}
	if w.gpus == nil {
		w.gpus = map[int]time.Time{}
	}
	for _, g := range changed {
		w.gpus[g] = at
	}
}

// hold starts the cooldown of the GPUs of nv the planner changed less
// than cooldown before now, and forgets older writes.
func (w *plannerWrites) hold(nv *plansnap.Node, cooldown time.Duration, now time.Time) {
	recent := func(t time.Time) bool { return !t.IsZero() && now.Sub(t) < cooldown }
	if !recent(w.all) {
		w.all = time.Time{}
	}
	for g, t := range w.gpus {
		if !recent(t) {
			delete(w.gpus, g)
		}
	}
	if w.all.IsZero() && len(w.gpus) == 0 {
		return
	}
	// nv's GPUs may be shared with the view's reading of the node.
	nv.GPUs = slices.Clone(nv.GPUs)
	for i := range nv.GPUs {
		g := &nv.GPUs[i]
		t := w.all
		if at, ok := w.gpus[g.Index]; ok && at.After(t) {
			t = at
		}
		if !t.IsZero() && g.LastChanged.Before(t) {
			g.LastChanged = t
		}
	}
}

// Planner implements Reshaper.
func (v *ReshapeView) Planner() (fallback.Planner, bool) {
	sup := v.supplier()
	if sup == nil {
		return nil, false
	}
	var classes *schedview.DRAClasses
	if v.classes != nil {
		classes = v.classes()
	}
	return supplied{sup: sup, classes: classes}, true
}

// CanSupply is the planner's answer on pod as it is; ok is false until it
// can answer.
func (v *ReshapeView) CanSupply(pod *corev1.Pod) (solver.PodPlan, bool) {
	p, ok := v.Planner()
	if !ok {
		return solver.PodPlan{}, false
	}
	return p.(supplied).plan(pod), true
}

// supplied answers fallback.Planner from one Supplier.
type supplied struct {
	sup     *solver.Supplier
	classes *schedview.DRAClasses
}

// Serve implements fallback.Planner.
func (s supplied) Serve(pod *corev1.Pod, need map[corev1.ResourceName]int64) fallback.Served {
	plan := s.plan(withNeed(pod, need))
	return fallback.Served{
		Now: plan.Action != solver.ActionNone, Node: plan.Node, Reshape: plan.Action == solver.ActionReshape,
		Later: plan.Later, Reason: plan.Reason,
	}
}

func (s supplied) plan(pod *corev1.Pod) solver.PodPlan {
	if s.classes != nil {
		// The webhook sees a pod before its claims exist; only its
		// extended resources are read (ClaimDemand empty).
		pod = s.classes.AsScheduled(pod, schedview.ClaimDemand{})
	}
	return s.sup.CanSupply(pod)
}

// withNeed is pod asking for need in one container and nothing else: what
// the Supplier reads of it is where it may land and what it needs on one
// node. The pod's other fields are shared, not copied.
func withNeed(pod *corev1.Pod, need map[corev1.ResourceName]int64) *corev1.Pod {
	out := *pod
	l := make(corev1.ResourceList, len(need))
	for name, n := range need {
		l[name] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	out.Spec.Containers = []corev1.Container{{Name: "need", Resources: corev1.ResourceRequirements{Requests: l, Limits: l}}}
	out.Spec.InitContainers = nil
	return &out
}

// supplier is the current Supplier, rebuilt when the Nodes changed (at
// most every refresh) or it is old.
func (v *ReshapeView) supplier() *solver.Supplier {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.synced != nil && !v.synced() {
		return nil
	}
	now := v.now()
	age := now.Sub(v.built)
	if v.sup != nil && (!v.dirty || age < v.refresh) && age < v.maxAge {
		return v.sup
	}
	// The old Supplier is garbage from here (admissions in flight keep
	// what they hold), not only once the new one is built: the two
	// together were the view's peak.
	v.sup = nil
	o := v.opts
	o.Now, o.Pools = now, v.pools
	snap := solver.Snapshot{Now: now}
	views := make([]plansnap.Node, 0, len(v.nodes))
	models := make(map[string][]solver.Model, len(v.models))
	for name, n := range v.nodes {
		r := v.read[name]
		if !r.valid(now) {
			r = v.readNode(n, o)
			if r.keep {
				v.read[name] = r
			} else {
				delete(v.read, name)
			}
		}
		if r.profiles != "" {
			models[r.profiles] = r.nv.Models
		}
		nv := r.at(now)
		if w := v.writes[name]; w != nil {
			w.hold(&nv, v.cooldown, now)
		}
		views = append(views, nv)
	}
	// Tables no node publishes any more are forgotten.
	v.models = models
	snap.Models, _ = plansnap.MergeModels(views)
	for _, nv := range views {
		snap.Nodes = append(snap.Nodes, nv.Node)
	}
	sup, err := v.pl.NewSupplier(snap)
	if err != nil {
		// A malformed view (a node twice) cannot come from an informer;
		// without a supplier the webhook falls back as before.
		return nil
	}
	v.sup, v.built, v.dirty = sup, now, false
	if v.drop == nil {
		v.drop = time.AfterFunc(v.maxAge, v.dropOld)
	} else {
		v.drop.Reset(v.maxAge)
	}
	return sup
}

// dropOld lets go of a Supplier maxAge old: no admission uses it again
// (supplier builds a new one first), and a webhook at rest would hold it
// (the round's state of every GPU, about 10 MB at 5,000 Nodes) for
// nothing until the next admission that asks the planner. The readings
// stay: the next rebuild reads again only the Nodes that changed.
func (v *ReshapeView) dropOld() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.sup != nil && v.now().Sub(v.built) >= v.maxAge {
		v.sup = nil
	}
}

// viewNode is a Node as the planner reads it (plansnap.FromAPI), kept by
// the view from one rebuild to the next while the Node object stays the
// same (an informer replaces a Node's object on every change; SetNode
// drops the reading), so that a rebuild reads again only the Nodes that
// changed. It keeps no decoded layout: the layout and its devices' UUIDs
// and pods were most of the view's memory, and the Supplier reads only
// the GPUs and instances derived from them.
type viewNode struct {
	nv plansnap.Node
	// profiles is the profiles annotation's text, by which nv.Models is
	// shared with other nodes publishing the same table.
	profiles string
	// until is when the reading expires (a human's hold on the node ends);
	// zero: never.
	until time.Time
	// keep is false for a reading that depends on more than the Node (a
	// dynamic node's pool): it is read again at every rebuild.
	keep bool
}

// readNode reads n as the planner does at o.Now.
func (v *ReshapeView) readNode(n *corev1.Node, o plansnap.Options) *viewNode {
	r := &viewNode{nv: plansnap.FromAPI(n, o), profiles: n.Annotations[nodeinfo.AnnotationProfiles]}
	r.keep = !(r.nv.Dynamic && o.Pools != nil)
	if until, held := o.HeldUntil(r.nv.ConfigOwner, r.nv.ConfigTime); held {
		r.until = until
	}
	if r.profiles != "" {
		// Every node of a model publishes the same table: one decoded
		// copy serves them all (MergeModels compares them by value).
		if m, ok := v.models[r.profiles]; ok {
			r.nv.Models = m
		} else {
			v.models[r.profiles] = r.nv.Models
		}
	}
	// Nothing reads the layout, the warnings or (solver.Node says so)
	// the allocatable of a reading.
	r.nv.Layout, r.nv.Warnings, r.nv.Allocatable = nil, nil, nil
	r.nv.GPUs = v.shareGPUs(r.nv.GPUs)
	return r
}

// valid tells whether the reading still holds at now.
func (r *viewNode) valid(now time.Time) bool {
	return r != nil && r.keep && (r.until.IsZero() || now.Before(r.until))
}

// at is the reading as FromAPI would return it at now: the GPUs whose new
// layout is in flight are changed now, as far as the cooldown is
// concerned. Its GPUs are shared with r unless they change.
func (r *viewNode) at(now time.Time) plansnap.Node {
	nv := r.nv
	if len(nv.InFlight) == 0 {
		return nv
	}
	nv.GPUs = slices.Clone(nv.GPUs)
	for i := range nv.GPUs {
		if slices.Contains(nv.InFlight, nv.GPUs[i].Index) {
			nv.GPUs[i].LastChanged = now
		}
	}
	return nv
}

// maxShapes bounds the view's table of GPU shapes; past it the table
// starts again empty (sharing is lost for a while, nothing else).
const maxShapes = 4096

// shareGPUs returns gpus, or an equal slice the view already holds: most
// nodes of a fleet have the same GPUs with the same instances (one
// layout applied to many nodes), and the Supplier never changes a
// node's GPUs (the view clones them before changing one, see at and
// hold), so nodes with the same shape share one copy. A shape of its own
// is copied into two allocations of their exact size, with its names
// interned: as decoded, each GPU's instances were appended one by one
// (up to twice their size) and each name was a copy of the layout's
// text, kept as long as the view keeps the node.
func (v *ReshapeView) shareGPUs(gpus []solver.GPU) []solver.GPU {
	if len(gpus) == 0 {
		return gpus
	}
	key, ok := shapeKey(gpus)
	if ok {
		if shared, found := v.shapes[key]; found {
			return shared
		}
	}
	total := 0
	for _, g := range gpus {
		total += len(g.Instances)
	}
	out := make([]solver.GPU, len(gpus))
	ins := make([]solver.Instance, 0, total)
	for i, g := range gpus {
		g.Model = intern.Weak(g.Model)
		if g.Instances != nil {
			start := len(ins)
			for _, in := range g.Instances {
				in.Profile = intern.Weak(in.Profile)
				ins = append(ins, in)
			}
			g.Instances = ins[start:len(ins):len(ins)]
		}
		out[i] = g
	}
	if ok {
		if len(v.shapes) >= maxShapes {
			clear(v.shapes)
		}
		v.shapes[key] = out
	}
	return out
}

// shapeKey is a text that is the same for two GPU lists exactly when they
// are equal, for those that carry no time or reservation (a reading of
// the agent's layout); ok is false for others.
func shapeKey(gpus []solver.GPU) (string, bool) {
	var b strings.Builder
	flag := func(x bool) byte {
		if x {
			return '1'
		}
		return '0'
	}
	for _, g := range gpus {
		if !g.LastChanged.IsZero() || g.Run != nil || g.Reserved {
			return "", false
		}
		b.WriteString(strconv.Itoa(g.Index))
		b.WriteByte(0)
		b.WriteString(g.Model)
		b.WriteByte(0)
		b.WriteByte(flag(g.MigEnabled))
		b.WriteByte(flag(g.InUse))
		b.WriteByte(flag(g.Instances == nil))
		for _, in := range g.Instances {
			if in.Run != nil {
				return "", false
			}
			b.WriteString(in.Profile)
			b.WriteByte(0)
			b.WriteString(strconv.Itoa(in.Start))
			b.WriteByte(flag(in.InUse))
		}
		b.WriteByte(1)
	}
	return b.String(), true
}

// profileTables keeps one copy of each profile table's text the reshape
// cache holds (see intern: unique.Make alone keeps one per collection).
var profileTables = intern.New(64)

// reshapeNode keeps, besides what TransformNode keeps, what the planner
// reads of a Node: the agent's report (layout, profiles, state and
// reason), its nvidia.com/mig.config, and the managed field that says who
// last wrote it.
func reshapeNode(full, slim *corev1.Node) {
	keep := []string{nodeinfo.AnnotationLayout, nodeinfo.AnnotationProfiles, nodeinfo.AnnotationMigConfig, nodeinfo.AnnotationReason}
	for _, k := range keep {
		if v, ok := full.Annotations[k]; ok {
			if slim.Annotations == nil {
				slim.Annotations = map[string]string{}
			}
			// The profile table is the same text on every node of a
			// model; the layout names the node's own devices, so
			// interning it would only fill the intern table.
			switch k {
			case nodeinfo.AnnotationProfiles:
				v = profileTables.String(v)
			case nodeinfo.AnnotationLayout:
				// Read only by the reshape view, whose
				// nodeinfo.ParseLayout unpacks it.
				v = nodeinfo.PackLayout(v)
			}
			slim.Annotations[k] = v
		}
	}
	want := `"f:` + nodeinfo.AnnotationMigConfig + `"`
	for _, mf := range full.ManagedFields {
		if mf.FieldsV1 != nil && mf.Subresource == "" && strings.Contains(mf.FieldsV1.GetRawString(), want) {
			slim.ManagedFields = append(slim.ManagedFields, mf)
		}
	}
}

// reshapePatch is the patch that leaves the pod's request as asked and
// records why: AnnotationReshape.
func reshapePatch(pod *corev1.Pod) []fallback.Operation {
	if len(pod.Annotations) == 0 {
		return []fallback.Operation{{Op: "add", Path: "/metadata/annotations", Value: map[string]string{AnnotationReshape: ReshapeExpected}}}
	}
	return []fallback.Operation{reshapeOp()}
}

// reshapeOp adds AnnotationReshape to annotations that exist.
func reshapeOp() fallback.Operation {
	return fallback.Operation{Op: "add", Path: "/metadata/annotations/" + fallback.EscapePointer(AnnotationReshape), Value: ReshapeExpected}
}

// reshapeWarning tells the user what the planner will serve, and what the
// pod would have become without it (alone, the decision without the
// planner's word).
func reshapeWarning(pod *corev1.Pod, d, alone fallback.Decision) string {
	how := "free devices exist"
	if d.Planned.Reshape {
		how = "the planner can reshape free capacity for it"
	}
	instead := "been admitted with no GPU type fitting it"
	switch {
	case len(alone.Rewrites) > 0:
		instead = "become " + rewriteList(alone.Rewrites)
	case alone.Outcome == fallback.OutcomeDenied:
		instead = "been denied"
	case alone.Outcome != fallback.OutcomeUnsatisfiable:
		instead = "stayed as asked, waiting for a device to free"
	}
	what := "left as asked"
	if len(d.Rewrites) > 0 {
		what = "rewritten (" + rewriteList(d.Rewrites) + ")"
	}
	return fmt.Sprintf("migflex GPU webhook: the GPU request %s %s: %s on node %s (%s=%s); without the planner it would have %s",
		strings.Join(asked(pod, d), ", "), what, how, d.Planned.Node, AnnotationReshape, ReshapeExpected, instead)
}

// asked lists, sorted, the GPU types the warning is about: those the
// decision rewrote, or, left as asked, all the pod asks for.
func asked(pod *corev1.Pod, d fallback.Decision) []string {
	var out []string
	for _, rw := range d.Rewrites {
		if !slices.Contains(out, string(rw.From)) {
			out = append(out, string(rw.From))
		}
	}
	if len(out) == 0 {
		for r := range schedview.Devices(pod) {
			out = append(out, string(r))
		}
	}
	slices.Sort(out)
	return out
}

func rewriteList(rws []fallback.Rewrite) string {
	parts := make([]string, len(rws))
	for i, rw := range rws {
		parts[i] = rw.Label()
	}
	return strings.Join(parts, ", ")
}

// hasReshapeAnnotation tells whether the pod was already left alone for
// the planner (a reinvocation of the webhook).
func hasReshapeAnnotation(pod *corev1.Pod) bool {
	return pod.Annotations[AnnotationReshape] == ReshapeExpected
}
