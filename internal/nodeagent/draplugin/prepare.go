package draplugin

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/nodeagent/cdi"
)

// PrepareResourceClaims implements kubeletplugin.DRAPlugin. A claim
// already prepared gets the same answer again (the kubelet repeats
// Prepare, for example after it restarted). Otherwise each of its devices
// of this driver must be in this node's current layout, not draining, and
// not prepared for another claim; then its CDI spec is written and the
// claim checkpointed, in that order, before the answer goes back. Each
// claim prepared is logged once; the kubelet's repeats only at V(2).
//
// In dynamic mode the MIG instance of each allocated placement is created
// first (see prepareDynamicLocked). In either mode, once the claim is
// checkpointed the devices' status (the MIG UUID of each) is written into
// the ResourceClaim, after the lock is released so that no Prepare waits
// on the API server for another's: every pod that shares the claim maps to
// the same instance through it. A claim prepared or unprepared in dynamic
// mode changes the GPUs' use, so the devices are republished in the order
// it steers to (dra.Steer): the scheduler's next first fit is the best
// placement beside the new instances.
//
// A claim several pods share is prepared once: the kubelet calls Prepare
// for the first of its pods on the node and only records the others, and
// calls Unprepare when the last of them is done (its claim info cache
// counts the pods). A repeated Prepare gets the same answer, so the claim
// is never prepared twice, whoever asks.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	logger := klog.FromContext(ctx)
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	var made []dra.PreparedClaim
	d.mu.Lock()
	for _, c := range claims {
		_, again := d.prepared[string(c.UID)]
		pc, err := d.prepareLocked(c)
		if err != nil {
			logger.Error(err, "Prepare refused", "claim", klog.KObj(c))
			out[c.UID] = kubeletplugin.PrepareResult{Err: err}
			continue
		}
		if again {
			logger.V(2).Info("Prepared a claim again", claimKeys(pc)...)
		} else {
			logger.Info("Prepared a claim", claimKeys(pc)...)
			if len(pc.Devices) > 0 {
				made = append(made, pc)
			}
		}
		out[c.UID] = kubeletplugin.PrepareResult{Devices: d.result(pc)}
	}
	if len(made) > 0 {
		d.steerLocked(logger, "prepare")
	}
	d.mu.Unlock()
	for _, pc := range made {
		d.writeStatus(ctx, pc)
	}
	return out, nil
}

// claimKeys are the log keys of a prepared claim.
func claimKeys(pc dra.PreparedClaim) []any {
	names := make([]string, len(pc.Devices))
	for i, dev := range pc.Devices {
		names[i] = dev.Name
	}
	return []any{"claim", klog.KRef(pc.Namespace, pc.Name), "uid", pc.UID, "devices", names, "pods", pc.Pods}
}

func (d *Driver) prepareLocked(c *resourceapi.ResourceClaim) (dra.PreparedClaim, error) {
	uid := string(c.UID)
	if pc, ok := d.prepared[uid]; ok {
		// The spec may be gone (a node whose /var/run was cleared); the
		// answer must still be true.
		if _, err := os.Stat(d.cdi.SpecPath(uid)); err != nil {
			if _, err := d.cdi.WriteClaim(uid, requestsOf(pc)); err != nil {
				return dra.PreparedClaim{}, fmt.Errorf("claim %s: rewriting its CDI spec: %w", klog.KObj(c), err)
			}
		}
		return pc, nil
	}
	if c.Status.Allocation == nil {
		return dra.PreparedClaim{}, fmt.Errorf("claim %s is not allocated", klog.KObj(c))
	}
	if !d.started {
		return dra.PreparedClaim{}, fmt.Errorf("claim %s: the driver has not published this node's layout yet; try again", klog.KObj(c))
	}
	holder := d.holders()
	pc := dra.PreparedClaim{UID: uid, Namespace: c.Namespace, Name: c.Name}
	for _, r := range c.Status.ReservedFor {
		if r.APIGroup == "" && r.Resource == "pods" {
			pc.Pods = append(pc.Pods, c.Namespace+"/"+r.Name)
		}
	}
	slices.Sort(pc.Pods)
	if d.mode == ModeDynamic {
		return d.prepareDynamicLocked(c, pc)
	}
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != d.opts.DriverName {
			continue
		}
		dev, err := d.check(r, uid, holder)
		if err != nil {
			return dra.PreparedClaim{}, fmt.Errorf("claim %s: %w", klog.KObj(c), err)
		}
		pc.Devices = append(pc.Devices, dra.PreparedDevice{Device: dev, Requests: []string{r.Request}})
	}
	if err := d.finishLocked(pc); err != nil {
		return dra.PreparedClaim{}, fmt.Errorf("claim %s: %w", klog.KObj(c), err)
	}
	return d.prepared[uid], nil
}

// finishLocked writes the CDI spec of a claim whose devices are chosen,
// fills in their CDI device IDs and checkpoints it; on error neither the
// spec nor the checkpoint entry is left.
func (d *Driver) finishLocked(pc dra.PreparedClaim) error {
	uid := pc.UID
	pc.Devices = slices.Clone(pc.Devices)
	if len(pc.Devices) > 0 {
		reqs := requestsOf(pc)
		ids, err := d.cdi.WriteClaim(uid, reqs)
		if err != nil {
			// Named, so that the kubelet's FailedPrepareDynamicResources
			// Event says what to fix (a CDI directory that is read-only
			// or full), not only a path.
			return fmt.Errorf("writing its CDI spec: %w", err)
		}
		// The first device of each request carries the request's CDI
		// device, which gives the container all of the request's devices
		// at once.
		idOf := map[string]string{}
		for i, r := range reqs {
			idOf[r.Name] = ids[i]
		}
		for i := range pc.Devices {
			req := pc.Devices[i].Requests[0]
			if id, ok := idOf[req]; ok {
				pc.Devices[i].CDIDeviceIDs = []string{id}
				delete(idOf, req)
			}
		}
	}
	next := maps.Clone(d.prepared)
	next[uid] = pc
	if err := d.ckpt.save(next); err != nil {
		// Not checkpointed, so not prepared: the spec goes too.
		if rerr := d.cdi.RemoveClaim(uid); rerr != nil {
			err = fmt.Errorf("%w; and removing its CDI spec: %v", err, rerr)
		}
		return err
	}
	d.prepared = next
	return nil
}

// check says why the allocated device r cannot be prepared, if it cannot.
func (d *Driver) check(r resourceapi.DeviceRequestAllocationResult, uid string, holder map[string]string) (dra.Device, error) {
	if r.Pool != d.opts.NodeName {
		return dra.Device{}, fmt.Errorf("device %s/%s (request %q) is in pool %q, not this node's %q", r.Pool, r.Device, r.Request, r.Pool, d.opts.NodeName)
	}
	dev, ok := d.byName[r.Device]
	if !ok {
		return dra.Device{}, fmt.Errorf("device %q (request %q) is not in this node's MIG layout any more; the layout changed after the claim was allocated", r.Device, r.Request)
	}
	if d.draining[dev.UUID] {
		return dra.Device{}, fmt.Errorf("device %q (request %q) is draining: its GPU is about to be repartitioned", r.Device, r.Request)
	}
	if other, ok := holder[dev.UUID]; ok && other != uid && !adminAccess(r) {
		return dra.Device{}, fmt.Errorf("device %q (request %q) is already prepared for claim %s", r.Device, r.Request, d.prepared[other].Namespace+"/"+d.prepared[other].Name)
	}
	return dev, nil
}

func adminAccess(r resourceapi.DeviceRequestAllocationResult) bool {
	return r.AdminAccess != nil && *r.AdminAccess
}

// holders maps the UUID of every prepared device to its claim's UID.
func (d *Driver) holders() map[string]string {
	out := map[string]string{}
	for uid, pc := range d.prepared {
		for _, dev := range pc.Devices {
			out[dev.UUID] = uid
		}
	}
	return out
}

// requestsOf groups a prepared claim's devices by request, in the order
// of their first device.
func requestsOf(pc dra.PreparedClaim) []cdi.Request {
	var out []cdi.Request
	for _, dev := range pc.Devices {
		req := dev.Requests[0]
		i := slices.IndexFunc(out, func(r cdi.Request) bool { return r.Name == req })
		if i < 0 {
			out = append(out, cdi.Request{Name: req})
			i = len(out) - 1
		}
		out[i].Devices = append(out[i].Devices, dev.Device)
	}
	return out
}

// result is the kubelet's view of a prepared claim.
func (d *Driver) result(pc dra.PreparedClaim) []kubeletplugin.Device {
	out := make([]kubeletplugin.Device, 0, len(pc.Devices))
	for _, dev := range pc.Devices {
		out = append(out, kubeletplugin.Device{
			Requests: slices.Clone(dev.Requests), PoolName: d.opts.NodeName, DeviceName: dev.Name,
			CDIDeviceIDs: slices.Clone(dev.CDIDeviceIDs),
		})
	}
	return out
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin: the claim's
// CDI spec is removed and it leaves the checkpoint, logged as Prepare
// is. A claim that is not prepared is no error (logged at V(2)).
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	logger := klog.FromContext(ctx)
	out := make(map[types.UID]error, len(claims))
	freed := false
	for _, c := range claims {
		pc, prepared := d.prepared[string(c.UID)]
		out[c.UID] = d.unprepareLocked(string(c.UID))
		switch {
		case out[c.UID] != nil:
			logger.Error(out[c.UID], "Unprepare failed", "claim", c.NamespacedName)
		case prepared:
			logger.Info("Unprepared a claim", claimKeys(pc)...)
			freed = freed || len(pc.Devices) > 0
		default:
			logger.V(2).Info("Unprepared a claim that was not prepared: nothing to do", "claim", c.NamespacedName, "uid", c.UID)
		}
	}
	if freed {
		d.steerLocked(logger, "unprepare")
	}
	return out, nil
}

func (d *Driver) unprepareLocked(uid string) error {
	if pc, ok := d.prepared[uid]; ok {
		if err := d.destroyCreatedLocked(pc); err != nil {
			return err
		}
	}
	if err := d.cdi.RemoveClaim(uid); err != nil {
		return err
	}
	if _, ok := d.prepared[uid]; !ok {
		return nil
	}
	next := maps.Clone(d.prepared)
	delete(next, uid)
	if err := d.ckpt.save(next); err != nil {
		return err
	}
	d.prepared = next
	return nil
}
