package agent

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/domain/sharing"
	"github.com/migflex/migflex/internal/nodeagent/deviceplugin"
	"github.com/migflex/migflex/internal/nodeagent/podresources/podresourcestest"
)

func withSharing(path, def string) agentOption {
	return func(o *Options, _ *deviceplugin.Options) { o.SharingConfig, o.SharingDefault = path, def }
}

// testSharingConfig: a directory of NVIDIA sharing configs, one picked by
// the Node's nvidia.com/device-plugin.config label, serves replicas with
// GPU feature discovery's labels; the pods on every replica of an
// instance are its users and keep it from being repartitioned; an invalid
// edit, or a label naming no config, is a Warning and the node keeps
// serving what it served.
func testSharingConfig(t *testing.T, api *apiServer) {
	dir := t.TempDir()
	write := func(name, doc string) {
		t.Helper()
		// As the kubelet updates a mounted ConfigMap: a new file renamed
		// over the old one.
		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	write("default", "version: v1\n")
	write("shared", `version: v1
flags:
  migStrategy: mixed
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/mig-1g.10gb
      replicas: 2
`)
	n := newNode(t, api, withLabel(sharing.LabelConfig, "shared"))
	n.partition(0, "1g.10gb", "1g.10gb")
	gpu := string(resourcename.GPU)
	n.start(withSharing(dir, ""), withInUseInterval(20*time.Millisecond))
	n.waitServed(map[string]int{resource1g: 4, gpu: 1})
	n.waitEvent(corev1.EventTypeNormal, ReasonSharingApplied, `"shared"`, "time-slicing")
	n.waitNode("GFD's sharing labels", func(o *corev1.Node) bool {
		return o.Labels["nvidia.com/mig-1g.10gb.replicas"] == "2" && o.Labels["nvidia.com/mig-1g.10gb.sharing-strategy"] == "time-slicing" &&
			o.Labels["nvidia.com/gpu.replicas"] == "1" && o.Labels["nvidia.com/gpu.sharing-strategy"] == "none"
	})

	// Two pods on the two replicas of one instance: both use it.
	shared := n.discover()[0].Instances[0].UUID
	n.podres.Set(
		podresourcestest.Device{Namespace: "ml", Pod: "b", Container: "c", Resource: resource1g, IDs: []string{shared + "::1"}},
		podresourcestest.Device{Namespace: "ml", Pod: "a", Container: "c", Resource: resource1g, IDs: []string{shared + "::0"}},
	)
	instance := func(o *corev1.Node, uuid string) nodeinfo.Instance {
		l, err := nodeinfo.ParseLayout(o.Annotations[nodeinfo.AnnotationLayout])
		if err != nil || len(l) == 0 {
			return nodeinfo.Instance{UsedBy: []string{"unreadable"}}
		}
		for _, in := range l[0].Instances {
			if in.UUID == uuid {
				return in
			}
		}
		return nodeinfo.Instance{UsedBy: []string{"missing"}}
	}
	usedBy := func(o *corev1.Node) []string { return instance(o, shared).UsedBy }
	// The layout counts the replicas as the allocatable does: the
	// instance's two in use, the other instance's two free.
	other := n.discover()[0].Instances[1].UUID
	replicas := func(o *corev1.Node, uuid string, inUse int) bool {
		s := instance(o, uuid).Shared
		return s != nil && *s == nodeinfo.Shared{Resource: resource1g, Replicas: 2, InUse: inUse}
	}
	n.waitNode("both pods on the instance, its two replicas in use", func(o *corev1.Node) bool {
		return slices.Equal(usedBy(o), []string{"ml/a", "ml/b"}) && replicas(o, shared, 2) && replicas(o, other, 0)
	})

	// An invalid edit of the config in use: a Warning naming the fault,
	// and the replicas stay served.
	write("shared", "sharing: {timeSlicing: {resources: [{name: mig-1g.10gb, replicas: 1}]}}\n")
	n.waitEvent(corev1.EventTypeWarning, ReasonSharingInvalid, "replicas", "keeps serving what it served")
	n.waitServed(map[string]int{resource1g: 4, gpu: 1})
	// A label naming no config: the same.
	n.label(sharing.LabelConfig, "nope")
	n.waitEvent(corev1.EventTypeWarning, ReasonSharingInvalid, "nope", "keeps serving what it served")
	n.waitServed(map[string]int{resource1g: 4, gpu: 1})
	if l := n.get().Labels["nvidia.com/mig-1g.10gb.replicas"]; l != "2" {
		t.Errorf("replicas label %q after invalid configs, want 2 kept", l)
	}

	// A layout that destroys the instance waits for both pods.
	n.annotate(nodeinfo.AnnotationMigConfig, allThree)
	obj := n.waitState(nodeinfo.StatePending)
	if r := obj.Annotations[nodeinfo.AnnotationReason]; !strings.Contains(r, "ml/a") || !strings.Contains(r, "ml/b") {
		t.Errorf("pending reason %q does not name both pods on the shared instance", r)
	}
	n.podres.Set(podresourcestest.Device{Namespace: "ml", Pod: "b", Container: "c", Resource: resource1g, IDs: []string{shared + "::1"}})
	obj = n.waitNode("still pending for the pod on the other replica, one replica in use", func(o *corev1.Node) bool {
		r := o.Annotations[nodeinfo.AnnotationReason]
		return strings.Contains(r, "ml/b") && !strings.Contains(r, "ml/a") && replicas(o, shared, 1)
	})
	if s := obj.Labels[nodeinfo.LabelMigConfigState]; s != nodeinfo.StatePending {
		t.Errorf("state %s with a pod on one replica, want pending", s)
	}
	n.podres.Set()
	n.waitState(nodeinfo.StateSuccess)

	// Back to the default config, which shares nothing.
	n.waitServed(map[string]int{resource3g: 4, resource1g: 0, gpu: 0})
	n.label(sharing.LabelConfig, "default")
	n.waitEvent(corev1.EventTypeNormal, ReasonSharingApplied, `"default"`, "none")
	n.waitNode("sharing labels say none, for the resources the node has", func(o *corev1.Node) bool {
		_, old := o.Labels["nvidia.com/mig-1g.10gb.replicas"]
		return !old && o.Labels["nvidia.com/mig-3g.40gb.replicas"] == "1" && o.Labels["nvidia.com/mig-3g.40gb.sharing-strategy"] == "none"
	})
}
