package deviceplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/migflex/migflex/internal/domain/resourcename"
)

// The kubelet publishes device-plugin resources in the Node's capacity and
// allocatable at its next node status update (every 10 s by default), so
// a new layout reaches the scheduler up to that long after the kubelet's
// device manager holds it. StatusPublisher closes that gap: once the
// kubelet holds exactly the served devices (the pod-resources API's
// GetAllocatableResources lists the healthy device IDs the kubelet counts
// as allocatable), it writes those counts into the Node's status itself.
// The values are the kubelet's own (devicemanager GetCapacity: capacity is
// every device a plugin listed, allocatable the healthy ones), so the
// kubelet's next update writes the same and nothing flaps; it never writes
// a count the kubelet's device manager does not hold, and never touches
// another status field or a resource it does not serve.

// HeldDevices is the kubelet's device manager as the pod-resources API
// shows it: the healthy device IDs it holds, by resource
// (podresources.Client.Allocatable).
type HeldDevices interface {
	Allocatable(ctx context.Context) (map[string][]string, error)
}

// NodeStatusWriter reads the Node and patches its status subresource;
// client-go's typed NodeInterface is one.
type NodeStatusWriter interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Node, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.Node, error)
}

// servedSource is what the publisher reads of the Manager.
type servedSource interface {
	Resources() []ResourceStatus
	Subscribe() <-chan struct{}
}

// StatusPublisherOptions configure a StatusPublisher.
type StatusPublisherOptions struct {
	NodeName string
	Nodes    NodeStatusWriter
	Kubelet  HeldDevices
	// Patience bounds how long one served state waits for the kubelet to
	// hold it; after that the kubelet's own status update is left to
	// publish it. Default DefaultStatusPatience.
	Patience time.Duration
	// Confirm is how long after its write the publisher reads the Node
	// again, to write once more if a status update of the kubelet's that
	// was computed before the kubelet held the devices overwrote it.
	// Default DefaultStatusConfirm.
	Confirm time.Duration
	// Observe, when set, is told the outcome of each attempt to write,
	// one of the Status* results, for the agent's metrics.
	Observe func(result string)
}

// Outcomes of the publisher's attempts, told to StatusPublisherOptions.Observe.
const (
	// StatusWritten: the Node's status was patched.
	StatusWritten = "written"
	// StatusRefused: RBAC or the node-scope policy refused the patch; the
	// publisher stops for this served state.
	StatusRefused = "refused"
	// StatusFailed: the patch failed otherwise; it is tried again.
	StatusFailed = "failed"
	// StatusLeft: the publisher left a served state to the kubelet's
	// status update (the kubelet did not hold it in time, or the Node
	// kept differing after the writes allowed).
	StatusLeft = "left"
)

// Defaults of StatusPublisherOptions.
const (
	DefaultStatusPatience = 30 * time.Second
	DefaultStatusConfirm  = time.Second
	// statusFirstPoll is the first wait for the kubelet to hold a new
	// layout; registration and the first ListAndWatch answer take
	// milliseconds. It doubles up to statusMaxPoll.
	statusFirstPoll = 10 * time.Millisecond
	statusMaxPoll   = time.Second
	// statusMaxWrites bounds the writes for one served state: the kubelet
	// computes the same values, so more than a repeat after a race means
	// something else writes these keys; the publisher leaves it to them.
	statusMaxWrites = 3
)

// StatusPublisher writes the served resources' counts into the Node's
// status as soon as the kubelet's device manager holds them (see above).
type StatusPublisher struct {
	opts    StatusPublisherOptions
	served  servedSource
	changes <-chan struct{}
}

// NewStatusPublisher publishes what m serves. It subscribes to m's changes
// at once, so none made before Run is missed.
func NewStatusPublisher(m *Manager, opts StatusPublisherOptions) *StatusPublisher {
	return newStatusPublisher(m, opts)
}

func newStatusPublisher(src servedSource, opts StatusPublisherOptions) *StatusPublisher {
	if opts.Patience <= 0 {
		opts.Patience = DefaultStatusPatience
	}
	if opts.Confirm <= 0 {
		opts.Confirm = DefaultStatusConfirm
	}
	if opts.Observe == nil {
		opts.Observe = func(string) {}
	}
	return &StatusPublisher{opts: opts, served: src, changes: src.Subscribe()}
}

// publication is the publisher's progress on one served state.
type publication struct {
	state    string
	deadline time.Time
	poll     time.Duration
	writes   int
	done     bool
}

// Run publishes every served state until ctx ends; it returns nil then.
func (p *StatusPublisher) Run(ctx context.Context) error {
	log := klog.FromContext(ctx).WithName("node-status")
	ctx = klog.NewContext(ctx, log)
	timer := time.NewTimer(0)
	defer timer.Stop()
	var pub publication
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.changes:
		case <-timer.C:
		}
		served := p.served.Resources()
		if st := servedState(served); st != pub.state {
			pub = publication{state: st, deadline: time.Now().Add(p.opts.Patience), poll: statusFirstPoll}
		}
		if pub.done {
			continue
		}
		next := p.step(ctx, served, &pub)
		if !pub.done {
			timer.Reset(next)
		}
	}
}

// step makes one attempt at pub and says when to try again.
func (p *StatusPublisher) step(ctx context.Context, served []ResourceStatus, pub *publication) time.Duration {
	log := klog.FromContext(ctx)
	retry := func(msg string, kv ...any) time.Duration {
		if time.Now().After(pub.deadline) {
			pub.done = true
			p.opts.Observe(StatusLeft)
			log.Info("Leaving the Node's allocatable to the kubelet's status update", append([]any{"why", msg}, kv...)...)
			return 0
		}
		log.V(2).Info("Waiting to publish the Node's allocatable", append([]any{"why", msg}, kv...)...)
		d := pub.poll
		pub.poll = min(2*pub.poll, statusMaxPoll)
		return d
	}
	held, err := p.opts.Kubelet.Allocatable(ctx)
	if err != nil {
		return retry("asking the kubelet which devices it holds", "err", err)
	}
	if wait := kubeletLags(served, held); wait != "" {
		return retry(wait)
	}
	node, err := p.opts.Nodes.Get(ctx, p.opts.NodeName, metav1.GetOptions{})
	if err != nil {
		return retry("reading the Node", "err", err)
	}
	upd := statusUpdate(served, node.Status)
	if upd.empty() {
		// The Node shows it: written by the kubelet, or by us and still
		// there a Confirm later.
		pub.done = true
		return 0
	}
	if pub.writes >= statusMaxWrites {
		pub.done = true
		p.opts.Observe(StatusLeft)
		log.Info("The Node's allocatable keeps differing from what the kubelet holds; leaving it to the kubelet", "want", upd.String())
		return 0
	}
	patch, err := upd.mergePatch()
	if err != nil {
		pub.done = true
		log.Error(err, "Encoding the Node's status patch")
		return 0
	}
	if _, err := p.opts.Nodes.Patch(ctx, p.opts.NodeName, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager}, "status"); err != nil {
		if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
			// RBAC or the node-scope policy says no: retrying will not
			// change that, and the kubelet publishes anyway.
			pub.done = true
			p.opts.Observe(StatusRefused)
			log.Error(err, "Writing the Node's allocatable was refused; the kubelet's status update publishes it")
			return 0
		}
		p.opts.Observe(StatusFailed)
		return retry("writing the Node's status", "err", err)
	}
	pub.writes++
	p.opts.Observe(StatusWritten)
	log.Info("Published the Node's allocatable ahead of the kubelet's status update", "resources", upd.String())
	return p.opts.Confirm
}

// FieldManager is the field manager of the publisher's status writes.
const FieldManager = "migflex-agent-allocatable"

// heldHealthy are the IDs of r's devices the kubelet counts as
// allocatable once it has read the plugin's latest list: the healthy
// ones that are not draining (a draining device is sent as unhealthy).
func heldHealthy(r ResourceStatus) []string {
	var ids []string
	for _, d := range r.Devices {
		if d.Healthy && !d.Draining {
			ids = append(ids, d.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

// kubeletLags says why the kubelet does not hold served yet, or "": for
// every served GPU resource, the healthy device IDs the kubelet holds are
// exactly those served healthy. Equal sets also mean the kubelet read the
// latest device list of the resource, which carries the health.
func kubeletLags(served []ResourceStatus, held map[string][]string) string {
	for _, r := range served {
		if !resourcename.IsGPU(corev1.ResourceName(r.Name)) {
			continue
		}
		want := heldHealthy(r)
		got := slices.Clone(held[r.Name])
		slices.Sort(got)
		got = slices.Compact(got)
		if !slices.Equal(want, got) {
			return fmt.Sprintf("the kubelet holds %d healthy %s devices, %d served", len(got), r.Name, len(want))
		}
		if len(r.Devices) > 0 && !r.Registered {
			return fmt.Sprintf("%s is not registered with the kubelet", r.Name)
		}
	}
	return ""
}

// nodeStatusUpdate is the capacity and allocatable entries to write.
type nodeStatusUpdate struct {
	Capacity, Allocatable map[corev1.ResourceName]int64
}

func (u nodeStatusUpdate) empty() bool { return len(u.Capacity) == 0 && len(u.Allocatable) == 0 }

// String lists the entries as "nvidia.com/mig-1g.10gb 7/7" (allocatable
// of capacity; "-" where unchanged), sorted.
func (u nodeStatusUpdate) String() string {
	names := map[corev1.ResourceName]bool{}
	for r := range u.Capacity {
		names[r] = true
	}
	for r := range u.Allocatable {
		names[r] = true
	}
	var parts []string
	for _, r := range slices.Sorted(maps.Keys(names)) {
		a, c := "-", "-"
		if v, ok := u.Allocatable[r]; ok {
			a = strconv.FormatInt(v, 10)
		}
		if v, ok := u.Capacity[r]; ok {
			c = strconv.FormatInt(v, 10)
		}
		parts = append(parts, fmt.Sprintf("%s %s/%s", r, a, c))
	}
	return strings.Join(parts, ", ")
}

// mergePatch is the JSON merge patch of the status subresource: the
// entries only, so every other key of capacity and allocatable, and every
// other status field, stays as it is.
func (u nodeStatusUpdate) mergePatch() ([]byte, error) {
	quantities := func(m map[corev1.ResourceName]int64) map[string]string {
		if len(m) == 0 {
			return nil
		}
		out := make(map[string]string, len(m))
		for r, v := range m {
			out[string(r)] = strconv.FormatInt(v, 10)
		}
		return out
	}
	type status struct {
		Capacity    map[string]string `json:"capacity,omitempty"`
		Allocatable map[string]string `json:"allocatable,omitempty"`
	}
	return json.Marshal(map[string]status{"status": {Capacity: quantities(u.Capacity), Allocatable: quantities(u.Allocatable)}})
}

// statusUpdate decides the entries to write for served, once the kubelet
// holds it (kubeletLags is ""), against the Node's status: for each served
// GPU resource the kubelet's own counts, capacity every served device
// (healthy or not), allocatable the healthy ones that are not draining,
// where the Node shows another value. A resource served with no devices
// (its profile gone) is written as 0 only where the Node shows it: the
// kubelet keeps such a key at 0, and a key the Node never had stays
// absent. Resources not served are left alone.
func statusUpdate(served []ResourceStatus, status corev1.NodeStatus) nodeStatusUpdate {
	upd := nodeStatusUpdate{Capacity: map[corev1.ResourceName]int64{}, Allocatable: map[corev1.ResourceName]int64{}}
	for _, r := range served {
		name := corev1.ResourceName(r.Name)
		if !resourcename.IsGPU(name) {
			continue
		}
		capacity, allocatable := int64(len(r.Devices)), int64(len(heldHealthy(r)))
		gotCap, hasCap := status.Capacity[name]
		gotAlloc, hasAlloc := status.Allocatable[name]
		if (hasCap || capacity > 0) && (!hasCap || gotCap.Value() != capacity) {
			upd.Capacity[name] = capacity
		}
		if (hasAlloc || allocatable > 0 || capacity > 0) && (!hasAlloc || gotAlloc.Value() != allocatable) {
			upd.Allocatable[name] = allocatable
		}
	}
	return upd
}

// servedState identifies what the kubelet is to hold of served: the
// devices, each one's health as sent to the kubelet, and registration.
func servedState(served []ResourceStatus) string {
	var b strings.Builder
	for _, r := range byName(served) {
		fmt.Fprintf(&b, "%s %t", r.Name, r.Registered)
		for _, d := range r.Devices {
			fmt.Fprintf(&b, " %s=%t", d.ID, d.Healthy && !d.Draining)
		}
		b.WriteByte('\n')
	}
	return b.String()
}
