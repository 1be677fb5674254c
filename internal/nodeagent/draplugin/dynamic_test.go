package draplugin

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim/simtest"
	"github.com/migflex/migflex/internal/nvml/nvmlmig"
)

// Dynamic mode's offers, made from a GPU as the agent discovers it, against
// the simulated NVML through the partitioner Prepare will create instances
// with: walking every set of devices that fits the counters, creating each
// device in turn, a device fits the counters beside the set exactly when
// the partitioner can create it there. Each set is created for real, so
// this is the simulator's word, not a restatement of its rules.
func TestDynamicOffersAreWhatThePartitionerCreates(t *testing.T) {
	for _, m := range gpumodel.Builtin() {
		t.Run(m.Name, func(t *testing.T) {
			lib := simtest.New(t, sim.Config{GPUs: []sim.GPUSpec{{Model: m.Name, Count: 1, Initial: &sim.InitialState{MigEnabled: true}}}, UUIDSeed: t.Name()})
			part := nvmlmig.NewPartitioner(lib)
			gpus, err := nvmlmig.Discover(lib)
			if err != nil {
				t.Fatal(err)
			}
			offers, err := dra.Offers(gpus)
			if err != nil {
				t.Fatal(err)
			}
			o := offers[0]
			var devs []dra.OfferedDevice
			for _, d := range o.Devices {
				if d.MIG {
					devs = append(devs, d)
				}
			}
			fits := func(set []dra.OfferedDevice) bool {
				used := map[string]int64{}
				for _, d := range set {
					for name, n := range d.Consumes {
						if used[name] += n; used[name] > o.Counters[name] {
							return false
						}
					}
				}
				return true
			}
			sets, failures := 0, 0
			var walk func(set []dra.OfferedDevice, next int)
			walk = func(set []dra.OfferedDevice, next int) {
				sets++
				for i := next; i < len(devs) && failures < 5; i++ {
					d := devs[i]
					bigger := append(slices.Clip(set), d)
					inst, err := part.CreateInstance(0, d.Profile, d.Start)
					if err != nil && !errors.Is(err, mig.ErrInsufficientResources) {
						t.Fatalf("creating %s beside %s: %v", d.Name, names(set), err)
					}
					if created := err == nil; created != fits(bigger) {
						failures++
						t.Errorf("%s beside %s: counters fit %v, created %v (%v)", d.Name, names(set), fits(bigger), created, err)
					}
					if err != nil {
						continue
					}
					walk(bigger, i+1)
					if err := part.DestroyInstance(0, inst.GIID); err != nil {
						t.Fatal(err)
					}
				}
			}
			walk(nil, 0)
			t.Logf("%d sets created", sets)
		})
	}
}

func names(set []dra.OfferedDevice) string {
	if len(set) == 0 {
		return "nothing"
	}
	out := make([]string, len(set))
	for i, d := range set {
		out[i] = fmt.Sprintf("%s@%d", d.Profile, d.Start)
	}
	return strings.Join(out, " ")
}
