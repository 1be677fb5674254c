package agent

import (
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
)

// status is what the agent reports about the desired layout.
type status struct {
	// State is nodeinfo.StatePending, nodeinfo.StateSuccess, nodeinfo.StateFailed, or empty when the
	// Node asks for no layout.
	State string
	// Reason says why State is not success, or, with success, what else
	// the Node should know (sources ignored, no source left, what of the
	// configuration does not apply to this node).
	Reason string
}

// ownedMetadata is every label and annotation the agent owns on its Node,
// with their values: the state, the layout and profile tables, and the
// labels the server gives the devices (deviceLabels). Keys it does not
// return are removed by the apply, so a profile count label disappears
// with the profile.
func ownedMetadata(st status, gpus []mig.GPU, served map[string]bool, inUse map[string][]string, shared map[string]nodeinfo.Shared, deviceLabels map[string]string) (labels, annotations map[string]string, err error) {
	labels = maps.Clone(deviceLabels)
	if labels == nil {
		labels = map[string]string{}
	}
	if st.State != "" {
		labels[nodeinfo.LabelMigConfigState] = st.State
	}
	layoutJSON, err := nodeinfo.EncodeLayout(gpus, served, inUse, shared)
	if err != nil {
		return nil, nil, err
	}
	annotations = map[string]string{nodeinfo.AnnotationLayout: layoutJSON}
	profilesJSON, err := nodeinfo.EncodeProfiles(gpus)
	if err != nil {
		return nil, nil, err
	}
	if profilesJSON != "" {
		annotations[nodeinfo.AnnotationProfiles] = profilesJSON
	}
	// A success has a reason too: sources ignored, no source left, or
	// what of the configuration was left out on this node (successWith).
	if st.State != "" && st.Reason != "" {
		annotations[nodeinfo.AnnotationReason] = truncate(st.Reason)
	}
	return labels, annotations, nil
}

// applyMetadata makes the agent's labels and annotations on node exactly
// labels and annotations, by server-side apply under the agent's field
// manager: keys it stops setting are removed, and keys other managers own
// (users' labels, the mig.config annotation itself) are never touched. It
// sends nothing when the Node already carries exactly these values for the
// agent, and returns whether it sent the apply.
func (a *Agent) applyMetadata(ctx context.Context, node *corev1.Node, labels, annotations map[string]string) (bool, error) {
	owned, err := corev1ac.ExtractNode(node, a.opts.FieldManager)
	if err != nil {
		return false, fmt.Errorf("reading the agent's fields of Node %s: %w", node.Name, err)
	}
	if maps.Equal(owned.Labels, labels) && maps.Equal(owned.Annotations, annotations) {
		return false, nil
	}
	// The UID makes the apply a precondition on this Node: it must not
	// create a Node that was deleted in the meantime.
	ac := corev1ac.Node(node.Name).WithUID(node.UID).WithLabels(labels).WithAnnotations(annotations)
	updated, err := a.opts.Client.CoreV1().Nodes().Apply(ctx, ac, metav1.ApplyOptions{FieldManager: a.opts.FieldManager, Force: true})
	if err != nil {
		return true, fmt.Errorf("applying labels and annotations to Node %s: %w", node.Name, err)
	}
	a.nodes.Mutation(updated)
	return true, nil
}

// Event reasons on the Node.
const (
	ReasonApplied = "MigConfigApplied"
	ReasonInvalid = "MigConfigInvalid"
	ReasonFailed  = "MigConfigFailed"
	ReasonPending = "MigConfigPending"
	// ReasonSourceIgnored: more than one source is set and they differ;
	// the message names the one that decides and those ignored.
	ReasonSourceIgnored = "MigConfigSourceIgnored"
	// ReasonSourceChanged: the deciding source went and another one
	// decides now.
	ReasonSourceChanged = "MigConfigSourceChanged"
	// ReasonRemoved: the last source went; the layout is kept as is.
	ReasonRemoved = "MigConfigRemoved"
	// ReasonNotPublished: the kubelet did not publish the served layout
	// in the Node's allocatable in time.
	ReasonNotPublished = "MigConfigNotPublished"
	// ReasonNVMLCallHung: an NVML call of the health checks has not
	// returned within --nvml-call-timeout (ReportNVMLHang).
	ReasonNVMLCallHung = "NVMLCallHung"
)

// event is one Event to record on the Node.
type event struct {
	Type    string // corev1.EventTypeNormal or corev1.EventTypeWarning
	Reason  string
	Message string
}

// recordEvent creates a core/v1 Event about node, in the default namespace
// as for every cluster-scoped object, so `kubectl describe node` lists it.
// Events are best effort: a failure is logged, not returned.
func (a *Agent) recordEvent(ctx context.Context, node *corev1.Node, ev event) {
	now := metav1.NewTime(time.Now())
	e := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			// Two Events in the same clock tick must not collide.
			GenerateName: node.Name + ".",
			Namespace:    metav1.NamespaceDefault,
		},
		InvolvedObject: corev1.ObjectReference{
			Kind:       "Node",
			APIVersion: "v1",
			Name:       node.Name,
			UID:        node.UID,
		},
		Type:                ev.Type,
		Reason:              ev.Reason,
		Message:             truncate(ev.Message),
		Source:              corev1.EventSource{Component: a.opts.FieldManager, Host: node.Name},
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		ReportingController: eventController,
		ReportingInstance:   reportingInstance(a.opts.FieldManager, node.Name),
	}
	if _, err := a.opts.Client.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, e, metav1.CreateOptions{}); err != nil {
		a.log.Error(err, "Recording an Event on the Node failed", "reason", ev.Reason, "message", ev.Message)
		return
	}
	a.log.V(2).Info("Recorded Event", "type", ev.Type, "reason", ev.Reason)
}

// eventsAfterStop bounds how long the Events of a report that reached
// the Node are still sent once the agent is stopping.
const eventsAfterStop = 5 * time.Second

// eventController names the agent as the reporting controller of its
// Events.
const eventController = "migflex.io/agent"

// reportingInstance is "<manager>-<node>", cut to the 128 characters the
// events API allows (node names may have 253).
func reportingInstance(manager, node string) string {
	const maxLength = 128
	s := manager + "-" + node
	if len(s) > maxLength {
		s = s[:maxLength]
	}
	return s
}
