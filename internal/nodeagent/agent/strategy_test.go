package agent

import (
	"strings"
	"testing"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/nodeagent/deviceplugin"
	"github.com/migflex/migflex/internal/nodeagent/podresources/podresourcestest"
)

func withStrategy(s deviceplugin.MigStrategy) agentOption {
	return func(_ *Options, d *deviceplugin.Options) { d.MigStrategy = s }
}

// TestSingleStrategy: under --mig-strategy=single the device plugin can
// serve only one profile on the whole node, so a layout it could not serve
// is refused before any GPU changes (applied, it would leave the plugin
// serving destroyed instances), and a layout it can serve is not applied
// piecemeal through a state it cannot.
func TestSingleStrategy(t *testing.T) {
	api := startAPIServer(t)
	threeThree := []string{"GPU 0 mig=true 3g.40gb@0 3g.40gb@4", "GPU 1 mig=true 3g.40gb@0 3g.40gb@4"}

	t.Run("two profiles are refused, nothing changes", func(t *testing.T) {
		n := newNode(t, api)
		n.partition(0, "3g.40gb", "3g.40gb")
		n.partition(1, "3g.40gb", "3g.40gb")
		n.start(withStrategy(deviceplugin.MigStrategySingle))
		n.waitServed(map[string]int{string(resourcename.GPU): 4})

		n.annotate(nodeinfo.AnnotationMigConfig, mixedLayout)
		obj := n.waitState(nodeinfo.StateFailed)
		if r := obj.Annotations[nodeinfo.AnnotationReason]; !strings.Contains(r, "--mig-strategy=single") || !strings.Contains(r, "left as they are") {
			t.Errorf("reason %q does not say the strategy cannot serve the layout and nothing changed", r)
		}
		n.waitEvent("Warning", ReasonInvalid, "--mig-strategy=single")
		waitLayout(t, n, threeThree)
		n.waitServed(map[string]int{string(resourcename.GPU): 4})
	})

	t.Run("one GPU busy: the other does not go alone", func(t *testing.T) {
		n := newNode(t, api)
		n.partition(0, "3g.40gb", "3g.40gb")
		n.partition(1, "3g.40gb", "3g.40gb")
		gpus := n.discover()
		n.podres.Set(podresourcestest.Device{Namespace: "ml", Pod: "train-0", Container: "main", Resource: string(resourcename.GPU), IDs: []string{gpus[0].Instances[0].UUID}})
		n.start(withStrategy(deviceplugin.MigStrategySingle))

		// Every GPU to 3 x 2g.20gb destroys the busy instance too.
		n.annotate(nodeinfo.AnnotationMigConfig, `version: v1
mig-configs:
  selected:
  - {devices: all, mig-enabled: true, mig-devices: {"2g.20gb": 3}}
`)
		obj := n.waitState(nodeinfo.StatePending)
		if r := obj.Annotations[nodeinfo.AnnotationReason]; !strings.Contains(r, "ml/train-0") || !strings.Contains(r, "free GPUs are left as they are too") {
			t.Errorf("pending reason %q does not name the pod and say why GPU 1 waits too", r)
		}
		waitLayout(t, n, threeThree)
		n.waitServed(map[string]int{string(resourcename.GPU): 4})

		n.podres.Set()
		n.waitState(nodeinfo.StateSuccess)
		waitLayout(t, n, []string{"GPU 0 mig=true 2g.20gb@0 2g.20gb@2 2g.20gb@4", "GPU 1 mig=true 2g.20gb@0 2g.20gb@2 2g.20gb@4"})
		n.waitServed(map[string]int{string(resourcename.GPU): 6})
	})
}
