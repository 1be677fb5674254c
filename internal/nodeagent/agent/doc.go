// Package agent is migflex's node agent: it watches its own Node for the
// MIG layout users ask for, partitions the GPUs through NVML when no pod is
// in the way, has the resulting devices served to the kubelet through its
// Server port (the device plugin, internal/nodeagent/deviceplugin, is the one server
// today), and reports what it did on the Node.
//
// # Sources of the desired layout
//
// In precedence order: the annotation nvidia.com/mig.config (a whole
// mig.config document, any form internal/domain/migconfig parses), the annotation
// run.ai/mig.config (the same, under Run:ai's key), and the GPU operator's
// label nvidia.com/mig.config=<name> naming a configuration in the config
// file (for example a mounted ConfigMap in mig-parted format; it is watched
// and re-read on change). Without a source the GPUs stay as they are and
// the agent serves and reports what exists.
//
// No state is silent: when more than one source is set and they differ,
// the reason annotation names the source that decides and those ignored,
// with a Normal MigConfigSourceIgnored Event; when the deciding source goes
// and another takes over, a Normal MigConfigSourceChanged Event says so
// before its layout is applied; when the last source goes, the layout is
// kept as is, the state stays success with the reason "no mig.config on
// the node: ...", and a Normal MigConfigRemoved Event says so. A Node that
// never had a source gets no state at all.
//
// # Reconcile
//
// Discover -> parse -> select -> validate -> plan -> busy check -> apply ->
// discover -> serve. The plan is made from what NVML reports every time,
// never from memory, so a restart with the same layout changes nothing and
// an agent killed half way converges when it starts again.
//
// The busy check asks the kubelet's pod-resources API which devices pods
// hold. A GPU the plan would disturb a pod on (its whole GPU changes, its
// MIG device is destroyed, or its GPU's MIG mode changes) is not touched:
// with the wait policy it stays pending until the pods are gone; with the
// evict policy the pods are evicted through the Eviction API (a
// PodDisruptionBudget's 429 means wait and retry; pods are never deleted
// directly) and the GPU is changed once the kubelet no longer lists them.
// Other GPUs proceed meanwhile. A pod holding a replica of a shared device
// ("<uuid>::<n>") holds the device: one replica in use makes it busy.
//
// With Options.SharingConfig the agent reads NVIDIA's device plugin
// config before each reconcile and hands its sharing section to a Server
// that is a Sharer (sharing.go); a config it cannot read, select or apply
// is a Warning Event once per change, and the node keeps serving what it
// served.
//
// A MIG mode change that waits for a GPU reset (Ampere) is finished by a
// reset where the backend can reset GPUs (the simulator); otherwise the
// state is failed with a reason that tells the operator what to do.
//
// A call that changes a GPU (MIG mode, an instance's create or destroy, a
// reset), and each reading of the GPUs, runs in a goroutine of its own and
// is waited for at most Options.NVMLCallTimeout. NVML calls cannot be cancelled: one that has not
// returned by then is left running, the state is failed with a reason
// naming the call ("GPU 0: NVML CreateGpuInstance/CreateComputeInstance
// (create 1g.10gb at 1) has not returned for 2m0s"), the timeout is counted
// and its GPU is neither rolled back nor touched until the call returns;
// then it is reconciled from what NVML reports. A reading of the GPUs that
// has not returned fails the reconciles until it does, and the devices
// served before stay served. The rest of the agent goes
// on meanwhile (other GPUs, health, pods in use, the Node's watch), and a
// stopping agent waits for such a call a few seconds at most. The guard is
// internal/nvml/nvmlcall's, which the health watcher uses too, and so does
// DRA dynamic mode's Prepare through Instances.
//
// Failures never destroy the current layout: a document that does not parse
// or fit changes nothing, and a failed step rolls its GPU back. A GPU on
// which a document failed is held: tried again after Options.RetryInterval,
// the wait doubling at each failure in a row up to five minutes (a driver
// error may not recur), at once when the document or the GPU's layout
// changes, with the busy check before every try. A retry is not announced,
// so a failure that recurs the same way writes nothing to the Node.
//
// # Reporting
//
// Label nvidia.com/mig.config.state (pending, success, failed, as the GPU
// operator's mig-manager) with the reason in annotation
// migflex.io/mig.config.reason (on success too when part of the
// configuration was left out on this node: an entry for another GPU model,
// or, in the label's shared config file, GPUs the node lacks or a
// configuration nothing of which applies here). Success means the layout is in place,
// served, and visible to the scheduler (Server.Visible): for the device
// plugin, in the Node's allocatable, which the kubelet publishes at its
// next node status update, seconds after the devices changed; until then
// the state is pending (a pod created on the word success would otherwise
// not fit yet). After Options.AllocatableTimeout without it the state is
// failed, with a Warning MigConfigNotPublished Event, until it shows. The
// server's labels for its devices (the device plugin's: GPU feature
// discovery's nvidia.com/gpu.product, gpu.count, mig.capable,
// mig.strategy, mig-<profile>.count); annotation migflex.io/mig.layout with the layout,
// device health and the pods holding each device as JSON ([]nodeinfo.GPU),
// and migflex.io/mig.profiles with the MIG profile table of each GPU model
// (internal/domain/nodeinfo owns both formats). Which pods hold devices is asked
// of the kubelet every Options.InUseInterval and published when it
// changed, so the planner sees instances in use as pods come and go. They are written by server-side apply
// under one field manager with only these keys, so keys the agent stops
// setting are removed and nobody else's keys are touched; nothing is sent
// when nothing changed. Events on the Node: Normal MigConfigApplied, Warning
// MigConfigInvalid, MigConfigFailed and MigConfigNotPublished, Normal
// MigConfigPending naming the pods, and the source Events above; each only
// when the state or reason changes, or GPUs were changed. Warning
// NVMLCallHung for a health check's NVML call that has not returned
// (ReportNVMLHang): one a hang, at most one a call an hour.
//
// # RBAC
//
//	nodes:          get, list, watch, patch (its own Node; apply is a patch)
//	events (core):  create
//	pods/eviction:  create (only with the evict policy)
//
// The agent reads pods from the kubelet's pod-resources socket, not from the
// API server, so it needs no access to pods.
package agent
