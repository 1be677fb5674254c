package agent

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
)

// TestConcerns: the Node watch wakes the loop for changes of its inputs
// (the mig.config sources, other managers' labels and annotations, the
// allocatable, the UID) and not for the agent's own report, so that no
// report causes the next.
func TestConcerns(t *testing.T) {
	// agentFields is the managedFields entry of an apply by the agent
	// that owns the state label and the reason annotation.
	agentFields := func(labels, annotations []string) metav1.ManagedFieldsEntry {
		var l, a string
		for i, k := range labels {
			if i > 0 {
				l += ","
			}
			l += `"f:` + k + `":{}`
		}
		for i, k := range annotations {
			if i > 0 {
				a += ","
			}
			a += `"f:` + k + `":{}`
		}
		raw := `{"f:metadata":{"f:labels":{` + l + `},"f:annotations":{` + a + `}}}`
		return metav1.ManagedFieldsEntry{
			Manager: DefaultFieldManager, Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1",
			Time: &metav1.Time{Time: time.Unix(0, 0)}, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(raw)},
		}
	}
	base := func() *corev1.Node {
		return &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name: "n", UID: "u1",
				Labels: map[string]string{"team": "ml", nodeinfo.LabelMigConfigState: nodeinfo.StatePending, "nvidia.com/mig-3g.40gb.count": "2"},
				Annotations: map[string]string{
					nodeinfo.AnnotationMigConfig: "doc-1",
					nodeinfo.AnnotationReason:    "changing the GPUs",
				},
				ManagedFields: []metav1.ManagedFieldsEntry{agentFields(
					[]string{nodeinfo.LabelMigConfigState, "nvidia.com/mig-3g.40gb.count"},
					[]string{nodeinfo.AnnotationReason})},
			},
			Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{"nvidia.com/mig-3g.40gb": resource.MustParse("2")}},
		}
	}
	for _, tc := range []struct {
		name   string
		change func(n *corev1.Node)
		want   bool
	}{
		{"nothing (a status heartbeat)", func(n *corev1.Node) {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		}, false},
		{"the agent's own state and reason", func(n *corev1.Node) {
			n.Labels[nodeinfo.LabelMigConfigState] = nodeinfo.StateSuccess
			n.Annotations[nodeinfo.AnnotationReason] = "waiting for pods"
		}, false},
		{"the agent drops a count label it owned", func(n *corev1.Node) {
			delete(n.Labels, "nvidia.com/mig-3g.40gb.count")
			n.ManagedFields = []metav1.ManagedFieldsEntry{agentFields([]string{nodeinfo.LabelMigConfigState}, []string{nodeinfo.AnnotationReason})}
		}, false},
		{"a new mig.config", func(n *corev1.Node) { n.Annotations[nodeinfo.AnnotationMigConfig] = "doc-2" }, true},
		{"the mig.config label", func(n *corev1.Node) { n.Labels[nodeinfo.LabelMigConfig] = "all-1g.10gb" }, true},
		{"a user's label", func(n *corev1.Node) { n.Labels["team"] = "infra" }, true},
		{"a user removes a label of their own", func(n *corev1.Node) { delete(n.Labels, "team") }, true},
		{"a user overwrites the state label", func(n *corev1.Node) {
			n.Labels[nodeinfo.LabelMigConfigState] = "bogus"
			n.ManagedFields = []metav1.ManagedFieldsEntry{agentFields([]string{"nvidia.com/mig-3g.40gb.count"}, []string{nodeinfo.AnnotationReason})}
		}, true},
		{"the allocatable", func(n *corev1.Node) {
			n.Status.Allocatable = corev1.ResourceList{"nvidia.com/mig-3g.40gb": resource.MustParse("1")}
		}, true},
		{"a Node recreated under the same name", func(n *corev1.Node) { n.UID = types.UID("u2") }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, n := base(), base()
			tc.change(n)
			if got := concerns(o, n, DefaultFieldManager); got != tc.want {
				t.Errorf("concerns = %v, want %v", got, tc.want)
			}
		})
	}
}
