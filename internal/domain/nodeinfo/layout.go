package nodeinfo

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/platform/intern"
)

// GPU is one GPU in the layout annotation.
type GPU struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	Model string `json:"model"`
	// MigMode is MigModeEnabled, MigModeDisabled, MigModeNA (not MIG
	// capable), or a mode with the one pending a GPU reset: "Disabled
	// (pending Enabled)".
	MigMode string `json:"migMode"`
	// Health is the whole GPU's when it is served as one device.
	Health string `json:"health,omitempty"`
	// UsedBy are the pods ("namespace/name", sorted) holding the whole GPU
	// as a device, as the kubelet's pod-resources API reports them.
	UsedBy []string `json:"usedBy,omitempty"`
	// Shared says how the whole GPU is served when it is shared
	// (time-slicing, MPS); nil when it is served as one device.
	Shared    *Shared    `json:"shared,omitempty"`
	Instances []Instance `json:"instances,omitempty"`
}

// Instance is one GPU instance (and its compute instance) in the layout
// annotation.
type Instance struct {
	Profile   string    `json:"profile"`
	Placement Placement `json:"placement"`
	GI        uint32    `json:"gi"`
	CI        uint32    `json:"ci"`
	// UUID is the MIG device UUID; empty for a GPU instance without a
	// compute instance, which is no device.
	UUID   string `json:"uuid,omitempty"`
	Health string `json:"health"`
	// UsedBy are the pods ("namespace/name", sorted) holding the device.
	UsedBy []string `json:"usedBy,omitempty"`
	// Shared says how the device is served when it is shared
	// (time-slicing, MPS); nil when it is served as one device.
	Shared *Shared `json:"shared,omitempty"`
}

// Shared is how a shared device is served: as Replicas devices
// ("<uuid>::<n>") of Resource, of which pods hold InUse. The Node's
// allocatable counts the replicas, so readers of the layout that count
// devices against it (the webhook, the planner, kubectl migflex) count
// a shared device's replicas, not the device.
type Shared struct {
	// Resource is the extended resource the replicas are served as: the
	// device's own, or the one the sharing config renames it to.
	Resource string `json:"resource"`
	Replicas int    `json:"replicas"`
	// InUse is how many of its replicas pods hold (each pod in UsedBy
	// holds at least one).
	InUse int `json:"inUse"`
}

// Free is how many replicas no pod holds.
func (s *Shared) Free() int { return max(s.Replicas-s.InUse, 0) }

// Devices is what a device served as resource, held by usedBy and shared
// as s (nil: served whole), counts for in the Node's allocatable and how
// many of those pods hold: its replicas, or the device itself.
func Devices(resource corev1.ResourceName, usedBy []string, s *Shared) (served corev1.ResourceName, total, inUse int64) {
	if s == nil {
		if len(usedBy) > 0 {
			inUse = 1
		}
		return resource, 1, inUse
	}
	// A pod holds at least one replica: the kubelet's count, from the
	// agent's last poll, may be older than the pods it names.
	return corev1.ResourceName(s.Resource), int64(s.Replicas), int64(min(max(s.InUse, len(usedBy)), s.Replicas))
}

// Placement is where an instance sits, in memory slices.
type Placement struct {
	Start int `json:"start"`
	Size  int `json:"size"`
}

// notApplicable is the value of a MIG mode or a health that does not apply.
const notApplicable = "N/A"

// Values of GPU.MigMode.
const (
	MigModeEnabled  = "Enabled"
	MigModeDisabled = "Disabled"
	// MigModeNA: the GPU is not MIG capable.
	MigModeNA = notApplicable
)

// Health values in the layout annotation.
const (
	HealthHealthy   = "Healthy"
	HealthUnhealthy = "Unhealthy"
	// HealthNotServed: the device is not served to the kubelet (a GPU
	// instance without compute instance, a MIG device under the none
	// strategy, a whole GPU with MIG on), so it has no health.
	HealthNotServed = notApplicable
)

// MigModeOf renders a GPU's current and pending MIG mode the way
// nvidia-smi does.
func MigModeOf(g mig.GPU) string {
	mode := func(on bool) string {
		if on {
			return MigModeEnabled
		}
		return MigModeDisabled
	}
	if !g.MigCapable {
		return MigModeNA
	}
	if g.MigEnabled != g.MigPending {
		return mode(g.MigEnabled) + " (pending " + mode(g.MigPending) + ")"
	}
	return mode(g.MigEnabled)
}

// Layout is the layout annotation's content for gpus, ordered by GPU
// index and each GPU's instances by placement. served maps every device ID
// served to the kubelet to whether it is healthy (a device not in it is not
// served); inUse maps a device ID to the pods holding it; shared maps the
// ID of each device served as replicas to how (nil: none is shared).
func Layout(gpus []mig.GPU, served map[string]bool, inUse map[string][]string, shared map[string]Shared) []GPU {
	out := make([]GPU, 0, len(gpus))
	for _, g := range gpus {
		lg := GPU{Index: g.Index, UUID: g.UUID, Model: g.Model, MigMode: MigModeOf(g)}
		if !g.MigEnabled {
			lg.Health = healthOf(served, g.UUID)
			lg.UsedBy = inUse[g.UUID]
			lg.Shared = sharedOf(shared, g.UUID)
		}
		for _, in := range g.Instances {
			lg.Instances = append(lg.Instances, Instance{
				Profile:   in.Profile,
				Placement: Placement{Start: in.Start, Size: in.Size},
				GI:        in.GIID,
				CI:        in.CIID,
				UUID:      in.UUID,
				Health:    healthOf(served, in.UUID),
				UsedBy:    usedBy(inUse, in.UUID),
				Shared:    sharedOf(shared, in.UUID),
			})
		}
		slices.SortFunc(lg.Instances, func(a, b Instance) int { return cmp.Compare(a.Placement.Start, b.Placement.Start) })
		out = append(out, lg)
	}
	slices.SortFunc(out, func(a, b GPU) int { return cmp.Compare(a.Index, b.Index) })
	return out
}

// healthOf is the health of device id; served maps every served device ID
// to whether it is healthy.
func healthOf(served map[string]bool, id string) string {
	healthy, ok := served[id]
	switch {
	case id == "" || !ok:
		return HealthNotServed
	case healthy:
		return HealthHealthy
	default:
		return HealthUnhealthy
	}
}

// usedBy is the pods holding device id; an instance without a device
// (no compute instance) has none.
func usedBy(inUse map[string][]string, id string) []string {
	if id == "" {
		return nil
	}
	return inUse[id]
}

// sharedOf is how device id is shared; nil when it is not.
func sharedOf(shared map[string]Shared, id string) *Shared {
	s, ok := shared[id]
	if id == "" || !ok {
		return nil
	}
	return &s
}

// EncodeLayout is the value of AnnotationLayout for gpus (see Layout).
func EncodeLayout(gpus []mig.GPU, served map[string]bool, inUse map[string][]string, shared map[string]Shared) (string, error) {
	b, err := json.Marshal(Layout(gpus, served, inUse, shared))
	if err != nil {
		return "", fmt.Errorf("encoding annotation %s: %w", AnnotationLayout, err)
	}
	return string(b), nil
}

// ParseLayout decodes the value of AnnotationLayout, as the agent wrote
// it or as a Node cache keeps it (PackLayout).
func ParseLayout(s string) ([]GPU, error) {
	var out []GPU
	err := withUnpacked(s, func(b []byte) error {
		var err error
		out, err = ParseLayoutBytes(b)
		return err
	})
	return out, err
}

// ParseLayoutBytes decodes the agent's text of AnnotationLayout in b, for
// a reader that has it as bytes; nothing of b is kept. The strings that
// repeat across a fleet's layouts (models, MIG modes, profiles, health)
// are interned: readers at thousands of Nodes keep what they decoded, and
// those were a tenth of it.
func ParseLayoutBytes(b []byte) ([]GPU, error) {
	var out []GPU
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", AnnotationLayout, err)
	}
	for i := range out {
		g := &out[i]
		g.Model, g.MigMode, g.Health = intern.Weak(g.Model), intern.Weak(g.MigMode), intern.Weak(g.Health)
		for j := range g.Instances {
			in := &g.Instances[j]
			in.Profile, in.Health = intern.Weak(in.Profile), intern.Weak(in.Health)
		}
	}
	return out, nil
}

// Held counts the devices pods hold in a layout, by the resource the
// device plugin serves them as under the mixed strategy: a held MIG
// device as its profile's resource, a held whole GPU as nvidia.com/gpu,
// and a shared device's replicas in use as the resource its replicas are
// served as (see Devices). It is what the node's agent last reported, for
// readers that watch no pods (the webhook in existence mode).
func Held(gpus []GPU) map[corev1.ResourceName]int64 {
	var out map[corev1.ResourceName]int64
	add := func(r corev1.ResourceName, usedBy []string, s *Shared) {
		r, _, n := Devices(r, usedBy, s)
		if n == 0 {
			return
		}
		if out == nil {
			out = map[corev1.ResourceName]int64{}
		}
		out[r] += n
	}
	for _, g := range gpus {
		add(resourcename.GPU, g.UsedBy, g.Shared)
		for _, in := range g.Instances {
			if in.UUID != "" {
				add(resourcename.MIG(in.Profile), in.UsedBy, in.Shared)
			}
		}
	}
	return out
}
