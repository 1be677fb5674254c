package planner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/migflex/migflex/internal/domain/drawatch"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/planner/plansnap"
	"github.com/migflex/migflex/internal/planner/solver"
	"github.com/migflex/migflex/internal/platform/intern"
	"github.com/migflex/migflex/internal/platform/metricsserver"
)

// ErrLostLease is what Run returns when another replica took the lead:
// the process should exit and start again as a follower.
var ErrLostLease = errors.New("lost the planner's leader Lease")

// Controller runs the planner in the cluster: it watches Nodes and pending
// pods through informers, and the replica holding the Lease plans
// debounced rounds and writes the layouts.
type Controller struct {
	opts    Options
	planner *solver.Planner
	metrics *metrics
	ready   atomic.Bool

	nodes, pods cache.SharedIndexInformer
	trigger     chan struct{}

	// departed are pods that left the pending set bound to a node, and
	// arrivals GPU pods created while this replica leads, from the
	// informer's goroutine to the loop's.
	mu       sync.Mutex
	departed []departure
	arrivals []arrival
	leading  atomic.Bool
	// reported are the pods each Node's agent reported holding devices
	// since the last round: a pod that started and went between two
	// rounds was reported, and its node need not wait out the start
	// grace.
	reported map[string][]string

	recorder    record.EventRecorder
	broadcaster record.EventBroadcaster
	demandKnown map[corev1.ResourceName]bool

	// dra reads pods' ResourceClaims on our DeviceClasses.
	dra *drawatch.Watch
}

type departure struct {
	node, pod string
	at        time.Time
}

// pendingPods selects the pods the planner looks at: pending ones. Those
// asking for GPUs are kept (see transformPod), unschedulable ones are
// demand, bound ones are starting.
var pendingPods = fields.OneTermEqualSelector("status.phase", string(corev1.PodPending)).String()

// New checks opts, fills in defaults and returns a Controller; Run starts
// it.
func New(opts Options) (*Controller, error) {
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("planner options: %w", err)
	}
	pl, err := solver.New(opts.Policy)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(opts.Registry)
	if err != nil {
		return nil, err
	}
	c := &Controller{opts: opts, planner: pl, metrics: m, trigger: make(chan struct{}, 1), demandKnown: map[corev1.ResourceName]bool{}}
	c.nodes = coreinformers.NewNodeInformer(opts.Client, 0, cache.Indexers{})
	c.pods = coreinformers.NewFilteredPodInformer(opts.Client, metav1.NamespaceAll, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.FieldSelector = pendingPods })
	if err := c.nodes.SetTransform(transformNode); err != nil {
		return nil, fmt.Errorf("node informer transform: %w", err)
	}
	if err := c.pods.SetTransform(transformPod); err != nil {
		return nil, fmt.Errorf("pod informer transform: %w", err)
	}
	if _, err := c.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(n any) {
			c.noteReported(nil, n)
			c.poke()
		},
		UpdateFunc: func(o, n any) {
			c.noteReported(o, n)
			if nodeChanged(o, n) {
				c.poke()
			}
		},
		DeleteFunc: func(any) { c.poke() },
	}); err != nil {
		return nil, fmt.Errorf("node informer handler: %w", err)
	}
	if _, err := c.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.podAdded,
		UpdateFunc: func(_, n any) { c.podChanged(n) },
		DeleteFunc: c.podGone,
	}); err != nil {
		return nil, fmt.Errorf("pod informer handler: %w", err)
	}
	// A claim allocated or a class added changes what pending pods ask.
	if c.dra, err = drawatch.New(opts.Client, drawatch.Options{Slices: true, Claims: true, Templates: true, ClassesChanged: c.poke, ClaimChanged: c.poke}); err != nil {
		return nil, err
	}
	return c, nil
}

// asksForDevices: the pod asks for GPUs by extended resource, or names
// ResourceClaims that may ask for our devices.
func asksForDevices(p *corev1.Pod) bool { return plansnap.AsksForGPUs(p) || hasClaims(p) }

// transformPod keeps only pods asking for GPUs, without their managed
// fields: the cache holds what the planner reads, not every pending pod.
func transformPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	p.ManagedFields = nil
	if !asksForDevices(p) {
		// A stub the handlers ignore: the informer needs an object.
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion}}, nil
	}
	return p, nil
}

// profileTables keeps one copy of each profile table's text the Node
// cache holds: a fleet publishes one per GPU model and driver, so 64 is
// ample, and a fleet with more still keeps at most that many.
var profileTables = intern.New(64)

// transformNode keeps of a Node what the planner reads (plansnap, the
// scheduling view, nodeChanged) and what its writes need: metadata with
// the managed fields that say who wrote nvidia.com/mig.config, the
// proposal or the reservation (the planner's own among them, which
// ExtractNode reads), the
// cordon and taints, allocatable. The kubelet's images, conditions,
// addresses and system info, and its large managed-fields entries, are
// most of a Node and the planner reads none of them: at thousands of
// Nodes the cache would be mostly that.
func transformNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	slim := &corev1.Node{ObjectMeta: n.ObjectMeta, Spec: corev1.NodeSpec{Unschedulable: n.Spec.Unschedulable, Taints: n.Spec.Taints},
		Status: corev1.NodeStatus{Allocatable: n.Status.Allocatable}}
	slim.ManagedFields = nil
	if len(slim.Annotations) > 0 {
		// A map of its own: the values change, and a caller handing the
		// same Node to another reader must see the agent's text.
		slim.Annotations = maps.Clone(slim.Annotations)
		if v, ok := slim.Annotations[nodeinfo.AnnotationProfiles]; ok {
			// The same text on every node of a model.
			slim.Annotations[nodeinfo.AnnotationProfiles] = profileTables.String(v)
		}
		if v, ok := slim.Annotations[nodeinfo.AnnotationLayout]; ok {
			// Most of a Node as kept here; read only through
			// nodeinfo.ParseLayout, which unpacks it, and never written
			// back (write sends the planner's own annotations alone).
			slim.Annotations[nodeinfo.AnnotationLayout] = nodeinfo.PackLayout(v)
		}
	}
	for _, mf := range n.ManagedFields {
		if mf.FieldsV1 == nil || mf.Subresource != "" {
			continue
		}
		raw := mf.FieldsV1.GetRawString()
		if strings.Contains(raw, `"f:`+nodeinfo.AnnotationMigConfig+`"`) || strings.Contains(raw, `"f:`+nodeinfo.AnnotationProposed+`"`) ||
			strings.Contains(raw, `"f:`+nodeinfo.AnnotationReservation+`"`) {
			slim.ManagedFields = append(slim.ManagedFields, mf)
		}
	}
	return slim, nil
}

// nodeChanged tells whether a Node update concerns the planner: not a
// heartbeat, but labels, annotations, taints, cordon or allocatable.
func nodeChanged(oldObj, newObj any) bool {
	o, ok1 := oldObj.(*corev1.Node)
	n, ok2 := newObj.(*corev1.Node)
	if !ok1 || !ok2 {
		return true
	}
	return !maps.Equal(o.Labels, n.Labels) || !maps.Equal(o.Annotations, n.Annotations) ||
		o.Spec.Unschedulable != n.Spec.Unschedulable || !slices.EqualFunc(o.Spec.Taints, n.Spec.Taints, func(a, b corev1.Taint) bool { return a.MatchTaint(&b) && a.Value == b.Value }) ||
		!maps.EqualFunc(o.Status.Allocatable, n.Status.Allocatable, func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })
}

// noteReported keeps, while this replica leads, the pods a Node's agent
// reports holding devices when its layout annotation changed.
func (c *Controller) noteReported(oldObj, newObj any) {
	n, ok := newObj.(*corev1.Node)
	if !ok || !c.leading.Load() {
		return
	}
	layout := n.Annotations[nodeinfo.AnnotationLayout]
	if o, ok := oldObj.(*corev1.Node); ok && o.Annotations[nodeinfo.AnnotationLayout] == layout {
		return
	}
	users := layoutUsers(layout)
	if len(users) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reported == nil {
		c.reported = map[string][]string{}
	}
	c.reported[n.Name] = append(c.reported[n.Name], users...)
}

// layoutUsers are the pods an agent's layout annotation names holding a
// GPU or an instance; none when it does not parse (plansnap says why).
func layoutUsers(layout string) []string {
	gpus, err := nodeinfo.ParseLayout(layout)
	if err != nil {
		return nil
	}
	var out []string
	for _, g := range gpus {
		out = append(out, g.UsedBy...)
		for _, in := range g.Instances {
			out = append(out, in.UsedBy...)
		}
	}
	return out
}

// startingOn is plansnap.StartingOn of the pod as the planner reads its
// claims.
func (c *Controller) startingOn(p *corev1.Pod) string {
	s := asScheduled(c.dra, []*corev1.Pod{p})
	if node := plansnap.StartingOn(s.pods[0]); node != "" {
		return node
	}
	for node := range s.claimed {
		return node
	}
	return ""
}

// podChanged starts a batch for a pod asking for GPUs.
func (c *Controller) podChanged(obj any) {
	if p, ok := obj.(*corev1.Pod); ok && asksForDevices(p) {
		c.poke()
	}
}

// podAdded notes a GPU pod created, for the demand mix (see
// memory.observe); only the leader keeps them, and consumes them every
// round. A new pod is no demand until the scheduler finds no room for it:
// the update that says so starts the batch (with Cadence.Leading, a round
// at once), not the creation, which would spend a leading round on a pod
// not marked yet and make the mark wait for the batch window.
func (c *Controller) podAdded(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok || !asksForDevices(p) {
		return
	}
	if c.leading.Load() {
		c.mu.Lock()
		c.arrivals = append(c.arrivals, arrival{pod: p, at: c.opts.Now()})
		c.mu.Unlock()
	}
	if plansnap.WaitsForScheduler(p) {
		c.poke()
	}
}

// podGone notes a pod that left the pending set while bound: it may be
// starting, holding devices its node's agent does not report yet.
func (c *Controller) podGone(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok || !asksForDevices(p) {
		return
	}
	if node := c.startingOn(p); node != "" {
		c.mu.Lock()
		c.departed = append(c.departed, departure{node: node, pod: p.Namespace + "/" + p.Name, at: c.opts.Now()})
		c.mu.Unlock()
	}
	c.poke()
}

func (c *Controller) poke() {
	select {
	case c.trigger <- struct{}{}:
	default:
	}
}

// Handler serves /metrics and /healthz; the process serves it (Run in
// process.go, through internal/platform/metricsserver).
func (c *Controller) Handler() http.Handler {
	return metricsserver.Handler(c.opts.Registry, &c.ready, "the planner's caches have not synced")
}

// Run watches the cluster and, while leading, plans rounds until ctx is
// done. It returns ErrLostLease when another replica took the lead.
func (c *Controller) Run(ctx context.Context) error {
	log := klog.FromContext(ctx).WithName("planner")
	ctx = klog.NewContext(ctx, log)
	// The informers run until ctx ends: cancel it before waiting for them
	// (defers run last first), or Run never returns when it stops on its
	// own, with ErrLostLease.
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	c.broadcaster = record.NewBroadcaster(record.WithContext(ctx))
	c.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.opts.Client.CoreV1().Events("")})
	defer c.broadcaster.Shutdown()
	c.recorder = c.broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: c.opts.FieldManager})

	for _, inf := range append([]cache.SharedIndexInformer{c.nodes, c.pods}, c.dra.Informers()...) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inf.RunWithContext(ctx)
		}()
	}
	if !cache.WaitForNamedCacheSyncWithContext(ctx, append([]cache.InformerSynced{c.nodes.HasSynced, c.pods.HasSynced}, c.dra.Synced()...)...) {
		return nil
	}
	c.ready.Store(true)
	log.Info("Caches synced", "dryRun", c.opts.DryRun, "leaderElection", c.opts.LeaderElection)

	if !c.opts.LeaderElection {
		c.lead(ctx)
		return nil
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, c.opts.LeaseNamespace, c.opts.LeaseName,
		c.opts.Client.CoreV1(), c.opts.Client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: c.opts.Identity})
	if err != nil {
		return fmt.Errorf("leader Lease: %w", err)
	}
	lost := false
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   c.opts.LeaseDuration,
		RenewDeadline:   c.opts.RenewDeadline,
		RetryPeriod:     c.opts.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            c.opts.LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				log.Info("Leading: planning rounds", "identity", c.opts.Identity)
				c.metrics.leader.Set(1)
				c.lead(ctx)
			},
			OnStoppedLeading: func() {
				c.metrics.leader.Set(0)
				if ctx.Err() == nil {
					lost = true
				}
			},
			OnNewLeader: func(id string) {
				if id != c.opts.Identity {
					log.Info("Following", "leader", id)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	le.Run(ctx)
	if lost {
		return ErrLostLease
	}
	return nil
}

// lead runs rounds until ctx is done, when solver.Batcher says: a round
// starts Cadence.Idle after the last change, at most Cadence.Max after the
// first, and the Batcher asks for another look every Cadence.Resync while
// pods wait, which opens a batch as a change would; so does the end of a
// start grace that froze a node while pods wait.
func (c *Controller) lead(ctx context.Context) {
	log := klog.FromContext(ctx)
	// The first round counts the pending set in the mix; pods created
	// from now on are counted as they come.
	c.leading.Store(true)
	defer c.leading.Store(false)
	m := newMemory(c.opts.MixHalfLife)
	b, err := solver.NewBatcher(c.opts.Cadence)
	if err != nil {
		// New validated the cadence.
		log.Error(err, "Cannot batch rounds")
		return
	}
	batch := time.NewTimer(time.Hour)
	batch.Stop()
	resync := time.NewTimer(time.Hour)
	resync.Stop()
	lift := time.NewTimer(time.Hour)
	lift.Stop()
	defer batch.Stop()
	defer resync.Stop()
	defer lift.Stop()
	trigger := func() {
		now := time.Now()
		batch.Reset(max(b.Trigger(now).Sub(now), 0))
	}
	trigger()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.trigger:
			trigger()
			continue
		case <-resync.C:
			trigger()
			continue
		case <-lift.C:
			trigger()
			continue
		case <-batch.C:
		}
		now := time.Now()
		if !b.Due(now) {
			continue
		}
		waiting, lifts := c.round(ctx, m)
		if next, ok := b.Ran(time.Now(), waiting); ok {
			resync.Reset(time.Until(next))
		}
		if waiting && !lifts.IsZero() {
			lift.Reset(max(lifts.Sub(c.opts.Now()), 0))
		}
		if ctx.Err() == nil {
			log.V(4).Info("Round done", "waiting", waiting)
		}
	}
}

// round decides and writes once; it returns whether pods still wait, and
// when a node frozen for a pod starting on it may be changed again.
func (c *Controller) round(ctx context.Context, m *memory) (bool, time.Time) {
	log := klog.FromContext(ctx)
	start := time.Now()
	now := c.opts.Now()
	c.mu.Lock()
	m.merge(c.departed, c.reported)
	c.departed, c.reported = nil, nil
	arrived := c.arrivals
	c.arrivals = nil
	c.mu.Unlock()

	nodes := listAs[*corev1.Node](c.nodes.GetStore())
	sched := asScheduled(c.dra, listAs[*corev1.Pod](c.pods.GetStore()))
	pods := sched.pods
	m.claimed = sched.claimed
	m.pools = c.dra.Pool
	for _, a := range arrived {
		if ps := asScheduled(c.dra, []*corev1.Pod{a.pod}).pods[0]; plansnap.AsksForGPUs(ps) {
			m.arrived = append(m.arrived, arrival{pod: ps, at: a.at})
		}
	}
	for _, ev := range m.tellUnread(pods, sched.unread) {
		log.Info("Pod's claims partly unread", "pod", klog.KObj(ev.pod), "message", ev.message)
		c.recorder.Event(ev.pod, ev.typ, ev.reason, ev.message)
	}
	d, err := decide(&c.opts, c.planner, m, now, nodes, pods)
	log.V(2).Info("Round decided", "nodes", len(nodes), "pods", len(pods), "demand", d.demand, "impossible", d.impossible, "writes", len(d.writes), "took", time.Since(start))
	result := resultUnchanged
	if err != nil {
		log.Error(err, "Planning a round")
		result = resultFailed
	}
	for _, w := range d.warnings {
		log.V(2).Info("Planner warning", "warning", w)
	}
	c.metrics.setDemand(d.demand, c.demandKnown)
	c.metrics.impossible.Set(float64(d.impossible))
	for _, ev := range d.events {
		c.recorder.Event(ev.pod, ev.typ, ev.reason, ev.message)
	}
	result, waiting, lifts := c.writeAll(ctx, m, now, d, result)
	c.metrics.rounds.WithLabelValues(result).Inc()
	c.metrics.duration.WithLabelValues(result).Observe(time.Since(start).Seconds())
	log.V(2).Info("Round ended", "result", result, "took", time.Since(start))
	return waiting, lifts
}

// writeAll sends a round's writes and takes in their outcomes: the
// memory, the metrics, the Events. It returns the round's result (result
// as decide left it, failed if a write failed, changed if one changed a
// layout), whether pods still wait, and when a write held back may be
// sent.
func (c *Controller) writeAll(ctx context.Context, m *memory, now time.Time, d decision, result string) (string, bool, time.Time) {
	mode := modeApplied
	if c.opts.DryRun {
		mode = modeDryRun
	}
	log := klog.FromContext(ctx)
	waiting, lifts := d.waiting, d.lifts
	// waitFor keeps the pods of a write not sent waiting, told again once
	// it is, and the next round due when the write may be sent.
	waitFor := func(w nodeWrite, until time.Time) {
		for _, ev := range w.eventsAfterward {
			delete(m.told, ev.pod.UID)
		}
		waiting = true
		if lifts.IsZero() || until.Before(lifts) {
			lifts = until
		}
	}
	// Every write's backoff is read before any is sent: a round writes
	// each Node's layout at most once (and its reservation), so no write's
	// outcome changes another's.
	var send []nodeWrite
	for _, w := range d.writes {
		if until, ok := m.backoff.blocked(w.node.Name, now); ok {
			log.V(2).Info("Not writing a layout yet: the last write to the Node was refused", "node", w.node.Name, "retryAt", until)
			waitFor(w, until)
			continue
		}
		send = append(send, w)
	}
	// A reservation's write goes after the layout writes: it does not
	// hold the Node's version as a precondition, and sent first it would
	// fail a layout write to the same Node that does.
	slices.SortStableFunc(send, func(a, b nodeWrite) int {
		return cmp.Compare(boolInt(a.anyVersion), boolInt(b.anyVersion))
	})
	first := slices.IndexFunc(send, func(w nodeWrite) bool { return w.anyVersion })
	if first < 0 {
		first = len(send)
	}
	errs := append(c.sendWrites(ctx, send[:first]), c.sendWrites(ctx, send[first:])...)
	// The outcomes are taken in the decision's order, on this goroutine:
	// the memory, the logs and the Events do not depend on which write
	// the API server answered first.
	for i, w := range send {
		err := errs[i]
		if errors.Is(err, errNotSent) {
			// No longer leading: what is not written is the next
			// leader's. A later write may have been started before ctx
			// ended, and its outcome is still taken.
			continue
		}
		if err != nil {
			result = resultFailed
			if apierrors.IsConflict(err) {
				for _, ev := range w.eventsAfterward {
					delete(m.told, ev.pod.UID)
				}
				log.Info("Writing a layout conflicted; planning again from the Node as it is", "node", w.node.Name, "annotation", w.key)
				// The cluster moved on; plan again from what it shows.
				c.poke()
				continue
			}
			until := m.backoff.failed(w.node.Name, now)
			log.Error(err, "Writing a layout", "node", w.node.Name, "annotation", w.key, "retryAt", until)
			waitFor(w, until)
			continue
		}
		m.backoff.succeeded(w.node.Name)
		for _, ev := range w.notes {
			c.recorder.Event(ev.obj, ev.typ, ev.reason, ev.message)
		}
		if w.value == "" {
			log.Info("Removed an annotation", "node", w.node.Name, "annotation", w.key)
			continue
		}
		if w.key == nodeinfo.AnnotationReservation {
			log.Info("Wrote a reservation", "node", w.node.Name, "reservation", w.value)
			continue
		}
		if result != resultFailed {
			result = resultChanged
		}
		m.wrote(&c.opts, w, now)
		c.metrics.reshapes.WithLabelValues(mode).Add(float64(len(w.gpus)))
		c.metrics.served.WithLabelValues(mode).Add(float64(w.pods))
		log.Info("Wrote a layout", "node", w.node.Name, "annotation", w.key, "gpus", w.gpus, "pods", w.pods)
		for _, ev := range w.eventsAfterward {
			c.recorder.Event(ev.pod, ev.typ, ev.reason, ev.message)
		}
	}
	return result, waiting, lifts
}

// errNotSent is sendWrites' answer for a write it did not send because
// ctx ended.
var errNotSent = errors.New("not sent: no longer leading")

// sendWrites sends ws, at most Options.WriteParallelism at once, and
// returns each one's error in ws's order. Once ctx ends no write is
// started: those left get errNotSent. The client's rate limiter
// (--kube-api-qps) still spaces the requests; the bound keeps a round of
// hundreds of writes from queueing them all at the API server at once.
func (c *Controller) sendWrites(ctx context.Context, ws []nodeWrite) []error {
	errs := make([]error, len(ws))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(max(c.opts.WriteParallelism, 1), len(ws)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(ws) {
					return
				}
				if ctx.Err() != nil {
					errs[i] = errNotSent
					continue
				}
				errs[i] = c.write(ctx, ws[i])
			}
		})
	}
	wg.Wait()
	return errs
}

// write applies the planner's annotations on the Node under w.manager:
// every one that manager owns as it is, but w.key set to w.value (or
// removed). The Node's UID and
// resourceVersion are preconditions: a Node that changed since the round
// read it (another replica's write, the agent's report) fails the write,
// and the next round plans from what it shows. A reservation's write
// (w.anyVersion) has the UID alone.
func (c *Controller) write(ctx context.Context, w nodeWrite) error {
	manager := cmp.Or(w.manager, c.opts.FieldManager)
	owned, err := corev1ac.ExtractNode(w.node, manager)
	if err != nil {
		return fmt.Errorf("reading the planner's fields of Node %s: %w", w.node.Name, err)
	}
	ann := maps.Clone(owned.Annotations)
	if ann == nil {
		ann = map[string]string{}
	}
	if w.value == "" {
		delete(ann, w.key)
	} else {
		ann[w.key] = w.value
	}
	for k, v := range ann {
		if nodeinfo.IsPacked(v) {
			// Only the informer's copy of a layout is packed, and the
			// planner owns no layout; sending it would corrupt the Node.
			return fmt.Errorf("writing Node %s: annotation %s holds a cache's packed text", w.node.Name, k)
		}
	}
	ac := corev1ac.Node(w.node.Name).WithUID(w.node.UID)
	if !w.anyVersion {
		ac.WithResourceVersion(w.node.ResourceVersion)
	}
	if len(ann) > 0 {
		ac.WithAnnotations(ann)
	}
	_, err = c.opts.Client.CoreV1().Nodes().Apply(ctx, ac, metav1.ApplyOptions{FieldManager: manager, Force: true})
	switch {
	case err == nil:
		c.metrics.writes.WithLabelValues(writeSuccess).Inc()
		return nil
	case apierrors.IsConflict(err):
		c.metrics.writes.WithLabelValues(writeConflict).Inc()
	default:
		c.metrics.writes.WithLabelValues(writeError).Inc()
	}
	return fmt.Errorf("applying %s to Node %s: %w", w.key, w.node.Name, err)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func listAs[T runtime.Object](s cache.Store) []T {
	items := s.List()
	out := make([]T, 0, len(items))
	for _, it := range items {
		if t, ok := it.(T); ok {
			out = append(out, t)
		}
	}
	return out
}
