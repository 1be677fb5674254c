package planner

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/planner/plansnap"
)

// The node cache keeps what the planner reads and writes with, not the
// kubelet's status or managed fields.
func TestTransformNode(t *testing.T) {
	kubelet := metav1.ManagedFieldsEntry{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1",
		FieldsV1: metav1.NewFieldsV1(`{"f:status":{"f:images":{}}}`), Subresource: "status"}
	planner := plansnap.ManagedTime(DefaultFieldManager, nodeinfo.AnnotationMigConfig, t0)
	proposal := plansnap.ManagedTime(DefaultFieldManager+"-proposal", nodeinfo.AnnotationProposed, t0)
	agent := metav1.ManagedFieldsEntry{Manager: "migflex-agent", Operation: metav1.ManagedFieldsOperationApply, FieldsType: "FieldsV1",
		FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:annotations":{"f:migflex.io/mig.layout":{}}}}`)}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "u", ResourceVersion: "7", Labels: map[string]string{"a": "b"},
			Annotations:   map[string]string{nodeinfo.AnnotationLayout: "[]", nodeinfo.AnnotationMigConfig: "x"},
			ManagedFields: []metav1.ManagedFieldsEntry{kubelet, planner, agent, proposal}},
		Spec: corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}}, ProviderID: "p"},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{mig3g: resource.MustParse("2")},
			Images:     []corev1.ContainerImage{{Names: []string{"img"}}},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
	out, err := transformNode(n)
	if err != nil {
		t.Fatal(err)
	}
	s := out.(*corev1.Node)
	if s.Name != "n" || s.UID != "u" || s.ResourceVersion != "7" || s.Labels["a"] != "b" || s.Annotations[nodeinfo.AnnotationMigConfig] != "x" ||
		!s.Spec.Unschedulable || len(s.Spec.Taints) != 1 || s.Status.Allocatable.Name(mig3g, resource.DecimalSI).Value() != 2 {
		t.Errorf("lost what the planner reads: %+v", s)
	}
	if len(s.Status.Images) != 0 || len(s.Status.Conditions) != 0 || s.Spec.ProviderID != "" {
		t.Errorf("kept the kubelet's status: %+v", s.Status)
	}
	if len(s.ManagedFields) != 2 || s.ManagedFields[0].Manager != DefaultFieldManager || s.ManagedFields[1].Manager != DefaultFieldManager+"-proposal" {
		t.Errorf("managed fields %+v, want the planner's and its proposal's", s.ManagedFields)
	}
	if owner, _ := plansnap.AnnotationOwner(s, nodeinfo.AnnotationMigConfig); owner != DefaultFieldManager {
		t.Errorf("mig.config owner %q after the transform", owner)
	}
	if len(n.ManagedFields) != 4 || len(n.Status.Images) != 1 {
		t.Error("the transform changed the informer's object")
	}
}
