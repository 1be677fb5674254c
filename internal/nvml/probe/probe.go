// Package probe reads what NVML reports about a node's MIG-capable GPUs
// (identity, MIG mode, every GPU-instance profile with its placements and
// engines, compute-instance profiles, current instances) into the
// simulator's own types, so the dump runs as a simulated node
// (`--nvml-backend=simulated --sim-config dump.yaml`) and compares with the
// built-in model of the same name.
//
// Probing only reads: it never changes the MIG mode and never creates or
// destroys an instance. NVML answers compute-instance profile queries only
// on an existing GPU instance, so those profiles are read for the profiles
// that have an instance and for no other.
package probe

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
	"github.com/migflex/migflex/internal/nvml/nvmlmig"
)

// Result is what a probe read.
type Result struct {
	// Config holds one GPU entry per probed GPU (count 1, the GPU's state as
	// its initial state) and one model per distinct GPU model.
	Config sim.Config
	// Driver is the driver version NVML reports ("" when it does not).
	Driver string
	// Notes say what the dump could not hold or how names were chosen, one
	// line each; they become comments in the YAML.
	Notes []string
}

// Probe reads every GPU of lib. builtins are the models a GPU is named
// after when its product name or PCI device id matches one (so --compare
// finds it); other GPUs get a model named after their product.
func Probe(lib nvml.Interface, builtins []gpumodel.Model) (*Result, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("initializing NVML: %w", ret)
	}
	defer lib.Shutdown()
	r := &Result{}
	if v, ret := lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		r.Driver = v
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("counting GPUs: %w", ret)
	}
	byName := map[string]int{} // model name -> index in r.Config.Models
	for i := range n {
		g, err := probeGPU(lib, i)
		if err != nil {
			return nil, err
		}
		if g == nil {
			r.Notes = append(r.Notes, fmt.Sprintf("GPU %d is not MIG capable and is left out: the simulator has no model without MIG profiles", i))
			continue
		}
		r.Notes = append(r.Notes, g.notes...)
		m := g.model
		m.Name = modelName(g.productName, m.PCIDeviceID, builtins)
		if j, ok := byName[m.Name]; ok && !sameTable(r.Config.Models[j], m) {
			r.Notes = append(r.Notes, fmt.Sprintf("GPU %d reports another table than the earlier GPUs named %s: its model is %s-gpu%d", i, m.Name, m.Name, i))
			m.Name = fmt.Sprintf("%s-gpu%d", m.Name, i)
		}
		if j, ok := byName[m.Name]; ok {
			mergeComputeProfiles(&r.Config.Models[j], m)
		} else {
			byName[m.Name] = len(r.Config.Models)
			r.Config.Models = append(r.Config.Models, m)
		}
		r.Config.GPUs = append(r.Config.GPUs, sim.GPUSpec{Model: m.Name, Count: 1, Initial: &g.state})
	}
	if len(r.Config.GPUs) == 0 {
		return nil, fmt.Errorf("no MIG-capable GPU among the %d NVML reports", n)
	}
	if err := r.Config.Validate(); err != nil {
		return nil, fmt.Errorf("the probed tables do not make a valid simulator model (a GPU the simulator cannot represent?): %w", err)
	}
	return r, nil
}

// gpu is one probed GPU before naming.
type gpu struct {
	productName string
	model       gpumodel.Model
	state       sim.InitialState
	notes       []string
}

func probeGPU(lib nvml.Interface, i int) (*gpu, error) {
	d, ret := lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return nil, gpuErr(i, ret, "get device handle")
	}
	cur, pending, ret := d.GetMigMode()
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_NOT_SUPPORTED:
		return nil, nil
	default:
		return nil, gpuErr(i, ret, "get MIG mode")
	}
	g := &gpu{}
	if g.productName, ret = d.GetName(); ret != nvml.SUCCESS {
		return nil, gpuErr(i, ret, "get name")
	}
	if g.state.UUID, ret = d.GetUUID(); ret != nvml.SUCCESS {
		return nil, gpuErr(i, ret, "get UUID")
	}
	pci, ret := d.GetPciInfo()
	if ret != nvml.SUCCESS {
		return nil, gpuErr(i, ret, "get PCI info")
	}
	mem, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return nil, gpuErr(i, ret, "get memory info")
	}
	arch, ret := d.GetArchitecture()
	if ret != nvml.SUCCESS {
		return nil, gpuErr(i, ret, "get architecture")
	}
	g.model = gpumodel.Model{
		ProductName:  g.productName,
		PCIDeviceID:  pci.PciDeviceId,
		MemoryMiB:    mem.Total >> 20,
		Architecture: architecture(arch),
	}
	g.state.MigEnabled = cur == nvml.DEVICE_MIG_ENABLE
	pendingEnabled := pending == nvml.DEVICE_MIG_ENABLE
	g.state.MigPending = &pendingEnabled

	profiles, err := readProfiles(lib, d, i, mem.Total, &g.notes)
	if err != nil {
		return nil, err
	}
	if len(profiles) == 0 {
		return nil, fmt.Errorf("GPU %d (%s): NVML reports MIG mode but no GPU-instance profile", i, g.productName)
	}
	for _, p := range profiles {
		g.model.Profiles = append(g.model.Profiles, p.Profile)
		memEnd := 0
		for _, s := range p.Placements {
			memEnd = max(memEnd, s+p.MemorySlices)
		}
		g.model.MemorySlices = max(g.model.MemorySlices, memEnd)
		g.model.ComputeSlices = max(g.model.ComputeSlices, p.Slices)
		// NVML has no SM count of a whole GPU for a handle that is not a
		// MIG device; the largest profile's is the nearest it reports.
		g.model.SMs = max(g.model.SMs, p.SMs)
	}
	if g.state.MigEnabled {
		if g.state.Instances, err = readInstances(d, i, profiles, &g.model, &g.notes); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// profile is a probed profile with the NVML info it came from.
type profile struct {
	gpumodel.Profile
	info nvml.GpuInstanceProfileInfo
}

func readProfiles(lib nvml.Interface, d nvml.Device, gpu int, totalMem uint64, notes *[]string) ([]profile, error) {
	gips, err := nvmlmig.GIProfiles(lib, d, gpu, totalMem)
	if err != nil {
		return nil, err
	}
	var out []profile
	derived := 0
	for _, gp := range gips {
		q, info := gp.Query, gp.Info
		if _, named := d.(nvmlmig.ProfileNamer); !named {
			if _, ok := nvmlmig.VersionedProfileInfo(lib, d, q); !ok {
				derived++
			}
		}
		if len(gp.Placements) == 0 {
			return nil, fmt.Errorf("GPU %d: GPU instance profile %s (id %d) has no placement", gpu, mig.QueryName(q), info.Id)
		}
		mp := gp.MIG()
		p := profile{info: info, Profile: gpumodel.Profile{
			Name: mp.Name, ID: mp.ID, Query: mp.Query, Slices: mp.Slices, MemorySlices: mp.MemorySlices,
			MemoryMiB: mp.MemoryMiB, SMs: mp.SMs, MaxCount: mp.MaxCount, Placements: mp.Placements, Engines: mp.Engines,
		}}
		for _, pl := range gp.Placements {
			if int(pl.Size) != p.MemorySlices {
				return nil, fmt.Errorf("GPU %d: GPU instance profile %s has placements of sizes %d and %d", gpu, mig.QueryName(q), pl.Size, p.MemorySlices)
			}
		}
		out = append(out, p)
	}
	if derived > 0 {
		*notes = append(*notes, fmt.Sprintf("GPU %d: %d profile names derived from memory sizes (NVML here has no versioned profile info with names)", gpu, derived))
	}
	return out, nil
}

// readInstances reads the GPU instances and, on each, its compute-instance
// profiles (recorded on the model's profile the first time one is seen) and
// its compute instances.
func readInstances(d nvml.Device, gpu int, profiles []profile, m *gpumodel.Model, notes *[]string) ([]sim.InitialInstance, error) {
	gips := make([]nvmlmig.GIProfile, len(profiles))
	for i, p := range profiles {
		gips[i] = nvmlmig.GIProfile{Query: p.Query, Name: p.Name, Info: p.info}
	}
	var out []sim.InitialInstance
	err := nvmlmig.EachGPUInstance(d, gpu, gips, func(pi int, gi nvml.GpuInstance, info nvml.GpuInstanceInfo) error {
		name := gips[pi].Name
		cps, cis, err := readComputeInstances(gi, gpu, name)
		if err != nil {
			return err
		}
		mp := &m.Profiles[pi]
		if len(mp.ComputeProfiles) == 0 {
			mp.ComputeProfiles = cps
		}
		out = append(out, sim.InitialInstance{Profile: name, Start: int(info.Placement.Start), ComputeInstances: cis})
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b sim.InitialInstance) int { return cmp.Compare(a.Start, b.Start) })
	for _, in := range out {
		p, _ := profileNamed(m, in.Profile)
		full := mig.ComputeQueryName(mig.FullComputeProfile(p.Slices))
		for _, ci := range in.ComputeInstances {
			if ci != full {
				*notes = append(*notes, fmt.Sprintf("GPU %d: the %s GPU instance at %d has a %s compute instance; the simulator creates only the full-size one (%s): remove it to run this dump", gpu, in.Profile, in.Start, ci, full))
			}
		}
	}
	return out, nil
}

func readComputeInstances(gi nvml.GpuInstance, gpu int, profileName string) ([]gpumodel.ComputeProfile, []string, error) {
	var cps []gpumodel.ComputeProfile
	var cis []string
	for q := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		info, ret := gi.GetComputeInstanceProfileInfo(q, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_INVALID_ARGUMENT:
			continue
		default:
			return nil, nil, gpuErr(gpu, ret, "get compute instance profile %s of a %s GPU instance", mig.ComputeQueryName(q), profileName)
		}
		placements, ret := gi.GetComputeInstancePossiblePlacements(&info)
		if ret != nvml.SUCCESS {
			return nil, nil, gpuErr(gpu, ret, "get placements of compute instance profile %s", mig.ComputeQueryName(q))
		}
		cp := gpumodel.ComputeProfile{Query: q, Slices: int(info.SliceCount), SMs: int(info.MultiprocessorCount), MaxCount: int(info.InstanceCount)}
		for _, pl := range placements {
			cp.Placements = append(cp.Placements, int(pl.Start))
		}
		cps = append(cps, cp)
		if info.InstanceCount == 0 {
			continue
		}
		list, ret := gi.GetComputeInstances(&info)
		if ret != nvml.SUCCESS {
			return nil, nil, gpuErr(gpu, ret, "list %s compute instances", mig.ComputeQueryName(q))
		}
		for range list {
			cis = append(cis, mig.ComputeQueryName(q))
		}
	}
	return cps, cis, nil
}

func profileNamed(m *gpumodel.Model, name string) (gpumodel.Profile, bool) {
	for _, p := range m.Profiles {
		if p.Name == name {
			return p, true
		}
	}
	return gpumodel.Profile{}, false
}

func architecture(a nvml.DeviceArchitecture) gpumodel.Architecture {
	switch a {
	case nvml.DEVICE_ARCH_AMPERE:
		return gpumodel.Ampere
	case nvml.DEVICE_ARCH_HOPPER:
		return gpumodel.Hopper
	case nvml.DEVICE_ARCH_BLACKWELL:
		return gpumodel.Blackwell
	}
	return gpumodel.Architecture(fmt.Sprintf("unknown-%d", a))
}

var notNameChars = regexp.MustCompile(`[^A-Za-z0-9.]+`)

// modelName names a GPU's model: the built-in model with its product name
// (or, in the simulator, its name), else the one with its PCI device id,
// else its product name made a model name ("NVIDIA H100 80GB HBM3" ->
// "H100-80GB-HBM3").
func modelName(product string, pciDeviceID uint32, builtins []gpumodel.Model) string {
	for _, m := range builtins {
		if product == m.ProductName || product == m.Name {
			return m.Name
		}
	}
	var byID []string
	for _, m := range builtins {
		if m.PCIDeviceID == pciDeviceID {
			byID = append(byID, m.Name)
		}
	}
	if len(byID) == 1 {
		return byID[0]
	}
	name := strings.Trim(notNameChars.ReplaceAllString(strings.TrimPrefix(product, "NVIDIA "), "-"), "-")
	if name == "" {
		name = fmt.Sprintf("GPU-0x%08X", pciDeviceID)
	}
	return name
}

// mergeComputeProfiles keeps the compute-instance profiles another GPU of
// the model had an instance to read them on.
func mergeComputeProfiles(dst *gpumodel.Model, src gpumodel.Model) {
	for i := range dst.Profiles {
		if len(dst.Profiles[i].ComputeProfiles) == 0 {
			dst.Profiles[i].ComputeProfiles = src.Profiles[i].ComputeProfiles
		}
	}
}

func sameTable(a, b gpumodel.Model) bool {
	a.Name, b.Name = "", ""
	return len(Compare(a, b)) == 0
}

func gpuErr(gpu int, ret nvml.Return, format string, args ...any) error {
	return fmt.Errorf("GPU %d: %s: %w", gpu, fmt.Sprintf(format, args...), error(ret))
}
