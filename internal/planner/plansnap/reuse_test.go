package plansnap

import (
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/testsupport/draslices"
)

// With Reuse, a Node read again is handed its previous view while what
// the view was read from is the same, and read again when any of it
// changed; either way the view is what a fresh reading gives.
func TestReuse(t *testing.T) {
	base := func() *corev1.Node {
		n := apiNode([]nodeinfo.GPU{gpu(0, "3g.40gb@0=ns/a"), gpu(1)}, withOwner("someone", now.Add(-5*time.Minute)))
		n.ResourceVersion = "7"
		n.Status.Allocatable = corev1.ResourceList{"nvidia.com/mig-3g.40gb": resource.MustParse("1")}
		return n
	}
	opts := Options{FieldManager: manager, ManualHold: 10 * time.Minute, Now: now, Reuse: true}
	for _, tc := range []struct {
		name string
		// next is the Node the second reading gets, from a copy of the
		// first (nil: the same object), read at the options later gives.
		next   func(*corev1.Node)
		later  func(*Options)
		reused bool
	}{
		{name: "the same object", reused: true},
		{name: "an equal copy", next: func(*corev1.Node) {}, reused: true},
		{name: "the time moves within the hold", next: func(*corev1.Node) {}, later: func(o *Options) { o.Now = now.Add(time.Minute) }, reused: true},
		{name: "the hold ends", later: func(o *Options) { o.Now = now.Add(6 * time.Minute) }},
		{name: "another manual hold", later: func(o *Options) { o.ManualHold = time.Minute }},
		{name: "another field manager", later: func(o *Options) { o.FieldManager = "someone" }},
		{name: "no reuse asked", later: func(o *Options) { o.Reuse = false }},
		{name: "a new resourceVersion", next: func(n *corev1.Node) { n.ResourceVersion = "8" }},
		{name: "a new layout, same resourceVersion", next: func(n *corev1.Node) {
			n.Annotations[nodeinfo.AnnotationLayout] = apiNode([]nodeinfo.GPU{gpu(0), gpu(1)}).Annotations[nodeinfo.AnnotationLayout]
		}},
		{name: "an annotation removed", next: func(n *corev1.Node) { delete(n.Annotations, nodeinfo.AnnotationProfiles) }},
		{name: "opted out", next: func(n *corev1.Node) { n.Labels[nodeinfo.LabelPlanner] = "false" }},
		{name: "agent pending", next: func(n *corev1.Node) { n.Labels[nodeinfo.LabelMigConfigState] = nodeinfo.StatePending }},
		{name: "cordoned", next: func(n *corev1.Node) { n.Spec.Unschedulable = true }},
		{name: "tainted", next: func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "k", Effect: corev1.TaintEffectNoSchedule})
		}},
		{name: "allocatable changed", next: func(n *corev1.Node) {
			n.Status.Allocatable["nvidia.com/mig-3g.40gb"] = resource.MustParse("2")
		}},
		{name: "mig.config owner changed", next: func(n *corev1.Node) {
			n.ManagedFields = []metav1.ManagedFieldsEntry{ManagedTime(manager, nodeinfo.AnnotationMigConfig, now)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCache()
			first := base()
			o := opts
			o.Cache = c
			a := FromAPI(first, o)
			n := first
			if tc.next != nil {
				n = first.DeepCopy()
				tc.next(n)
			}
			if tc.later != nil {
				tc.later(&o)
			}
			c.Sweep()
			b := FromAPI(n, o)
			fresh := o
			fresh.Cache, fresh.Reuse = nil, false
			if diff := cmp.Diff(FromAPI(n, fresh), b); diff != "" {
				t.Errorf("the view is not a fresh reading's (-fresh,+got):\n%s", diff)
			}
			if reused := len(a.GPUs) > 0 && len(b.GPUs) > 0 && &a.GPUs[0] == &b.GPUs[0]; reused != tc.reused {
				t.Errorf("reused: %v, want %v", reused, tc.reused)
			}
			if b.API != n {
				t.Error("the view does not point at the Node read")
			}
		})
	}
}

// A view that depends on more than its Node is read again each time: one
// whose mig.config layout is in flight shows its GPUs changed now.
func TestReuseNotInFlight(t *testing.T) {
	n := apiNode([]nodeinfo.GPU{gpu(0)}, withAnnotation(nodeinfo.AnnotationMigConfig, migConfig("1g.10gb")),
		withOwner(manager, now.Add(-time.Hour)))
	o := Options{FieldManager: manager, Now: now, Cache: NewCache(), Reuse: true}
	a := FromAPI(n, o)
	if len(a.InFlight) == 0 {
		t.Fatal("the test's layout is not in flight")
	}
	o.Now = now.Add(time.Minute)
	b := FromAPI(n, o)
	if &a.GPUs[0] == &b.GPUs[0] || !b.GPUs[0].LastChanged.Equal(o.Now) {
		t.Errorf("an in-flight view was reused: LastChanged %s, want %s", b.GPUs[0].LastChanged, o.Now)
	}
}

// A dynamic node's view read without its pool (a round that read no
// slices) is not handed back to a reading with it: the placements
// allocated in the pool count too.
func TestReuseDynamicWithPool(t *testing.T) {
	sl := draslices.Pointers(draslices.Dynamic(t, "n1", h100, true))
	claims := []*resourceapi.ResourceClaim{draslices.Claim("ns", "allocated", "n1", "gpu-0-mig-3g40gb-9-4")}
	g := gpu(0)
	g.UUID = "GPU-0" // the slices'
	n := apiNode([]nodeinfo.GPU{g}, withLabel(nodeinfo.LabelServing, nodeinfo.ServingDRA), withLabel(nodeinfo.LabelDRAMode, nodeinfo.DRAModeDynamic))
	o := Options{FieldManager: manager, Now: now, Cache: NewCache(), Reuse: true}
	if a := FromAPI(n, o); len(a.GPUs[0].Instances) != 0 {
		t.Fatalf("instances without the pool: %+v", a.GPUs[0].Instances)
	}
	o.Pools = func(node string) *schedview.Pool { return schedview.NewPool(node, sl, claims) }
	if b := FromAPI(n, o); len(b.GPUs[0].Instances) != 1 {
		t.Errorf("instances with the pool: %+v, want the one allocated", b.GPUs[0].Instances)
	}
}
