package planner

import (
	"maps"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/planner/plansnap"
	"github.com/migflex/migflex/test/bench/scale"
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

// TestTransformNodePacksTheLayout: the cache keeps a Node's layout packed
// and its profile table shared with every node publishing the same text,
// and reads both as the Node served them; the Node handed over keeps the
// agent's text.
func TestTransformNodePacksTheLayout(t *testing.T) {
	var slims []*corev1.Node
	for i := range 2 {
		n, err := scale.Node(i)
		if err != nil {
			t.Fatal(err)
		}
		served := maps.Clone(n.Annotations)
		out, err := transformNode(n)
		if err != nil {
			t.Fatal(err)
		}
		s := out.(*corev1.Node)
		if !maps.Equal(n.Annotations, served) {
			t.Errorf("%s: the transform changed the Node's annotations", n.Name)
		}
		raw, text := s.Annotations[nodeinfo.AnnotationLayout], served[nodeinfo.AnnotationLayout]
		if !nodeinfo.IsPacked(raw) || len(raw) >= len(text) {
			t.Errorf("%s: the cache keeps %d bytes of layout from %d (packed: %v)", n.Name, len(raw), len(text), nodeinfo.IsPacked(raw))
		}
		got, err := nodeinfo.ParseLayout(raw)
		want, wantErr := nodeinfo.ParseLayout(text)
		if err != nil || wantErr != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the kept layout reads as %+v (%v), want %+v (%v)", n.Name, got, err, want, wantErr)
		}
		if s.Annotations[nodeinfo.AnnotationProfiles] != served[nodeinfo.AnnotationProfiles] {
			t.Errorf("%s: the profile table changed", n.Name)
		}
		slims = append(slims, s)
	}
	a, b := slims[0].Annotations[nodeinfo.AnnotationProfiles], slims[1].Annotations[nodeinfo.AnnotationProfiles]
	if unsafe.StringData(a) != unsafe.StringData(b) {
		t.Error("two nodes' equal profile tables are kept twice")
	}
}

// TestWriteRefusesPackedText: a cache's packed layout never reaches the
// API server, even were the planner's field manager to own the key.
func TestWriteRefusesPackedText(t *testing.T) {
	n, err := scale.Node(0)
	if err != nil {
		t.Fatal(err)
	}
	n.UID = "u"
	n.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: DefaultFieldManager, Operation: metav1.ManagedFieldsOperationApply, FieldsType: "FieldsV1",
		FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:annotations":{"f:` + nodeinfo.AnnotationLayout + `":{},"f:` + nodeinfo.AnnotationMigConfig + `":{}}}}`)}}
	out, err := transformNode(n)
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(n)
	c := &Controller{opts: Options{Client: client, FieldManager: DefaultFieldManager}}
	err = c.write(t.Context(), nodeWrite{node: out.(*corev1.Node), key: nodeinfo.AnnotationMigConfig, value: "x"})
	if err == nil || !strings.Contains(err.Error(), "packed") {
		t.Fatalf("write = %v, want a refusal of the packed text", err)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() == "patch" {
			t.Errorf("sent %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
}
