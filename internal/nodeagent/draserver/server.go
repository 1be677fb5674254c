package draserver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/nodeagent/health"
)

// Driver is the kubelet plugin; *draplugin.Driver is the real one.
type Driver interface {
	Publish(gpus []mig.GPU, unhealthy map[string]dra.Fault) error
	Drain(ctx context.Context, uuids []string) error
	Undrain(uuids []string)
	Published() ([]dra.Device, resourceslice.DriverResources)
	Prepared() []dra.PreparedClaim
	Visible(ctx context.Context) (bool, error)
	SliceChanges() <-chan struct{}
	Fatal() <-chan error
	Stop()
	// Dynamic: the driver serves dynamic mode (every placement offered,
	// the instance made at Prepare), not the layout the agent applies.
	Dynamic() bool
	// Reserve makes r the node's reservation, nil ending it: the driver
	// keeps the reserved GPUs' free devices from new claims (a device
	// taint) until they are all free and whole (draplugin.Driver.Reserve).
	Reserve(r *nodeinfo.Reservation)
}

// HealthSource is the node's device health; *health.Watcher is the real
// one, shared with the device-plugin path.
type HealthSource interface {
	SetTargets([]health.Target)
	Unhealthy() map[string]health.Fault
	Changes() <-chan struct{}
}

// Options configure a Server.
type Options struct {
	// Driver is the started kubelet plugin. Required.
	Driver Driver
	// Health is the devices' health; nil: every device is healthy.
	Health HealthSource
	// Labels are the hardware labels the Node gets for a layout (GPU
	// feature discovery's); the serving label is added. Nil: only it.
	Labels func(gpus []mig.GPU) map[string]string
	// DriverName and NodeName name the pool, for messages.
	DriverName, NodeName string
}

// Server serves the node's GPUs through DRA behind the agent's Server
// port (see the package comment).
type Server struct {
	opts    Options
	changes chan struct{}

	mu        sync.Mutex
	gpus      []mig.GPU
	served    bool
	unhealthy map[string]dra.Fault
}

// New returns a Server of the started driver.
func New(opts Options) *Server {
	return &Server{opts: opts, changes: make(chan struct{}, 1)}
}

// Run republishes on every health change until ctx ends, then stops the
// driver (its ResourceSlices stay: a restarted agent takes them over).
// It returns the driver's fatal error, if one comes.
func (s *Server) Run(ctx context.Context) error {
	defer s.opts.Driver.Stop()
	var healthChanges <-chan struct{}
	if s.opts.Health != nil {
		healthChanges = s.opts.Health.Changes()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-s.opts.Driver.Fatal():
			return fmt.Errorf("DRA kubelet plugin: %w", err)
		case <-healthChanges:
			if err := s.republish(); err != nil {
				klog.FromContext(ctx).Error(err, "Republishing after a health change")
			}
		}
	}
}

func (s *Server) republish() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.served {
		return nil
	}
	faults := s.faultsLocked()
	if maps.Equal(faults, s.unhealthy) {
		return nil
	}
	if err := s.opts.Driver.Publish(s.gpus, faults); err != nil {
		return err
	}
	s.unhealthy = faults
	s.notify()
	return nil
}

// faultsLocked is the health watcher's faults as the slice's taints take
// them.
func (s *Server) faultsLocked() map[string]dra.Fault {
	out := map[string]dra.Fault{}
	if s.opts.Health == nil {
		return out
	}
	for id, f := range s.opts.Health.Unhealthy() {
		out[id] = dra.Fault{Xid: f.Xid, Reason: f.Reason}
	}
	return out
}

// Serve publishes gpus' layout as the node's ResourceSlice pool, in place.
// A layout that cannot be named as devices changes nothing.
func (s *Server) Serve(_ context.Context, gpus []mig.GPU) error {
	devs, err := dra.Devices(gpus)
	if err != nil {
		return fmt.Errorf("the layout cannot be published as DRA devices, keeping the previous ones: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opts.Health != nil {
		s.opts.Health.SetTargets(healthTargets(gpus, devs, s.opts.Driver.Dynamic()))
	}
	faults := s.faultsLocked()
	if err := s.opts.Driver.Publish(gpus, faults); err != nil {
		return err
	}
	s.gpus, s.served, s.unhealthy = gpus, true, faults
	s.notify()
	return nil
}

// healthTargets are the devices whose health the watcher tracks: the
// devices that exist (devs) and, in dynamic mode, each GPU with MIG on
// under its own UUID, scoped to the events of the whole GPU (GI and CI
// health.AllInstances: an Xid 79, a GPU fallen off the bus). Dynamic
// mode taints or withdraws a GPU's placements by the GPU's UUID
// (dra.DynamicResources), which a GPU with MIG on is not a device under:
// without it a fault of the whole GPU would reach the slices as the
// faults of the instances Prepare made, which are no published device,
// and no placement would be tainted (nor any, on a GPU without
// instances, watched). An Xid of one instance stays that instance's.
func healthTargets(gpus []mig.GPU, devs []dra.Device, dynamic bool) []health.Target {
	targets := make([]health.Target, 0, len(devs)+len(gpus))
	for _, d := range devs {
		targets = append(targets, health.Target{ID: d.UUID, GPU: d.GPUUUID, MIG: d.MIG, GI: d.GI, CI: d.CI, Profile: d.Profile})
	}
	if dynamic {
		for _, g := range gpus {
			if g.MigEnabled {
				targets = append(targets, health.Target{ID: g.UUID, GPU: g.UUID, MIG: true, GI: health.AllInstances, CI: health.AllInstances})
			}
		}
	}
	return targets
}

// Servable says why gpus could not be published, or nil.
//
// In dynamic mode no layout is: the driver makes each instance at a
// claim's Prepare and destroys, at its next start, every instance no
// prepared claim holds, so a layout applied here would be destroyed
// again; and the scheduler allocates placements from the counters, which
// a layout made behind its back would contradict (Prepare would fail on
// the overlap). The agent then reports the node's nvidia.com/mig.config
// failed and leaves the GPUs alone (ErrDynamicMode).
func (s *Server) Servable(gpus []mig.GPU) error {
	if s.opts.Driver.Dynamic() {
		return ErrDynamicMode
	}
	if _, err := dra.Devices(gpus); err != nil {
		return fmt.Errorf("the layout cannot be published as DRA devices: %w", err)
	}
	return nil
}

// ErrDynamicMode is why a DRA node in dynamic mode takes no layout.
var ErrDynamicMode = errors.New("the DRA driver serves dynamic mode (--dra-mode=dynamic): it makes each MIG instance at a claim's Prepare and destroys at its next start every instance no claim holds, so it applies no layout; remove the node's mig.config, or serve static mode (--dra-mode=static)")

// Reserve hands the node's reservation to the driver, which decides,
// knowing the claims as they are prepared and allocated, which devices it
// keeps from new claims (agent.Reserver).
func (s *Server) Reserve(r *nodeinfo.Reservation) { s.opts.Driver.Reserve(r) }

// Drain withdraws the devices from the slice and makes Prepare refuse
// them (see draplugin.Driver.Drain).
func (s *Server) Drain(ctx context.Context, ids []string) error {
	return s.opts.Driver.Drain(ctx, ids)
}

// Undrain publishes them again.
func (s *Server) Undrain(ids []string) { s.opts.Driver.Undrain(ids) }

// Served is the published devices by the extended resource their
// DeviceClass maps (nvidia.com/mig-<profile>, nvidia.com/gpu), so the
// Node's layout and metrics read as on the device-plugin path.
func (s *Server) Served() map[string]map[string]bool {
	devs, _ := s.opts.Driver.Published()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]map[string]bool{}
	for _, d := range devs {
		r := string(resourcename.GPU)
		if d.MIG {
			r = string(resourcename.MIG(d.Profile))
		}
		if out[r] == nil {
			out[r] = map[string]bool{}
		}
		_, bad := s.unhealthy[d.UUID]
		out[r][d.UUID] = !bad
	}
	return out
}

// Makeable is, on a driver serving dynamic mode, how many devices of
// each extended resource (nvidia.com/mig-<profile>, nvidia.com/gpu) the
// node can still make, each alone, zero counts included; ok is false
// otherwise (static mode, or a driver that cannot say).
func (s *Server) Makeable() (free map[string]int64, ok bool) {
	d, can := s.opts.Driver.(interface {
		Makeable() (map[string]int64, bool)
	})
	if !can {
		return nil, false
	}
	byProfile, ok := d.Makeable()
	if !ok {
		return nil, false
	}
	free = make(map[string]int64, len(byProfile))
	for profile, n := range byProfile {
		r := string(resourcename.GPU)
		if profile != "" {
			r = string(resourcename.MIG(profile))
		}
		free[r] += n
	}
	return free, true
}

// Devices are the published layout's devices, draining ones included
// (State, for Holders).
func (s *Server) Devices() []dra.Device {
	devs, _ := s.opts.Driver.Published()
	return devs
}

// Prepared are the claims the driver prepared (State, for Holders).
func (s *Server) Prepared() []dra.PreparedClaim { return s.opts.Driver.Prepared() }

// Visible says whether the API server's ResourceSlices show the pool last
// published, which the scheduler reads directly, with no kubelet status
// update in between; and whether node's allocatable still offers a GPU
// resource through a device plugin (a node just switched from it: until
// the kubelet's next status update the scheduler would place pods by that
// stale count, and the kubelet would refuse them, as no plugin serves it).
func (s *Server) Visible(ctx context.Context, node *corev1.Node) (layout string, missing []string, err error) {
	devs, _ := s.opts.Driver.Published()
	var b strings.Builder
	for _, d := range devs {
		fmt.Fprintf(&b, "%s %s\n", d.Name, d.UUID)
	}
	if node != nil {
		for _, name := range slices.Sorted(maps.Keys(node.Status.Allocatable)) {
			if q := node.Status.Allocatable[name]; resourcename.IsGPU(name) && !q.IsZero() {
				missing = append(missing, fmt.Sprintf("%s %s still in the Node's allocatable from a device plugin", name, q.String()))
			}
		}
	}
	ok, err := s.opts.Driver.Visible(ctx)
	if err != nil {
		return b.String(), missing, err
	}
	if !ok {
		missing = append(missing, fmt.Sprintf("ResourceSlices of driver %s, pool %s: not yet the %d devices published", s.opts.DriverName, s.opts.NodeName, len(devs)))
	}
	return b.String(), missing, nil
}

// Visibility signals when the node's ResourceSlices of the driver
// change in the API server (draplugin.Driver.SliceChanges), so that an
// agent waiting for a publication asks Visible again then, not at its
// next retry: the kubelet plugin helper writes the slices after Serve
// returns, one request per slice of at most 64 devices, and nothing on
// the Node changes when the last one is stored. Serving the layout
// already published writes no slice, so it signals nothing.
func (s *Server) Visibility() <-chan struct{} { return s.opts.Driver.SliceChanges() }

// InstanceChanges signals when the driver made or destroyed a MIG
// instance itself (dynamic mode's Prepare and Unprepare,
// draplugin.Driver.InstanceChanges), so that the agent reads the GPUs
// again and its layout annotation, labels and metrics list what NVML has
// then, not what it had at the last reconcile. Nil for a driver that
// cannot say.
func (s *Server) InstanceChanges() <-chan struct{} {
	if d, ok := s.opts.Driver.(interface{ InstanceChanges() <-chan struct{} }); ok {
		return d.InstanceChanges()
	}
	return nil
}

// Publisher names the driver and the slices.
func (s *Server) Publisher() (who, where, hint string) {
	return "the DRA driver " + s.opts.DriverName, "the node's ResourceSlices",
		"can the agent write ResourceSlices (its RBAC), and does the API server serve resource.k8s.io/v1?"
}

// Labels are the hardware labels and the serving label, which tells the
// webhook and the planner to read this node's supply from its
// ResourceSlices and claims.
func (s *Server) Labels(gpus []mig.GPU) map[string]string {
	labels := map[string]string{}
	if s.opts.Labels != nil {
		labels = s.opts.Labels(gpus)
	}
	labels[nodeinfo.LabelServing] = nodeinfo.ServingDRA
	labels[nodeinfo.LabelDRAMode] = nodeinfo.DRAModeStatic
	if s.opts.Driver.Dynamic() {
		labels[nodeinfo.LabelDRAMode] = nodeinfo.DRAModeDynamic
	}
	return labels
}

// Changes signals after every publication.
func (s *Server) Changes() <-chan struct{} { return s.changes }

func (s *Server) notify() {
	select {
	case s.changes <- struct{}{}:
	default:
	}
}
