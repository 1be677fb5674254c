package draplugin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/schedview"
)

// ReasonDynamicUnavailable is the reason of the Node Event the driver
// records when the API server cannot serve dynamic mode.
const ReasonDynamicUnavailable = "DRADynamicModeUnavailable"

// adoptedInstance is an instance found at start that no prepared claim
// names and that could not be destroyed: a process uses it (a Prepare
// killed before its checkpoint, whose pod started anyway, or an instance
// made by hand). It is kept, and the placements it overlaps are not
// published, until it can be destroyed.
type adoptedInstance struct {
	gpu  int
	inst mig.Instance
}

// lateReturns is the optional side of Instances that says when a call it
// stopped waiting for returned (agent.Instances): a create Prepare gave up
// on may have made an instance that no claim holds.
type lateReturns interface {
	Returned() <-chan struct{}
}

// repairAfterLateReturns destroys, after each late return, the instances
// no prepared claim names and publishes the GPUs as NVML reads them then
// (as at start: repairLocked), until ctx ends. The scheduler would
// otherwise allocate the placement of such an instance, and its Prepare
// would fail on the overlap until the agent restarted.
func (d *Driver) repairAfterLateReturns(ctx context.Context, returned <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-returned:
		}
		d.mu.Lock()
		if d.started && d.mode == ModeDynamic {
			d.repaired = false
			if err := d.publishGPUsLocked(nil, d.unhealthy); err != nil {
				d.logger.Error(err, "Repairing the GPUs after a late NVML call returned; the agent's next publication tries again")
			}
		}
		d.mu.Unlock()
	}
}

// dynamicLocked makes the offers of gpus. The first time, and while
// instances are adopted, it first destroys the instances no prepared claim
// names (repairLocked) on the GPUs as NVML reads them now, which it then
// returns instead of gpus.
func (d *Driver) dynamicLocked(gpus []mig.GPU) ([]mig.GPU, error) {
	if !d.repaired || len(d.adopted) > 0 {
		// From NVML, not gpus: those may predate an Unprepare, and an id
		// read then may name another claim's instance now.
		now, err := d.opts.Instances.Discover()
		if err != nil {
			return nil, fmt.Errorf("reading the GPUs to find instances no claim holds: %w", err)
		}
		if d.repairLocked(now) {
			if now, err = d.opts.Instances.Discover(); err != nil {
				return nil, fmt.Errorf("reading the GPUs after removing instances no claim holds: %w", err)
			}
		}
		gpus, d.repaired = now, true
	}
	offers, err := dra.Offers(gpus)
	if err != nil {
		return nil, fmt.Errorf("cannot offer the GPUs' placements: %w", err)
	}
	d.offers, d.offered = offers, map[string]dra.OfferedDevice{}
	for _, o := range offers {
		for _, dev := range o.Devices {
			d.offered[dev.Name] = dev
		}
	}
	return gpus, nil
}

// repairLocked destroys every instance on gpus that no prepared claim
// names: in dynamic mode every instance is a claim's, so one that is not
// was left by a Prepare killed between its create and its checkpoint (or
// by static mode, or by hand). One in use (NVML says so: a process runs
// on it) is never destroyed: it is adopted, and tried again at the next
// publication. It reports whether it destroyed any.
func (d *Driver) repairLocked(gpus []mig.GPU) bool {
	named := map[string]bool{}
	for _, pc := range d.prepared {
		for _, dev := range pc.Devices {
			named[dev.UUID] = true
		}
	}
	destroyed := false
	d.adopted = nil
	for _, g := range gpus {
		if !g.MigEnabled {
			continue
		}
		for _, in := range g.Instances {
			if in.UUID != "" && named[in.UUID] {
				continue
			}
			err := d.opts.Instances.DestroyInstance(g.Index, in.GIID)
			if err == nil {
				destroyed = true
				d.notifyInstances()
				d.logger.Info("Destroyed an instance no prepared claim holds (a Prepare stopped before its checkpoint, or static mode's)",
					"gpu", g.Index, "profile", in.Profile, "start", in.Start, "uuid", in.UUID)
				continue
			}
			d.adopted = append(d.adopted, adoptedInstance{gpu: g.Index, inst: in})
			d.logger.Info("Kept an instance no prepared claim holds: it could not be destroyed (in use?); the placements it overlaps are not offered until it can be",
				"gpu", g.Index, "profile", in.Profile, "start", in.Start, "uuid", in.UUID, "err", err)
		}
	}
	return destroyed
}

// steeredOffersLocked are the offers in the order their use steers to
// (dra.Steer), less the GPUs draining and, on a GPU with adopted
// instances, the devices they overlap and the whole GPU. An adopted
// instance is use like a claim's: steered around, not just withheld, so a
// GPU holding one is filled before a free one and its free placements are
// ranked beside it. Steer only reorders, so withholding after it leaves
// the order of the rest as steering on what is visible would.
func (d *Driver) steeredOffersLocked() []dra.Offer {
	offers := make([]dra.Offer, 0, len(d.offers))
	for _, o := range d.offers {
		if !d.draining[o.GPUUUID] {
			offers = append(offers, o)
		}
	}
	inUse := d.inUseLocked()
	for _, a := range d.adopted {
		if name := placementOf(offers, a); name != "" {
			inUse[name] = true
		}
	}
	out := dra.Steer(offers, inUse)
	for i, o := range out {
		out[i].Devices = slices.DeleteFunc(slices.Clone(o.Devices), func(dev dra.OfferedDevice) bool {
			return slices.ContainsFunc(d.adopted, func(a adoptedInstance) bool {
				return a.gpu == o.GPUIndex && (!dev.MIG || overlaps(dev.Start, dev.Size, a.inst.Start, a.inst.Size))
			})
		})
	}
	return out
}

// placementOf names the offered device at the adopted instance's
// placement; "" when none is offered (a profile the model table lacks).
func placementOf(offers []dra.Offer, a adoptedInstance) string {
	for _, o := range offers {
		if o.GPUIndex != a.gpu {
			continue
		}
		for _, dev := range o.Devices {
			if dev.MIG && dev.Profile == a.inst.Profile && dev.Start == a.inst.Start {
				return dev.Name
			}
		}
	}
	return ""
}

func overlaps(s1, n1, s2, n2 int) bool { return s1 < s2+n2 && s2 < s1+n1 }

// inUseLocked names the devices the published order is steered by
// (dra.Steer): those of the prepared claims, and those the API's claims
// have allocated in this pool and the kubelet has not prepared yet
// (ClaimEvents). The scheduler counts the latter itself (its allocator
// skips allocated devices and their counters), but the order it walks
// for the next claim is best only if it was steered around them too.
func (d *Driver) inUseLocked() map[string]bool {
	out := map[string]bool{}
	for _, pc := range d.prepared {
		for _, dev := range pc.Devices {
			out[dev.Name] = true
		}
	}
	for _, names := range d.allocated {
		for _, name := range names {
			out[name] = true
		}
	}
	return out
}

// steerLocked republishes dynamic mode's devices after their use changed,
// in the order the new use steers to. A failure leaves the last order
// published, which still offers every device: it is logged only, and the
// claim's Prepare or Unprepare stands.
//
// In static mode the order does not change with use; only what a
// reservation keeps from new claims may (reholdLocked), and the slices
// are written only then.
func (d *Driver) steerLocked(logger klog.Logger, cause string) {
	if !d.started {
		return
	}
	if d.mode != ModeDynamic {
		d.reholdLocked(logger, cause)
		return
	}
	if err := d.publishLocked(); err != nil {
		logger.Error(err, "Republishing the devices in the order their use steers to; the previous order stays", "cause", cause)
		return
	}
	logger.V(2).Info("Republished the devices in the order their use steers to", "cause", cause)
}

// ClaimEvents is the handler of an informer on the API's ResourceClaims
// (the agent's, which its busy check reads): it keeps the devices each
// claim has allocated in this driver's pool, and republishes in dynamic
// mode when that changes the use the order is steered by. A claim's
// allocation seen before its Prepare steers at once; its Prepare then
// changes no use and writes nothing, and neither does any event of a
// claim elsewhere, a repeated one, or the informer's resync.
func (d *Driver) ClaimEvents() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { d.claimSeen(obj, false) },
		UpdateFunc: func(_, obj any) { d.claimSeen(obj, false) },
		DeleteFunc: func(obj any) { d.claimSeen(obj, true) },
	}
}

func (d *Driver) claimSeen(obj any, gone bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	c, ok := obj.(*resourceapi.ResourceClaim)
	if !ok {
		return
	}
	var names []string
	if !gone && c.Status.Allocation != nil {
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver == d.opts.DriverName && r.Pool == d.opts.NodeName && (r.AdminAccess == nil || !*r.AdminAccess) {
				names = append(names, r.Device)
			}
		}
	}
	uid := string(c.UID)
	d.mu.Lock()
	defer d.mu.Unlock()
	if slices.Equal(d.allocated[uid], names) {
		return
	}
	before := d.inUseLocked()
	if len(names) == 0 {
		delete(d.allocated, uid)
	} else {
		d.allocated[uid] = names
	}
	if maps.Equal(before, d.inUseLocked()) {
		return
	}
	cause := "claim allocated"
	if len(names) == 0 {
		cause = "claim released"
	}
	d.steerLocked(d.logger.WithValues("claim", klog.KObj(c)), cause)
}

// prepareDynamicLocked prepares c in dynamic mode: for each allocated
// device, a placement's MIG instance is created through the partitioner
// (NVML's own checks refuse a placement an existing instance overlaps);
// the whole GPU is served only with MIG off (MIG mode is never changed at
// Prepare). Then the CDI spec and the checkpoint, as in static mode. If
// anything fails, the instances it created are destroyed again: a claim
// is prepared whole or not at all.
func (d *Driver) prepareDynamicLocked(c *resourceapi.ResourceClaim, pc dra.PreparedClaim) (dra.PreparedClaim, error) {
	var created []dra.PreparedDevice
	fail := func(err error) (dra.PreparedClaim, error) {
		for _, dev := range slices.Backward(created) {
			if derr := d.opts.Instances.DestroyInstance(dev.GPUIndex, dev.GI); derr != nil {
				err = fmt.Errorf("%w; and destroying the %s instance it created at %d on GPU %d again: %v", err, dev.Profile, dev.Start, dev.GPUIndex, derr)
				// Left behind: the GPUs differ from before the Prepare.
				d.notifyInstances()
			}
		}
		return dra.PreparedClaim{}, fmt.Errorf("claim %s: %w", klog.KObj(c), err)
	}
	held := map[string]string{}
	for uid, other := range d.prepared {
		for _, dev := range other.Devices {
			held[dev.Name] = uid
		}
	}
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != d.opts.DriverName {
			continue
		}
		if r.Pool != d.opts.NodeName {
			return fail(fmt.Errorf("device %s/%s (request %q) is in pool %q, not this node's %q", r.Pool, r.Device, r.Request, r.Pool, d.opts.NodeName))
		}
		od, ok := d.offered[r.Device]
		switch {
		case !ok:
			return fail(fmt.Errorf("device %q (request %q) is not offered on this node any more; the GPUs changed after the claim was allocated", r.Device, r.Request))
		case d.draining[od.GPUUUID]:
			return fail(fmt.Errorf("device %q (request %q) is draining: its GPU is about to be repartitioned", r.Device, r.Request))
		case held[r.Device] != "":
			other := d.prepared[held[r.Device]]
			return fail(fmt.Errorf("device %q (request %q) is already prepared for claim %s/%s", r.Device, r.Request, other.Namespace, other.Name))
		}
		dev := dra.PreparedDevice{Device: od.Device, Requests: []string{r.Request}}
		if od.MIG {
			inst, err := d.opts.Instances.CreateInstance(od.GPUIndex, od.Profile, od.Start)
			if err != nil {
				why := ""
				if errors.Is(err, mig.ErrInsufficientResources) {
					why = " (an instance the scheduler does not know of overlaps it)"
				}
				return fail(fmt.Errorf("device %q (request %q): creating %s at memory slice %d on GPU %d%s: %w", r.Device, r.Request, od.Profile, od.Start, od.GPUIndex, why, err))
			}
			dev.UUID, dev.GI, dev.CI, dev.Created = inst.UUID, inst.GIID, inst.CIID, true
			created = append(created, dev)
		} else if err := d.wholeFreeLocked(od.Device); err != nil {
			return fail(fmt.Errorf("device %q (request %q): %w", r.Device, r.Request, err))
		}
		pc.Devices = append(pc.Devices, dev)
	}
	if err := d.finishLocked(pc); err != nil {
		return fail(err)
	}
	if len(created) > 0 {
		d.notifyInstances()
	}
	return d.prepared[pc.UID], nil
}

// wholeFreeLocked says why the whole GPU dev cannot be served, if it
// cannot: MIG is on (CUDA would see no device; migflex changes MIG mode
// only in a layout the busy check has cleared, never at Prepare), or it
// has instances.
func (d *Driver) wholeFreeLocked(dev dra.Device) error {
	gpus, err := d.opts.Instances.Discover()
	if err != nil {
		return fmt.Errorf("reading GPU %d: %w", dev.GPUIndex, err)
	}
	i := slices.IndexFunc(gpus, func(g mig.GPU) bool { return g.UUID == dev.GPUUUID })
	switch {
	case i < 0:
		return fmt.Errorf("GPU %s is not on this node any more", dev.GPUUUID)
	case len(gpus[i].Instances) > 0:
		return fmt.Errorf("GPU %d has %d MIG instances; it is served whole only without any", dev.GPUIndex, len(gpus[i].Instances))
	case gpus[i].MigEnabled:
		return fmt.Errorf("GPU %d has MIG on; dynamic mode serves a GPU whole only with MIG off and does not change MIG mode at Prepare", dev.GPUIndex)
	}
	return nil
}

// destroyCreatedLocked destroys the instances of pc, each only if the GPU
// still has it under its UUID (an Unprepare retried after a partial
// failure must not destroy a newer instance that got the same id): those
// Prepare created, and, serving dynamic mode, every MIG instance pc holds,
// one static mode prepared included (kept at the switch because pc held
// it: in dynamic mode every instance is a claim's, so once pc is gone
// nothing would hold it until the next start). An instance in use is not
// destroyed: the error says so and the kubelet retries.
func (d *Driver) destroyCreatedLocked(pc dra.PreparedClaim) error {
	destroys := func(dev dra.PreparedDevice) bool { return dev.Created || dev.MIG && d.mode == ModeDynamic }
	if !slices.ContainsFunc(pc.Devices, destroys) {
		return nil
	}
	if d.opts.Instances == nil {
		// An agent restarted in static mode: the instances stay, part of
		// the layout static mode serves; blocking Unprepare on them would
		// keep the claim's pod from ever finishing.
		d.logger.Info("Kept the instances dynamic mode made for an unprepared claim: the agent runs in static mode", "claim", pc.Namespace+"/"+pc.Name)
		return nil
	}
	gpus, err := d.opts.Instances.Discover()
	if err != nil {
		return fmt.Errorf("reading the GPUs to destroy claim %s/%s's instances: %w", pc.Namespace, pc.Name, err)
	}
	exists := map[string]bool{}
	for _, g := range gpus {
		for _, in := range g.Instances {
			exists[in.UUID] = true
		}
	}
	for _, dev := range pc.Devices {
		if !destroys(dev) || !exists[dev.UUID] {
			continue
		}
		if err := d.opts.Instances.DestroyInstance(dev.GPUIndex, dev.GI); err != nil {
			return fmt.Errorf("destroying the %s instance %s of claim %s/%s: %w", dev.Profile, dev.UUID, pc.Namespace, pc.Name, err)
		}
		d.notifyInstances()
		d.logger.Info("Destroyed the instance of an unprepared claim", "claim", pc.Namespace+"/"+pc.Name, "device", dev.Name, "uuid", dev.UUID)
	}
	return nil
}

// Mode returns the mode the driver serves in, and why it is not the one
// asked for when it fell back to static.
func (d *Driver) Mode() (Mode, string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mode, d.fallback
}

// Dynamic reports whether the driver serves dynamic mode now: asked for,
// and not fallen back to static.
func (d *Driver) Dynamic() bool {
	mode, _ := d.Mode()
	return mode == ModeDynamic
}

// checkPartitionable falls back to static mode, before anything is
// published or any instance touched, when the API server does not keep
// partitionable devices: a dry-run create of a counters-only slice of this
// node comes back without its counters (DRAPartitionableDevices off, the
// default in 1.35). A failed check falls back too: dynamic mode's start
// destroys idle instances no claim holds, which must not happen on a node
// that will end up serving static mode.
func (d *Driver) checkPartitionable(ctx context.Context) {
	probe := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{GenerateName: d.opts.NodeName + "-partitionable-"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: d.opts.DriverName, NodeName: &d.opts.NodeName,
			Pool:           resourceapi.ResourcePool{Name: d.opts.NodeName, ResourceSliceCount: 1},
			SharedCounters: []resourceapi.CounterSet{{Name: "probe", Counters: map[string]resourceapi.Counter{"probe": {Value: resource.MustParse("1")}}}},
		},
	}
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	got, err := d.opts.KubeClient.ResourceV1().ResourceSlices().Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	var why string
	switch {
	case err != nil:
		why = fmt.Sprintf("could not ask the API server whether it keeps partitionable devices (%v)", err)
	case len(got.Spec.SharedCounters) == 0:
		why = "the API server drops partitionable devices (DRAPartitionableDevices is off: Kubernetes 1.35, or the gate turned off)"
	default:
		return
	}
	d.mu.Lock()
	d.mode = ModeStatic
	d.fallback = "--dra-mode=dynamic: " + why + "; serving static mode: the MIG instances that exist"
	msg := d.fallback
	d.mu.Unlock()
	d.logger.Error(nil, "Dynamic mode is not available; serving static mode", "reason", msg)
	d.recordEvent(ctx, corev1.EventTypeWarning, ReasonDynamicUnavailable, msg)
}

// fallBack switches dynamic mode to static because the API server drops
// partitionable devices (Kubernetes 1.35, or DRAPartitionableDevices off):
// the scheduler would see devices without their counters and could
// allocate overlapping placements. It republishes static mode's devices,
// logs why and records a Warning Event on the Node, once. It reports
// whether it handled err.
func (d *Driver) fallBack(ctx context.Context, dropped *resourceslice.DroppedFieldsError) bool {
	d.mu.Lock()
	if d.mode != ModeDynamic {
		d.mu.Unlock()
		return d.opts.Mode == ModeDynamic // already fallen back: nothing more to say
	}
	d.mode = ModeStatic
	d.fallback = fmt.Sprintf("--dra-mode=dynamic needs partitionable devices, which this API server drops (DRAPartitionableDevices is off: Kubernetes 1.35, or the gate turned off); serving static mode: the instances that exist (%v)", dropped)
	d.logger.Error(nil, "Dynamic mode is not available; serving static mode", "reason", d.fallback)
	if err := d.publishLocked(); err != nil {
		d.logger.Error(err, "Republishing in static mode")
	}
	msg := d.fallback
	d.mu.Unlock()
	d.recordEvent(ctx, corev1.EventTypeWarning, ReasonDynamicUnavailable, msg)
	return true
}

// reportingInstance is the node's name cut to the 128 characters the
// events API allows in reportingInstance.
func reportingInstance(node string) string {
	const maxLength = 128
	if len(node) > maxLength {
		return node[:maxLength]
	}
	return node
}

// recordEvent records a core/v1 Event about the Node, best effort.
func (d *Driver) recordEvent(ctx context.Context, typ, reason, msg string) {
	const maxMessage = 1024
	if len(msg) > maxMessage {
		msg = msg[:maxMessage]
	}
	now := metav1.NewTime(time.Now())
	e := &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{GenerateName: d.opts.NodeName + ".", Namespace: metav1.NamespaceDefault},
		InvolvedObject:      corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: d.opts.NodeName, UID: d.opts.NodeUID},
		Type:                typ,
		Reason:              reason,
		Message:             msg,
		Source:              corev1.EventSource{Component: d.opts.DriverName, Host: d.opts.NodeName},
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		ReportingController: d.opts.DriverName,
		ReportingInstance:   reportingInstance(d.opts.NodeName),
	}
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	if _, err := d.opts.KubeClient.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, e, metav1.CreateOptions{}); err != nil {
		d.logger.Error(err, "Recording an Event on the Node failed", "reason", reason)
	}
}

// Makeable is, in dynamic mode, how many devices of each profile the node
// can still make, each profile alone, whole GPUs under "" and zero counts
// included: schedview's reading of the pool as last published (what the
// scheduler sees) with the devices in use taken (the claims allocated in
// it and those prepared), the count the webhook and kubectl migflex give.
// ok is false in static mode and before the first publication. It reads
// under the driver's lock and writes nothing: a metrics scrape builds the
// series from it, so none outlives a profile or a node.
func (d *Driver) Makeable() (free map[string]int64, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mode != ModeDynamic || !d.started {
		return nil, false
	}
	pool := d.published.Pools[d.opts.NodeName]
	sl := make([]*resourceapi.ResourceSlice, 0, len(pool.Slices))
	for _, s := range pool.Slices {
		sl = append(sl, &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{
			Driver: d.opts.DriverName, Pool: resourceapi.ResourcePool{Name: d.opts.NodeName},
			Devices: s.Devices, SharedCounters: s.SharedCounters,
		}})
	}
	used := &resourceapi.ResourceClaim{Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{}}}
	for _, name := range slices.Sorted(maps.Keys(d.inUseLocked())) {
		used.Status.Allocation.Devices.Results = append(used.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Driver: d.opts.DriverName, Pool: d.opts.NodeName, Device: name})
	}
	return schedview.NewPool(d.opts.NodeName, sl, []*resourceapi.ResourceClaim{used}).FreeEveryProfile(), true
}
