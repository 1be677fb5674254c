package solver

import (
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/schedview"
)

// Snapshot is everything one round looks at. The planner keeps nothing from
// one round to the next except its cache of per-model layout tables.
type Snapshot struct {
	// Now is the time of the round: cooldowns and pod ages are measured
	// against it. The planner reads no clock.
	Now time.Time
	// Models are the MIG profile tables of the GPU models in Nodes, by name.
	Models []Model
	Nodes  []Node
	// Pending are the pods waiting for GPUs. Their GPU needs, priority
	// (spec.priority), age (creationTimestamp) and where they may land
	// (nodeSelector, affinity, tolerations, spec.nodeName) are read from
	// the pod.
	Pending []*corev1.Pod
	// Mix is the demand observed recently (see MixTracker), which the
	// fragmentation term keeps free capacity usable for. Empty: the pending
	// pods' own needs.
	Mix []Demand
}

// Model is a GPU model's MIG profile table, as NVML reports it.
type Model struct {
	Name     string
	Profiles []mig.Profile
}

// Node is one node as the planner sees it.
type Node struct {
	// Node is the scheduler's view of the node (name, labels, scheduling
	// taints, cordon), as schedview.NodeFromAPI extracts it; Allocatable is
	// not read.
	schedview.Node
	// OptedIn: the planner may change the node's layout. The free instances
	// of a node that has not opted in still serve pods.
	OptedIn bool
	// Frozen, when not empty, says why the node must not be changed now
	// (its agent is applying or refused a layout, a human edits it, ...).
	Frozen string
	// Dynamic: the node serves through DRA in dynamic mode. The scheduler
	// allocates a placement and the agent makes the instance at Prepare,
	// so what its GPUs' instances leave free serves pods as free devices
	// do, opted in or not; the planner never changes its GPUs (no
	// mig.config, no reclaim) and OptedIn, Frozen and cooldowns do not
	// apply.
	Dynamic bool
	GPUs    []GPU
	// Replicas are the shared devices (time-slicing, MPS) with replicas
	// free: those serve pods as they are, as free devices do. A device
	// that pods use is in use (its GPU or instance says so), so the
	// planner never changes it; one that no pod uses is a free device,
	// until the round hands out a replica of it.
	Replicas []Replicas
}

// Replicas is a shared device's free replicas.
type Replicas struct {
	// GPU is the device's GPU index; Profile and Start its instance's
	// profile and first memory slice (a MIG device), or "" and -1 (a
	// whole GPU).
	GPU     int
	Profile string
	Start   int
	// Resource is what its replicas are served as.
	Resource corev1.ResourceName
	Free     int64
}

// GPU is one physical GPU and its current layout.
type GPU struct {
	Index int
	// Model names a Snapshot model; a GPU whose model has no table (not MIG
	// capable) can serve whole-GPU pods and is never changed.
	Model      string
	MigEnabled bool
	// InUse is set when MIG is disabled and a pod holds the whole GPU.
	InUse bool
	// Reserved: a reservation holds the GPU for a pod waiting for several
	// whole GPUs on its node (internal/planner/reserve), and its free
	// devices go to that pod alone, which the scheduler binds. The round
	// gives the GPU to no pod, and makes it whole once nothing uses its
	// instances (within the cap and the cooldown).
	Reserved  bool
	Instances []Instance
	// LastChanged is when the GPU's layout last changed; zero if unknown.
	LastChanged time.Time
	// Run is when the pod holding the GPU whole started and when it is
	// expected to end, where known (nil: unknown). The round does not
	// read it; reservations do (internal/planner/reserve). A pointer,
	// not the times: every Node view of every round carries the field,
	// and only the trace replay knows the times.
	Run *Run
}

// Run is when the pod holding a device started and when it is expected
// to end; a zero time is unknown.
type Run struct {
	Since, Until time.Time
}

// Instance is one MIG instance (GPU instance with its full compute instance).
type Instance struct {
	Profile string
	// Start is the first memory slice.
	Start int
	// InUse: a pod holds the instance's device. It is never destroyed.
	InUse bool
	// Run is when the pod holding it started and when it is expected to
	// end, as for GPU.
	Run *Run
}

// Demand is one kind of request in the recent demand mix.
type Demand struct {
	// Resource is nvidia.com/gpu or a nvidia.com/mig-* resource.
	Resource corev1.ResourceName
	// Count is how many devices of Resource one pod needs on its node.
	Count int64
	// Weight is how often it was seen, relative to the other entries.
	Weight float64
}

// Policy bounds and weighs what a round may do.
type Policy struct {
	// MaxGPUsPerRound caps the GPUs one round repartitions; 0 means no cap.
	MaxGPUsPerRound int
	// Cooldown is how long a GPU is left alone after it changed.
	Cooldown time.Duration
	// ReclaimIdle gives MIG GPUs with no instance in use back to whole
	// (MIG disabled) once the round's pods are placed, within the cap and
	// cooldown: a free instance draws the scheduler's pods of its profile
	// wherever it is, which scatters MIG over nodes that could hold
	// multi-GPU pods, and a whole GPU serves whole-GPU pods at once and MIG
	// pods after one round. Free instances up to the mix's MIG share of
	// the free capacity stay (see the package documentation).
	ReclaimIdle bool
	// HoldForMultiGPU: when a pod that needs several whole GPUs on one
	// node finds none, the pods after it in the round get no new MIG
	// instance on the nodes that could hold it once their pods end
	// (look-ahead on pending demand). A node with a MIG pod holds no
	// multi-GPU pod until every MIG pod on it ends, and the scheduler
	// keeps filling the free instances left there.
	HoldForMultiGPU bool
	// Weights order the ways of serving a pod; see Weights.
	Weights Weights
}

// Weights of the cost of serving one device on a GPU. The defaults make the
// order lexicographic: a GPU not yet changed this round costs more than any
// loss of usable capacity (at most a few GPUs' worth per device), which
// outweighs any number of free instances destroyed (a tie-break: a free
// instance nobody asks for is capacity in the wrong shape, and the usable
// capacity already counts what the mix can use).
type Weights struct {
	// Touch is the cost of repartitioning a GPU this round does not change
	// yet.
	Touch float64
	// Destroy is the cost of each free instance the change destroys.
	Destroy float64
	// Fragmentation is the cost of each GPU's worth of capacity that
	// becomes unusable for the recent demand mix (see the package
	// documentation).
	Fragmentation float64
}

// DefaultPolicy is what the planner runs with unless told otherwise.
func DefaultPolicy() Policy {
	return Policy{
		MaxGPUsPerRound: 64,
		Cooldown:        2 * time.Minute,
		ReclaimIdle:     true,
		HoldForMultiGPU: true,
		Weights:         Weights{Touch: 1000, Destroy: 1e-6, Fragmentation: 1},
	}
}

// Validate rejects a policy the planner cannot run.
func (p Policy) Validate() error {
	var errs []error
	if p.MaxGPUsPerRound < 0 {
		errs = append(errs, fmt.Errorf("maxGPUsPerRound %d is negative (0 means no cap)", p.MaxGPUsPerRound))
	}
	if p.Cooldown < 0 {
		errs = append(errs, fmt.Errorf("cooldown %s is negative", p.Cooldown))
	}
	for _, w := range []struct {
		name string
		v    float64
	}{{"touch", p.Weights.Touch}, {"destroy", p.Weights.Destroy}, {"fragmentation", p.Weights.Fragmentation}} {
		if w.v < 0 || w.v != w.v || w.v > 1e12 {
			errs = append(errs, fmt.Errorf("weight %s %v must be a number from 0 to 1e12", w.name, w.v))
		}
	}
	return errors.Join(errs...)
}

// Action is what the planner does for a pending pod.
type Action string

const (
	// ActionExisting: free devices that exist now serve the pod; nothing
	// changes (the scheduler has not placed it yet, or its snapshot is old).
	ActionExisting Action = "existing"
	// ActionReshape: the pod is served by the layouts of Result.Nodes.
	ActionReshape Action = "reshape"
	// ActionNone: no change this round can serve the pod; Reason says why.
	ActionNone Action = "none"
)

// PodPlan is the planner's explanation for one pending pod.
type PodPlan struct {
	// Pod is namespace/name.
	Pod    string
	Action Action
	// Node and Devices say where the pod will run (Action is not none).
	Node    string
	Devices []Device
	// Reason explains ActionNone in words.
	Reason string
	// Later (Supplier, with ActionNone): a GPU of a node the pod may land
	// on could take its largest device once what blocks it now passes
	// (instances in use, a cooldown, a frozen or held node, the round's
	// cap): the planner may change it and its model has the profile. The
	// planner tries each round, so the pod is served when it does.
	Later bool
}

// Device is one device a pod will use.
type Device struct {
	GPU      int
	Resource corev1.ResourceName
	// Start is the instance's first memory slice (MIG devices only).
	Start int
}

// Result is one round's decision.
type Result struct {
	// Nodes are the nodes to change, ordered by name.
	Nodes []NodeChange
	// Pods explain every pending pod, in the order of Snapshot.Pending.
	Pods []PodPlan
	// Warnings name GPUs the planner left alone because their layout or
	// model is not one it understands.
	Warnings []string
}

// NodeChange is the new layout of one node.
type NodeChange struct {
	Node string
	// Config is the node's mig.config document (mig-parted format) with
	// every MIG-capable GPU of the node: the changed GPUs at their new
	// layout, the others at their current one.
	Config string
	GPUs   []GPUChange
}

// GPUChange is one GPU's change.
type GPUChange struct {
	Index int
	Model string
	// MigEnabled is the new MIG mode; Layout the instances after the
	// change, in start order.
	MigEnabled bool
	Layout     []Instance
	// Destroyed are the free instances the change removes.
	Destroyed []Instance
	// Pods are the pending pods the change is for; none when Reclaimed.
	Pods []string
	// Reclaimed: the GPU had no instance in use and goes back to whole
	// (Policy.ReclaimIdle).
	Reclaimed bool
}
