package webhook

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/planner/plansnap"
	"github.com/migflex/migflex/internal/planner/solver"
	"github.com/migflex/migflex/internal/webhook/fallback"
)

// AnnotationReshape records on a pod that the webhook left its GPU request
// as asked because the planner can reshape a node for it (reshape-first).
const AnnotationReshape = "migflex.io/reshape"

// ReshapeExpected is AnnotationReshape's value.
const ReshapeExpected = "expected"

// Reshaper says whether the planner could serve a pod as it is: from free
// devices that exist, or by reshaping free capacity of an opted-in node
// without touching an instance in use. ok is false until it can answer.
type Reshaper interface {
	CanSupply(pod *corev1.Pod) (plan solver.PodPlan, ok bool)
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
	mu      sync.Mutex
	nodes   map[string]*corev1.Node
	dirty   bool
	built   time.Time
	sup     *solver.Supplier
	pl      *solver.Planner
	refresh time.Duration
	opts    plansnap.Options
	// cooldown is the planner's (see NewReshapeView).
	cooldown time.Duration
	// decoded keeps the Nodes' decoded annotations between rebuilds.
	decoded *plansnap.Cache
	now     func() time.Time
	synced  func() bool
	// classes are the DeviceClasses of our DRA driver: a pod asking for
	// a resource none serves cannot use a DRA node.
	classes func() *schedview.DRAClasses
}

// NewReshapeView returns an empty view; fieldManager, manualHold and
// cooldown are the planner's: a node a human just changed is not counted
// on, nor the GPUs of a node the planner changed less than cooldown ago
// (the planner will not change them again before it ends, so a pod left
// for it would wait where a fallback runs at once). The webhook does not
// know which GPUs that change was for, so it holds them all, as a new
// leader of the planner does.
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
		nodes: map[string]*corev1.Node{}, pl: pl, refresh: refresh, now: time.Now,
		opts: plansnap.Options{FieldManager: fieldManager, ManualHold: manualHold}, cooldown: cooldown,
		decoded: plansnap.NewCache(),
	}, nil
}

// SetNode records a Node (as TransformNode keeps it in reshape mode).
func (v *ReshapeView) SetNode(n *corev1.Node) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.nodes[n.Name] = n
	v.dirty = true
}

// DeleteNode forgets a Node.
func (v *ReshapeView) DeleteNode(name string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.nodes, name)
	v.dirty = true
}

// CanSupply implements Reshaper.
func (v *ReshapeView) CanSupply(pod *corev1.Pod) (solver.PodPlan, bool) {
	sup := v.supplier()
	if sup == nil {
		return solver.PodPlan{}, false
	}
	if v.classes != nil {
		// The webhook sees a pod before its claims exist; only its
		// extended resources are read (ClaimDemand empty).
		pod = v.classes().AsScheduled(pod, schedview.ClaimDemand{})
	}
	return sup.CanSupply(pod), true
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
	if v.sup != nil && (!v.dirty || age < v.refresh) && age < reshapeMaxAge {
		return v.sup
	}
	o := v.opts
	o.Now, o.Cache = now, v.decoded
	v.decoded.Sweep()
	snap := solver.Snapshot{Now: now}
	views := make([]plansnap.Node, 0, len(v.nodes))
	for _, n := range v.nodes {
		nv := plansnap.FromAPI(n, o)
		plansnap.HoldRecentChange(&nv, o.FieldManager, v.cooldown, now)
		views = append(views, nv)
	}
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
	return sup
}

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
// records why: AnnotationReshape, with the node the planner would use.
func reshapePatch(pod *corev1.Pod) []fallback.Operation {
	if len(pod.Annotations) == 0 {
		return []fallback.Operation{{Op: "add", Path: "/metadata/annotations", Value: map[string]string{AnnotationReshape: ReshapeExpected}}}
	}
	return []fallback.Operation{{Op: "add", Path: "/metadata/annotations/" + fallback.EscapePointer(AnnotationReshape), Value: ReshapeExpected}}
}

// reshapeWarning tells the user why the request was not rewritten.
func reshapeWarning(d fallback.Decision, plan solver.PodPlan) string {
	var asked []string
	for _, dev := range plan.Devices {
		if !slices.Contains(asked, string(dev.Resource)) {
			asked = append(asked, string(dev.Resource))
		}
	}
	slices.Sort(asked)
	how := "free devices exist"
	if plan.Action == solver.ActionReshape {
		how = "the planner can reshape free capacity for it"
	}
	instead := "been admitted with no GPU type fitting it"
	if len(d.Rewrites) > 0 {
		instead = "become " + rewriteList(d.Rewrites)
	}
	return fmt.Sprintf("migflex GPU webhook: the GPU request %s left as asked: %s on node %s (%s=%s); without the planner it would have %s",
		strings.Join(asked, ", "), how, plan.Node, AnnotationReshape, ReshapeExpected, instead)
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
