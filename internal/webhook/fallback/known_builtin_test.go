package fallback_test

import (
	"testing"

	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/webhook/fallback"
)

// The webhook leaves a MIG resource it does not know alone (with a warning)
// unless a node has it. Every resource the device plugin serves for a
// built-in model (resourcename.MIG of its profiles) must therefore parse in
// the webhook as the same profile, and be in known.go.
func TestServedResourcesAreKnownToTheWebhook(t *testing.T) {
	for _, m := range gpumodel.Builtin() {
		for _, p := range m.Profiles {
			r := resourcename.MIG(p.Name)
			got, ok := fallback.ParseResource(r)
			switch {
			case !ok:
				t.Errorf("%s %s: the webhook does not parse %s", m.Name, p.Name, r)
			case got.Slices != p.Slices:
				t.Errorf("%s %s: the webhook reads %d slices from %s", m.Name, p.Name, got.Slices, r)
			case !fallback.Known(r):
				t.Errorf("%s %s: %s is not in the webhook's table of known profiles (internal/webhook/fallback/known.go)", m.Name, p.Name, r)
			}
		}
	}
}
