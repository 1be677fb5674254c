package nodeinfo

// keyMigConfig is the GPU operator's key for the desired MIG layout, used
// both as an annotation (a whole mig.config document) and as a label (the
// name of a configuration in the agent's config file).
const keyMigConfig = "nvidia.com/mig.config"

// Keys the agent reads: the sources of the desired layout, in precedence
// order (see Sources). The agent never writes them; the planner writes
// AnnotationMigConfig on nodes that opted in.
const (
	// AnnotationMigConfig holds a whole mig.config document.
	AnnotationMigConfig = keyMigConfig
	// AnnotationRunAIConfig is the same document under the key Run:ai's
	// fake-gpu-operator uses.
	AnnotationRunAIConfig = "run.ai/mig.config"
	// LabelMigConfig names a configuration in the agent's --config-file,
	// as the GPU operator's mig-manager label does.
	LabelMigConfig = keyMigConfig
)

// Keys the agent writes on its Node, by server-side apply under one field
// manager, so nothing else on the Node is touched.
const (
	// LabelMigConfigState is the agent's state of the desired layout:
	// StatePending, StateSuccess or StateFailed, as the GPU operator's
	// mig-manager reports it.
	LabelMigConfigState = "nvidia.com/mig.config.state"
	// AnnotationReason says why the state is not success, or with success
	// what else there is to know (sources ignored, no source left, what of
	// the configuration was left out on this node).
	AnnotationReason = "migflex.io/mig.config.reason"
	// AnnotationLayout is the node's GPU layout as JSON ([]GPU): every
	// GPU, its instances, their health and the pods holding them.
	AnnotationLayout = "migflex.io/mig.layout"
	// AnnotationProfiles is the MIG profile table of each GPU model on the
	// node as JSON ([]Model), as NVML reports it: what a reader needs to
	// know which layouts the node's GPUs can take.
	AnnotationProfiles = "migflex.io/mig.profiles"

	// LabelServing says which kubelet API the agent serves the node's GPUs
	// through: ServingDevicePlugin or ServingDRA. The webhook and the
	// planner read supply from allocatable on the first and from
	// ResourceSlices and claims on the second; one node never offers a
	// resource both ways.
	LabelServing = "migflex.io/serving"

	// LabelDRAMode says, on a node served through DRA, what its driver
	// offers: DRAModeStatic, the MIG instances that exist, or
	// DRAModeDynamic, every placement, the instance made at Prepare. It
	// is the mode served, not the one asked for (--dra-mode=dynamic on an
	// API server without partitionable devices serves static). The
	// planner writes no nvidia.com/mig.config on a dynamic node, and the
	// agent there refuses one.
	LabelDRAMode = "migflex.io/dra-mode"

	// GPU feature discovery's labels, as the device plugin names the
	// devices (each profile's count is ProfileCountLabel).
	LabelGPUProduct  = "nvidia.com/gpu.product"
	LabelGPUCount    = "nvidia.com/gpu.count"
	LabelMigCapable  = "nvidia.com/mig.capable"
	LabelMigStrategy = "nvidia.com/mig.strategy"
)

// ProfileCountLabel is GPU feature discovery's label with the number of
// devices of a MIG resource ("nvidia.com/mig-1g.10gb.count").
func ProfileCountLabel(resource string) string { return resource + ".count" }

// Values of LabelServing.
const (
	ServingDevicePlugin = "device-plugin"
	ServingDRA          = "dra"
)

// Values of LabelDRAMode.
const (
	DRAModeStatic  = "static"
	DRAModeDynamic = "dynamic"
)

// Values of LabelMigConfigState.
const (
	StatePending = "pending"
	StateSuccess = "success"
	StateFailed  = "failed"
)

// Keys of the planner.
const (
	// LabelPlanner opts a node in to the planner with the value
	// PlannerEnabled: the planner then owns its AnnotationMigConfig.
	LabelPlanner   = "migflex.io/planner"
	PlannerEnabled = "enabled"
	// AnnotationProposed is where the planner in dry-run mode writes the
	// layout it would have written in AnnotationMigConfig.
	AnnotationProposed = "migflex.io/mig.config.proposed"
)
