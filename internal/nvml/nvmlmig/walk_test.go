package nvmlmig_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/migflex/migflex/internal/nvml/nvmlmig"
)

// The walk Discover and the probe share: every profile the GPU has, in
// query order, and every GPU instance of them, stopping at the first error.
func TestWalk(t *testing.T) {
	lib := newSim(t, gpus("H100-SXM5-80GB", 1))
	p := nvmlmig.NewPartitioner(lib)
	if err := p.SetMigMode(0, true); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		profile string
		start   int
	}{{"3g.40gb", 0}, {"1g.10gb", 4}, {"1g.10gb", 5}} {
		if _, err := p.CreateInstance(0, c.profile, c.start); err != nil {
			t.Fatal(err)
		}
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	defer lib.Shutdown()
	d, ret := lib.DeviceGetHandleByIndex(0)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	mem, _ := d.GetMemoryInfo()
	profiles, err := nvmlmig.GIProfiles(lib, d, 0, mem.Total)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.IsSortedFunc(profiles, func(a, b nvmlmig.GIProfile) int { return a.Query - b.Query }) || len(profiles) < 5 {
		t.Fatalf("profiles %+v, want the H100's in query order", profiles)
	}
	for _, gp := range profiles {
		if m := gp.MIG(); m.Name != gp.Name || len(m.Placements) != len(gp.Placements) || m.MemorySlices == 0 {
			t.Errorf("MIG() of %s = %+v", gp.Name, m)
		}
	}

	var seen []string
	err = nvmlmig.EachGPUInstance(d, 0, profiles, func(pi int, _ nvml.GpuInstance, info nvml.GpuInstanceInfo) error {
		seen = append(seen, profiles[pi].Name)
		return nil
	})
	slices.Sort(seen)
	if err != nil || !slices.Equal(seen, []string{"1g.10gb", "1g.10gb", "3g.40gb"}) {
		t.Errorf("EachGPUInstance saw %v, %v; want the three instances", seen, err)
	}
	stop := errors.New("enough")
	calls := 0
	err = nvmlmig.EachGPUInstance(d, 0, profiles, func(int, nvml.GpuInstance, nvml.GpuInstanceInfo) error {
		calls++
		return stop
	})
	if !errors.Is(err, stop) || calls != 1 {
		t.Errorf("EachGPUInstance after f's error: %v, %d calls; want that error after one", err, calls)
	}
}
