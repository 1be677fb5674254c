package deviceplugin

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/fallback"
	"github.com/migflex/migflex/internal/gpumodel"
)

// The webhook leaves a MIG resource it does not know alone (with a
// warning) unless a node has it; its table of NVIDIA's profiles lives in the
// pure fallback package, which cannot import the simulator (cgo). Every
// resource this device plugin serves for a built-in simulated model must
// therefore parse in the webhook as the same profile, and be known to it.
func TestServedResourcesAreKnownToTheWebhook(t *testing.T) {
	for _, m := range gpumodel.Builtin() {
		for _, p := range m.Profiles {
			r := corev1.ResourceName(MigResourceName(p.Name))
			got, ok := fallback.ParseResource(r)
			switch {
			case !ok:
				t.Errorf("%s %s: the webhook does not parse %s", m.Name, p.Name, r)
			case got.Slices != p.Slices:
				t.Errorf("%s %s: the webhook reads %d slices from %s", m.Name, p.Name, got.Slices, r)
			case !fallback.Known(r):
				t.Errorf("%s %s: %s is not in the webhook's table of known profiles (internal/fallback/known.go)", m.Name, p.Name, r)
			}
		}
	}
}
