// Package planner runs the planner (internal/planner/solver) in the cluster: it
// turns pods the scheduler could not place for want of a MIG profile into
// layouts on the nodes that opted in, which their agents then apply.
//
// # What it reads
//
// Two informers, never a List per decision: Nodes, and pods in phase
// Pending (only those asking for nvidia.com/gpu or nvidia.com/mig-* are
// kept). Demand is the pods marked PodScheduled=False with reason
// Unschedulable, less those a Node's layout lists holding a device (the
// pod informer can be behind the Node informer after a lost watch); pods
// bound to a node but not started are "starting" (the kubelet may be
// handing them devices their agent does not report yet).
// The Nodes are read through internal/planner/plansnap: the GPUs and the pods
// holding their instances from the agent's migflex.io/mig.layout, the
// profile tables from migflex.io/mig.profiles.
//
// # Rounds
//
// Any relevant change (a GPU pod, a Node's labels, annotations, taints,
// cordon or allocatable; not heartbeats) starts a batch of
// planner.Batcher, as the trace replay runs it: the round runs once
// nothing changed for Options.Cadence.Idle, or Options.Cadence.Max after
// the batch began, and again every Options.Cadence.Resync while pods wait
// (a cooldown ends, a hold lifts). A round is idempotent: what it would write
// is compared with what the Nodes carry, and a layout written but not in
// place yet counts as done (plansnap shows such a node's GPUs at their
// new layout, and freezes it), so a round after a change, or after a
// leader change, finds nothing more to do and writes nothing.
//
// # What it may change
//
// Only nodes labelled migflex.io/planner=enabled, and of those only ones
// whose agent reports success (a node that never had a layout asked for
// counts as well), not changing a layout, not waiting for a MIG mode
// reset, and with no pod starting on them. On an opted-in node the planner
// owns nvidia.com/mig.config: it writes the whole document by server-side
// apply under its field manager (Options.FieldManager), with the Node's
// UID and resourceVersion as preconditions, so that a write based on a
// stale view (another replica's write, the agent's report) fails and is
// planned again. Someone else writing nvidia.com/mig.config on such a
// node (kubectl annotate, another tool) is a human change: the managed
// field shows another manager, and the planner leaves the node alone for
// Options.ManualHold after it (the time in managedFields), then takes the
// layout as it finds it and may change it again. To keep a node by hand,
// remove its label. The agent stays the last guard: it never repartitions
// a GPU a pod holds.
//
// # Safety
//
// A GPU the planner changed is left alone for Policy.Cooldown; a new
// leader, which does not know which GPUs its predecessor changed, holds
// every GPU of a node whose mig.config the planner wrote less than a
// cooldown ago. A round changes at most Policy.MaxGPUsPerRound GPUs and
// Options.MaxNodesPerRound nodes; the rest waits for the next round. With
// Options.DryRun it writes the document to migflex.io/mig.config.proposed
// instead, under a field manager of its own (Options.FieldManager plus
// "-proposal": a proposal must not refresh the managed-fields time that
// dates the planner's last change), and removes proposals that no longer
// stand.
//
// # Events
//
// Every pending pod the planner acts on gets an Event: MigReshapePlanned
// (Normal) naming the node and the GPUs that will serve it, once the
// layout is written; MigReshapeImpossible (Warning) saying why no change
// can, naming the pods holding the GPUs that could were their instances
// free. The same Event is not repeated while its message stays the same.
//
// # Leader election
//
// With Options.LeaderElection the replica holding the Lease plans; the
// others keep their caches warm and take over when its holder stops
// renewing it (Options.LeaseDuration), or at once when it releases it on
// shutdown. Run returns ErrLostLease when another replica took the lead,
// and the process exits.
package planner
