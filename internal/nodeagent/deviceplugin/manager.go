package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/sharing"
	"github.com/migflex/migflex/internal/nodeagent/health"
)

// firstRetry is the first delay before a failed registration is retried;
// it doubles up to Options.RetryInterval. A kubelet that just created its
// socket may not accept connections yet, and a short first retry keeps
// re-registration well under a second.
const firstRetry = 10 * time.Millisecond

// ResourceStatus is what the Manager serves for one resource.
type ResourceStatus struct {
	Name   string `json:"name"`
	Socket string `json:"socket"`
	// Registered is true once the kubelet accepted the current server.
	Registered    bool      `json:"registered"`
	RegisteredAt  time.Time `json:"registeredAt,omitzero"`
	RegisterError string    `json:"registerError,omitempty"`
	// Devices is empty, not absent, for a resource whose devices went away:
	// it stays registered so the kubelet drops its capacity to 0 at once.
	Devices []DeviceStatus `json:"devices"`
}

// DeviceStatus is one served device and its health. Healthy is the
// device's own health (no fault); Draining is separate: a draining device
// is sent to the kubelet as unhealthy while it drains, whatever Healthy
// says, and goes back to its own health after.
type DeviceStatus struct {
	Device
	Healthy bool          `json:"healthy"`
	Fault   *health.Fault `json:"fault,omitempty"`
	// Draining: the device's GPU is about to be repartitioned (see
	// Manager.Drain).
	Draining bool `json:"draining,omitempty"`
}

// Manager serves a GPU layout to the kubelet: one gRPC server per resource,
// kept in step with layout changes (Update), device health and kubelet
// restarts (Run).
type Manager struct {
	opts    Options
	alloc   allocator
	changes chan struct{}
	// token is in every socket name of this Manager (see socketName).
	token string
	// kick asks Run's registrar for a pass (coalesced).
	kick chan struct{}
	// gate is shared by every server's Allocate and taken by Drain (see
	// Drain).
	gate sync.RWMutex
	// settle is Drain's; a field so tests can shorten it.
	settle time.Duration

	mu      sync.Mutex
	log     klog.Logger
	running bool
	servers map[string]*server
	// draining are the device IDs being drained (see Drain), withheld
	// those a reservation keeps from the kubelet (see Withhold); servers
	// treat both alike (blockedLocked).
	draining map[string]bool
	withheld map[string]bool

	// subs are Subscribe's channels, signalled with changes; subMu, not
	// mu, guards them, as notify runs with and without mu held.
	subMu sync.Mutex
	subs  []chan struct{}

	// shareMu guards the sharing config and the layout last served, which
	// Share applies it to; taken before mu.
	shareMu sync.Mutex
	sharing *sharing.Config
	gpus    []mig.GPU
}

// New validates opts, fills in defaults and returns a Manager serving
// nothing until Update gives it a layout.
func New(opts Options) (*Manager, error) {
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("device plugin options: %w", err)
	}
	return &Manager{
		opts:     opts,
		token:    newToken(),
		alloc:    newAllocator(opts),
		changes:  make(chan struct{}, 1),
		kick:     make(chan struct{}, 1),
		settle:   drainSettle,
		log:      klog.Background().WithName("deviceplugin"),
		servers:  map[string]*server{},
		draining: map[string]bool{},
		withheld: map[string]bool{},
	}, nil
}

// Serve is the one place the MIG strategy applies: it names gpus' devices
// as resources under Options.MigStrategy (Resources) and serves them. When
// the layout cannot be served under the strategy it returns the reason,
// and the previous devices that still exist stay served.
func (m *Manager) Serve(ctx context.Context, gpus []mig.GPU) error {
	m.shareMu.Lock()
	defer m.shareMu.Unlock()
	m.gpus = slices.Clone(gpus)
	sh, err := m.plan(gpus)
	if err != nil {
		m.Retain(ctx, deviceIDs(gpus))
		return m.cannotServe(fmt.Errorf("serving GPU layout, keeping the previous devices that still exist: %w", err))
	}
	if err := m.update(ctx, sh.res, sh.info); err != nil {
		return m.cannotServe(err)
	}
	return nil
}

// plan names gpus' devices as resources and shares them under the current
// sharing config; m.shareMu is held.
func (m *Manager) plan(gpus []mig.GPU) (shared, error) {
	res, err := Resources(gpus, m.opts.MigStrategy)
	if err != nil {
		return shared{}, err
	}
	sh, err := share(gpus, res, m.sharing, m.opts.MPSRoot)
	if err != nil {
		return shared{}, fmt.Errorf("sharing config: %w", err)
	}
	return sh, nil
}

// Servable says why the layout gpus would have cannot be served under
// Options.MigStrategy and the sharing config, or nil; nothing changes.
func (m *Manager) Servable(gpus []mig.GPU) error {
	m.shareMu.Lock()
	defer m.shareMu.Unlock()
	if _, err := m.plan(gpus); err != nil {
		return m.cannotServe(err)
	}
	return nil
}

// cannotServe says why a layout cannot be served; m.shareMu is held.
func (m *Manager) cannotServe(err error) error {
	if m.sharing != nil {
		return fmt.Errorf("the layout cannot be served under --mig-strategy=%s and the sharing config: %w", m.opts.MigStrategy, err)
	}
	return fmt.Errorf("the layout cannot be served under --mig-strategy=%s: %w", m.opts.MigStrategy, err)
}

// Update serves a new set of devices by resource (see Serve, which names
// them): servers for
// new resources start (and register in the background), resources whose
// devices changed send the new list, and a resource that disappears keeps
// its registration with an empty list so the kubelet drops its capacity to
// 0 at once. A draining device that is not in the new set stops draining;
// one that still is keeps draining until Undrain.
// Before Run, it only records the devices. Update never waits for the
// kubelet.
func (m *Manager) Update(ctx context.Context, res map[string][]Device) error {
	return m.update(ctx, res, nil)
}

// update is Update with what each shared resource's server needs to
// allocate its replicas.
func (m *Manager) update(ctx context.Context, res map[string][]Device, info map[string]shareInfo) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	log := klog.FromContext(ctx).WithName("deviceplugin")
	for _, name := range slices.Sorted(maps.Keys(res)) {
		if _, ok := m.servers[name]; !ok {
			m.servers[name] = newServer(m.log, name, m.token, m.opts, m.alloc, &m.gate)
			log.Info("New resource", "resource", name)
		}
	}
	// Health first, so each server sends its new list once, with the faults
	// that apply to the new devices.
	var faults map[string]health.Fault
	if h := m.opts.Health; h != nil {
		// Replicas share their device's health: one target per device.
		var targets []health.Target
		seen := map[string]bool{}
		for _, devs := range res {
			for _, d := range devs {
				if id := d.Underlying(); !seen[id] {
					seen[id] = true
					targets = append(targets, health.Target{ID: id, GPU: d.GPUUUID, MIG: d.MIG, GI: d.GI, CI: d.CI, Profile: d.Profile})
				}
			}
		}
		h.SetTargets(targets)
		faults = h.Unhealthy()
	}
	// Draining ends for devices the new layout no longer has.
	served := map[string]bool{}
	for _, devs := range res {
		for _, d := range devs {
			served[d.Underlying()] = true
		}
	}
	maps.DeleteFunc(m.draining, func(id string, _ bool) bool { return !served[id] })
	for name, s := range m.servers {
		devs := res[name]
		if s.set(devs, faults, m.blockedLocked(), info[name]) {
			log.Info("Devices changed", "resource", name, "devices", len(devs))
		}
	}
	var errs error
	if m.running {
		errs = m.startLocked()
		m.kickRegistrar()
	}
	m.notify()
	return errs
}

// deviceIDs are the IDs of the devices gpus have under any strategy: the
// MIG devices of GPUs with MIG enabled, the other GPUs whole.
func deviceIDs(gpus []mig.GPU) map[string]bool {
	ids := map[string]bool{}
	for _, g := range gpus {
		if !g.MigEnabled {
			ids[g.UUID] = true
		}
		for _, in := range instancesOf(g) {
			ids[in.UUID] = true
		}
	}
	return ids
}

// Retain stops serving the devices whose IDs are not in ids and changes
// nothing else, for a layout that cannot be served: the previous devices
// stay served, but one whose instance is gone (changed behind the agent's
// back) must not be handed to a pod.
func (m *Manager) Retain(ctx context.Context, ids map[string]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	changed := false
	for name, s := range m.servers {
		if gone := s.keepOnly(ids); len(gone) > 0 {
			klog.FromContext(ctx).Info("Devices gone; no longer served", "resource", name, "devices", gone)
			changed = true
		}
	}
	if changed {
		m.notify()
	}
}

// Resources returns every served resource, the zeroed ones included, with
// its devices and their health, ordered by name.
func (m *Manager) Resources() []ResourceStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]ResourceStatus, 0, len(m.servers))
	for _, name := range slices.Sorted(maps.Keys(m.servers)) {
		out = append(out, m.servers[name].status())
	}
	return out
}

// Changes signals (coalesced) whenever Resources may have changed: a new
// layout, a health change, or a registration.
func (m *Manager) Changes() <-chan struct{} { return m.changes }

// Subscribe returns a channel of its own that is signalled (coalesced)
// whenever Changes is, for a reader besides the agent.
func (m *Manager) Subscribe() <-chan struct{} {
	c := make(chan struct{}, 1)
	m.subMu.Lock()
	defer m.subMu.Unlock()
	m.subs = append(m.subs, c)
	return c
}

func (m *Manager) notify() {
	select {
	case m.changes <- struct{}{}:
	default:
	}
	m.subMu.Lock()
	defer m.subMu.Unlock()
	for _, c := range m.subs {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// Run serves the resources until ctx is cancelled: it starts and registers
// every server, follows the health source, re-registers everything when the
// kubelet restarts, and stops all servers on the way out. Registration runs
// in a goroutine of its own, so a kubelet that hangs in Register delays
// nothing but the registration. It returns nil on cancellation and an error
// only if it cannot start at all.
func (m *Manager) Run(ctx context.Context) error {
	log := klog.FromContext(ctx).WithName("deviceplugin")
	ctx = klog.NewContext(ctx, log)
	m.mu.Lock()
	if m.running {
		m.mu.Unlock()
		return errors.New("device plugin manager is already running")
	}
	m.running = true
	m.log = log
	for _, s := range m.servers {
		s.log = log.WithValues("resource", s.resource)
	}
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.running = false
		for _, s := range m.servers {
			s.stop()
		}
		log.Info("Stopped serving devices")
	}()

	if err := os.MkdirAll(m.opts.PluginDir, 0o750); err != nil {
		return fmt.Errorf("creating device plugin directory: %w", err)
	}
	m.removeEarlierSockets(log)
	// Watch before the first registration, so a kubelet that starts in
	// between is not missed.
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching for kubelet restarts: %w", err)
	}
	defer w.Close()
	if err := w.Add(m.opts.PluginDir); err != nil {
		return fmt.Errorf("watching device plugin directory %s: %w", m.opts.PluginDir, err)
	}

	var healthChanges <-chan struct{}
	if h := m.opts.Health; h != nil {
		healthChanges = h.Changes()
	}

	// Registered after the deferred stop of every server, so it runs
	// first: no registration is in flight once the servers stop.
	rctx, rcancel := context.WithCancel(ctx)
	var rwg sync.WaitGroup
	rwg.Add(1)
	go func() {
		defer rwg.Done()
		m.registrar(rctx)
	}()
	defer func() {
		rcancel()
		rwg.Wait()
	}()
	m.kickRegistrar()

	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("device plugin directory watch closed")
			}
			// The kubelet removes every socket and then creates its own:
			// handle the whole burst with one restart.
			scope := m.restartScope(log, ev)
			for drained := false; !drained; {
				select {
				case ev := <-w.Events:
					scope = max(scope, m.restartScope(log, ev))
				default:
					drained = true
				}
			}
			if scope != restartNone {
				m.restart(ctx, scope)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("device plugin directory watch closed")
			}
			log.Error(err, "Watching device plugin directory")
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				// A kubelet restart may be among the lost events.
				m.restart(ctx, restartAll)
			}
		case <-healthChanges:
			m.mu.Lock()
			m.refreshHealthLocked()
			m.mu.Unlock()
		}
	}
}

// restartScope says which servers must be restarted because of a change
// in the plugin directory.
type restartScope int

const (
	restartNone restartScope = iota
	// restartStale restarts the servers registered with another kubelet
	// than the one on the current kubelet.sock.
	restartStale
	// restartAll restarts every server.
	restartAll
)

// restartScope maps a directory event to what must be restarted. A new
// kubelet.sock means a new kubelet, which knows only the servers that
// already registered with it (our own restart on the removal of our sockets
// may have got there first); servers not registered at all are the
// registrar's, which is asked for a pass. A removed socket of ours means
// the kubelet restarted, or is about to. Our own restarts remove sockets
// too, but serve on new ones (see socketName): the removed one is no
// longer a current server's.
func (m *Manager) restartScope(log klog.Logger, ev fsnotify.Event) restartScope {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ev.Name == m.kubeletSocket() {
		if !ev.Has(fsnotify.Create) {
			return restartNone
		}
		fi, err := os.Stat(ev.Name)
		if err != nil {
			return restartNone // gone again; its successor sends its own event
		}
		for _, s := range m.servers {
			if s.registeredElsewhere(fi) {
				log.Info("Kubelet socket created; registering again")
				return restartStale
			}
		}
		log.V(2).Info("Kubelet socket created; registering what is not registered yet")
		m.kickRegistrar()
		return restartNone
	}
	if !ev.Has(fsnotify.Remove) && !ev.Has(fsnotify.Rename) {
		return restartNone
	}
	for _, s := range m.servers {
		if socket, ok := s.servingOn(); !ok || socket != ev.Name {
			continue
		}
		log.Info("Plugin socket removed; registering again", "socket", ev.Name)
		return restartAll
	}
	return restartNone
}

// restart stops the servers in scope, then serves them again and has the
// registrar register them. All are stopped before any registers (the
// registrar reads what to register under m.mu, and a registration of a
// stopped server is discarded): an old stream closing after the new
// registration would make the kubelet mark the devices unhealthy.
func (m *Manager) restart(ctx context.Context, scope restartScope) {
	m.mu.Lock()
	defer m.mu.Unlock()
	kubelet, err := os.Stat(m.kubeletSocket())
	for _, s := range m.servers {
		if scope == restartAll || err != nil || s.registeredElsewhere(kubelet) {
			s.stop()
		}
	}
	if err := m.startLocked(); err != nil {
		klog.FromContext(ctx).Error(err, "Serving again after kubelet restart")
	}
	m.kickRegistrar()
	m.notify()
}

// startLocked starts the servers that are not serving. It never waits for
// the kubelet: registration is the registrar's.
func (m *Manager) startLocked() error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(m.servers)) {
		if err := m.servers[name].start(); err != nil {
			errs = append(errs, fmt.Errorf("serving %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

func (m *Manager) kickRegistrar() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// registrar registers servers with the kubelet whenever asked, until ctx
// ends. A pass that leaves something undone is retried after a delay that
// starts at firstRetry and doubles up to Options.RetryInterval; it starts
// again from firstRetry once a pass leaves nothing undone.
func (m *Manager) registrar(ctx context.Context) {
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	backoff := firstRetry
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.kick:
		case <-retry.C:
		}
		if m.registerPass(ctx) {
			backoff = firstRetry
			retry.Stop()
			continue
		}
		if ctx.Err() == nil {
			retry.Reset(backoff)
			backoff = min(2*backoff, m.opts.RetryInterval)
		}
	}
}

// registerPass starts the servers that are not serving and registers those
// not registered, one after the other. The Register calls, which wait for
// the kubelet, run without m.mu held. Registration is only tried when
// kubelet.sock exists; its creation triggers a restart anyway. It reports
// whether nothing is left to retry.
func (m *Manager) registerPass(ctx context.Context) bool {
	type job struct {
		name string
		s    *server
		gen  uint64
	}
	m.mu.Lock()
	log := m.log
	startErr := m.startLocked()
	kubelet := m.kubeletSocket()
	kubeletFile, statErr := os.Stat(kubelet)
	var jobs []job
	settling := false
	for _, name := range slices.Sorted(maps.Keys(m.servers)) {
		s := m.servers[name]
		gen, ok := s.needsRegistration()
		switch {
		case s.settling():
			settling = true // kept down after a failure; a later pass serves it
		case !ok:
		case statErr != nil:
			log.V(2).Info("Kubelet socket absent; registration waits for it", "resource", name, "socket", kubelet)
		default:
			jobs = append(jobs, job{name, s, gen})
		}
	}
	m.mu.Unlock()
	if startErr != nil {
		log.Error(startErr, "Serving devices; will retry")
	}

	done := startErr == nil && !settling
	for _, j := range jobs {
		start := time.Now()
		err := j.s.register(ctx, kubeletFile, j.gen)
		switch {
		case errors.Is(err, errStale):
			// Stopped meanwhile: a restart serves it again and asks for
			// another pass.
			log.V(2).Info("Registration overtaken by a restart", "resource", j.name)
		case err != nil:
			log.Info("Registration failed; will retry", "resource", j.name, "err", err)
			done = false
		default:
			socket, _ := j.s.servingOn()
			log.Info("Registered with kubelet", "resource", j.name, "socket", socket, "took", time.Since(start))
			m.notify()
		}
	}
	return done
}

// removeEarlierSockets removes the sockets an earlier agent left behind
// when it did not stop cleanly; nothing of this Manager serves yet. The
// kubelet removes them only when it restarts.
func (m *Manager) removeEarlierSockets(log klog.Logger) {
	paths, err := filepath.Glob(filepath.Join(m.opts.PluginDir, socketGlob(m.opts.SocketPrefix)))
	if err != nil {
		log.Error(err, "Listing earlier plugin sockets")
		return
	}
	for _, p := range paths {
		if fi, err := os.Lstat(p); err != nil || fi.Mode().Type() != fs.ModeSocket {
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			log.Error(err, "Removing an earlier plugin socket", "socket", p)
			continue
		}
		log.V(2).Info("Removed an earlier plugin socket", "socket", p)
	}
}

func (m *Manager) kubeletSocket() string {
	return filepath.Join(m.opts.PluginDir, filepath.Base(pluginapi.KubeletSocket))
}

func (m *Manager) refreshHealthLocked() {
	faults := m.opts.Health.Unhealthy()
	changed := false
	for name, s := range m.servers {
		if s.setHealth(faults) {
			changed = true
			m.log.V(2).Info("Device health changed", "resource", name)
		}
	}
	if changed {
		m.notify()
	}
}
