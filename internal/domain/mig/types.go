// Package mig is the MIG domain: GPUs, their GPU-instance profiles and
// instances, the error sentinels of changing them, and the NVML numbers and
// names that describe profiles. It is pure (no cgo, no I/O), so the config
// engine, the planner and the webhook's tables build without go-nvml; the
// NVML adapter that fills these types from a real or simulated GPU is
// nvmlmig. Its types have no wire form: what the agent publishes on its
// Node is internal/domain/nodeinfo's. Memory is in MiB, as NVML reports it.
package mig

// Profile is a GPU-instance profile a GPU supports, as NVML reports it. Each
// GPU instance migflex creates carries exactly one compute instance that spans
// all of its compute slices, so a profile here names both.
type Profile struct {
	// Name is the canonical profile name: "1g.10gb", "3g.40gb", "1g.10gb+me".
	Name string
	// ID is GpuInstanceProfileInfo.Id, the number nvidia-smi prints (19 for 1g.10gb).
	ID uint32
	// Query is the go-nvml GPU_INSTANCE_PROFILE_* constant used to look the
	// profile up (nvml.GPU_INSTANCE_PROFILE_1_SLICE == 0, ...).
	Query int
	// Slices is the number of compute (GPU) slices: the "3" in 3g.40gb.
	Slices int
	// MemorySlices is the placement size in memory slices (out of 8).
	MemorySlices int
	// MemoryMiB is the instance memory in MiB, as NVML reports it.
	MemoryMiB uint64
	// SMs is the multiprocessor count of the instance.
	SMs int
	// MaxCount is how many instances of this profile fit on an empty GPU.
	MaxCount int
	// Placements are the memory-slice starts this profile may be created at.
	Placements []int
	// Engines are the engines an instance of the profile gets, as NVML
	// reports them. A GPU's media engines are shared out among its
	// instances, never given twice (see MediaLimits).
	Engines Engines
}

// Engines are the engine counts of a GPU-instance profile: copy engines and
// the media engines (video decoders and encoders, JPEG decoders, optical
// flow accelerators).
type Engines struct {
	CopyEngines int
	Decoders    int
	Encoders    int
	JPEGs       int
	OFAs        int
}

// MediaLimits is how many media engines the GPU has: per engine, the most
// any of its profiles gets (the whole-GPU profile, or a +me.all one, gets
// them all). Copy engines are left out: they are not handed out that way.
func (g *GPU) MediaLimits() Engines {
	var l Engines
	for _, p := range g.Profiles {
		l = l.MediaMax(p.Engines)
	}
	return l
}

// MediaMax is, per media engine, the larger count of e and o; copy
// engines are left out (zero).
func (e Engines) MediaMax(o Engines) Engines {
	return Engines{Decoders: max(e.Decoders, o.Decoders), Encoders: max(e.Encoders, o.Encoders), JPEGs: max(e.JPEGs, o.JPEGs), OFAs: max(e.OFAs, o.OFAs)}
}

// Plus adds the engines of o to e.
func (e Engines) Plus(o Engines) Engines {
	return Engines{e.CopyEngines + o.CopyEngines, e.Decoders + o.Decoders, e.Encoders + o.Encoders, e.JPEGs + o.JPEGs, e.OFAs + o.OFAs}
}

// MediaWithin reports whether e's media engines are at most limit's. Copy
// engines are not limited: nvidia-smi shows the whole-GPU profile with
// fewer copy engines than seven 1g instances have between them (B200).
func (e Engines) MediaWithin(limit Engines) bool {
	return e.Decoders <= limit.Decoders && e.Encoders <= limit.Encoders && e.JPEGs <= limit.JPEGs && e.OFAs <= limit.OFAs
}

// Instance is one GPU instance on a GPU, with its full-size compute instance.
type Instance struct {
	// Profile is the Profile.Name of the GPU instance.
	Profile string
	// Start and Size are the placement in memory slices.
	Start int
	Size  int
	// GIID is the GPU instance id; CIID the compute instance id inside it.
	GIID uint32
	CIID uint32
	// HasCI is false for a GPU instance without a compute instance (a
	// half-applied layout); such an instance yields no MIG device.
	HasCI bool
	// UUID is the MIG device UUID ("MIG-..."), empty when HasCI is false.
	UUID string
}

// GPU is one physical GPU: identity, MIG capability and current layout.
type GPU struct {
	Index int
	UUID  string
	// Model is the product name NVML reports ("NVIDIA H100 80GB HBM3" on real
	// hardware, the model name in the simulator).
	Model string
	// PCIDeviceID is the combined device/vendor id, e.g. 0x233010DE, the value
	// mig-parted's device-filter matches.
	PCIDeviceID uint32
	// PCISubsystemID is the combined subsystem device/vendor id
	// (0x16C110DE), which a device-filter may also name; 0 when unknown.
	PCISubsystemID uint32
	// MemoryMiB is the total memory of the GPU in MiB.
	MemoryMiB uint64
	// Minor is the /dev/nvidiaN minor number.
	Minor int

	MigCapable bool
	// MigEnabled is the current MIG mode; MigPending the mode that takes
	// effect after a GPU reset (equal to MigEnabled when nothing is pending).
	MigEnabled bool
	MigPending bool

	// Profiles is what the GPU supports, ordered by Query; empty when the GPU
	// is not MIG capable.
	Profiles []Profile
	// Instances is the current layout ordered by Start; empty when MIG is off.
	Instances []Instance
}

// Profile returns the profile with the given name, or false.
func (g *GPU) Profile(name string) (Profile, bool) {
	for _, p := range g.Profiles {
		if p.Name == name {
			return p, true
		}
	}
	return Profile{}, false
}
