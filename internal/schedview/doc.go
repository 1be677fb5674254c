// Package schedview is the scheduler's view of GPU pods and nodes, shared
// by the webhook's decision (internal/fallback), the planner
// (internal/planner, internal/plansnap, internal/reshape) and the trace
// replay, so that they all count a pod's GPUs and judge where it may land
// alike: what a pod asks for (Devices), a Node as the scheduler sees it
// (Node, NodeFromAPI), the node filters that depend only on the pod and
// the Node object (Filter), and an immutable Snapshot of the nodes grouped
// by what those filters read, with a Builder that keeps it from informer
// events. It is pure.
//
// A pod asks for GPUs by extended resource today (nvidia.com/gpu,
// nvidia.com/mig-*). With DRA it may also ask through ResourceClaims; what
// a claim asks for belongs here too, beside Devices, so that the webhook,
// the planner and the replay keep reading one answer.
package schedview
