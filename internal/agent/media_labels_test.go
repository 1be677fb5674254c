package agent

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/migflex/migflex/internal/deviceplugin"
	"github.com/migflex/migflex/internal/mig"
)

// The GFD count labels of media-extension and graphics profiles: one per
// variant, named like its resource, each a valid label key.
func TestGFDLabelsMediaVariants(t *testing.T) {
	gpus := []mig.GPU{
		h100(0, true, inst("1g.24gb+me.all", 0, 3, 1), inst("1g.24gb-me", 3, 3, 2), inst("1g.24gb-me", 6, 3, 3), inst("1g.24gb+gfx", 9, 3, 4)),
		h100(1, true, inst("1g.10gb+me", 0, 1, 1)),
	}
	labels := gfdLabels(gpus, deviceplugin.MigStrategyMixed)
	want := map[string]string{
		"nvidia.com/mig-1g.24gb.me.all.count": "1",
		"nvidia.com/mig-1g.24gb-me.count":     "2",
		"nvidia.com/mig-1g.24gb.gfx.count":    "1",
		"nvidia.com/mig-1g.10gb.me.count":     "1",
	}
	for k, v := range want {
		if labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, labels[k], v)
		}
	}
	for k := range labels {
		if strings.HasPrefix(k, "nvidia.com/mig-") {
			if _, ok := want[k]; !ok {
				t.Errorf("unexpected label %s", k)
			}
		}
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			t.Errorf("label key %s: %v", k, errs)
		}
	}
}
