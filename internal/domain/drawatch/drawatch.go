// Package drawatch watches the DRA objects the cluster side reads
// (migflex's ResourceSlices, ResourceClaims, ResourceClaimTemplates and
// DeviceClasses) through informers, and answers from their caches what
// internal/domain/schedview asks: the DeviceClasses of our driver, a DRA node's
// supply, the claims and templates a pod names. The webhook and the
// planner both use it, each with the informers it needs.
package drawatch

import (
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	resourceinformers "k8s.io/client-go/informers/resource/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/migflex/migflex/internal/domain/schedview"
)

// Options say which informers to run and whom to tell of changes.
type Options struct {
	// Slices watches our driver's ResourceSlices (Supply).
	Slices bool
	// Claims watches ResourceClaims (Supply's allocations, Claim).
	Claims bool
	// Templates watches ResourceClaimTemplates (Template).
	Templates bool
	// Resync is the informers' resync period.
	Resync time.Duration
	// NodeChanged is called, from an informer's goroutine, with the pool
	// (node) whose slices or allocated claims changed.
	NodeChanged func(node string)
	// ClassesChanged is called when the DeviceClasses changed (then every
	// DRA node's supply may have).
	ClassesChanged func()
	// ClaimChanged is called when a claim or template changed, for a
	// caller that reads pods' claims.
	ClaimChanged func()
	// Logger receives, once per change, each DeviceClass of our driver
	// that is not read and why; default klog.Background().
	Logger *klog.Logger
}

// Watch is the informers and what they answer.
type Watch struct {
	opts                               Options
	slices, claims, templates, classes cache.SharedIndexInformer
	informers                          []cache.SharedIndexInformer
	synced                             []cache.InformerSynced

	mu sync.Mutex
	// read is the DeviceClasses read; nil after a class event until the
	// next Classes call rebuilds it.
	read *schedview.DRAClasses
	// toldUnread is what was logged of the classes not read: why, by
	// class.
	toldUnread map[string]string
}

const byPool = "pool"

// New creates the informers; the caller runs them (Informers) and waits
// for them (Synced).
func New(client kubernetes.Interface, o Options) (*Watch, error) {
	w := &Watch{opts: o}
	w.classes = resourceinformers.NewDeviceClassInformer(client, o.Resync, cache.Indexers{})
	if err := w.add(w.classes, func(any) { w.classesChanged() }); err != nil {
		return nil, fmt.Errorf("DeviceClass informer: %w", err)
	}
	if o.Slices {
		w.slices = resourceinformers.NewFilteredResourceSliceInformer(client, o.Resync, cache.Indexers{byPool: slicePool},
			func(lo *metav1.ListOptions) {
				lo.FieldSelector = fields.OneTermEqualSelector("spec.driver", schedview.DRADriver).String()
			})
		if err := w.add(w.slices, func(obj any) { w.nodesChanged(slicePool(obj)) }); err != nil {
			return nil, fmt.Errorf("ResourceSlice informer: %w", err)
		}
	}
	if o.Claims {
		w.claims = resourceinformers.NewResourceClaimInformer(client, metav1.NamespaceAll, o.Resync, cache.Indexers{byPool: claimPools})
		if err := w.claims.SetTransform(stripManagedFields); err != nil {
			return nil, fmt.Errorf("ResourceClaim informer transform: %w", err)
		}
		if err := w.add(w.claims, func(obj any) {
			w.nodesChanged(claimPools(obj))
			if o.ClaimChanged != nil {
				o.ClaimChanged()
			}
		}); err != nil {
			return nil, fmt.Errorf("ResourceClaim informer: %w", err)
		}
	}
	if o.Templates {
		w.templates = resourceinformers.NewResourceClaimTemplateInformer(client, metav1.NamespaceAll, o.Resync, cache.Indexers{})
		if err := w.add(w.templates, func(any) {
			if o.ClaimChanged != nil {
				o.ClaimChanged()
			}
		}); err != nil {
			return nil, fmt.Errorf("ResourceClaimTemplate informer: %w", err)
		}
	}
	return w, nil
}

// add registers changed for every event of inf: with the old and the new
// object of an update, so a claim whose allocation moved tells both pools.
func (w *Watch) add(inf cache.SharedIndexInformer, changed func(obj any)) error {
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: changed,
		UpdateFunc: func(o, n any) {
			changed(o)
			changed(n)
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			changed(obj)
		},
	})
	if err != nil {
		return err
	}
	w.informers = append(w.informers, inf)
	w.synced = append(w.synced, reg.HasSynced)
	return nil
}

func (w *Watch) nodesChanged(pools []string, _ error) {
	if w.opts.NodeChanged == nil {
		return
	}
	for _, p := range pools {
		w.opts.NodeChanged(p)
	}
}

func (w *Watch) classesChanged() {
	w.mu.Lock()
	w.read = nil
	w.mu.Unlock()
	if w.opts.ClassesChanged != nil {
		w.opts.ClassesChanged()
	}
}

// Informers are the informers to run.
func (w *Watch) Informers() []cache.SharedIndexInformer { return w.informers }

// Synced are the handlers' HasSynced, to wait for before answering.
func (w *Watch) Synced() []cache.InformerSynced { return w.synced }

// Classes are the DeviceClasses as schedview reads them.
func (w *Watch) Classes() *schedview.DRAClasses {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.read == nil {
		w.read = schedview.NewDRAClasses(listAs[*resourceapi.DeviceClass](w.classes.GetStore().List()))
		w.logUnread(w.read)
	}
	return w.read
}

// logUnread logs each DeviceClass that names our driver in a form the
// scheduling view does not read, and why (a CEL error among others), once
// per change: the webhook counts no supply for it and the planner plans
// for no claim on it. A resync rebuilds the classes without a change.
func (w *Watch) logUnread(c *schedview.DRAClasses) {
	log := klog.Background().WithName("drawatch")
	if w.opts.Logger != nil {
		log = *w.opts.Logger
	}
	told := make(map[string]string, len(c.Unread))
	for _, name := range c.Unread {
		why := c.UnreadWhy(name)
		told[name] = why
		if w.toldUnread[name] != why {
			log.Info("DeviceClass not read: claims on it are left to the scheduler", "deviceClass", name, "why", why)
		}
	}
	w.toldUnread = told
}

// Supply is schedview.DRASupply of node from the caches.
func (w *Watch) Supply(node string) (allocatable, allocated map[corev1.ResourceName]int64) {
	return w.Classes().Supply(w.Pool(node))
}

// Pool is node's pool of our driver as schedview reads it, from the
// caches: its slices (with Slices) and the claims allocated in it (with
// Claims).
func (w *Watch) Pool(node string) *schedview.Pool {
	var sl []*resourceapi.ResourceSlice
	var cl []*resourceapi.ResourceClaim
	if w.slices != nil {
		objs, _ := w.slices.GetIndexer().ByIndex(byPool, node)
		sl = listAs[*resourceapi.ResourceSlice](objs)
	}
	if w.claims != nil {
		objs, _ := w.claims.GetIndexer().ByIndex(byPool, node)
		cl = listAs[*resourceapi.ResourceClaim](objs)
	}
	return schedview.NewPool(node, sl, cl)
}

// Claim implements schedview.ClaimSource.
func (w *Watch) Claim(namespace, name string) *resourceapi.ResourceClaim {
	return get[*resourceapi.ResourceClaim](w.claims, namespace, name)
}

// Template implements schedview.ClaimSource.
func (w *Watch) Template(namespace, name string) *resourceapi.ResourceClaimTemplate {
	return get[*resourceapi.ResourceClaimTemplate](w.templates, namespace, name)
}

var _ schedview.ClaimSource = (*Watch)(nil)

func get[T any](inf cache.SharedIndexInformer, namespace, name string) T {
	var zero T
	if inf == nil {
		return zero
	}
	obj, ok, err := inf.GetStore().GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return zero
	}
	t, _ := obj.(T)
	return t
}

func listAs[T any](objs []any) []T {
	out := make([]T, 0, len(objs))
	for _, o := range objs {
		if t, ok := o.(T); ok {
			out = append(out, t)
		}
	}
	return out
}

// slicePool indexes a slice of our driver by its pool, the node's name.
func slicePool(obj any) ([]string, error) {
	s, ok := obj.(*resourceapi.ResourceSlice)
	if !ok || s.Spec.Driver != schedview.DRADriver {
		return nil, nil
	}
	return []string{s.Spec.Pool.Name}, nil
}

// claimPools indexes a claim by the pools of our driver it has devices
// allocated in.
func claimPools(obj any) ([]string, error) {
	c, ok := obj.(*resourceapi.ResourceClaim)
	if !ok || c.Status.Allocation == nil {
		return nil, nil
	}
	var out []string
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver == schedview.DRADriver && !slices.Contains(out, r.Pool) {
			out = append(out, r.Pool)
		}
	}
	return out, nil
}

func stripManagedFields(obj any) (any, error) {
	if c, ok := obj.(*resourceapi.ResourceClaim); ok {
		c.ManagedFields = nil
	}
	return obj, nil
}
