package migconfig

import (
	"fmt"

	"github.com/migflex/migflex/internal/domain/mig"
)

// Table GPUs for the pure tests, from ../../../shared/mig-profiles.md (the
// same public tables the simulator's built-in models come from). The tests
// that go through the simulator itself live in sim_test.go.

func seq(from, to int) []int {
	var out []int
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

// ampereHopper builds the seven profiles every A100/H100/H200 has, ordered by
// the go-nvml query constant, given their names smallest to largest.
func ampereHopper(g1, g2, g3, g4, g7, g1me, g1double string) []mig.Profile {
	return []mig.Profile{
		{Name: g1, ID: 19, Query: 0, Slices: 1, MemorySlices: 1, MaxCount: 7, Placements: seq(0, 6)},
		{Name: g2, ID: 14, Query: 1, Slices: 2, MemorySlices: 2, MaxCount: 3, Placements: []int{0, 2, 4}},
		{Name: g3, ID: 9, Query: 2, Slices: 3, MemorySlices: 4, MaxCount: 2, Placements: []int{0, 4}},
		{Name: g4, ID: 5, Query: 3, Slices: 4, MemorySlices: 4, MaxCount: 1, Placements: []int{0}},
		{Name: g7, ID: 0, Query: 4, Slices: 7, MemorySlices: 8, MaxCount: 1, Placements: []int{0}},
		{Name: g1me, ID: 20, Query: 7, Slices: 1, MemorySlices: 1, MaxCount: 1, Placements: seq(0, 6)},
		{Name: g1double, ID: 15, Query: 9, Slices: 1, MemorySlices: 2, MaxCount: 4, Placements: []int{0, 2, 4, 6}},
	}
}

type model struct {
	name      string
	pci       uint32
	memoryMiB uint64
	profiles  []mig.Profile
}

var (
	a100x40 = model{"A100-SXM4-40GB", 0x20B010DE, 40960,
		ampereHopper("1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb", "1g.5gb+me", "1g.10gb")}
	a100x80 = model{"A100-SXM4-80GB", 0x20B210DE, 81920,
		ampereHopper("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.10gb+me", "1g.20gb")}
	h100 = model{"H100-SXM5-80GB", 0x233010DE, 81559,
		ampereHopper("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.10gb+me", "1g.20gb")}
	h200 = model{"H200-SXM-141GB", 0x233510DE, 143771,
		ampereHopper("1g.18gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb", "1g.18gb+me", "1g.35gb")}
	t4 = model{"Tesla-T4", 0x1EB810DE, 15360, nil}
	// oddModel is a made-up table (the simulator takes custom models) whose
	// placements do not keep compute slices in bounds by themselves.
	oddModel = model{"Odd-40GB", 0x000010DE, 40960, []mig.Profile{
		{Name: "1g.5gb", Slices: 1, MemorySlices: 1, MaxCount: 8, Placements: seq(0, 7)},
		{Name: "1g.10gb", Query: 1, Slices: 1, MemorySlices: 2, MaxCount: 3, Placements: []int{5, 3, 1}},
		{Name: "4g.20gb", Query: 2, Slices: 4, MemorySlices: 4, MaxCount: 1, Placements: []int{0}},
		{Name: "7g.40gb", Query: 3, Slices: 7, MemorySlices: 8, MaxCount: 1, Placements: []int{0}},
	}}
)

// gpu builds GPU index of model m with MIG enabled and the given instances
// (all complete, with GI ids from 1 in order).
func gpu(index int, m model, instances ...mig.Instance) mig.GPU {
	g := mig.GPU{
		Index:       index,
		UUID:        fmt.Sprintf("GPU-%08d", index),
		Model:       m.name,
		PCIDeviceID: m.pci,
		MemoryMiB:   m.memoryMiB,
		Minor:       index,
		MigCapable:  m.profiles != nil,
		MigEnabled:  m.profiles != nil,
		MigPending:  m.profiles != nil,
		Profiles:    m.profiles,
	}
	for i, in := range instances {
		p, ok := g.Profile(in.Profile)
		if !ok {
			panic("test GPU " + m.name + " has no profile " + in.Profile)
		}
		in.Size = p.MemorySlices
		if in.GIID == 0 {
			in.GIID = uint32(i + 1)
		}
		in.HasCI = true
		g.Instances = append(g.Instances, in)
	}
	return g
}

// migOff is gpu with MIG disabled.
func migOff(index int, m model) mig.GPU {
	g := gpu(index, m)
	g.MigEnabled, g.MigPending = false, false
	return g
}

// at is an instance of profile at start; gpu fills in the rest.
func at(profile string, start int) mig.Instance {
	return mig.Instance{Profile: profile, Start: start}
}

func gpus(n int, m model) []mig.GPU {
	out := make([]mig.GPU, n)
	for i := range out {
		out[i] = gpu(i, m)
	}
	return out
}

// filter is a device-filter of the given ids, as Parse reads them.
func filter(ids ...string) []DeviceID {
	out := make([]DeviceID, len(ids))
	for i, id := range ids {
		out[i] = ParseDeviceID(id)
	}
	return out
}
