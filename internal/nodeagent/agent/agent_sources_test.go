package agent

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/domain/resourcename"
)

// The sources of the desired layout: annotations, the label and its config
// file, and documents that do not parse or fit.

// testValidAnnotation: a valid mig.config annotation is applied, served,
// reported (state, labels, layout) and recorded as an Event; nobody else's
// labels or annotations are touched.
func testValidAnnotation(t *testing.T, api *apiServer) {
	n := newNode(t, api, withAnnotation(nodeinfo.AnnotationMigConfig, mixedLayout))
	n.start()
	obj := n.waitState(nodeinfo.StateSuccess)
	if diff := cmp.Diff([]string{"GPU 0 mig=true 2g.20gb@0 2g.20gb@2 3g.40gb@4", "GPU 1 mig=true 7g.80gb@0"}, n.layoutOf()); diff != "" {
		t.Errorf("layout (-want +got):\n%s", diff)
	}
	n.waitServed(map[string]int{resource2g: 2, resource3g: 1, resource7g: 1})

	wantLabels := map[string]string{
		"team":                         "ml",
		nodeinfo.LabelGPUCount:         "2",
		nodeinfo.LabelGPUProduct:       "H100-SXM5-80GB",
		nodeinfo.LabelMigCapable:       "true",
		nodeinfo.LabelMigStrategy:      "mixed",
		nodeinfo.LabelMigConfigState:   "success",
		nodeinfo.LabelServing:          nodeinfo.ServingDevicePlugin,
		"nvidia.com/mig-2g.20gb.count": "2",
		"nvidia.com/mig-3g.40gb.count": "1",
		"nvidia.com/mig-7g.80gb.count": "1",
	}
	if diff := cmp.Diff(wantLabels, obj.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if obj.Annotations[nodeinfo.AnnotationMigConfig] != mixedLayout || obj.Annotations["example.com/owner"] != "alice" {
		t.Errorf("the agent touched keys it does not own: %v", obj.Annotations)
	}
	if _, ok := obj.Annotations[nodeinfo.AnnotationReason]; ok {
		t.Errorf("reason annotation on success: %q", obj.Annotations[nodeinfo.AnnotationReason])
	}
	checkLayoutAnnotation(t, n, obj)

	ev := n.waitEvent(corev1.EventTypeNormal, ReasonApplied, "annotation nvidia.com/mig.config", "GPU 0", "create 2g.20gb@0:2", "GPU 1")
	if ev.InvolvedObject.UID != obj.UID || ev.InvolvedObject.Kind != "Node" || ev.Namespace != metav1.NamespaceDefault {
		t.Errorf("Event is about %+v in %q, want the Node with UID %s in default", ev.InvolvedObject, ev.Namespace, obj.UID)
	}
	// Only the agent's field manager owns its keys.
	for _, mf := range obj.ManagedFields {
		if mf.Manager == DefaultFieldManager && mf.Operation != metav1.ManagedFieldsOperationApply {
			t.Errorf("the agent wrote with %s, want only server-side apply", mf.Operation)
		}
	}

	// A new layout: the 7g goes, its count label goes and the resource
	// is zeroed at the kubelet.
	n.annotate(nodeinfo.AnnotationMigConfig, allThree)
	n.waitServed(map[string]int{resource2g: 0, resource3g: 4, resource7g: 0})
	obj = n.waitNode("the 3g.40gb count", func(o *corev1.Node) bool { return o.Labels["nvidia.com/mig-3g.40gb.count"] == "4" })
	for _, k := range []string{"nvidia.com/mig-7g.80gb.count", "nvidia.com/mig-2g.20gb.count"} {
		if v, ok := obj.Labels[k]; ok {
			t.Errorf("label %s=%s stayed after its profile went", k, v)
		}
	}
	if obj.Labels[nodeinfo.LabelMigConfigState] != nodeinfo.StateSuccess {
		t.Errorf("state %q", obj.Labels[nodeinfo.LabelMigConfigState])
	}
}

// testRunAIAnnotation: the run.ai/mig.config annotation is a source too.
func testRunAIAnnotation(t *testing.T, api *apiServer) {
	n := newNode(t, api, withAnnotation(nodeinfo.AnnotationRunAIConfig, allThree))
	n.start()
	n.waitState(nodeinfo.StateSuccess)
	n.waitServed(map[string]int{resource3g: 4})
	n.waitEvent(corev1.EventTypeNormal, ReasonApplied, "annotation run.ai/mig.config")
}

// testNoSource: a Node without a source gets the GPUs served as they
// are, the GFD labels and layout, and no state.
func testNoSource(t *testing.T, api *apiServer) {
	n := newNode(t, api)
	n.partition(0, "3g.40gb")
	before := n.layoutOf()
	r := n.start()
	n.waitServed(map[string]int{resource3g: 1, string(resourcename.GPU): 1})
	obj := n.waitNode("the GFD labels", func(o *corev1.Node) bool { return o.Labels[nodeinfo.LabelGPUCount] == "2" })
	waitCounter(t, r, "migflex_agent_reconciles_total", "result", resultNone)
	if _, ok := obj.Labels[nodeinfo.LabelMigConfigState]; ok {
		t.Errorf("state label without a source: %v", obj.Labels)
	}
	if obj.Labels["nvidia.com/mig-3g.40gb.count"] != "1" || obj.Annotations[nodeinfo.AnnotationLayout] == "" {
		t.Errorf("labels %v, annotations %v: want the existing layout reported", obj.Labels, obj.Annotations)
	}
	if diff := cmp.Diff(before, n.layoutOf()); diff != "" {
		t.Errorf("the GPUs changed without a source (-before +after):\n%s", diff)
	}
	if evs := n.events(); len(evs) != 0 {
		t.Errorf("Events without a source: %s", describeEvents(evs))
	}
}

// testMalformedAndImpossible: a document that does not parse or fit is
// refused with a reason and an Event, and the layout stays.
func testMalformedAndImpossible(t *testing.T, api *apiServer) {
	n := newNode(t, api)
	n.partition(0, "3g.40gb", "3g.40gb")
	before := n.layoutOf()
	n.start()
	want := map[string]int{resource3g: 2, string(resourcename.GPU): 1}
	n.waitServed(want)

	n.annotate(nodeinfo.AnnotationMigConfig, "version: v1\nmig-configs:\n  selected:\n  - devices: all\n    mig-enabled: yes please\n")
	obj := n.waitState(nodeinfo.StateFailed)
	if r := obj.Annotations[nodeinfo.AnnotationReason]; !strings.Contains(r, "annotation nvidia.com/mig.config") || !strings.Contains(r, "mig-enabled") {
		t.Errorf("reason %q does not say what is wrong", r)
	}
	n.waitEvent(corev1.EventTypeWarning, ReasonInvalid, "mig-enabled")
	if diff := cmp.Diff(before, n.layoutOf()); diff != "" {
		t.Errorf("a malformed document changed the GPUs (-before +after):\n%s", diff)
	}

	// Valid YAML asking for more than a GPU holds.
	n.annotate(nodeinfo.AnnotationMigConfig, "version: v1\nmig-configs:\n  selected:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {\"3g.40gb\": 3}\n")
	obj = n.waitNode("the impossible layout's reason", func(o *corev1.Node) bool {
		return o.Labels[nodeinfo.LabelMigConfigState] == nodeinfo.StateFailed && strings.Contains(o.Annotations[nodeinfo.AnnotationReason], "3g.40gb")
	})
	n.waitEvent(corev1.EventTypeWarning, ReasonInvalid, "3g.40gb", "GPU 0")
	if diff := cmp.Diff(before, n.layoutOf()); diff != "" {
		t.Errorf("an impossible layout changed the GPUs (-before +after):\n%s", diff)
	}
	if st := n.kubelet.State(); !servesExactly(st, want) {
		t.Errorf("served %v, want %v unchanged", served(st), want)
	}
	t.Logf("reason: %s", obj.Annotations[nodeinfo.AnnotationReason])

	// Fixing it recovers, and the reason goes.
	n.annotate(nodeinfo.AnnotationMigConfig, allThree)
	obj = n.waitState(nodeinfo.StateSuccess)
	if _, ok := obj.Annotations[nodeinfo.AnnotationReason]; ok {
		t.Errorf("reason annotation stayed on success: %q", obj.Annotations[nodeinfo.AnnotationReason])
	}
	n.waitServed(map[string]int{resource3g: 4, string(resourcename.GPU): 0})
}

// testLabelAndConfigFile: the label names a configuration of the config
// file, re-read when its mounted ConfigMap changes.
func testLabelAndConfigFile(t *testing.T, api *apiServer) {
	dir := t.TempDir()
	cfgPath := configMapMount(t, dir, "v1", `version: v1
mig-configs:
  all-disabled:
  - devices: all
    mig-enabled: false
  all-3g.40gb:
  - devices: all
    mig-enabled: true
    mig-devices: {"3g.40gb": 2}
`)
	n := newNode(t, api, withLabel(nodeinfo.LabelMigConfig, "all-3g.40gb"))
	n.start(withConfigFile(cfgPath))
	obj := n.waitState(nodeinfo.StateSuccess)
	if obj.Labels[nodeinfo.LabelMigConfig] != "all-3g.40gb" {
		t.Errorf("the agent touched the label it reads: %v", obj.Labels)
	}
	n.waitServed(map[string]int{resource3g: 4})
	n.waitEvent(corev1.EventTypeNormal, ReasonApplied, "label nvidia.com/mig.config=all-3g.40gb")

	// The ConfigMap changes (a symlink swap): the agent re-reads it.
	configMapMount(t, dir, "v2", `version: v1
mig-configs:
  all-3g.40gb:
  - devices: all
    mig-enabled: true
    mig-devices: {"3g.40gb": 1, "2g.20gb": 2}
`)
	n.waitServed(map[string]int{resource3g: 2, resource2g: 4})
	n.waitState(nodeinfo.StateSuccess)

	// A name the file lacks.
	n.label(nodeinfo.LabelMigConfig, "all-7g.80gb")
	n.waitState(nodeinfo.StateFailed)
	n.waitEvent(corev1.EventTypeWarning, ReasonInvalid, "all-7g.80gb")
	n.waitServed(map[string]int{resource3g: 2, resource2g: 4})
}

// testLabelWithoutConfigFile: the label without --config-file is a
// failure that says so.
func testLabelWithoutConfigFile(t *testing.T, api *apiServer) {
	n := newNode(t, api, withLabel(nodeinfo.LabelMigConfig, "all-3g.40gb"))
	n.start()
	obj := n.waitState(nodeinfo.StateFailed)
	if r := obj.Annotations[nodeinfo.AnnotationReason]; !strings.Contains(r, "--config-file") {
		t.Errorf("reason %q does not point at --config-file", r)
	}
	n.waitEvent(corev1.EventTypeWarning, ReasonFailed, "--config-file")
}
