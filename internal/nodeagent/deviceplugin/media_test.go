package deviceplugin

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/resourcename"
)

// Every media-extension and graphics variant is its own resource, named as
// NVIDIA's device plugin names them ("+" is not allowed in a resource name,
// so it becomes "."), and every name the built-in models can produce is a
// valid extended resource name.
func TestMediaVariantResources(t *testing.T) {
	for profile, want := range map[string]string{
		"1g.10gb+me":     "nvidia.com/mig-1g.10gb.me",
		"1g.24gb+me.all": "nvidia.com/mig-1g.24gb.me.all",
		"2g.48gb-me":     "nvidia.com/mig-2g.48gb-me",
		"4g.96gb+gfx":    "nvidia.com/mig-4g.96gb.gfx",
	} {
		if got := string(resourcename.MIG(profile)); got != want {
			t.Errorf("string(resourcename.MIG(%q)) = %q, want %q", profile, got, want)
		}
	}
	for _, m := range gpumodel.Builtin() {
		for _, p := range m.Profiles {
			if errs := validation.IsQualifiedName(string(resourcename.MIG(p.Name))); len(errs) > 0 {
				t.Errorf("%s %s: resource %s is not a qualified name: %v", m.Name, p.Name, string(resourcename.MIG(p.Name)), errs)
			}
		}
	}
	// An RTX PRO 6000 with +me.all beside -me instances, and another with
	// graphics profiles: one resource per variant, one device per instance.
	gpus := []mig.GPU{
		migGPU(0, inst("1g.24gb+me.all", 0, 3, 1), inst("1g.24gb-me", 3, 3, 2), inst("2g.48gb-me", 6, 6, 3)),
		migGPU(1, inst("2g.48gb+gfx", 0, 6, 1), inst("1g.24gb+gfx", 6, 3, 2), inst("1g.24gb+me", 9, 3, 3)),
	}
	res, err := Resources(gpus, MigStrategyMixed)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for name, devs := range res {
		for _, d := range devs {
			got[name] = append(got[name], d.ID)
		}
		slices.Sort(got[name])
	}
	want := map[string][]string{
		"nvidia.com/mig-1g.24gb.me.all": {"MIG-0-1"},
		"nvidia.com/mig-1g.24gb-me":     {"MIG-0-2"},
		"nvidia.com/mig-2g.48gb-me":     {"MIG-0-3"},
		"nvidia.com/mig-2g.48gb.gfx":    {"MIG-1-1"},
		"nvidia.com/mig-1g.24gb.gfx":    {"MIG-1-2"},
		"nvidia.com/mig-1g.24gb.me":     {"MIG-1-3"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("resources (-want +got):\n%s", diff)
	}
}
