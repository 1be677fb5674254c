// Package draplugin is migflex's DRA kubelet plugin: it publishes the
// node's GPU layout as ResourceSlices, prepares and unprepares the claims
// the kubelet hands it, and keeps what it prepared in a checkpoint on the
// node. It speaks the kubelet's protocols through
// k8s.io/dynamic-resource-allocation/kubeletplugin; the devices are the
// pure dra package's, and the CDI specs those of dra/cdi.
//
// The agent drives it as it drives the device plugin: Publish on every
// layout change (no restart: the ResourceSlice is updated in place),
// Drain and Undrain around a repartition, Prepared and Published for its
// busy check and its report, Visible to know the scheduler can see the
// layout, and SliceChanges to learn when to ask Visible again.
package draplugin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/nodeagent/cdi"
)

// Driver is the running kubelet plugin. Create it with Start.
type Driver struct {
	opts   Options
	helper *kubeletplugin.Helper
	cdi    *cdi.Writer
	ckpt   checkpoint
	logger klog.Logger
	fatal  chan error
	// stopBackground ends the periodic ReleaseStale and the slice
	// informer; background is done when both have stopped.
	stopBackground context.CancelFunc
	background     sync.WaitGroup
	// slices is the API server's view of this node's ResourceSlices of
	// the driver (see watchSlices); sliceChanges signals its changes.
	slices       cache.SharedIndexInformer
	sliceChanges chan struct{}
	// instanceChanges signals (coalesced) that dynamic mode made or
	// destroyed a MIG instance (see InstanceChanges).
	instanceChanges chan struct{}

	// mu guards everything below. Prepare and Unprepare hold it from
	// their decision until the checkpoint is saved, so Drain, which
	// takes it after marking, returns only once every Prepare that could
	// have accepted a drained device has answered.
	mu        sync.Mutex
	started   bool
	devices   []dra.Device
	byName    map[string]dra.Device
	unhealthy map[string]dra.Fault
	draining  map[string]bool // by UUID
	policy    dra.UnhealthyPolicy
	prepared  map[string]dra.PreparedClaim
	published resourceslice.DriverResources
	// mode is what is published: Options.Mode, or static once the API
	// server is seen to drop partitionable devices (fallback says why).
	mode     Mode
	fallback string
	// offers and offered (by device name) are dynamic mode's devices of
	// the current GPUs; adopted are the instances found at start that no
	// prepared claim names and that could not be destroyed (in use),
	// whose overlapping placements are not published; repaired is set
	// once that start-up check ran.
	offers   []dra.Offer
	offered  map[string]dra.OfferedDevice
	adopted  []adoptedInstance
	repaired bool
	// allocated are the devices each API claim (by UID) has allocated
	// in this pool, prepared or not (ClaimEvents): use to steer by.
	allocated map[string][]string
	changed   chan struct{} // closed and replaced on every publication
	// gpus are the GPUs last published (as read from NVML in dynamic
	// mode), for the reservation's decision (dra.Held).
	gpus []mig.GPU
	// resv is the node's reservation (Reserve); resvHeld the devices the
	// last publication kept from new claims for it, and resvHeldFor the
	// pod UID their taint named. taintsDropped is set once the API server
	// is seen to drop device taints: the reserved devices are then left
	// out of the slices instead, whatever the unhealthy-device policy.
	resv          *reservation
	resvHeld      []string
	resvHeldFor   string
	taintsDropped bool
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// Start loads the checkpoint, removes CDI specs of claims it does not list
// (left by a Prepare that failed half way), registers with the kubelet, and
// releases prepared claims gone from the API server now and every
// Options.StaleClaimCheck (ReleaseStale).
// It publishes nothing until the first Publish. Stop, or ctx's end, stops
// it.
func Start(ctx context.Context, opts Options) (*Driver, error) {
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("DRA driver: %w", err)
	}
	w, err := cdi.NewWriter(opts.CDIDir, opts.CDIKind, opts.Editor)
	if err != nil {
		return nil, fmt.Errorf("DRA driver: %w", err)
	}
	d := &Driver{
		opts: opts, cdi: w, ckpt: newCheckpoint(opts.StateDir, opts.DriverName, opts.NodeName),
		logger: klog.FromContext(ctx).WithName("dra"), fatal: make(chan error, 1),
		byName: map[string]dra.Device{}, draining: map[string]bool{}, changed: make(chan struct{}),
		policy: opts.Unhealthy, sliceChanges: make(chan struct{}, 1), instanceChanges: make(chan struct{}, 1), mode: opts.Mode,
		allocated: map[string][]string{},
	}
	if d.policy == UnhealthyAuto {
		d.policy = dra.UnhealthyTaint
	}
	var restored string
	if d.prepared, restored, err = d.ckpt.load(); err != nil {
		return nil, fmt.Errorf("DRA driver: %w", err)
	}
	if restored != "" {
		d.logger.Error(nil, "Restored the checkpoint from its copy", "why", restored)
	}
	if err := d.removeStraySpecs(); err != nil {
		return nil, fmt.Errorf("DRA driver: %w", err)
	}
	if d.mode == ModeDynamic {
		d.checkPartitionable(ctx)
	}
	d.helper, err = kubeletplugin.Start(klog.NewContext(ctx, d.logger), d,
		kubeletplugin.DriverName(opts.DriverName),
		kubeletplugin.NodeName(opts.NodeName),
		kubeletplugin.NodeUID(opts.NodeUID),
		kubeletplugin.KubeClient(opts.KubeClient),
		kubeletplugin.RegistrarDirectoryPath(opts.RegistrarDir),
		kubeletplugin.PluginDataDirectoryPath(opts.PluginDir),
	)
	if err != nil {
		return nil, fmt.Errorf("DRA driver: starting the kubelet plugin: %w", err)
	}
	d.logger.Info("DRA driver started", "driver", opts.DriverName, "node", opts.NodeName, "mode", opts.Mode, "prepared", len(d.prepared))
	var bg context.Context
	bg, d.stopBackground = context.WithCancel(klog.NewContext(ctx, d.logger))
	if err := d.watchSlices(bg); err != nil {
		d.Stop()
		return nil, fmt.Errorf("DRA driver: %w", err)
	}
	if opts.StaleClaimCheck > 0 {
		d.background.Go(func() { d.releaseStaleEvery(bg, opts.StaleClaimCheck) })
	}
	if r, ok := opts.Instances.(lateReturns); ok && d.mode == ModeDynamic {
		d.background.Go(func() { d.repairAfterLateReturns(bg, r.Returned()) })
	}
	return d, nil
}

// watchSlices starts an informer on this node's ResourceSlices of the
// driver, the ones the kubelet plugin helper writes (the same field
// selector as its own), until ctx ends. Visible reads it, so asking
// costs the API server nothing, and each change of those slices is
// signalled on SliceChanges, so that a caller waiting for a publication
// hears of it when the API server has it: the helper writes the slices
// in the background after Publish returns, one request per slice, and
// nothing else tells when the last one is stored. Its own informer is
// not reachable through the helper.
func (d *Driver) watchSlices(ctx context.Context) error {
	factory := informers.NewSharedInformerFactoryWithOptions(d.opts.KubeClient, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = sliceSelector(d.opts.DriverName, d.opts.NodeName) }))
	d.slices = factory.Resource().V1().ResourceSlices().Informer()
	notify := func(any) { d.notifySlices() }
	if _, err := d.slices.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    notify,
		UpdateFunc: func(_, obj any) { notify(obj) },
		DeleteFunc: notify,
	}); err != nil {
		return fmt.Errorf("watching ResourceSlices: %w", err)
	}
	factory.Start(ctx.Done())
	d.background.Go(func() {
		// A synced cache may answer Visible differently even when it
		// holds no slice at all (no add event then).
		if cache.WaitForCacheSync(ctx.Done(), d.slices.HasSynced) {
			d.notifySlices()
		}
		<-ctx.Done()
		factory.Shutdown()
	})
	return nil
}

// sliceSelector selects node's ResourceSlices of driver.
func sliceSelector(driver, node string) string {
	return fields.AndSelectors(
		fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorDriver, driver),
		fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorNodeName, node),
	).String()
}

func (d *Driver) notifySlices() {
	select {
	case d.sliceChanges <- struct{}{}:
	default:
	}
}

// SliceChanges signals (coalesced) whenever this node's ResourceSlices of
// the driver change in the API server, whoever changed them: Visible may
// answer differently. Publishing the same layout again writes nothing, so
// signals nothing.
func (d *Driver) SliceChanges() <-chan struct{} { return d.sliceChanges }

// InstanceChanges signals (coalesced) each time the driver made or
// destroyed a MIG instance itself: dynamic mode's Prepare, Unprepare, and
// the destruction of instances no claim holds. Nothing else tells the
// node agent, whose layout annotation, labels and metrics list the
// instances NVML has: it reads the GPUs again on it (agent.Server's
// optional InstanceChanges) rather than at its next resync.
func (d *Driver) InstanceChanges() <-chan struct{} { return d.instanceChanges }

func (d *Driver) notifyInstances() {
	select {
	case d.instanceChanges <- struct{}{}:
	default:
	}
}

func (d *Driver) removeStraySpecs() error {
	uids, err := d.cdi.Claims()
	if err != nil {
		return err
	}
	for _, uid := range uids {
		if _, ok := d.prepared[uid]; ok {
			continue
		}
		if err := d.cdi.RemoveClaim(uid); err != nil {
			return err
		}
		d.logger.Info("Removed the CDI spec of a claim the checkpoint does not list", "claim", uid)
	}
	return nil
}

// Stop unregisters from the kubelet and stops publishing. The
// ResourceSlices stay: a restarted agent takes them over unchanged, an
// agent that serves the node through the device plugin instead deletes
// them (Withdraw), and otherwise the kubelet does once the plugin has
// been gone for a while.
func (d *Driver) Stop() {
	if d.stopBackground != nil {
		d.stopBackground()
	}
	d.background.Wait()
	d.helper.Stop()
}

// Fatal delivers an error the kubelet-plugin helper says the process
// cannot recover from (its gRPC servers failed); the caller decides to
// exit.
func (d *Driver) Fatal() <-chan error { return d.fatal }

// Publish makes gpus the published layout with the given device health
// (by UUID), replacing the previous one in place. A layout that cannot be
// named as devices is an error and changes nothing. Drain marks of
// devices that are gone end.
func (d *Driver) Publish(gpus []mig.GPU, unhealthy map[string]dra.Fault) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.publishGPUsLocked(gpus, unhealthy)
}

func (d *Driver) publishGPUsLocked(gpus []mig.GPU, unhealthy map[string]dra.Fault) error {
	devs, err := dra.Devices(gpus)
	if err != nil {
		return fmt.Errorf("cannot publish the layout: %w", err)
	}
	if d.mode == ModeDynamic {
		if gpus, err = d.dynamicLocked(gpus); err != nil {
			return err
		}
		if devs, err = dra.Devices(gpus); err != nil {
			return fmt.Errorf("cannot publish the layout: %w", err)
		}
	}
	d.devices, d.byName, d.unhealthy, d.gpus = devs, dra.ByName(devs), maps.Clone(unhealthy), gpus
	present := map[string]bool{}
	for _, dev := range devs {
		present[dev.UUID] = true
	}
	maps.DeleteFunc(d.draining, func(uuid string, _ bool) bool { return !present[uuid] })
	d.started = true
	return d.publishLocked()
}

// publishLocked hands the current devices, less those draining, to the
// ResourceSlice controller; in dynamic mode in the order their use steers
// to (dra.Steer). The controller writes only slices that differ from
// what the API server has, so a publication of what is published writes
// nothing.
func (d *Driver) publishLocked() error {
	var res resourceslice.DriverResources
	var err error
	if d.mode == ModeDynamic {
		res, err = dra.DynamicResources(d.opts.NodeName, d.steeredOffersLocked(), d.unhealthy, d.policy)
	} else {
		visible := slices.DeleteFunc(slices.Clone(d.devices), func(dev dra.Device) bool { return d.draining[dev.UUID] })
		res, err = dra.Resources(d.opts.NodeName, visible, d.unhealthy, d.policy)
	}
	if err != nil {
		return err
	}
	held := d.holdLocked(&res)
	if err := d.helper.PublishResources(context.Background(), res); err != nil {
		return fmt.Errorf("publishing ResourceSlices: %w", err)
	}
	d.noteHeldLocked(held)
	d.published = res
	close(d.changed)
	d.changed = make(chan struct{})
	return nil
}

// Drain withdraws the devices with these UUIDs from the slice, so the
// scheduler allocates them to no new claim, and makes Prepare refuse
// them. It returns once every Prepare that might have accepted one has
// answered. A claim the scheduler allocated before it saw the new slice
// is the caller's to find (dra.Uses over the API's claims), as on the
// device-plugin path.
func (d *Driver) Drain(ctx context.Context, uuids []string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, u := range uuids {
		d.draining[u] = true
	}
	if !d.started {
		return nil
	}
	return d.publishLocked()
}

// Undrain ends Drain for these UUIDs and publishes them again.
func (d *Driver) Undrain(uuids []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, u := range uuids {
		delete(d.draining, u)
	}
	if !d.started {
		return
	}
	if err := d.publishLocked(); err != nil {
		d.logger.Error(err, "Undrain: republishing")
	}
}

// Published returns the devices of the current layout (draining ones
// included) and the pool last handed to the ResourceSlice controller.
func (d *Driver) Published() ([]dra.Device, resourceslice.DriverResources) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.devices), *d.published.DeepCopy()
}

// Prepared returns the prepared claims, sorted by UID.
func (d *Driver) Prepared() []dra.PreparedClaim {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := slices.Collect(maps.Values(d.prepared))
	slices.SortFunc(out, func(a, b dra.PreparedClaim) int { return strings.Compare(a.UID, b.UID) })
	return out
}

// Visible reports whether the API server's ResourceSlices of this node
// and driver show exactly the pool last published: the scheduler sees
// what the agent serves. It is "success" on a DRA node. It reads the
// informer's copy of the slices (SliceChanges signals when it changes),
// and cannot tell until the informer has listed them.
func (d *Driver) Visible(context.Context) (bool, error) {
	d.mu.Lock()
	want := d.published.DeepCopy()
	started := d.started
	d.mu.Unlock()
	if !started {
		return false, nil
	}
	if !d.slices.HasSynced() {
		return false, errors.New("the node's ResourceSlices are not listed yet")
	}
	var items []*resourceapi.ResourceSlice
	for _, obj := range d.slices.GetStore().List() {
		if s, ok := obj.(*resourceapi.ResourceSlice); ok {
			items = append(items, s)
		}
	}
	return sameDevices(want.Pools[d.opts.NodeName], d.opts.DriverName, d.opts.NodeName, items), nil
}

// sameDevices reports whether slices (of any driver and pool: filtered
// here, as a fake client ignores field selectors) hold, at the newest
// generation of the pool and complete, the devices of want with their
// taints.
func sameDevices(want resourceslice.Pool, driver, pool string, items []*resourceapi.ResourceSlice) bool {
	var gen int64 = -1
	var ours []*resourceapi.ResourceSlice
	for _, s := range items {
		if s.Spec.Driver != driver || s.Spec.Pool.Name != pool {
			continue
		}
		ours = append(ours, s)
		gen = max(gen, s.Spec.Pool.Generation)
	}
	var got []string
	count := 0
	for _, s := range ours {
		if s.Spec.Pool.Generation != gen {
			continue
		}
		if int64(len(want.Slices)) != s.Spec.Pool.ResourceSliceCount {
			return false
		}
		count++
		for _, dev := range s.Spec.Devices {
			got = append(got, deviceKey(dev))
		}
	}
	if count != len(want.Slices) {
		return false
	}
	var expect []string
	for _, s := range want.Slices {
		for _, dev := range s.Devices {
			expect = append(expect, deviceKey(dev))
		}
	}
	slices.Sort(got)
	slices.Sort(expect)
	return slices.Equal(got, expect)
}

func deviceKey(dev resourceapi.Device) string {
	key := dev.Name
	for _, t := range dev.Taints {
		key += fmt.Sprintf(" %s=%s:%s", t.Key, t.Value, t.Effect)
	}
	return key
}

// HandleError implements kubeletplugin.DRAPlugin. Publishing errors are
// logged; taints the API server dropped switch the auto policy to
// withdrawing unhealthy devices; an unrecoverable error goes to Fatal.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	var dropped *resourceslice.DroppedFieldsError
	if errors.As(err, &dropped) && slices.Contains(dropped.DisabledFeatures(), "DRAPartitionableDevices") && d.fallBack(ctx, dropped) {
		return
	}
	if errors.As(err, &dropped) && slices.Contains(dropped.DisabledFeatures(), "DRADeviceTaints") {
		d.mu.Lock()
		defer d.mu.Unlock()
		republish := false
		if !d.taintsDropped {
			// A reservation's devices are withdrawn whatever the
			// unhealthy-device policy: a taint the server drops would
			// offer them to every claim.
			d.taintsDropped = true
			republish = len(d.resvHeld) > 0
			if republish {
				d.logger.Info("The API server drops device taints (DRADeviceTaints is off); the reserved GPUs' free devices are withdrawn from the ResourceSlice instead")
			}
		}
		if d.opts.Unhealthy == UnhealthyAuto && d.policy == dra.UnhealthyTaint {
			d.logger.Info("The API server drops device taints (DRADeviceTaints is off); unhealthy devices are withdrawn from the ResourceSlice instead")
			d.policy = dra.UnhealthyWithdraw
			republish = true
		}
		if republish {
			if perr := d.publishLocked(); perr != nil {
				d.logger.Error(perr, "Republishing without the tainted devices")
			}
			return
		}
	}
	if errors.Is(err, kubeletplugin.ErrRecoverable) {
		d.logger.Error(err, msg)
		return
	}
	d.logger.Error(err, msg, "fatal", true)
	select {
	case d.fatal <- fmt.Errorf("%s: %w", msg, err):
	default:
	}
}

// WatchHealthStatus implements kubeletplugin.DRAPlugin: the health of every
// published device, sent at once, on every publication and every
// healthTimeout/3, so the kubelet can show it in the pod's status.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	tick := time.NewTicker(healthTimeout / 3)
	defer tick.Stop()
	for {
		d.mu.Lock()
		report := d.healthLocked(time.Now())
		changed := d.changed
		d.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case reports <- report:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-tick.C:
		}
	}
}

func (d *Driver) healthLocked(now time.Time) kubeletplugin.DeviceHealthReport {
	var r kubeletplugin.DeviceHealthReport
	for _, dev := range d.devices {
		h := kubeletplugin.DeviceHealth{
			PoolName: d.opts.NodeName, DeviceName: dev.Name, Health: kubeletplugin.HealthStatusHealthy,
			LastUpdated: now, HealthCheckTimeout: healthTimeout,
		}
		if f, bad := d.unhealthy[dev.UUID]; bad {
			h.Health, h.Message = kubeletplugin.HealthStatusUnhealthy, f.Reason
		}
		r.Devices = append(r.Devices, h)
	}
	return r
}
