package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/migconfig"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/nodeagent/podresources"
	"github.com/migflex/migflex/internal/nvml/nvmlmig"
	"github.com/migflex/migflex/internal/platform/cli"
	"github.com/migflex/migflex/internal/platform/metricsserver"
)

// Defaults of Options.
const (
	DefaultFieldManager   = "migflex-agent"
	DefaultRetryInterval  = 10 * time.Second
	DefaultResyncInterval = 5 * time.Minute
	// DefaultAllocatableTimeout is how long the command lets the kubelet
	// take to publish a new layout in the Node's allocatable: it does at
	// its next node status update (every 10 s by default).
	DefaultAllocatableTimeout = 2 * time.Minute
	// DefaultMetricsAddr is the command's HTTPS listener for Handler
	// (internal/platform/metricsserver) unless told otherwise.
	DefaultMetricsAddr = ":9123"
	// DefaultInUseInterval is how often the agent asks the kubelet which
	// devices pods hold, to publish it in the layout annotation.
	DefaultInUseInterval = 2 * time.Second
	// DefaultNVMLCallTimeout is how long a call that changes a GPU (a MIG
	// mode change, an instance's create or destroy) may take before the
	// agent reports it hung: such calls take seconds on real GPUs.
	DefaultNVMLCallTimeout = 2 * time.Minute
)

// BusyPolicy decides what happens to a GPU the new layout would change
// while pods use it.
type BusyPolicy string

const (
	// BusyWait leaves such a GPU as it is until its pods are gone; the
	// other GPUs are configured meanwhile.
	BusyWait BusyPolicy = "wait"
	// BusyEvict evicts the pods through the Eviction API, which respects
	// PodDisruptionBudgets, then configures the GPU once they are gone.
	BusyEvict BusyPolicy = "evict"
)

// BusyPolicies are the values of --busy-policy.
var BusyPolicies = cli.NewEnum("busy policy", BusyWait, BusyEvict)

// PodResources lists the devices pods hold, by device ID: the busy check
// and the layout annotation's pods. *podresources.Client (the kubelet's
// device-plugin assignments) is the real one; a node served through DRA is
// wired with one that also lists the devices of the pods' prepared and
// allocated ResourceClaims, so that no GPU is repartitioned under a claim.
type PodResources interface {
	List(ctx context.Context) ([]podresources.Assignment, error)
}

// partitioner changes MIG state; *nvmlmig.Partitioner is the real one.
type partitioner interface {
	migconfig.Partitioner
	ResetGPU(gpu int) error
}

// Options configure an Agent.
type Options struct {
	// NodeName is the Node the agent runs on and reports to. Required.
	NodeName string
	// Client talks to the API server. Required.
	Client kubernetes.Interface
	// NVML is the initialized backend, real or simulated. Required.
	NVML nvml.Interface
	// Server serves the devices; the agent runs it. Required.
	Server Server
	// PodResources tells which devices pods hold. Required.
	PodResources PodResources
	// ConfigFile holds named configurations for the nvidia.com/mig.config
	// label (mig-parted format, for example a mounted ConfigMap). Empty:
	// the label source is an error.
	ConfigFile string
	// BusyPolicy decides about GPUs pods use. Default BusyWait.
	BusyPolicy BusyPolicy
	// RetryInterval is how often a pending change is retried, and a
	// transient failure (NVML, pod-resources, config file unreadable); a
	// GPU whose apply failed waits this long, doubled at each failure in
	// a row up to maxRetryBackoff. Default DefaultRetryInterval.
	RetryInterval time.Duration
	// ResyncInterval is how often the agent compares the GPUs with the
	// desired layout without being told of a change, catching changes
	// made behind its back (nvidia-smi, a GPU reset). Default
	// DefaultResyncInterval.
	ResyncInterval time.Duration
	// FieldManager owns the agent's keys on the Node. Default
	// DefaultFieldManager.
	FieldManager string
	// AllocatableTimeout: state success waits until the Node's
	// allocatable shows the served layout, for at most this long (then
	// failed, until it does). Zero reports success as soon as the layout
	// is served, without waiting for the kubelet.
	AllocatableTimeout time.Duration
	// InUseInterval is how often the kubelet is asked which devices pods
	// hold, so that the layout annotation says it as pods come and go; the
	// Node is written only when that changed, so at most once per interval.
	// Default DefaultInUseInterval; negative turns the polling off (the
	// annotation is then current only after each reconcile).
	InUseInterval time.Duration
	// NVMLCallTimeout is how long a call that changes a GPU, or a reading
	// of the GPUs, may take. A call that has not returned by then is left
	// running (NVML calls cannot be cancelled), the state is failed with a
	// reason naming it, and its GPU is not touched (the GPUs are not read
	// again) until it returns; the rest of the agent goes on. Default
	// DefaultNVMLCallTimeout.
	NVMLCallTimeout time.Duration
	// Serving is the path the devices are served through
	// (nodeinfo.ServingDevicePlugin or ServingDRA), the serving label of
	// the per-instance metrics. Default ServingDevicePlugin.
	Serving string
	// SharingConfig is the device plugin's sharing config in NVIDIA's
	// format (see internal/domain/sharing): a file, or a directory of
	// named configs (a mounted ConfigMap) of which the Node's
	// nvidia.com/device-plugin.config label, else SharingDefault, picks
	// one. Re-read on change. Empty: nothing is shared. Only a Server
	// that is a Sharer shares.
	SharingConfig string
	// SharingDefault is the config of a SharingConfig directory a node
	// without the label uses; empty: NVIDIA's fallbacks (a config named
	// "default", else the only one).
	SharingDefault string
	// Registry receives the agent's metrics and is what /metrics serves.
	// Nil: a new registry with the Go and process collectors.
	Registry *prometheus.Registry

	// callAfter replaces time.After for the NVML call deadlines (tests).
	callAfter func(time.Duration) <-chan time.Time
	// now and lapseAfter replace time.Now and time.After for a
	// reservation's deadline (tests).
	now        func() time.Time
	lapseAfter func(time.Duration) <-chan time.Time
	// shutdownGrace is how long a GPU call is still waited for once the
	// agent stops; 0: defaultShutdownGrace, negative: not at all (tests).
	shutdownGrace time.Duration
}

func (o *Options) setDefaults() {
	if o.Serving == "" {
		o.Serving = nodeinfo.ServingDevicePlugin
	}
	if o.BusyPolicy == "" {
		o.BusyPolicy = BusyWait
	}
	if o.RetryInterval <= 0 {
		o.RetryInterval = DefaultRetryInterval
	}
	if o.ResyncInterval <= 0 {
		o.ResyncInterval = DefaultResyncInterval
	}
	if o.FieldManager == "" {
		o.FieldManager = DefaultFieldManager
	}
	if o.InUseInterval == 0 {
		o.InUseInterval = DefaultInUseInterval
	}
	if o.NVMLCallTimeout <= 0 {
		o.NVMLCallTimeout = DefaultNVMLCallTimeout
	}
	switch {
	case o.shutdownGrace == 0:
		o.shutdownGrace = defaultShutdownGrace
	case o.shutdownGrace < 0:
		o.shutdownGrace = 0
	}
	if o.Registry == nil {
		o.Registry = newRegistry()
	}
	if o.now == nil {
		o.now = time.Now
	}
	if o.lapseAfter == nil {
		o.lapseAfter = time.After
	}
}

func (o *Options) validate() error {
	var errs []error
	if o.NodeName == "" {
		errs = append(errs, errors.New("the node name is required"))
	}
	if o.Client == nil {
		errs = append(errs, errors.New("a Kubernetes client is required"))
	}
	if o.NVML == nil {
		errs = append(errs, errors.New("an NVML backend is required"))
	}
	if o.Server == nil {
		errs = append(errs, errors.New("a server of the devices is required"))
	}
	if o.PodResources == nil {
		errs = append(errs, errors.New("a pod-resources client is required"))
	}
	if _, err := BusyPolicies.Parse(string(o.BusyPolicy)); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// nodeCache is what the agent needs of client-go's MutationCache (which
// outsiders may no longer implement, so tests substitute this instead).
type nodeCache interface {
	GetByKey(key string) (any, bool, error)
	Mutation(obj any)
}

// Agent is the node agent: it keeps the node's GPUs partitioned as the
// Node asks, serves their devices, and reports on the Node.
type Agent struct {
	opts Options
	// part changes the GPUs: guard, over NVML.
	part    partitioner
	guard   *callGuard
	metrics *metrics
	log     klog.Logger
	live    atomic.Bool
	trigger chan struct{}

	// nodes is the informer's view of the Node, corrected by the agent's
	// own applies until the informer catches up. Set by Run.
	nodes nodeCache

	// Owned by the loop in Run.
	gpus []mig.GPU
	// unknownHeld are the devices pods held, at the last poll, that gpus
	// did not have (unknownHeld), sorted: a poll that finds new ones asks
	// for a reconcile, once.
	unknownHeld []string
	// reported is the status of the last reconcile whose report
	// succeeded, and shown what the Node shows for it (see present);
	// known is false until the first reconcile, when the Node's labels
	// stand in for both.
	reported status
	shown    status
	known    bool
	nodeUID  types.UID
	// lastSourceKey is the key of the source that decided at the last
	// reconcile (see present).
	lastSourceKey   string
	lastSourceKnown bool
	// awaiting is the wait for the kubelet to publish the served layout,
	// and published the layout it last published (see awaitPublication).
	awaiting  *publication
	published string
	// held are GPUs on which the current document failed, by index (see
	// reconcile).
	held map[int]hold
	// unsent are the Events of reconciles whose report on the Node
	// failed, recorded with the next report that succeeds (see step).
	unsent []event
	// inUse maps each device pods hold (a shared instance's replicas
	// folded into it) to those pods, as the kubelet last said (see
	// noteAssignments); inUseByID is the same by the device IDs served,
	// replicas apart; inUseErr is the last failure to ask, logged once.
	inUse     map[string][]string
	inUseByID map[string][]string
	inUseErr  string
	// sharingKey identifies the sharing config (or error) last applied
	// (see applySharing).
	sharingKey string
	// hangs are the hung NVML calls reported from outside the loop
	// (ReportNVMLHang).
	hangs *hangs
	// resvIDs are the devices withheld for the Node's reservation, until
	// when that answer holds (see honourReservation); resvBad is the last
	// reservation that did not parse, and resvUnsupported whether a
	// Server that cannot withhold was reported, each logged once;
	// resvPassed is the reservation last handed to a Reserver (its
	// encoding, "" for none).
	resvIDs         []string
	resvPassed      string
	resvUntil       time.Time
	resvBad         string
	resvUnsupported bool
}

// New checks opts, fills in defaults and returns an Agent; Run starts it.
func New(opts Options) (*Agent, error) {
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("node agent options: %w", err)
	}
	m, err := newMetrics(opts.Registry, opts.Server, opts.NodeName, opts.Serving)
	if err != nil {
		return nil, err
	}
	guard := newCallGuard(nvmlmig.NewPartitioner(opts.NVML), opts.NVMLCallTimeout, opts.shutdownGrace, opts.callAfter, func(call string) {
		m.callTimeouts.WithLabelValues(call).Inc()
	})
	return &Agent{
		opts:    opts,
		part:    guard,
		guard:   guard,
		metrics: m,
		log:     klog.Background().WithName("agent"),
		trigger: make(chan struct{}, 1),
		held:    map[int]hold{},
		hangs:   newHangs(),
	}, nil
}

// Handler serves /metrics and /healthz; the process serves it
// CountAllocatableWrite counts one outcome of the device plugin's write
// of the Node's allocatable (deviceplugin.StatusPublisher) on the agent's
// /metrics: the agent owns every migflex_agent_ metric, and stays free of
// device-plugin packages.
func (a *Agent) CountAllocatableWrite(result string) {
	a.metrics.allocatable.WithLabelValues(result).Inc()
}

// CountNVMLCallTimeout counts one NVML call that did not return within
// --nvml-call-timeout outside the agent's loop (the health watcher's, DRA
// Prepare's) on the agent's migflex_agent_nvml_call_timeouts_total.
func (a *Agent) CountNVMLCallTimeout(call string) {
	a.metrics.callTimeouts.WithLabelValues(call).Inc()
}

// (internal/nodeagent, through internal/platform/metricsserver).
func (a *Agent) Handler() http.Handler {
	return metricsserver.Handler(a.opts.Registry, &a.live, "the agent is not running its loop")
}

// Run serves the node's current devices at once, then watches the Node and
// the config file and reconciles until ctx is cancelled; an Agent runs
// once. It returns an error only when it cannot start (the GPUs cannot be
// read) or the server of the devices stops with one.
func (a *Agent) Run(ctx context.Context) error {
	a.log = klog.FromContext(ctx).WithName("agent").WithValues("node", a.opts.NodeName)
	ctx = klog.NewContext(ctx, a.log)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A GPU call under way when the agent stops is waited for a little
	// (a rollback finishes), a hung one is not.
	a.guard.SetLogger(a.log)
	context.AfterFunc(ctx, a.guard.Stop)
	var wg sync.WaitGroup
	defer wg.Wait()

	// Serve what the GPUs have before anything else, so a restarted agent
	// does not zero the node's resources while it catches up.
	gpus, err := a.guard.discover(a.opts.NVML)
	if err != nil {
		return fmt.Errorf("reading the GPUs: %w", err)
	}
	a.gpus = gpus
	a.metrics.instances.setLayout(gpus)
	a.applySharingAtStart(ctx)
	if err := a.opts.Server.Serve(ctx, gpus); err != nil {
		a.log.Error(err, "Serving the current layout")
	}
	srvErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		srvErr <- a.opts.Server.Run(ctx)
	}()
	a.live.Store(true)
	defer a.live.Store(false)
	a.log.Info("Serving the current layout", "gpus", len(gpus))

	factory := informers.NewSharedInformerFactoryWithOptions(a.opts.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", a.opts.NodeName).String()
		}))
	informer := factory.Core().V1().Nodes().Informer()
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { a.poke() },
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*corev1.Node)
			n, ok2 := newObj.(*corev1.Node)
			if !ok1 || !ok2 || concerns(o, n, a.opts.FieldManager) {
				a.poke()
			}
		},
		DeleteFunc: func(any) { a.poke() },
	}); err != nil {
		return fmt.Errorf("watching Node %s: %w", a.opts.NodeName, err)
	}
	a.nodes = cache.NewIntegerResourceVersionMutationCache(a.log, informer.GetStore(), informer.GetIndexer(), time.Minute, false)
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	defer cancel() // before Shutdown, which waits for the informer

	for _, f := range []struct{ what, path string }{{"config file", a.opts.ConfigFile}, {"sharing config", a.opts.SharingConfig}} {
		if f.path == "" {
			continue
		}
		stop, err := a.watchFile(f.path)
		if err != nil {
			// The file may be mounted later; the resync reads it anyway.
			a.log.Error(err, "Watching the "+f.what+"; changes are picked up at the next resync", "file", f.path, "resync", a.opts.ResyncInterval)
		} else {
			defer stop()
		}
	}

	synced := make(chan struct{})
	go func() {
		cache.WaitForCacheSync(ctx.Done(), informer.HasSynced)
		close(synced)
	}()
	select {
	case <-synced:
	case err := <-srvErr:
		if err != nil {
			return fmt.Errorf("serving the devices: %w", err)
		}
		return nil
	}
	if ctx.Err() != nil {
		return nil
	}
	return a.loop(ctx, srvErr)
}

// poke asks the loop for a reconcile; requests coalesce.
func (a *Agent) poke() {
	select {
	case a.trigger <- struct{}{}:
	default:
	}
}

// loop reconciles on every trigger, retry and resync, and while it waits
// for publication on every sign of it, and refreshes the report when
// device health changes.
func (a *Agent) loop(ctx context.Context, srvErr <-chan error) error {
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	resync := time.NewTicker(a.opts.ResyncInterval)
	defer resync.Stop()
	var inUse <-chan time.Time
	if a.opts.InUseInterval > 0 {
		t := time.NewTicker(a.opts.InUseInterval)
		defer t.Stop()
		inUse = t.C
	}
	var instances <-chan struct{}
	if ic, ok := a.opts.Server.(instanceChanger); ok {
		instances = ic.InstanceChanges()
	}
	// lapse fires at the reservation's deadline: the agent ends it itself.
	var lapse <-chan time.Time
	var armed time.Time
	a.poke()
	for {
		cause := causeReconcile
		if !a.resvUntil.Equal(armed) {
			armed, lapse = a.resvUntil, nil
			if !armed.IsZero() {
				lapse = a.opts.lapseAfter(max(armed.Sub(a.opts.now()), 0))
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-lapse:
			armed, lapse = time.Time{}, nil
			a.honourReservation(a.node())
			continue
		case <-inUse:
			a.pollInUse(ctx)
			continue
		case err := <-srvErr:
			if err != nil {
				return fmt.Errorf("serving the devices: %w", err)
			}
			return nil
		case <-a.opts.Server.Changes():
			a.refresh(ctx, causeHealth)
			continue
		case <-a.hangs.signal:
			a.recordHangs(ctx, time.Now())
			continue
		case <-a.opts.Server.Visibility():
			// What the scheduler sees changed: a wait for publication
			// ends now rather than at the next retry. Nothing else
			// depends on it.
			if a.awaiting == nil {
				continue
			}
		case <-a.guard.Returned():
			// A GPU call that did not return in time did: its GPU is
			// reconciled from what NVML reports now.
		case <-a.trigger:
		case <-retry.C:
		case <-resync.C:
			a.liftBusyHolds()
		case <-instances:
			// The server made or destroyed an instance (dynamic mode's
			// Prepare or Unprepare): the GPUs are read again now.
			cause = causeInstances
		}
		began := time.Now()
		if d, ok := a.nextRetry(a.step(ctx, cause), began, time.Now()); ok {
			retry.Reset(d)
		} else {
			retry.Stop()
		}
		// Hangs reported while the Node was not there yet.
		a.recordHangs(ctx, time.Now())
	}
}

// node returns the Node from the cache, or nil.
func (a *Agent) node() *corev1.Node {
	obj, ok, err := a.nodes.GetByKey(a.opts.NodeName)
	if err != nil || !ok {
		return nil
	}
	n, _ := obj.(*corev1.Node)
	return n
}

// step reconciles once and reports, cause being why (the writes
// metric's label); it returns whether to retry soon.
func (a *Agent) step(ctx context.Context, cause string) bool {
	node := a.node()
	if node == nil {
		a.log.Info("Node not found; waiting for it", "node", a.opts.NodeName)
		return false
	}
	if !a.known || node.UID != a.nodeUID {
		// What the Node shows stands in for what this process reported,
		// so a restart does not repeat the last Event; a Node deleted and
		// created again starts from its own labels too.
		a.shown = status{State: node.Labels[nodeinfo.LabelMigConfigState], Reason: node.Annotations[nodeinfo.AnnotationReason]}
		a.reported = withoutNote(a.shown, node)
		a.known, a.nodeUID = true, node.UID
		a.lastSourceKnown, a.awaiting, a.published = false, nil, ""
		a.metrics.setState(a.shown.State)
	}
	// Before the reconcile, which serves the layout under it.
	a.applySharing(ctx, node)
	start := time.Now()
	out := a.reconcile(ctx, node, a.reported)
	if ctx.Err() != nil {
		return false // shutting down; what was done stays, the next agent reports it
	}
	a.metrics.reconciles.WithLabelValues(out.result).Inc()
	a.metrics.duration.WithLabelValues(out.result).Observe(time.Since(start).Seconds())
	a.gpus = out.gpus
	a.metrics.instances.setLayout(out.gpus)
	a.honourReservation(node)
	// The reconcile may have reported on the Node (see announce): what
	// follows compares with the Node as it is now.
	if n := a.node(); n != nil && n.UID == node.UID {
		node = n
	}
	shown := a.present(ctx, node, out)
	retry := out.retry || shown.retry
	// Events follow the report: an Event the Node's state does not show
	// yet would tell users of a change they cannot see, and the retry
	// after a failed report, which still compares with the old state,
	// would record it a second time.
	if err := a.report(ctx, node, shown.status, cause); err != nil {
		a.metrics.errors.WithLabelValues(stageReport).Inc()
		a.log.Error(err, "Reporting on the Node; its Events wait for the next report", "events", len(shown.events))
		retry = true
		a.unsent = keepUnsent(a.unsent, shown.events)
	} else {
		a.reported, a.shown = out.status, shown.status
		a.metrics.setState(a.shown.State)
		// The Node shows the state now and a restarted agent compares
		// with what the Node shows, so an Event dropped here would never
		// be recorded: a stop that comes between the report and its
		// Events waits for them, a bounded while.
		evCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), eventsAfterStop)
		for _, ev := range withUnsent(a.unsent, shown.events) {
			a.recordEvent(evCtx, node, ev)
		}
		cancel()
		a.unsent = nil
	}
	log := a.log.WithValues("result", out.result, "state", shown.status.State, "took", time.Since(start))
	if shown.status.Reason != "" {
		log = log.WithValues("reason", shown.status.Reason)
	}
	log.Info("Reconciled")
	return retry
}

// refresh reports again with the last status, for a change of device
// health or of the pods holding devices.
func (a *Agent) refresh(ctx context.Context, cause string) {
	node := a.node()
	if node == nil || !a.known {
		return
	}
	if err := a.report(ctx, node, a.shown, cause); err != nil {
		a.metrics.errors.WithLabelValues(stageReport).Inc()
		a.log.Error(err, "Reporting on the Node", "cause", cause)
	}
}

// pollInUse asks the kubelet which devices pods hold and, when that
// changed, reports it on the Node. A failure keeps what was known and is
// logged once until it changes.
func (a *Agent) pollInUse(ctx context.Context) {
	assignments, err := a.opts.PodResources.List(ctx)
	if err != nil {
		if msg := err.Error(); msg != a.inUseErr {
			a.inUseErr = msg
			a.log.Error(err, "Asking the kubelet which devices pods hold; the layout annotation keeps what it last knew")
		}
		return
	}
	a.inUseErr = ""
	changed := a.noteAssignments(assignments)
	// A device a pod holds that the GPUs last read do not have was made
	// since: on a DRA node in dynamic mode each claim's Prepare makes its
	// instance. Read the GPUs again (a reconcile), so that the layout
	// annotation lists it with its pod; once per new set, not every poll.
	if unknown := unknownHeld(a.gpus, a.inUse); !slices.Equal(unknown, a.unknownHeld) {
		a.unknownHeld = unknown
		if len(unknown) > 0 {
			a.log.V(2).Info("Pods hold devices the GPUs last read do not have; reading them again", "devices", unknown)
			a.poke()
		}
	}
	if changed {
		// A reserved GPU a pod left may be offered, or withheld.
		a.honourReservation(a.node())
		a.refresh(ctx, causeInUse)
	}
}

// unknownHeld is the devices of held (pods by device ID) that gpus has
// neither as a GPU nor as a MIG device, sorted.
func unknownHeld(gpus []mig.GPU, held map[string][]string) []string {
	known := map[string]bool{}
	for _, g := range gpus {
		known[g.UUID] = true
		for _, in := range g.Instances {
			known[in.UUID] = true
		}
	}
	var out []string
	for id := range held {
		if !known[id] {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// noteAssignments records which pods hold which devices, and returns
// whether that changed. The pods holding replicas of a shared device are
// all the device's: the layout annotation names every pod on an instance.
func (a *Agent) noteAssignments(assignments []podresources.Assignment) bool {
	next, byID := map[string][]string{}, map[string][]string{}
	for _, as := range assignments {
		key := as.PodKey()
		if id := deviceOf(as.DeviceID); !slices.Contains(next[id], key) {
			next[id] = append(next[id], key)
		}
		if !slices.Contains(byID[as.DeviceID], key) {
			byID[as.DeviceID] = append(byID[as.DeviceID], key)
		}
	}
	for _, m := range []map[string][]string{next, byID} {
		for _, pods := range m {
			slices.Sort(pods)
		}
	}
	// The replicas pods hold can change while the instance's holders
	// stay the same: the layout annotation counts them too.
	changed := false
	if !maps.EqualFunc(a.inUseByID, byID, slices.Equal[[]string]) {
		a.inUseByID = byID
		a.metrics.instances.setInUse(byID)
		changed = true
	}
	if !maps.EqualFunc(a.inUse, next, slices.Equal[[]string]) {
		a.inUse = next
		a.metrics.setInUse(next)
		changed = true
	}
	return changed
}

// report applies the agent's labels and annotations for st and the last
// discovered layout; cause is why, for the writes metric.
func (a *Agent) report(ctx context.Context, node *corev1.Node, st status, cause string) error {
	labels, annotations, err := ownedMetadata(st, a.gpus, servedHealth(a.opts.Server.Served()), a.inUse, sharedDevices(a.opts.Server, a.inUseByID), a.opts.Server.Labels(a.gpus))
	if err != nil {
		return err
	}
	sent, err := a.applyMetadata(ctx, node, labels, annotations)
	if sent {
		a.metrics.writes.WithLabelValues(cause).Inc()
	}
	if sent && err == nil {
		a.log.V(2).Info("Updated the Node's labels and annotations", "cause", cause)
	}
	return err
}

// watchFile pokes the loop when anything in the directory of path (or in
// path, a directory) changes: a mounted ConfigMap is updated by swapping a
// symlink next to the file, not by writing it.
func (a *Agent) watchFile(path string) (stop func(), err error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		dir = path
	}
	if err := w.Add(dir); err != nil {
		w.Close()
		return nil, fmt.Errorf("watching %s: %w", dir, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case _, ok := <-w.Events:
				if !ok {
					return
				}
				a.poke()
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				a.log.Error(err, "Watching a config file", "file", path)
				a.poke()
			}
		}
	}()
	return func() { w.Close(); <-done }, nil
}

// maxUnsent bounds the Events kept while reports fail: the oldest go first.
const maxUnsent = 8

// keepUnsent adds to the Events waiting for a report those of evs of
// another type or reason: a reconcile after a failed report finds the
// change done and would only repeat what the waiting Event says, less
// precisely ("the layout is in place" after "GPU 0: create 3g.40gb").
func keepUnsent(unsent, evs []event) []event {
	unsent = withUnsent(unsent, evs)
	if len(unsent) > maxUnsent {
		unsent = slices.Clone(unsent[len(unsent)-maxUnsent:])
	}
	return unsent
}

// withUnsent is what to record once a report succeeded: the Events that
// waited for it, then those of evs of another type or reason.
func withUnsent(unsent, evs []event) []event {
	out := slices.Clone(unsent)
	for _, ev := range evs {
		if !slices.ContainsFunc(unsent, func(u event) bool { return u.Type == ev.Type && u.Reason == ev.Reason }) {
			out = append(out, ev)
		}
	}
	return out
}
