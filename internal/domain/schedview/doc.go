// Package schedview is the scheduler's view of GPU pods and nodes, shared
// by the webhook's decision (internal/webhook/fallback), the planner
// (internal/planner/solver, internal/planner/plansnap, internal/planner) and the trace
// replay, so that they all count a pod's GPUs and judge where it may land
// alike: what a pod asks for (Devices), a Node as the scheduler sees it
// (Node, NodeFromAPI), the node filters that depend only on the pod and
// the Node object (Filter), and an immutable Snapshot of the nodes grouped
// by what those filters read, with a Builder that keeps it from informer
// events. It is pure.
//
// A pod asks for GPUs by extended resource (nvidia.com/gpu,
// nvidia.com/mig-*) or, on nodes whose agent serves through DRA, through
// ResourceClaims on migflex's DeviceClasses. On a DRA node the supply is
// the devices of its ResourceSlices less those allocated to claims
// (DRASupply), not status.allocatable; a pod's claims are read as the
// extended resources of the same devices (PodClaims), and AsScheduled
// restricts the pod to the nodes that can serve it that way, so that the
// webhook, the planner and the replay keep reading one answer. A selector
// of a form it does not read is checked with the scheduler's own CEL
// library (internal/domain/dracel), so that what it says about it (a
// compile error, a comparison false on every device) is what the
// scheduler finds.
package schedview
