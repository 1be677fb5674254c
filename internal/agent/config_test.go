package agent

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/deviceplugin"
	"github.com/migflex/migflex/internal/migconfig/migconfigtest"
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
	want := map[string]int{resource3g: 2, deviceplugin.ResourceGPU: 1}
	n.waitServed(want)

	// The layout in place, as a document: success, nothing to change.
	const inPlace = "version: v1\nmig-configs:\n  selected:\n  - devices: [0]\n    mig-enabled: true\n    mig-devices: {3g.40gb: 2}\n"
	sent := 0
	for _, d := range migconfigtest.Hostile() {
		if len(d.Data) > maxAnnotationDoc || !utf8.Valid(d.Data) || strings.TrimSpace(string(d.Data)) == "" {
			continue // the API server refuses it, or the agent sees no source
		}
		sent++
		n.annotate(AnnotationMigConfig, inPlace)
		n.waitState(StateSuccess)

		n.annotate(AnnotationMigConfig, string(d.Data))
		obj := n.waitState(StateFailed)
		reason := obj.Annotations[AnnotationReason]
		if !strings.HasPrefix(reason, "annotation "+AnnotationMigConfig+": ") || len(reason) > 2560 {
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
	n.annotate(AnnotationRunAIConfig, `version: v1
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
	n.waitState(StateSuccess)
	if diff := cmp.Diff([]string{"GPU 0 mig=true 3g.40gb@4", "GPU 1 mig=true 7g.80gb@0"}, n.layoutOf()); diff != "" {
		t.Errorf("layout (-want +got):\n%s", diff)
	}
	n.waitServed(map[string]int{resource3g: 1, resource7g: 1})

	n.annotate(AnnotationRunAIConfig, "version: v1\nmig-configs:\n  selected:\n  - {devices: [\"x\"], mig-enabled: false}\n")
	obj := n.waitState(StateFailed)
	want := `annotation run.ai/mig.config: mig-configs.selected[0].devices[0]: a GPU index must be a whole number from 0 to 2147483647, written 3 or "3", got the string "x"; the GPUs are left as they are`
	if r := obj.Annotations[AnnotationReason]; r != want {
		t.Errorf("reason %q\nwant   %q", r, want)
	}
}
