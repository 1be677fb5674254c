package agent

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/mig"
)

// Server is what the agent needs of whatever serves the node's GPUs to the
// kubelet and makes them visible to the scheduler: the device plugin
// (*deviceplugin.Manager) or, chosen per node, a DRA kubelet plugin
// publishing ResourceSlices. One serves a node at a time. How devices are
// named as resources, the labels that describe them and what "visible"
// means are the server's; the agent decides when a layout changes, and
// reports.
type Server interface {
	// Run serves until ctx ends. It returns an error only when it cannot
	// serve at all.
	Run(ctx context.Context) error
	// Serve publishes the layout gpus have now. When the layout cannot be
	// served as it is, the devices served before that still exist stay
	// served, and the error says why.
	Serve(ctx context.Context, gpus []mig.GPU) error
	// Servable says why a layout could not be served, or nil: the agent
	// asks before it changes any GPU, with the layout the change leaves
	// (migconfig.Plan.Projected).
	Servable(gpus []mig.GPU) error
	// Drain stops handing out the devices with these IDs (MIG device or
	// GPU UUIDs) and returns once every allocation that handed one out
	// has answered and the kubelet could know it; Undrain, or a layout
	// without the ID, ends it. The agent drains the devices of the GPUs a
	// change destroys between its two busy checks (see reconcile).
	Drain(ctx context.Context, ids []string) error
	Undrain(ids []string)
	// Served is what is published: by resource, each device ID and
	// whether it is healthy. A device not in it is not served.
	Served() map[string]map[string]bool
	// Visible says whether the scheduler sees what is served, node being
	// the agent's Node as its watch shows it: layout identifies the served
	// layout (health aside) and changes when it does; missing lists what
	// the scheduler does not see yet, empty once it sees it all. The state
	// success waits for it. An error (a server that asks the API server
	// and cannot) leaves the state pending, saying so. The agent asks at
	// each reconcile: when its Node changes (labels, annotations,
	// allocatable) and, while it waits, when Visibility signals and every
	// RetryInterval.
	Visible(ctx context.Context, node *corev1.Node) (layout string, missing []string, err error)
	// Visibility signals (coalesced) when Visible may answer differently
	// for a reason the agent's watch of its Node does not see (a DRA
	// server's ResourceSlices); nil when the Node shows the publication
	// (the device plugin's allocatable). A waiting agent reconciles on
	// it, so it must not signal merely because the layout already served
	// was served again (every reconcile serves it), or the agent would
	// reconcile in a loop.
	Visibility() <-chan struct{}
	// Publisher names, for the Node's reason and Events, who makes the
	// served layout visible, where, and what to check when it does not
	// become visible in time.
	Publisher() (who, where, hint string)
	// Labels are the labels the server's devices give the Node (GPU
	// feature discovery's), for the layout gpus.
	Labels(gpus []mig.GPU) map[string]string
	// Changes signals (coalesced) whenever Served may say something new
	// (a new layout, a health change, a registration): the agent reports
	// the devices' health again. It does not reconcile on it: a server
	// signals on every Serve.
	Changes() <-chan struct{}
}

// instanceChanger is the optional side of a Server that makes and
// destroys MIG instances itself, outside the agent's reconciles: a DRA
// driver in dynamic mode makes a claim's instance at its Prepare and
// destroys it at its Unprepare. InstanceChanges signals (coalesced) after
// each such change; the agent then reconciles, which reads the GPUs again
// and reports what they have (one Node write when that changed, none
// otherwise), instead of listing a destroyed instance until its next
// resync. It must not signal when nothing changed in NVML, or the agent
// would reconcile for nothing.
type instanceChanger interface {
	InstanceChanges() <-chan struct{}
}
