// Package solver decides which free MIG capacity to repartition so that
// pending pods can run. It is pure: a Snapshot (nodes, their GPUs and
// instances in use, pending pods, the recent demand mix, the time) and a
// Policy go in; a Result comes out with, for every node to change, its new
// nvidia.com/mig.config document (mig-parted format, checked with
// migconfig exactly as the agent will run it), and for every pending pod
// where it will run or why it cannot. No clock, no client, no NVML.
//
// # Rules
//
//   - An instance in use is never destroyed, moved or put under a MIG mode
//     change; a GPU held whole is never repartitioned.
//   - Layouts come from the model's own profile table: every layout the
//     planner can propose is one migconfig.Validate accepts (the tables are
//     enumerated once per model and checked by it), and every document is
//     run through migconfig's Parse, Validate and MakePlan before it is
//     returned.
//   - Only nodes that opted in and are not frozen change; their free
//     instances, and those of other nodes, serve pods as they are.
//   - A GPU changed less than Policy.Cooldown ago is not changed again; a
//     round changes at most Policy.MaxGPUsPerRound GPUs.
//   - Where a pod may land is schedview's node filter (node
//     selector, required affinity, taints, cordon, spec.nodeName): the same
//     code the webhook uses.
//
// # Objective
//
// Pods claim capacity in order of priority, then age (oldest first), then
// name, so that no pod is served at the cost of one before it. Each pod
// takes the cheapest way to get its devices, where the cost of a device on
// a GPU is, with the default weights effectively in this order:
//
//  1. Weights.Touch if the GPU is not already being changed this round
//     (a free instance that exists costs nothing): fewest GPUs touched;
//  2. Weights.Fragmentation times the loss of usable capacity (below);
//  3. Weights.Destroy per free instance the change destroys, a tie-break:
//     a free instance nobody needs is capacity in the wrong shape, and the
//     usable capacity already counts what the mix could use.
//
// Ties go to the first node by name, then the lowest GPU index.
//
// # Usable capacity, a fragmentation measure
//
// In the spirit of FGD (Weng et al., ATC'23), fragmentation is the free
// capacity that the demand expected next cannot use. The expectation is
// the recent demand mix (Snapshot.Mix, e.g. from MixTracker): request kinds
// t (a MIG profile, or k whole GPUs on one node) with weights w_t summing
// to one, each kind weighted by the GPUs' worth it asks for (so a rare
// eight-GPU pod counts for what it holds). A GPU's capacity usable by a MIG
// kind t is the memory share of t times how many more instances of t the
// GPU could hold, by its placement table, next to what is occupied (in
// use, or given to a pod this round); free instances count as reshapable
// on nodes the planner may change, and only as themselves elsewhere. For k
// whole GPUs it is k times the pods of k GPUs a node could take, counted
// twice: now, from its idle GPUs (floor(idle/k)), and later, from its GPUs
// that are or will be whole again when their pods end (a GPU given to MIG
// leaves that count; one given whole to a pod does not). The usable
// capacity
//
//	U = sum over t of w_t * usable_t
//
// differs from FGD's expected fragment (free - U) by the free capacity
// alone, which every placement of the same device lowers equally; so the
// planner takes the placement that loses the least U. Unlike FGD's
// resource-share model, usable_t follows MIG's placement rules: a busy 1g
// at slice 3 leaves room for 3g.40gb only at slice 4. The node terms keep
// MIG off the nodes that can still hold multi-GPU pods.
//
// # After the pods
//
// With Policy.ReclaimIdle (the default), MIG GPUs with no instance in use
// and none given to a pod go back to whole (MIG disabled), within the
// round's cap and the cooldown, when the demand mix asks for whole GPUs:
// the scheduler gives a free instance to the next pod of its profile
// wherever it is, so instances left idle scatter MIG pods over nodes that
// could hold multi-GPU pods, while a whole GPU serves whole-GPU pods at
// once and MIG pods after one round. Free instances of the profiles the
// mix asks for are kept while their share of the free capacity is at most
// the mix's MIG share, on the nodes with the fewest whole GPUs and never on
// one that would otherwise be all whole: a GPU reclaimed and then carved
// again for the next MIG pod is two changes where keeping it is none.
//
// A GPU the round changes gets, next to its occupied instances and the free
// instances kept, new free instances for the demand mix (the profile with
// the highest weight per instance already there, at the placement that
// leaves most room), so that the next pods of that mix find a device
// without another change. Every node document lists all its MIG GPUs: the
// changed ones at their new layout (mig-parted's count form when the
// agent's own planning lands on exactly the planned placements, the pinned
// {name, position, size} form otherwise), the others as they are.
//
// # Scale
//
// A model's layouts are enumerated once (a few thousand for A100/H100) with
// their successors and, per profile, how many more fit. GPUs in the same
// state share a class whose option per resource is computed once. Each
// group of nodes the scheduler cannot tell apart keeps, per resource, a
// lazy heap of its GPUs by cost (and per multi-device need, of its nodes),
// so a pod costs a heap pop per group it may land in rather than a scan of
// the fleet. See docs/PLANNER.md for measurements.
package solver
