package sharing

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// replicaSep joins a device's ID and a replica number, as in NVIDIA's
// device plugin ("MIG-<uuid>::0"): dcgm-exporter strips it to map a pod's
// device back to the GPU or MIG device it reads metrics for.
const replicaSep = "::"

// maxDeviceIDLen is the kubelet's limit on a device ID.
const maxDeviceIDLen = 63

// ReplicaID is the ID of replica n of the device with ID id.
func ReplicaID(id string, n int) string { return id + replicaSep + strconv.Itoa(n) }

// SplitReplicaID returns the device and replica number of a replica ID;
// ok is false for an ID that is not a replica's.
func SplitReplicaID(id string) (device string, replica int, ok bool) {
	device, n, found := strings.Cut(id, replicaSep)
	if !found || device == "" {
		return "", 0, false
	}
	r, err := strconv.Atoi(n)
	if err != nil || r < 0 || strconv.Itoa(r) != n {
		return "", 0, false
	}
	return device, r, true
}

// Device is one device a node serves before sharing.
type Device struct {
	// ID is its device ID to the kubelet: the GPU or MIG device UUID.
	ID string
	// Index is how NVIDIA's devices lists name it: "<gpu>" for a whole
	// GPU, "<gpu>:<mig>" for a MIG device.
	Index string
	// MIG is true for a MIG device (which MPS cannot share).
	MIG bool
	// MemoryBytes is its memory; it sets the MPS pinned memory limit.
	MemoryBytes uint64
}

// ServedDevice is one device served to the kubelet after sharing.
type ServedDevice struct {
	// ID is the device ID served: ReplicaID(Device, Replica) for a
	// replica, Device itself for a device that is not shared.
	ID string
	// Device is the ID of the device underneath.
	Device string
	// Shared is true for a replica; Replica is then its number, from 0.
	Shared  bool
	Replica int
}

// Options are what Expand needs beyond the devices and the config.
type Options struct {
	// MPSHostRoot is the host directory under which the MPS daemon of
	// each resource has its pipe and log directories (NVIDIA's --mps-root,
	// /run/nvidia/mps in its chart).
	MPSHostRoot string
}

// Served is what a node serves under a sharing config.
type Served struct {
	// Devices are the devices of each served resource: replicas under the
	// shared (maybe renamed) resource, the rest under their own.
	Devices map[corev1.ResourceName][]ServedDevice
	// Labels are GPU feature discovery's sharing labels for each resource
	// the node has: <resource>.replicas and <resource>.sharing-strategy,
	// keyed by the resource's own name even when renamed, as GFD keys them.
	Labels map[string]string
	// MPS is what each resource shared with MPS needs, by served resource.
	MPS map[corev1.ResourceName]MPS

	deviceOf map[string]string
}

// DeviceOf returns the ID of the device under a served device ID.
func (s *Served) DeviceOf(id string) (string, bool) {
	d, ok := s.deviceOf[id]
	return d, ok
}

// Busy returns the devices underneath IDs in use: a device is busy when
// any one of its replicas is. A replica ID this expansion does not serve
// (a pod still holds it from before the config changed: fewer replicas,
// or no sharing) still marks its device busy, and any other unknown ID is
// returned as it is, so a device in use is never taken for idle.
func (s *Served) Busy(inUse []string) map[string]bool {
	out := make(map[string]bool, len(inUse))
	for _, id := range inUse {
		if d, ok := s.deviceOf[id]; ok {
			out[d] = true
		} else if d, _, ok := SplitReplicaID(id); ok {
			out[d] = true
		} else {
			out[id] = true
		}
	}
	return out
}

// Label keys GPU feature discovery writes per resource.
func ReplicasLabel(resource corev1.ResourceName) string { return string(resource) + ".replicas" }
func StrategyLabel(resource corev1.ResourceName) string {
	return string(resource) + ".sharing-strategy"
}

// Expand returns what a node serving node's devices serves under cfg (nil
// cfg shares nothing). A shared resource the node does not have is
// skipped, as one file serves many nodes; a devices list or count the
// node cannot satisfy fails, as in NVIDIA's device plugin. On error
// nothing is returned: the caller keeps serving what it served.
func Expand(node map[corev1.ResourceName][]Device, cfg *Config, opts Options) (*Served, error) {
	if cfg == nil {
		cfg = &Config{Strategy: StrategyNone}
	}
	s := &Served{
		Devices:  map[corev1.ResourceName][]ServedDevice{},
		Labels:   map[string]string{},
		deviceOf: map[string]string{},
	}
	for _, name := range slices.Sorted(maps.Keys(node)) {
		devs := node[name]
		if len(devs) == 0 {
			continue
		}
		for _, d := range devs {
			if d.ID == "" {
				return nil, fmt.Errorf("%s: a device has no ID", name)
			}
			if prev, dup := s.deviceOf[d.ID]; dup {
				return nil, fmt.Errorf("%s: device %s is served twice (also as %s)", name, d.ID, prev)
			}
			s.deviceOf[d.ID] = d.ID
		}
		r, shared := cfg.Lookup(name)
		s.Labels[ReplicasLabel(name)] = "1"
		s.Labels[StrategyLabel(name)] = string(StrategyNone)
		if !shared {
			for _, d := range devs {
				s.Devices[name] = append(s.Devices[name], ServedDevice{ID: d.ID, Device: d.ID})
			}
			continue
		}
		s.Labels[ReplicasLabel(name)] = strconv.Itoa(r.Replicas)
		s.Labels[StrategyLabel(name)] = string(cfg.Strategy)
		picked, err := pick(r, devs)
		if err != nil {
			return nil, fmt.Errorf("sharing %s: %w", name, err)
		}
		for i, d := range devs {
			if !picked[i] {
				s.Devices[name] = append(s.Devices[name], ServedDevice{ID: d.ID, Device: d.ID})
				continue
			}
			if cfg.Strategy == StrategyMPS && d.MIG {
				return nil, fmt.Errorf("sharing %s: %s is a MIG device, which MPS cannot share", name, d.ID)
			}
			for n := range r.Replicas {
				id := ReplicaID(d.ID, n)
				if len(id) > maxDeviceIDLen {
					return nil, fmt.Errorf("sharing %s: replica ID %q is longer than the kubelet's %d characters", name, id, maxDeviceIDLen)
				}
				s.Devices[r.ServedAs()] = append(s.Devices[r.ServedAs()], ServedDevice{ID: id, Device: d.ID, Shared: true, Replica: n})
				s.deviceOf[id] = d.ID
			}
		}
		if cfg.Strategy == StrategyMPS {
			if s.MPS == nil {
				s.MPS = map[corev1.ResourceName]MPS{}
			}
			s.MPS[r.ServedAs()] = mpsFor(r, devs, picked, opts.MPSHostRoot)
		}
	}
	// A renamed resource must not be one the node serves otherwise, or
	// replicas and whole devices would be counted as one.
	for _, r := range cfg.Resources {
		if r.Rename == "" || len(s.Devices[r.Rename]) == 0 {
			continue
		}
		if devs := node[r.Rename]; len(devs) > 0 {
			return nil, fmt.Errorf("sharing %s: renamed to %s, which this node already serves", r.Name, r.Rename)
		}
	}
	return s, nil
}

// pick marks the devices of r that are shared.
func pick(r Resource, devs []Device) ([]bool, error) {
	picked := make([]bool, len(devs))
	switch {
	case r.Devices.All:
		for i := range picked {
			picked[i] = true
		}
	case r.Devices.Count > 0:
		if r.Devices.Count > len(devs) {
			return nil, fmt.Errorf("devices: %d asked for, this node has %d", r.Devices.Count, len(devs))
		}
		for i := range r.Devices.Count {
			picked[i] = true
		}
	default:
		for _, ref := range r.Devices.List {
			i := slices.IndexFunc(devs, func(d Device) bool { return d.ID == ref || d.Index == ref })
			if i < 0 {
				return nil, fmt.Errorf("devices: %q is not a device of this node's %s", ref, r.Name)
			}
			picked[i] = true
		}
	}
	return picked, nil
}
