package migconfig

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/migflex/migflex/internal/domain/mig"
)

func TestPlanProjected(t *testing.T) {
	kept := mig.Instance{Profile: "3g.40gb", Start: 0, Size: 4, GIID: 1, HasCI: true, UUID: "MIG-kept"}
	gone := mig.Instance{Profile: "3g.40gb", Start: 4, Size: 4, GIID: 2, HasCI: true, UUID: "MIG-gone"}
	gpus := []mig.GPU{
		{Index: 0, UUID: "GPU-0", MigCapable: true, MigEnabled: true, MigPending: true, Instances: []mig.Instance{kept, gone}},
		{Index: 1, UUID: "GPU-1", MigCapable: true},
		{Index: 2, UUID: "GPU-2", MigCapable: true, MigEnabled: true, MigPending: true, Instances: []mig.Instance{kept}},
		{Index: 3, UUID: "GPU-3", MigCapable: true, MigEnabled: true, MigPending: true},
	}
	plan := Plan{GPUs: []GPUPlan{
		// GPU 0: one instance replaced by two smaller ones.
		{GPU: 0, BeforeMode: true, Keep: []mig.Instance{kept}, Destroy: []mig.Instance{gone},
			Create: []Placement{{Profile: "1g.10gb", Start: 5, Size: 1}, {Profile: "1g.10gb", Start: 4, Size: 1}}},
		// GPU 1: MIG on, with an instance.
		{GPU: 1, Mode: ModeEnable, Create: []Placement{{Profile: "7g.80gb", Start: 0, Size: 8}}},
		// GPU 2: nothing to do; GPU 3: MIG off.
		{GPU: 2, BeforeMode: true, Keep: []mig.Instance{kept}},
		{GPU: 3, BeforeMode: true, Mode: ModeDisable},
	}}
	planned := func(gpu, j int, profile string, start, size int) mig.Instance {
		return mig.Instance{Profile: profile, Start: start, Size: size, HasCI: true, UUID: "MIG-planned-" + string(rune('0'+gpu)) + "-" + string(rune('0'+j))}
	}
	want := []mig.GPU{
		{Index: 0, UUID: "GPU-0", MigCapable: true, MigEnabled: true, MigPending: true, Instances: []mig.Instance{
			planned(0, 0, "3g.40gb", 0, 4), planned(0, 1, "1g.10gb", 4, 1), planned(0, 2, "1g.10gb", 5, 1),
		}},
		{Index: 1, UUID: "GPU-1", MigCapable: true, MigEnabled: true, MigPending: true, Instances: []mig.Instance{planned(1, 0, "7g.80gb", 0, 8)}},
		gpus[2],
		{Index: 3, UUID: "GPU-3", MigCapable: true},
	}
	got := plan.Projected(gpus)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Projected() (-want +got):\n%s", diff)
	}
	if gpus[0].Instances[1].UUID != "MIG-gone" {
		t.Error("Projected() changed its input")
	}
}
