package agent

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/migconfig/migconfigtest"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/domain/resourcename"
)

// maxAnnotationDoc leaves room on the Node for the agent's own annotations:
// the API server limits all of an object's annotations together to 256 KiB.
const maxAnnotationDoc = 200 << 10

// TestAgentConfigDocuments: how the agent reports what the config engine
// makes of a document, on a real API server.
func TestAgentConfigDocuments(t *testing.T) {
	api := startAPIServer(t)
	t.Run("hostile annotations", func(t *testing.T) { testHostileAnnotations(t, api) })
	t.Run("run.ai string indices", func(t *testing.T) { testRunAIStringIndices(t, api) })
	t.Run("shared config file", func(t *testing.T) { testSharedConfigFile(t, api) })
	t.Run("annotation for another node", func(t *testing.T) { testAnnotationNodeShape(t, api) })
}

// testHostileAnnotations annotates a running agent's Node with every
// document of the hostile corpus that the API server takes (issue 14):
// each must end failed with a short reason, the layout kept and still
// served, and the agent still working, which a document in place after each
// shows. An agent that panicked would take the test binary down with it.
func testHostileAnnotations(t *testing.T, api *apiServer) {
	n := newNode(t, api)
	n.partition(0, "3g.40gb", "3g.40gb")
	before := n.layoutOf()
	n.start()
	want := map[string]int{resource3g: 2, string(resourcename.GPU): 1}
	n.waitServed(want)

	// The layout in place, as a document: success, nothing to change.
	const inPlace = "version: v1\nmig-configs:\n  selected:\n  - devices: [0]\n    mig-enabled: true\n    mig-devices: {3g.40gb: 2}\n"
	sent := 0
	for _, d := range migconfigtest.Hostile() {
		if len(d.Data) > maxAnnotationDoc || !utf8.Valid(d.Data) || strings.TrimSpace(string(d.Data)) == "" {
			continue // the API server refuses it, or the agent sees no source
		}
		sent++
		n.annotate(nodeinfo.AnnotationMigConfig, inPlace)
		n.waitState(nodeinfo.StateSuccess)

		n.annotate(nodeinfo.AnnotationMigConfig, string(d.Data))
		obj := n.waitState(nodeinfo.StateFailed)
		reason := obj.Annotations[nodeinfo.AnnotationReason]
		if !strings.HasPrefix(reason, "annotation "+nodeinfo.AnnotationMigConfig+": ") || len(reason) > 2560 {
			t.Errorf("%s: reason of %d bytes: %.300s", d.Name, len(reason), reason)
		}
		if diff := cmp.Diff(before, n.layoutOf()); diff != "" {
			t.Errorf("%s changed the GPUs (-before +after):\n%s", d.Name, diff)
		}
		if st := n.kubelet.State(); !servesExactly(st, want) {
			t.Errorf("%s: served %v, want %v unchanged", d.Name, served(st), want)
		}
	}
	if sent < 20 {
		t.Fatalf("only %d corpus documents fit in an annotation", sent)
	}
	ev := n.waitEvent(corev1.EventTypeWarning, ReasonInvalid)
	if len(ev.Message) > maxMessageLength {
		t.Errorf("Event message of %d bytes", len(ev.Message))
	}
	t.Logf("%d hostile annotations, each failed with the layout kept", sent)
}

// testRunAIStringIndices: run.ai/mig.config as fake-gpu-operator's users
// write it, indices as strings (issue 14 point 2).
func testRunAIStringIndices(t *testing.T, api *apiServer) {
	n := newNode(t, api)
	n.start()
	n.annotate(nodeinfo.AnnotationRunAIConfig, `version: v1
mig-configs:
  selected:
  - devices: ["0"]
    mig-enabled: true
    mig-devices:
    - {name: 3g.40gb, position: 4, size: 4}
  - devices: ["1"]
    mig-enabled: true
    mig-devices: [{name: 7g.80gb, position: 0, size: 8}]
`)
	n.waitState(nodeinfo.StateSuccess)
	if diff := cmp.Diff([]string{"GPU 0 mig=true 3g.40gb@4", "GPU 1 mig=true 7g.80gb@0"}, n.layoutOf()); diff != "" {
		t.Errorf("layout (-want +got):\n%s", diff)
	}
	n.waitServed(map[string]int{resource3g: 1, resource7g: 1})

	n.annotate(nodeinfo.AnnotationRunAIConfig, "version: v1\nmig-configs:\n  selected:\n  - {devices: [\"x\"], mig-enabled: false}\n")
	obj := n.waitState(nodeinfo.StateFailed)
	want := `annotation run.ai/mig.config: mig-configs.selected[0].devices[0]: a GPU index must be a whole number from 0 to 2147483647, written 3 or "3", got the string "x"; the GPUs are left as they are`
	if r := obj.Annotations[nodeinfo.AnnotationReason]; r != want {
		t.Errorf("reason %q\nwant   %q", r, want)
	}
}

// fleetFile is one mig-parted config file for a fleet, as the GPU
// operator's users share it: entries per GPU model (device-filters with and
// without the subsystem id), indices of bigger nodes, and one configuration
// migflex cannot use.
const fleetFile = `version: v1
mig-configs:
  h100-and-a100:
  - device-filter: "0x233010DE:0x16C110DE"
    devices: [0, 5]
    mig-enabled: true
    mig-devices: {"1g.05gb": 0, "7g.80gb": 1}
  - device-filter: ["0x20B010DE", "A100-SXM4-40GB"]
    devices: all
    mig-enabled: true
    mig-devices: {"1g.5gb": 7}
  a100-only:
  - device-filter: "0x20B010DE"
    devices: all
    mig-enabled: true
    mig-devices: {"3g.20gb": 2}
  compute-instances:
  - devices: all
    mig-enabled: true
    mig-devices: {"1c.7g.80gb": 7}
`

// testSharedConfigFile: the label's config file is read as mig-parted reads
// it (issue 16 points 2, 3, 6): what does not apply to this node is left
// out and said in the reason and a Normal Event, a configuration nothing of
// which applies changes nothing and succeeds, and a configuration migflex
// cannot use fails alone.
func testSharedConfigFile(t *testing.T, api *apiServer) {
	cfgPath := configMapMount(t, t.TempDir(), "v1", fleetFile)
	n := newNode(t, api, withLabel(nodeinfo.LabelMigConfig, "h100-and-a100"))
	n.start(withConfigFile(cfgPath))
	obj := n.waitState(nodeinfo.StateSuccess)
	if diff := cmp.Diff([]string{"GPU 0 mig=true 7g.80gb@0", "GPU 1 mig=false"}, n.layoutOf()); diff != "" {
		t.Errorf("layout (-want +got):\n%s", diff)
	}
	const src = "label nvidia.com/mig.config=h100-and-a100: "
	wantReason := src + "mig-configs.h100-and-a100[0]: GPU 5 does not exist (node has GPUs 0, 1); " +
		`mig-configs.h100-and-a100[1]: its device-filter ("0x20B010DE", "A100-SXM4-40GB") matches no GPU on this node (H100-SXM5-80GB is 0x233010DE:0x16C110DE)`
	if r := obj.Annotations[nodeinfo.AnnotationReason]; r != wantReason {
		t.Errorf("reason %q\nwant   %q", r, wantReason)
	}
	n.waitEvent(corev1.EventTypeNormal, ReasonApplied, "create 7g.80gb@0:8", "GPU 5 does not exist", "matches no GPU")
	n.waitServed(map[string]int{resource7g: 1, string(resourcename.GPU): 1})

	// A configuration for other GPUs: nothing changes, and the Node says so.
	before := n.layoutOf()
	n.label(nodeinfo.LabelMigConfig, "a100-only")
	obj = n.waitNode("the a100-only reason", func(o *corev1.Node) bool {
		return strings.Contains(o.Annotations[nodeinfo.AnnotationReason], "a100-only")
	})
	if obj.Labels[nodeinfo.LabelMigConfigState] != nodeinfo.StateSuccess || !strings.Contains(obj.Annotations[nodeinfo.AnnotationReason], "they are left as they are") {
		t.Errorf("state %q, reason %q", obj.Labels[nodeinfo.LabelMigConfigState], obj.Annotations[nodeinfo.AnnotationReason])
	}
	n.waitEvent(corev1.EventTypeNormal, ReasonApplied, "label nvidia.com/mig.config=a100-only: nothing to change on this node", "no entry applies")
	if diff := cmp.Diff(before, n.layoutOf()); diff != "" {
		t.Errorf("a configuration for other GPUs changed them (-before +after):\n%s", diff)
	}

	// The configuration migflex cannot use fails alone, with what to do.
	n.label(nodeinfo.LabelMigConfig, "compute-instances")
	obj = n.waitState(nodeinfo.StateFailed)
	if r := obj.Annotations[nodeinfo.AnnotationReason]; !strings.Contains(r, `profile "1c.7g.80gb": compute-instance profiles`) || !strings.Contains(r, `("7g.80gb")`) {
		t.Errorf("reason %q", r)
	}
	if diff := cmp.Diff(before, n.layoutOf()); diff != "" {
		t.Errorf("a refused configuration changed the GPUs (-before +after):\n%s", diff)
	}
}

// testAnnotationNodeShape: an annotation is written for this node, so the
// same shapes are errors there (docs/INSTALL.md, Differences from
// mig-parted): GPUs it lacks, or nothing that applies.
func testAnnotationNodeShape(t *testing.T, api *apiServer) {
	n := newNode(t, api)
	n.start()
	n.annotate(nodeinfo.AnnotationMigConfig, "version: v1\nmig-configs:\n  selected:\n  - {devices: [0, 5], mig-enabled: true, mig-devices: {7g.80gb: 1}}\n")
	obj := n.waitState(nodeinfo.StateFailed)
	want := "annotation nvidia.com/mig.config: config \"selected\": mig-configs.selected[0]: GPU 5 does not exist (node has GPUs 0, 1); the GPUs are left as they are"
	if r := obj.Annotations[nodeinfo.AnnotationReason]; r != want {
		t.Errorf("reason %q\nwant   %q", r, want)
	}
	n.annotate(nodeinfo.AnnotationMigConfig, "version: v1\nmig-configs:\n  selected:\n  - {device-filter: \"0x20B010DE\", devices: all, mig-enabled: false}\n")
	obj = n.waitNode("the no-entry reason", func(o *corev1.Node) bool {
		return strings.Contains(o.Annotations[nodeinfo.AnnotationReason], "no entry applies")
	})
	if obj.Labels[nodeinfo.LabelMigConfigState] != nodeinfo.StateFailed {
		t.Errorf("state %q", obj.Labels[nodeinfo.LabelMigConfigState])
	}
	if diff := cmp.Diff([]string{"GPU 0 mig=false", "GPU 1 mig=false"}, n.layoutOf()); diff != "" {
		t.Errorf("layout (-want +got):\n%s", diff)
	}
}
