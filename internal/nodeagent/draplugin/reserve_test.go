package draplugin

import (
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim/simtest"
	"github.com/migflex/migflex/internal/nvml/nvmlmig"
)

// reservedFor is a reservation of GPUs for the pod ns/big with this UID.
func reservedFor(uid string, gpus ...int) *nodeinfo.Reservation {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return &nodeinfo.Reservation{Pod: "ns/big", UID: types.UID("uid-" + uid), GPUs: gpus, Since: at, Ready: at, Deadline: at.Add(time.Hour)}
}

// reservedKey is how sliceDevices shows a device with the reserved taint.
func reservedKey(name, uid string) string {
	return name + " " + dra.TaintReserved + "=uid-" + uid + ":NoSchedule"
}

// TestReserveStatic: in static mode, the reserved GPUs' free devices are
// tainted while not all of them are free and whole, and lifted together
// once they are; a device a claim holds is never tainted; the driver
// re-decides on Prepare, Unprepare and claims allocated, and a reservation
// or a use that changes nothing writes nothing.
func TestReserveStatic(t *testing.T) {
	// Two whole H100s (GPUs 0 and 1) and one split in two 3g.40gb.
	lib := simtest.New(t, sim.Config{GPUs: []sim.GPUSpec{{Model: "H100-SXM5-80GB", Count: 3}}, UUIDSeed: t.Name()})
	part := nvmlmig.NewPartitioner(lib)
	if err := part.SetMigMode(2, true); err != nil {
		t.Fatal(err)
	}
	for _, start := range []int{0, 4} {
		if _, err := part.CreateInstance(2, "3g.40gb", start); err != nil {
			t.Fatal(err)
		}
	}
	gpus, err := nvmlmig.Discover(lib)
	if err != nil {
		t.Fatal(err)
	}
	const migA, migB = "gpu-2-mig-3g40gb-9-0", "gpu-2-mig-3g40gb-9-4"
	c0 := allocated("team-a", "c0", "p0", [2]string{"gpu", "gpu-0"})
	c1 := allocated("team-a", "c1", "p1", [2]string{"gpu", "gpu-1"})
	client := fakeClient(c0)
	writes := countSliceWrites(client)
	d := newDirs(t)
	drv := startDriver(t, client, d, Options{})
	if err := drv.Publish(gpus, nil); err != nil {
		t.Fatal(err)
	}
	waitDevices(t, client, drv, "gpu-0", "gpu-1", migA, migB)
	kubelet := dialKubelet(t, d)
	prepare := func(c *resourceapi.ResourceClaim) {
		if resp := kubelet.prepare(c)[string(c.UID)]; resp.Error != "" {
			t.Fatalf("Prepare: %s", resp.Error)
		}
	}
	unprepare := func(c *resourceapi.ResourceClaim) {
		if resp := kubelet.unprepare(c)[string(c.UID)]; resp.Error != "" {
			t.Fatalf("Unprepare: %s", resp.Error)
		}
	}
	events := drv.ClaimEvents()

	steps := []struct {
		what   string
		do     func()
		writes int
		want   []string
	}{
		{"a claim prepared on GPU 0, no reservation: nothing to write", func() { prepare(c0) }, 0,
			[]string{"gpu-0", "gpu-1", migA, migB}},
		{"GPUs 0 and 1 reserved: GPU 0 is the claim's, GPU 1 is tainted", func() { drv.Reserve(reservedFor("big", 0, 1)) }, 1,
			[]string{"gpu-0", reservedKey("gpu-1", "big"), migA, migB}},
		{"at rest: the same reservation, the same GPUs, the same Prepare", func() {
			drv.Reserve(reservedFor("big", 0, 1))
			if err := drv.Publish(gpus, nil); err != nil {
				t.Fatal(err)
			}
			prepare(c0)
		}, 0, []string{"gpu-0", reservedKey("gpu-1", "big"), migA, migB}},
		{"GPU 0 unprepared: both free and whole, lifted together", func() { unprepare(c0) }, 1,
			[]string{"gpu-0", "gpu-1", migA, migB}},
		{"a claim allocated GPU 1 first (a one-GPU pod): GPU 0 tainted again", func() { events.OnAdd(c1, false) }, 1,
			[]string{reservedKey("gpu-0", "big"), "gpu-1", migA, migB}},
		{"reserved for another pod: the taint names it", func() { drv.Reserve(reservedFor("other", 0, 1)) }, 1,
			[]string{reservedKey("gpu-0", "other"), "gpu-1", migA, migB}},
		{"a MIG GPU reserved with GPU 0: its free instances tainted too", func() { drv.Reserve(reservedFor("other", 0, 2)) }, 1,
			[]string{reservedKey("gpu-0", "other"), "gpu-1", reservedKey(migA, "other"), reservedKey(migB, "other")}},
		{"the reservation ends: every device offered again", func() { drv.Reserve(nil) }, 1,
			[]string{"gpu-0", "gpu-1", migA, migB}},
		{"and a claim's release then writes nothing", func() { events.OnDelete(c1) }, 0,
			[]string{"gpu-0", "gpu-1", migA, migB}},
	}
	for _, s := range steps {
		before := writes.count()
		s.do()
		waitDevices(t, client, drv, s.want...)
		// The controller writes in the background: give a write that
		// should not happen the time to.
		time.Sleep(100 * time.Millisecond)
		if n := writes.count() - before; n != s.writes {
			t.Errorf("%s: %d slice writes, want %d", s.what, n, s.writes)
		}
	}
}

// TestReserveDynamic: in dynamic mode every offered device of a reserved
// MIG GPU (each placement and the whole GPU, which Prepare cannot serve
// with MIG on) is kept, tainted where the API server keeps taints and left
// out of the slices where it drops them (DRADeviceTaints off: 1.35), the
// counter sets staying; the end of the reservation offers them again.
func TestReserveDynamic(t *testing.T) {
	for _, dropped := range []bool{false, true} {
		name := "taints kept (1.36, 1.37)"
		if dropped {
			name = "taints dropped (DRADeviceTaints off): withdrawn"
		}
		t.Run(name, func(t *testing.T) {
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
			var all, gpu1, gpu1Tainted []string
			for _, o := range offers {
				for _, dev := range o.Devices {
					all = append(all, dev.Name)
					if o.GPUIndex == 1 {
						gpu1 = append(gpu1, dev.Name)
						gpu1Tainted = append(gpu1Tainted, reservedKey(dev.Name, "big"))
					}
				}
			}
			// Both name what they create, as the API server does (the
			// fake does not): dynamic mode writes two slices.
			client := fakeClient()
			if dropped {
				dropTaints(client)
			} else {
				countSliceWrites(client)
			}
			drv := startDriver(t, client, newDirs(t), Options{Mode: ModeDynamic, Instances: in, Unhealthy: UnhealthyAuto})
			if err := drv.Publish(gpus, nil); err != nil {
				t.Fatal(err)
			}
			waitDevices(t, client, drv, all...)

			drv.Reserve(reservedFor("big", 1))
			want := slices.DeleteFunc(slices.Clone(all), func(n string) bool { return slices.Contains(gpu1, n) })
			if !dropped {
				want = append(want, gpu1Tainted...)
			}
			slices.Sort(want)
			waitFor(t, "GPU 1's devices kept from new claims", func() bool { return slices.Equal(sliceDevices(t, client), want) })
			if sets := counterSets(t, client); !slices.Equal(sets, []string{dra.CounterSetName(0), dra.CounterSetName(1)}) {
				t.Errorf("counter sets %v, want both GPUs' (a withdrawn device's GPU keeps its counters)", sets)
			}
			if mode, why := drv.Mode(); mode != ModeDynamic {
				t.Errorf("mode %s (%s), want dynamic", mode, why)
			}

			drv.Reserve(nil)
			waitDevices(t, client, drv, all...)
			if strings.Contains(strings.Join(sliceDevices(t, client), ","), dra.TaintReserved) {
				t.Error("a reserved taint outlived the reservation")
			}
		})
	}
}
