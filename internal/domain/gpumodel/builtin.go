package gpumodel

import (
	"slices"

	"github.com/migflex/migflex/internal/domain/mig"
)

// The built-in tables. docs/MODELS.md gives, for every model and every
// number, the public source it was read from (nvidia-smi transcripts in
// NVIDIA's mig-parted and gpu-operator pull requests and issues, NVIDIA's
// MIG user guide, nvml.h) and says which numbers no source gave and how they
// were chosen instead. Memory figures that nvidia-smi prints in GiB with two
// decimals are the multiple of 128 MiB they round from (23.62 GiB is 24192
// MiB). Drivers differ: the same GPU reports other memory sizes under other
// driver versions, so `device-plugin probe --compare` on a real GPU is
// expected to find some differences.

// row is the part of a profile that differs between GPUs of one geometry.
type row struct {
	name    string
	memMiB  uint64
	sms     int
	engines mig.Engines
}

// eng is Engines in the order nvidia-smi mig -lgip prints them: copy
// engines, decoders, encoders, JPEG decoders, OFAs.
func eng(ce, dec, enc, jpeg, ofa int) mig.Engines {
	return mig.Engines{CopyEngines: ce, Decoders: dec, Encoders: enc, JPEGs: jpeg, OFAs: ofa}
}

// sevenSlice builds the table every 8-memory-slice, 7-compute-slice GPU in
// the field shares (A100, H100, H200, H20, B200, GB200): the same NVML ids,
// queries, counts and placements (nvidia-smi mig -lgipp on A100 and H100),
// with memory, SMs and engines per GPU. Rows in this order: 1g, 1g+me, 1g
// with two memory slices, 2g, 3g, 4g, 7g.
func sevenSlice(rows [7]row) []Profile {
	shape := [7]Profile{
		{ID: 19, Query: mig.GIProfile1Slice, Slices: 1, MemorySlices: 1, MaxCount: 7, Placements: []int{0, 1, 2, 3, 4, 5, 6}},
		{ID: 20, Query: mig.GIProfile1SliceRev1, Slices: 1, MemorySlices: 1, MaxCount: 1, Placements: []int{0, 1, 2, 3, 4, 5, 6}},
		{ID: 15, Query: mig.GIProfile1SliceRev2, Slices: 1, MemorySlices: 2, MaxCount: 4, Placements: []int{0, 2, 4, 6}},
		{ID: 14, Query: mig.GIProfile2Slice, Slices: 2, MemorySlices: 2, MaxCount: 3, Placements: []int{0, 2, 4}},
		{ID: 9, Query: mig.GIProfile3Slice, Slices: 3, MemorySlices: 4, MaxCount: 2, Placements: []int{0, 4}},
		{ID: 5, Query: mig.GIProfile4Slice, Slices: 4, MemorySlices: 4, MaxCount: 1, Placements: []int{0}},
		{ID: 0, Query: mig.GIProfile7Slice, Slices: 7, MemorySlices: 8, MaxCount: 1, Placements: []int{0}},
	}
	return withRows(shape[:], rows[:])
}

func withRows(shape []Profile, rows []row) []Profile {
	out := make([]Profile, len(shape))
	for i, p := range shape {
		p.Name, p.MemoryMiB, p.SMs, p.Engines = rows[i].name, rows[i].memMiB, rows[i].sms, rows[i].engines
		out[i] = p
	}
	slices.SortStableFunc(out, func(a, b Profile) int { return a.Query - b.Query })
	return out
}

// Engine counts shared by several GPUs, in sevenSlice row order.
var (
	// A100 (MIG user guide, A100 table; an A100-PCIE-40GB's nvidia-smi
	// agrees): media engines on few profiles, 5 decoders in all.
	a100Engines = [7]mig.Engines{eng(1, 0, 0, 0, 0), eng(1, 1, 0, 1, 1), eng(1, 1, 0, 0, 0), eng(2, 1, 0, 0, 0), eng(3, 2, 0, 0, 0), eng(4, 2, 0, 0, 0), eng(7, 5, 0, 1, 1)}
	// Hopper (MIG user guide, H100 and H200 tables; nvidia-smi on H200 and
	// H100 NVL agrees): one decoder and one JPEG per compute slice, 8 copy
	// engines on the whole GPU, one OFA.
	hopperEngines = [7]mig.Engines{eng(1, 1, 0, 1, 0), eng(1, 1, 0, 1, 1), eng(1, 1, 0, 1, 0), eng(2, 2, 0, 2, 0), eng(3, 3, 0, 3, 0), eng(4, 4, 0, 4, 0), eng(8, 7, 0, 7, 1)}
	// Blackwell B200/GB200: the 1g and 2g rows from nvidia-smi; copy engines
	// of 3g, 4g, 7g from the MIG user guide; their media engines are not in
	// any source found and follow the Hopper pattern.
	b200Engines = [7]mig.Engines{eng(2, 1, 0, 1, 0), eng(2, 1, 0, 1, 1), eng(2, 1, 0, 1, 0), eng(4, 2, 0, 2, 0), eng(6, 3, 0, 3, 0), eng(8, 4, 0, 4, 0), eng(16, 7, 0, 7, 1)}
)

func withEngines(rows [7]row, engines [7]mig.Engines) [7]row {
	for i := range rows {
		rows[i].engines = engines[i]
	}
	return rows
}

// a30Profiles is the A30's 4-slice table: nvidia-smi mig -lgip and -lgipp
// on an A30 (R525 or later, which added 2g.12gb+me).
func a30Profiles() []Profile {
	shape := []Profile{
		{ID: 14, Query: mig.GIProfile1Slice, Slices: 1, MemorySlices: 1, MaxCount: 4, Placements: []int{0, 1, 2, 3}},
		{ID: 21, Query: mig.GIProfile1SliceRev1, Slices: 1, MemorySlices: 1, MaxCount: 1, Placements: []int{0, 1, 2, 3}},
		{ID: 5, Query: mig.GIProfile2Slice, Slices: 2, MemorySlices: 2, MaxCount: 2, Placements: []int{0, 2}},
		{ID: 6, Query: mig.GIProfile2SliceRev1, Slices: 2, MemorySlices: 2, MaxCount: 1, Placements: []int{0, 2}},
		{ID: 0, Query: mig.GIProfile4Slice, Slices: 4, MemorySlices: 4, MaxCount: 1, Placements: []int{0}},
	}
	return withRows(shape, []row{
		{"1g.6gb", 5952, 14, eng(1, 1, 0, 0, 0)},      // 5.81 GiB
		{"1g.6gb+me", 5952, 14, eng(1, 1, 0, 1, 1)},   // 5.81 GiB
		{"2g.12gb", 11968, 28, eng(2, 2, 0, 0, 0)},    // 11.69 GiB
		{"2g.12gb+me", 11968, 28, eng(2, 2, 0, 1, 1)}, // 11.69 GiB
		{"4g.24gb", 24000, 56, eng(4, 4, 0, 1, 1)},    // 23.44 GiB
	})
}

// rtxPro6000Profiles is the RTX PRO 6000 Blackwell's table: 12 placement
// units, 4 compute slices, and the Blackwell media and graphics variants
// (+me, +me.all, -me, +gfx), from nvidia-smi mig -lgip and -lgipp on an RTX
// PRO 6000 Blackwell Server Edition (driver 610.43.02).
func rtxPro6000Profiles() []Profile {
	one := []int{0, 3, 6, 9}
	two := []int{0, 6}
	shape := []Profile{
		{ID: 14, Query: mig.GIProfile1Slice, Slices: 1, MemorySlices: 3, MaxCount: 4, Placements: one},
		{ID: 21, Query: mig.GIProfile1SliceRev1, Slices: 1, MemorySlices: 3, MaxCount: 1, Placements: one},
		{ID: 47, Query: mig.GIProfile1SliceGFX, Slices: 1, MemorySlices: 3, MaxCount: 4, Placements: one},
		{ID: 65, Query: mig.GIProfile1SliceAllME, Slices: 1, MemorySlices: 3, MaxCount: 1, Placements: one},
		{ID: 67, Query: mig.GIProfile1SliceNoME, Slices: 1, MemorySlices: 3, MaxCount: 4, Placements: one},
		{ID: 5, Query: mig.GIProfile2Slice, Slices: 2, MemorySlices: 6, MaxCount: 2, Placements: two},
		{ID: 35, Query: mig.GIProfile2SliceGFX, Slices: 2, MemorySlices: 6, MaxCount: 2, Placements: two},
		{ID: 64, Query: mig.GIProfile2SliceAllME, Slices: 2, MemorySlices: 6, MaxCount: 1, Placements: two},
		{ID: 66, Query: mig.GIProfile2SliceNoME, Slices: 2, MemorySlices: 6, MaxCount: 2, Placements: two},
		{ID: 0, Query: mig.GIProfile4Slice, Slices: 4, MemorySlices: 12, MaxCount: 1, Placements: []int{0}},
		{ID: 32, Query: mig.GIProfile4SliceGFX, Slices: 4, MemorySlices: 12, MaxCount: 1, Placements: []int{0}},
	}
	const one24, two48, four96 = 24192, 48512, 97408 // 23.62, 47.38, 95.12 GiB
	return withRows(shape, []row{
		{"1g.24gb", one24, 46, eng(1, 1, 1, 1, 0)},
		{"1g.24gb+me", one24, 46, eng(1, 1, 1, 1, 1)},
		{"1g.24gb+gfx", one24, 46, eng(1, 1, 1, 1, 0)},
		{"1g.24gb+me.all", one24, 46, eng(1, 4, 4, 4, 1)},
		{"1g.24gb-me", one24, 46, eng(1, 0, 0, 0, 0)},
		{"2g.48gb", two48, 94, eng(2, 2, 2, 2, 0)},
		{"2g.48gb+gfx", two48, 94, eng(2, 2, 2, 2, 0)},
		{"2g.48gb+me.all", two48, 94, eng(2, 4, 4, 4, 1)},
		{"2g.48gb-me", two48, 94, eng(2, 0, 0, 0, 0)},
		{"4g.96gb", four96, 188, eng(4, 4, 4, 4, 1)},
		{"4g.96gb+gfx", four96, 188, eng(4, 4, 4, 4, 1)},
	})
}

func builtinModels() []Model {
	a100_40 := [7]row{
		{"1g.5gb", 4864, 14, mig.Engines{}},
		{"1g.5gb+me", 4864, 14, mig.Engines{}},
		{"1g.10gb", 9856, 14, mig.Engines{}},
		{"2g.10gb", 9856, 28, mig.Engines{}},
		{"3g.20gb", 19968, 42, mig.Engines{}},
		{"4g.20gb", 19968, 56, mig.Engines{}},
		{"7g.40gb", 40192, 98, mig.Engines{}},
	}
	a100_80 := [7]row{
		{"1g.10gb", 9856, 14, mig.Engines{}},
		{"1g.10gb+me", 9856, 14, mig.Engines{}},
		{"1g.20gb", 19968, 14, mig.Engines{}},
		{"2g.20gb", 19968, 28, mig.Engines{}},
		{"3g.40gb", 40192, 42, mig.Engines{}},
		{"4g.40gb", 40192, 56, mig.Engines{}},
		{"7g.80gb", 80384, 98, mig.Engines{}},
	}
	h100_80 := [7]row{
		{"1g.10gb", 9984, 16, mig.Engines{}},    // 9.75 GiB
		{"1g.10gb+me", 9984, 16, mig.Engines{}}, // 9.75 GiB
		{"1g.20gb", 20096, 26, mig.Engines{}},   // 19.62 GiB
		{"2g.20gb", 20096, 32, mig.Engines{}},   // 19.62 GiB
		{"3g.40gb", 40448, 60, mig.Engines{}},   // 39.50 GiB
		{"4g.40gb", 40448, 64, mig.Engines{}},   // 39.50 GiB
		{"7g.80gb", 81152, 132, mig.Engines{}},  // 79.25 GiB
	}
	h200 := [7]row{
		{"1g.18gb", 16384, 16, mig.Engines{}},    // 16.00 GiB
		{"1g.18gb+me", 16384, 16, mig.Engines{}}, // 16.00 GiB
		{"1g.35gb", 33280, 26, mig.Engines{}},    // 32.50 GiB
		{"2g.35gb", 33280, 32, mig.Engines{}},    // 32.50 GiB
		{"3g.71gb", 71424, 60, mig.Engines{}},    // 69.75 GiB
		{"4g.71gb", 71424, 64, mig.Engines{}},    // 69.75 GiB
		{"7g.141gb", 143360, 132, mig.Engines{}}, // 140.00 GiB
	}
	models := []Model{
		{
			Name:         "A100-SXM4-40GB",
			ProductName:  "NVIDIA A100-SXM4-40GB",
			PCIDeviceID:  0x20B010DE,
			MemoryMiB:    40960,
			SMs:          108,
			Architecture: Ampere,
			Profiles:     sevenSlice(withEngines(a100_40, a100Engines)),
		},
		{
			Name:         "A100-SXM4-80GB",
			ProductName:  "NVIDIA A100-SXM4-80GB",
			PCIDeviceID:  0x20B210DE,
			MemoryMiB:    81920,
			SMs:          108,
			Architecture: Ampere,
			Profiles:     sevenSlice(withEngines(a100_80, a100Engines)),
		},
		{
			Name:         "H100-SXM5-80GB",
			ProductName:  "NVIDIA H100 80GB HBM3",
			PCIDeviceID:  0x233010DE,
			MemoryMiB:    81559,
			SMs:          132,
			Architecture: Hopper,
			Profiles:     sevenSlice(withEngines(h100_80, hopperEngines)),

			// Subsystem 10de:16c1, from the PCI config space of an H100
			// 80GB HBM3 SXM5 (offset 0x2c).
			PCISubsystemID: 0x16C110DE,
		},
		{
			Name:         "H200-SXM-141GB",
			ProductName:  "NVIDIA H200",
			PCIDeviceID:  0x233510DE,
			MemoryMiB:    143771,
			SMs:          132,
			Architecture: Hopper,
			Profiles:     sevenSlice(withEngines(h200, hopperEngines)),
		},
		{
			Name:          "A30-24GB",
			ProductName:   "NVIDIA A30",
			PCIDeviceID:   0x20B710DE,
			MemoryMiB:     24576,
			SMs:           56,
			Architecture:  Ampere,
			MemorySlices:  4,
			ComputeSlices: 4,
			Profiles:      a30Profiles(),
		},
		{
			Name:         "A100-PCIE-40GB",
			ProductName:  "NVIDIA A100-PCIE-40GB",
			PCIDeviceID:  0x20F110DE,
			MemoryMiB:    40960,
			SMs:          108,
			Architecture: Ampere,
			Profiles: sevenSlice(withEngines([7]row{
				{"1g.5gb", 4864, 14, mig.Engines{}},    // 4.75 GiB
				{"1g.5gb+me", 4864, 14, mig.Engines{}}, // 4.75 GiB
				{"1g.10gb", 9984, 14, mig.Engines{}},   // 9.75 GiB
				{"2g.10gb", 9984, 28, mig.Engines{}},   // 9.75 GiB
				{"3g.20gb", 20096, 42, mig.Engines{}},  // 19.62 GiB
				{"4g.20gb", 20096, 56, mig.Engines{}},  // 19.62 GiB
				{"7g.40gb", 40448, 98, mig.Engines{}},  // 39.50 GiB
			}, a100Engines)),
		},
		{
			Name:         "A100-PCIE-80GB",
			ProductName:  "NVIDIA A100 80GB PCIe",
			PCIDeviceID:  0x20B510DE,
			MemoryMiB:    81920,
			SMs:          108,
			Architecture: Ampere,
			Profiles:     sevenSlice(withEngines(a100_80, a100Engines)),
		},
		{
			Name:         "H100-PCIE-80GB",
			ProductName:  "NVIDIA H100 PCIe",
			PCIDeviceID:  0x233110DE,
			MemoryMiB:    81559,
			SMs:          114,
			Architecture: Hopper,
			Profiles: sevenSlice(withEngines([7]row{
				{"1g.10gb", 9984, 16, mig.Engines{}},
				{"1g.10gb+me", 9984, 16, mig.Engines{}},
				{"1g.20gb", 20096, 16, mig.Engines{}},
				{"2g.20gb", 20096, 32, mig.Engines{}},
				{"3g.40gb", 40448, 48, mig.Engines{}},
				{"4g.40gb", 40448, 65, mig.Engines{}},
				{"7g.80gb", 81152, 114, mig.Engines{}},
			}, hopperEngines)),
		},
		{
			Name:         "H100-NVL-94GB",
			ProductName:  "NVIDIA H100 NVL",
			PCIDeviceID:  0x232110DE,
			MemoryMiB:    95830,
			SMs:          132,
			Architecture: Hopper,
			Profiles: sevenSlice(withEngines([7]row{
				{"1g.12gb", 10880, 16, mig.Engines{}},    // 10.62 GiB
				{"1g.12gb+me", 10880, 16, mig.Engines{}}, // 10.62 GiB
				{"1g.24gb", 22016, 26, mig.Engines{}},    // 21.50 GiB
				{"2g.24gb", 22016, 32, mig.Engines{}},    // 21.50 GiB
				{"3g.47gb", 47232, 60, mig.Engines{}},    // 46.12 GiB
				{"4g.47gb", 47232, 64, mig.Engines{}},    // 46.12 GiB
				{"7g.94gb", 94848, 132, mig.Engines{}},   // 92.62 GiB
			}, hopperEngines)),
		},
		{
			Name:         "H20-96GB",
			ProductName:  "NVIDIA H20",
			PCIDeviceID:  0x232910DE,
			MemoryMiB:    98304,
			SMs:          78,
			Architecture: Hopper,
			Profiles: sevenSlice(withEngines([7]row{
				{"1g.12gb", 11776, 11, mig.Engines{}},
				{"1g.12gb+me", 11776, 11, mig.Engines{}},
				{"1g.24gb", 23552, 11, mig.Engines{}}, // 23.00 GiB
				{"2g.24gb", 23552, 22, mig.Engines{}}, // 23.00 GiB
				{"3g.48gb", 47616, 33, mig.Engines{}}, // 46.50 GiB
				{"4g.48gb", 47616, 44, mig.Engines{}}, // 46.50 GiB
				{"7g.96gb", 95232, 78, mig.Engines{}}, // 93.00 GiB
			}, hopperEngines)),
		},
		{
			Name:         "H200-NVL-141GB",
			ProductName:  "NVIDIA H200 NVL",
			PCIDeviceID:  0x233B10DE,
			MemoryMiB:    143771,
			SMs:          132,
			Architecture: Hopper,
			Profiles:     sevenSlice(withEngines(h200, hopperEngines)),
		},
		{
			Name:         "B200-180GB",
			ProductName:  "NVIDIA B200",
			PCIDeviceID:  0x290110DE,
			MemoryMiB:    183359,
			SMs:          148,
			Architecture: Blackwell,
			Profiles: sevenSlice(withEngines([7]row{
				{"1g.23gb", 22528, 18, mig.Engines{}},    // 22.00 GiB
				{"1g.23gb+me", 22528, 18, mig.Engines{}}, // 22.00 GiB
				{"1g.45gb", 45312, 30, mig.Engines{}},    // 44.25 GiB
				{"2g.45gb", 45312, 36, mig.Engines{}},    // 44.25 GiB
				{"3g.90gb", 90624, 54, mig.Engines{}},
				{"4g.90gb", 90624, 72, mig.Engines{}},
				{"7g.180gb", 182272, 126, mig.Engines{}},
			}, b200Engines)),
		},
		{
			Name:         "GB200-186GB",
			ProductName:  "NVIDIA GB200",
			PCIDeviceID:  0x294110DE,
			MemoryMiB:    190464,
			SMs:          148,
			Architecture: Blackwell,
			Profiles: sevenSlice(withEngines([7]row{
				{"1g.23gb", 22528, 18, mig.Engines{}},    // 22.00 GiB
				{"1g.23gb+me", 22528, 18, mig.Engines{}}, // 22.00 GiB
				{"1g.47gb", 46592, 32, mig.Engines{}},    // 45.50 GiB
				{"2g.47gb", 46592, 38, mig.Engines{}},    // 45.50 GiB
				{"3g.93gb", 93184, 54, mig.Engines{}},
				{"4g.93gb", 93184, 72, mig.Engines{}},
				{"7g.186gb", 189440, 126, mig.Engines{}},
			}, b200Engines)),
		},
		{
			Name:          "RTX-PRO-6000-Server-96GB",
			ProductName:   "NVIDIA RTX PRO 6000 Blackwell Server Edition",
			PCIDeviceID:   0x2BB510DE,
			MemoryMiB:     97887,
			SMs:           188,
			Architecture:  Blackwell,
			MemorySlices:  12,
			ComputeSlices: 4,
			Profiles:      rtxPro6000Profiles(),
		},
	}
	for i := range models {
		m := &models[i]
		m.MemorySlices, m.ComputeSlices = m.Geometry()
	}
	return models
}
