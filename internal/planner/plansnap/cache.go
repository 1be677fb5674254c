package plansnap

import (
	"bytes"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/planner/solver"
)

// Cache keeps the decoded layout and profiles annotations of each Node
// from one reading of the fleet to the next: a round reads every Node,
// and at thousands of them decoding the same JSON again was most of its
// time and garbage. An entry is used while the annotation's text is the
// same (an informer hands the same string back while the Node does not
// change, which compares at once). What it returns is shared: callers
// must not change it.
//
// With Options.Reuse it keeps each Node's view too, and hands it back
// while the Node's resourceVersion, labels, annotations, taints, cordon,
// allocatable and managedFields are the same as those it was read from
// (compared, not trusted to the resourceVersion: a fake or a test may
// leave it unset) and the reading's options and manual hold agree. A
// view that depends on more than the Node is read again each time: one
// with a layout in flight (its GPUs' cooldown starts at Options.Now), a
// dynamic node's with Options.Pools (its claims).
//
// Entries of Nodes not read since the last Sweep but one are dropped.
type Cache struct {
	mu        sync.Mutex
	cur, prev map[string]*decoded
	// tables are the profile tables decoded, by text, swept as cur and
	// prev are: every node of a model publishes the same table, so a
	// fleet keeps one per model, not one per Node.
	tables, prevTables map[string]*table
}

// table is a profile table's text decoded.
type table struct {
	models []solver.Model
	err    error
}

type decoded struct {
	layoutRaw string
	layout    []nodeinfo.GPU
	layoutErr error
	hasLayout bool
	// kept is the Node's last view and what it was read from (Reuse).
	kept *keptView
}

// keptView is a view and what it was read from.
type keptView struct {
	node         *corev1.Node
	fieldManager string
	manualHold   time.Duration
	held         bool
	view         Node
}

// reuse is the view kept for n, when it was read from the same inputs.
func (d *decoded) reuse(n *corev1.Node, o Options) (Node, bool) {
	k := d.kept
	if k == nil || k.fieldManager != o.FieldManager || k.manualHold != o.ManualHold || !sameInputs(k.node, n) {
		return Node{}, false
	}
	if k.view.Dynamic && o.Pools != nil {
		// Kept from a reading without its pool: read it with it.
		return Node{}, false
	}
	if _, held := o.HeldUntil(k.view.ConfigOwner, k.view.ConfigTime); held != k.held {
		return Node{}, false
	}
	// The view reads n itself (labels, the scheduling view's API): point
	// it at the Node handed over, so that the one it was read from can go.
	k.node, k.view.API, k.view.Labels = n, n, n.Labels
	return k.view, true
}

// keep keeps v, n's view, if it depends on nothing but n and o's fields
// that reuse compares.
func (d *decoded) keep(n *corev1.Node, o Options, v Node) {
	d.kept = nil
	if len(v.InFlight) > 0 || (v.Dynamic && o.Pools != nil) {
		return
	}
	_, held := o.HeldUntil(v.ConfigOwner, v.ConfigTime)
	d.kept = &keptView{node: n, fieldManager: o.FieldManager, manualHold: o.ManualHold, held: held, view: v}
}

// sameInputs tells whether a and b are the same to FromAPI: what it reads
// of a Node.
func sameInputs(a, b *corev1.Node) bool {
	return a.Name == b.Name && a.ResourceVersion == b.ResourceVersion && a.Spec.Unschedulable == b.Spec.Unschedulable &&
		maps.Equal(a.Labels, b.Labels) && maps.Equal(a.Annotations, b.Annotations) &&
		slices.EqualFunc(a.Spec.Taints, b.Spec.Taints, func(x, y corev1.Taint) bool {
			return x.Key == y.Key && x.Value == y.Value && x.Effect == y.Effect && timeEqual(x.TimeAdded, y.TimeAdded)
		}) &&
		maps.EqualFunc(a.Status.Allocatable, b.Status.Allocatable, func(x, y resource.Quantity) bool { return x.Cmp(y) == 0 }) &&
		slices.EqualFunc(a.ManagedFields, b.ManagedFields, func(x, y metav1.ManagedFieldsEntry) bool {
			return x.Manager == y.Manager && x.Operation == y.Operation && x.APIVersion == y.APIVersion && x.Subresource == y.Subresource &&
				x.FieldsType == y.FieldsType && timeEqual(x.Time, y.Time) && (x.FieldsV1 == nil) == (y.FieldsV1 == nil) &&
				(x.FieldsV1 == nil || bytes.Equal(x.FieldsV1.GetRawBytes(), y.FieldsV1.GetRawBytes()))
		})
}

func timeEqual(a, b *metav1.Time) bool {
	return (a == nil) == (b == nil) && (a == nil || a.Equal(b))
}

// NewCache returns an empty cache.
func NewCache() *Cache {
	return &Cache{cur: map[string]*decoded{}, prev: map[string]*decoded{}, tables: map[string]*table{}, prevTables: map[string]*table{}}
}

// Sweep starts a new reading of the fleet: entries not read since the
// previous Sweep are dropped.
func (c *Cache) Sweep() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.prev, c.cur = c.cur, make(map[string]*decoded, len(c.cur))
	c.prevTables, c.tables = c.tables, make(map[string]*table, len(c.tables))
}

func (c *Cache) entry(node string) *decoded {
	if c == nil {
		return &decoded{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.cur[node]
	if d == nil {
		d = c.prev[node]
		if d == nil {
			d = &decoded{}
		}
		c.cur[node] = d
	}
	return d
}

// decodeLayout decodes raw (as the agent wrote it, or packed by the
// caller's Node cache: nodeinfo.ParseLayout), or returns what it decoded
// from the same text.
func (d *decoded) decodeLayout(raw string) ([]nodeinfo.GPU, error) {
	if d.hasLayout && d.layoutRaw == raw {
		return d.layout, d.layoutErr
	}
	l, err := nodeinfo.ParseLayout(raw)
	d.layoutRaw, d.layout, d.layoutErr, d.hasLayout = raw, l, err, true
	return l, err
}

// profiles decodes raw into planner models, or returns what it decoded
// from the same text for any Node.
func (c *Cache) profiles(raw string) ([]solver.Model, error) {
	if c == nil {
		return decodeProfiles(raw)
	}
	c.mu.Lock()
	t := c.tables[raw]
	if t == nil {
		t = c.prevTables[raw]
		if t != nil {
			c.tables[raw] = t
		}
	}
	c.mu.Unlock()
	if t != nil {
		return t.models, t.err
	}
	models, err := decodeProfiles(raw)
	c.mu.Lock()
	c.tables[raw] = &table{models: models, err: err}
	c.mu.Unlock()
	return models, err
}

func decodeProfiles(raw string) ([]solver.Model, error) {
	models, err := nodeinfo.ParseProfiles(raw)
	var out []solver.Model
	for _, m := range models {
		out = append(out, solver.Model{Name: m.Name, Profiles: m.MIGProfiles()})
	}
	return out, err
}
