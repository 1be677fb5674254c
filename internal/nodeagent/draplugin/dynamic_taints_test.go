package draplugin

import (
	"context"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim/simtest"
	"github.com/migflex/migflex/internal/nvml/nvmlmig"
)

// Dynamic mode where the API server keeps partitionable devices but drops
// device taints: Kubernetes 1.36 (or 1.37) with DRADeviceTaints turned off,
// which both minors allow (beta on 1.36, GA but not locked on 1.37). Taints
// only ever mark unhealthy devices here (the order steers, never a taint:
// docs/DRA.md), so nothing about steering depends on them; what does is
// the unhealthy GPU. Under the auto policy its devices are tainted where
// taints are kept, and withdrawn where they are dropped, its counter set
// staying, so a claim can neither land on it nor on an overlap of what
// runs there; the driver stays in dynamic mode either way.
func TestDynamicUnhealthyWhereTaintsAreDropped(t *testing.T) {
	lib := simtest.New(t, sim.Config{GPUs: []sim.GPUSpec{{Model: "H100-SXM5-80GB", Count: 2, Initial: &sim.InitialState{MigEnabled: true}}}, UUIDSeed: t.Name()})
	in := simInstances{Partitioner: nvmlmig.NewPartitioner(lib), lib: lib}
	gpus, err := in.Discover()
	if err != nil {
		t.Fatal(err)
	}
	offers, err := dra.Offers(gpus)
	if err != nil {
		t.Fatal(err)
	}
	names := map[int][]string{}
	for _, o := range offers {
		for _, dev := range o.Devices {
			names[o.GPUIndex] = append(names[o.GPUIndex], dev.Name)
		}
	}
	const xid = " gpu.migflex.io/xid=79:NoSchedule"
	tainted := slices.Clone(names[0])
	for _, name := range names[1] {
		tainted = append(tainted, name+xid)
	}
	tests := []struct {
		name       string
		dropTaints bool
		want       []string
	}{
		{"taints kept (1.36 and 1.37 by default): GPU 1's devices tainted", false, tainted},
		{"taints dropped (DRADeviceTaints off): GPU 1's devices withdrawn", true, names[0]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Both name what they create, as the API server does (the fake
			// does not): dynamic mode writes two slices.
			client := fakeClient()
			if tt.dropTaints {
				dropTaints(client)
			} else {
				countSliceWrites(client)
			}
			drv := startDriver(t, client, newDirs(t), Options{Mode: ModeDynamic, Instances: in, Unhealthy: UnhealthyAuto})
			if err := drv.Publish(gpus, map[string]dra.Fault{gpus[1].UUID: {Xid: 79, Reason: "Xid 79"}}); err != nil {
				t.Fatal(err)
			}
			want := slices.Sorted(slices.Values(tt.want))
			var got []string
			waitFor(t, "the slices to settle at GPU 1's devices handled", func() bool {
				got = sliceDevices(t, client)
				return slices.Equal(got, want)
			})
			if sets := counterSets(t, client); !slices.Equal(sets, []string{dra.CounterSetName(0), dra.CounterSetName(1)}) {
				t.Errorf("counter sets %v, want both GPUs' (a withdrawn GPU keeps its counters)", sets)
			}
			if mode, why := drv.Mode(); mode != ModeDynamic {
				t.Errorf("mode %s (%s), want dynamic: only dropped counters fall back to static", mode, why)
			}
			if strings.Contains(strings.Join(got, ","), "gpu-1") == tt.dropTaints {
				t.Errorf("GPU 1's devices published: %v, want %v", !tt.dropTaints, tt.dropTaints)
			}
		})
	}
}

// counterSets names the counter sets in the API's slices of this node's
// pool, sorted.
func counterSets(t *testing.T, client kubernetes.Interface) []string {
	t.Helper()
	list, err := client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range list.Items {
		if s.Spec.Driver != dra.DriverName || s.Spec.Pool.Name != node {
			continue
		}
		for _, cs := range s.Spec.SharedCounters {
			out = append(out, cs.Name)
		}
	}
	slices.Sort(out)
	return out
}
