package webhook

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/migflex/migflex/internal/domain/drawatch"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/platform/intern"
)

// SnapshotSource is the cluster view the handler decides against. The
// informer-backed source is the product; tests and benchmarks inject their own.
type SnapshotSource interface {
	// Snapshot returns the current view, or false until the view is complete
	// (caches synced). The snapshot is immutable.
	Snapshot() (*schedview.Snapshot, bool)
}

// StaticSource serves one fixed snapshot; for tests and benchmarks.
type StaticSource struct{ Snap *schedview.Snapshot }

// Snapshot implements SnapshotSource.
func (s StaticSource) Snapshot() (*schedview.Snapshot, bool) { return s.Snap, s.Snap != nil }

var _ SnapshotSource = StaticSource{}
var _ SnapshotSource = (*InformerSource)(nil)

// activePods selects the pods that can hold a device: bound and not terminal.
// Terminal and unbound pods never enter the cache, and a pod that finishes
// leaves it as a delete.
var activePods = fields.AndSelectors(
	fields.OneTermNotEqualSelector("spec.nodeName", ""),
	fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
	fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)),
).String()

// InformerSource keeps a schedview.Builder up to date from shared informers:
// Nodes always, Pods in capacity mode. No API call is made per admission.
type InformerSource struct {
	mu sync.Mutex
	b  *schedview.Builder
	// reshape, when set, sees every Node as the planner reads it.
	reshape *ReshapeView
	nodes   cache.SharedIndexInformer
	// dra watches the DRA objects; draNodes are the DRA nodes as their
	// Node objects show them, before their supply is read from it.
	dra      *drawatch.Watch
	draNodes map[string]schedview.Node
	// withPods: capacity mode, where pods say which devices are used.
	// Without them (existence mode) held keeps, by node, the devices its
	// agent's layout annotation reports held, at the Node's
	// resourceVersion: the transform reads them before the annotation is
	// dropped, and setNode records them as the node's use, by which the
	// decision counts free devices.
	withPods bool
	keepPlan bool
	heldMu   sync.Mutex
	held     map[string]heldDevices

	informers []cache.SharedIndexInformer
	synced    []cache.InformerSynced
	ready     atomic.Bool
	// readyCh is closed when ready becomes true.
	readyCh chan struct{}
}

// NewInformerSource creates the informers; Run starts them. withPods adds
// the pod informer that capacity mode needs.
func NewInformerSource(client kubernetes.Interface, withPods bool, resync time.Duration) (*InformerSource, error) {
	s := &InformerSource{b: schedview.NewBuilder(nil), readyCh: make(chan struct{}), draNodes: map[string]schedview.Node{},
		withPods: withPods, held: map[string]heldDevices{}}

	nodes := coreinformers.NewNodeInformer(client, resync, cache.Indexers{})
	if err := nodes.SetTransform(s.transformNode); err != nil {
		return nil, fmt.Errorf("node informer transform: %w", err)
	}
	reg, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    s.setNode,
		UpdateFunc: func(_, obj any) { s.setNode(obj) },
		DeleteFunc: s.deleteNode,
	})
	if err != nil {
		return nil, fmt.Errorf("node informer handler: %w", err)
	}
	s.informers = append(s.informers, nodes)
	s.synced = append(s.synced, reg.HasSynced)
	s.nodes = nodes

	if withPods {
		pods := coreinformers.NewFilteredPodInformer(client, metav1.NamespaceAll, resync, cache.Indexers{},
			func(o *metav1.ListOptions) { o.FieldSelector = activePods })
		if err := pods.SetTransform(TransformPod); err != nil {
			return nil, fmt.Errorf("pod informer transform: %w", err)
		}
		reg, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    s.setPod,
			UpdateFunc: func(_, obj any) { s.setPod(obj) },
			DeleteFunc: s.deletePod,
		})
		if err != nil {
			return nil, fmt.Errorf("pod informer handler: %w", err)
		}
		s.informers = append(s.informers, pods)
		s.synced = append(s.synced, reg.HasSynced)
	}

	// A DRA node's supply is its slices' devices our classes serve, less
	// (in capacity mode) those its claims hold.
	dra, err := drawatch.New(client, drawatch.Options{Slices: true, Claims: withPods, Resync: resync,
		NodeChanged: s.draNodeChanged, ClassesChanged: s.draClassesChanged})
	if err != nil {
		return nil, err
	}
	s.dra = dra
	s.informers = append(s.informers, dra.Informers()...)
	s.synced = append(s.synced, dra.Synced()...)
	return s, nil
}

// WithReshape keeps the Nodes in v too, with what the planner reads of
// them (see reshapeNode): the webhook's reshape-first mode. Call it before
// Run.
func (s *InformerSource) WithReshape(v *ReshapeView) error {
	s.keepPlan = true
	s.reshape = v
	v.synced = s.ready.Load
	v.classes = s.dra.Classes
	v.pools = s.dra.Pool
	return nil
}

// Run runs the informers until ctx is done.
func (s *InformerSource) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, inf := range s.informers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inf.RunWithContext(ctx)
		}()
	}
	if cache.WaitForNamedCacheSyncWithContext(ctx, s.synced...) {
		s.ready.Store(true)
		close(s.readyCh)
		klog.FromContext(ctx).Info("Caches synced; serving decisions")
	}
	wg.Wait()
}

// Ready is closed once the caches have synced and Snapshot answers.
func (s *InformerSource) Ready() <-chan struct{} { return s.readyCh }

// Snapshot implements SnapshotSource.
func (s *InformerSource) Snapshot() (*schedview.Snapshot, bool) {
	if !s.ready.Load() {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Snapshot(), true
}

func (s *InformerSource) setNode(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	node := schedview.NodeFromAPI(n)
	node.Allocatable = sharedCounts(node.Allocatable)
	// The Builder matches pods' node affinity against the cached Node
	// itself instead of a copy of its name and labels (1.8 KB a node).
	// An update that changes nothing the decision reads leaves the
	// Builder with the previous version: one old object per such node.
	node.API = n
	if s.reshape != nil {
		s.reshape.SetNode(n)
	}
	held := s.heldOn(n)
	s.mu.Lock()
	defer s.mu.Unlock()
	if node.DRA {
		s.draNodes[n.Name] = node
		node.SetDRAPool(s.dra.Classes(), s.dra.Pool(n.Name))
	} else {
		delete(s.draNodes, n.Name)
	}
	s.b.SetNode(node)
	if !s.withPods {
		// A DRA node's use is its claims' (SetDRA); held is empty there.
		s.b.SetPod(heldKey(n.Name), n.Name, held)
	}
}

// draNodeChanged reads a DRA node's supply again: its slices or claims
// changed.
func (s *InformerSource) draNodeChanged(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if node, ok := s.draNodes[name]; ok {
		node.SetDRAPool(s.dra.Classes(), s.dra.Pool(name))
		s.b.SetNode(node)
	}
}

// draClassesChanged reads every DRA node's supply again: which resources
// the classes serve may have changed.
func (s *InformerSource) draClassesChanged() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, node := range s.draNodes {
		node.SetDRAPool(s.dra.Classes(), s.dra.Pool(name))
		s.b.SetNode(node)
	}
}

func (s *InformerSource) deleteNode(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	if s.reshape != nil {
		s.reshape.DeleteNode(n.Name)
	}
	s.heldMu.Lock()
	delete(s.held, n.Name)
	s.heldMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.draNodes, n.Name)
	s.b.DeleteNode(n.Name)
	if !s.withPods {
		s.b.DeletePod(heldKey(n.Name))
	}
}

// heldDevices are the devices a Node's layout annotation reports held, at
// the Node's resourceVersion.
type heldDevices struct {
	version string
	devices map[corev1.ResourceName]int64
}

// heldKey is the Builder's key for the devices a node's agent reports
// held; it has no "/", so no pod's "namespace/name" key is the same.
func heldKey(node string) string { return "agent-reported:" + node }

// transformNode slims a Node for the cache (TransformNode, or
// transformReshapeNode in reshape-first mode); in existence mode it first
// keeps what the layout annotation reports held.
func (s *InformerSource) transformNode(obj any) (any, error) {
	if n, ok := obj.(*corev1.Node); ok && !s.withPods {
		s.noteHeld(n)
	}
	if s.keepPlan {
		return transformReshapeNode(obj)
	}
	return TransformNode(obj)
}

// noteHeld records what n's layout annotation reports held, nothing for
// a DRA node or a layout it cannot read (the annotation is bounded by the
// API server's limit on annotations).
func (s *InformerSource) noteHeld(n *corev1.Node) {
	var devices map[corev1.ResourceName]int64
	if raw, ok := n.Annotations[nodeinfo.AnnotationLayout]; ok && !schedview.IsDRANode(n.Labels) {
		if gpus, err := nodeinfo.ParseLayout(raw); err == nil {
			devices = nodeinfo.Held(gpus)
		}
	}
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	if devices == nil {
		delete(s.held, n.Name)
		return
	}
	s.held[n.Name] = heldDevices{version: n.ResourceVersion, devices: devices}
}

// heldOn is what noteHeld recorded for n, if it is of n's version: the
// transform of a later version may have run before n's handler.
func (s *InformerSource) heldOn(n *corev1.Node) map[corev1.ResourceName]int64 {
	if s.withPods {
		return nil
	}
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	if h, ok := s.held[n.Name]; ok && h.version == n.ResourceVersion {
		return h.devices
	}
	return nil
}

func (s *InformerSource) setPod(obj any) {
	p, ok := obj.(*PodDevices)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.SetPod(p.Namespace+"/"+p.Name, p.Node, p.Devices)
}

func (s *InformerSource) deletePod(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.DeletePod(key)
}

// TransformNode keeps only what the decision reads: name, labels, the
// scheduling taints, the cordon and the GPU part of Allocatable. The rest of
// a Node (images, conditions, managed fields) is most of its size.
func TransformNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	out := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:            n.Name,
		UID:             n.UID,
		ResourceVersion: n.ResourceVersion,
		Labels:          internValues(n.Labels),
	}}
	out.Spec.Unschedulable = n.Spec.Unschedulable
	for _, t := range n.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			out.Spec.Taints = append(out.Spec.Taints, corev1.Taint{Key: intern.Weak(t.Key), Value: intern.Weak(t.Value), Effect: t.Effect})
		}
	}
	out.Status.Allocatable = gpuOnly(n.Status.Allocatable)
	return out, nil
}

// internValues interns m's values in place and returns m: the transform
// owns the Node it is handed, and a new map would cost more than the
// keys it could share. A Node's labels, taints, resource names and profile
// table (that one kept by profileTables) are mostly the same text on every
// node of a fleet, yet each decoded Node holds its own copy: sharing them
// took 10 to 18 MiB off the webhook's RSS at 5,000 Nodes
// (docs/BENCHMARKS.md). Weakly (intern.Weak): node names in labels come
// and go.
func internValues(m map[string]string) map[string]string {
	for k, v := range m {
		m[k] = intern.Weak(v)
	}
	return m
}

// transformReshapeNode is TransformNode keeping what the planner reads too.
func transformReshapeNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	out, err := TransformNode(obj)
	if err != nil {
		return out, err
	}
	slim, ok := out.(*corev1.Node)
	if ok && slim != n {
		reshapeNode(n, slim)
	}
	return out, nil
}

// PodDevices is what the pod informer stores instead of a Pod: its identity,
// its node and the GPU devices it holds there. A Pod struct alone is over a
// kilobyte before any field is set; at 50,000 pods the difference is tens of
// megabytes.
type PodDevices struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	// Node is spec.nodeName.
	Node string `json:"node"`
	// Devices is schedview.Devices of the pod; nil for a terminal pod, which
	// holds none (the field selector keeps them out, but a watch can deliver
	// the update that makes a pod terminal before it drops the pod).
	Devices map[corev1.ResourceName]int64 `json:"devices,omitempty"`
}

// DeepCopyObject implements runtime.Object.
func (p *PodDevices) DeepCopyObject() runtime.Object {
	out := &PodDevices{TypeMeta: p.TypeMeta, Node: p.Node}
	p.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if p.Devices != nil {
		out.Devices = maps.Clone(p.Devices)
	}
	return out
}

var _ runtime.Object = (*PodDevices)(nil)

// TransformPod reduces a Pod to PodDevices: identity, node and devices by
// the scheduler's request rules. Anything else passes through unchanged, a
// PodDevices included, so the transform is idempotent.
func TransformPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &PodDevices{
		ObjectMeta: metav1.ObjectMeta{
			Name:            p.Name,
			Namespace:       p.Namespace,
			UID:             p.UID,
			ResourceVersion: p.ResourceVersion,
		},
		Node: p.Spec.NodeName,
	}
	if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
		out.Devices = schedview.Devices(p)
	}
	return out, nil
}

// The cached Nodes of a fleet mostly hold equal GPU counts (one model and
// layout on many nodes): allocatables shares the Nodes' lists of
// quantities (about 600 bytes a node) and counts the Builders' maps of
// them, each kept once per distinct value. Both are read-only, as an
// informer's objects are.
var (
	allocatables = intern.NewValues[corev1.ResourceList](maxShapes)
	counts       = intern.NewValues[map[corev1.ResourceName]int64](maxShapes)
)

// gpuOnly is the GPU part of l, shared with the Nodes that have the same.
func gpuOnly(l corev1.ResourceList) corev1.ResourceList {
	names := make([]corev1.ResourceName, 0, len(l))
	for name := range l {
		if resourcename.IsGPU(name) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	slices.Sort(names)
	out := make(corev1.ResourceList, len(names))
	for _, name := range names {
		out[corev1.ResourceName(intern.Weak(string(name)))] = l[name]
	}
	return allocatables.Value(sharingKey(names, func(b []byte, name corev1.ResourceName) []byte {
		q := l[name]
		return append(b, q.String()...)
	}), out)
}

// sharedCounts is m, or an equal map another node holds.
func sharedCounts(m map[corev1.ResourceName]int64) map[corev1.ResourceName]int64 {
	if len(m) == 0 {
		return m
	}
	return counts.Value(sharingKey(slices.Sorted(maps.Keys(m)), func(b []byte, name corev1.ResourceName) []byte {
		return strconv.AppendInt(b, m[name], 10)
	}), m)
}

// sharingKey is "name=value;" for each of the sorted names, value being
// what appendValue appends: equal maps have equal keys, under which the
// tables keep one of them.
func sharingKey(names []corev1.ResourceName, appendValue func([]byte, corev1.ResourceName) []byte) string {
	key := make([]byte, 0, 32*len(names))
	for _, name := range names {
		key = append(key, name...)
		key = append(key, '=')
		key = appendValue(key, name)
		key = append(key, ';')
	}
	return string(key)
}
