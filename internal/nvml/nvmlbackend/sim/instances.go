package sim

import (
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/internal/domain/mig"
)

func profileInfo(p *gpumodel.Profile) nvml.GpuInstanceProfileInfo {
	return nvml.GpuInstanceProfileInfo{
		Id:                  p.ID,
		SliceCount:          uint32(p.Slices),
		InstanceCount:       uint32(p.MaxCount),
		MultiprocessorCount: uint32(p.SMs),
		CopyEngineCount:     uint32(p.Engines.CopyEngines),
		DecoderCount:        uint32(p.Engines.Decoders),
		EncoderCount:        uint32(p.Engines.Encoders),
		JpegCount:           uint32(p.Engines.JPEGs),
		OfaCount:            uint32(p.Engines.OFAs),
		MemorySizeMB:        p.MemoryMiB,
	}
}

// GetGpuInstanceProfileInfo answers for every profile of the model whatever
// the MIG mode, so a layout can be validated before MIG is enabled. A query
// outside the GPU_INSTANCE_PROFILE_* range is ERROR_INVALID_ARGUMENT (how
// callers find the end of the enumeration); a profile the model lacks is
// ERROR_NOT_SUPPORTED.
func (h *gpuHandle) GetGpuInstanceProfileInfo(query int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
	_, m, r := h.begin()
	if r != nvml.SUCCESS {
		return nvml.GpuInstanceProfileInfo{}, r
	}
	defer h.lib.mu.Unlock()
	if query < 0 || query >= nvml.GPU_INSTANCE_PROFILE_COUNT {
		return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_INVALID_ARGUMENT
	}
	p, ok := m.ProfileByQuery(query)
	if !ok {
		return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
	}
	return profileInfo(p), nvml.SUCCESS
}

// GetGpuInstancePossiblePlacements lists every placement of the profile,
// occupied or not and whatever the MIG mode, as NVML documents.
func (h *gpuHandle) GetGpuInstancePossiblePlacements(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
	_, m, r := h.begin()
	if r != nvml.SUCCESS {
		return nil, r
	}
	defer h.lib.mu.Unlock()
	if info == nil {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	p, ok := m.ProfileByID(info.Id)
	if !ok {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	out := make([]nvml.GpuInstancePlacement, len(p.Placements))
	for i, s := range p.Placements {
		out[i] = nvml.GpuInstancePlacement{Start: uint32(s), Size: uint32(p.MemorySlices)}
	}
	return out, nvml.SUCCESS
}

// usage is what a GPU's instances occupy.
type usage struct {
	model   *gpumodel.Model
	memory  uint64 // occupied memory slices, bit s for slice s
	compute int
	media   mig.Engines    // media engines in use (copy engines are not limited)
	allMe   int            // instances of a profile with all media engines
	others  int            // instances that are neither all- nor no-media
	count   map[uint32]int // by profile id
}

func newUsage(m *gpumodel.Model) usage { return usage{model: m, count: map[uint32]int{}} }

func sliceMask(start, size int) uint64 { return ((uint64(1) << size) - 1) << start }

// add records an instance of p at start.
func (u *usage) add(p *gpumodel.Profile, start int) {
	u.memory |= sliceMask(start, p.MemorySlices)
	u.compute += p.Slices
	u.media = u.media.Plus(p.Engines)
	switch mig.MediaOf(p.Query) {
	case mig.AllMedia:
		u.allMe++
	case mig.SomeMedia:
		u.others++
	}
	u.count[p.ID]++
}

func usageOf(m *gpumodel.Model, g *gpuState) usage {
	u := newUsage(m)
	for _, gi := range g.Instances {
		p, _ := m.ProfileByID(gi.ProfileID) // checked when created or loaded
		u.add(p, gi.Start)
	}
	return u
}

func (u *usage) free(p *gpumodel.Profile, start int) bool {
	return u.memory&sliceMask(start, p.MemorySlices) == 0
}

// mediaFits reports whether one more instance of p leaves the GPU's media
// engines enough: their total (the most any profile has) is never exceeded,
// and, as nvml.h documents for the _ALL_ME profiles, an instance holding
// all media engines coexists only with _NO_ME instances.
func (u *usage) mediaFits(p *gpumodel.Profile) bool {
	switch mig.MediaOf(p.Query) {
	case mig.AllMedia:
		if u.allMe > 0 || u.others > 0 {
			return false
		}
	case mig.SomeMedia:
		if u.allMe > 0 {
			return false
		}
	}
	return u.media.Plus(p.Engines).MediaWithin(u.model.MediaLimits())
}

// fits checks one more instance of p at start against counts, compute
// slices, media engines and memory overlap: ERROR_INSUFFICIENT_RESOURCES
// when it does not fit.
func (u *usage) fits(p *gpumodel.Profile, start int) nvml.Return {
	_, computeSlices := u.model.Geometry()
	if u.count[p.ID] >= p.MaxCount || u.compute+p.Slices > computeSlices || !u.mediaFits(p) || !u.free(p, start) {
		return nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	return nvml.SUCCESS
}

// remaining is how many more instances of p can be created: the largest set
// of free, mutually disjoint placements, capped by the profile's count, the
// free compute slices and the media engines left. A brute force over the
// subsets of the profile's free placements (at most a few dozen).
func (u *usage) remaining(p *gpumodel.Profile) int {
	var free []int
	for _, s := range p.Placements {
		if u.free(p, s) {
			free = append(free, s)
		}
	}
	best := 0
	for mask := 1; mask < 1<<len(free); mask++ {
		var taken uint64
		n, ok := 0, true
		for i, s := range free {
			if mask&(1<<i) == 0 {
				continue
			}
			m := sliceMask(s, p.MemorySlices)
			ok = ok && taken&m == 0
			taken |= m
			n++
		}
		if ok && n > best {
			best = n
		}
	}
	_, computeSlices := u.model.Geometry()
	n := max(0, min(best, p.MaxCount-u.count[p.ID], (computeSlices-u.compute)/p.Slices))
	// Media engines: count how many more fit one by one (each instance of
	// p needs the same engines).
	trial := *u
	for i := range n {
		if !trial.mediaFits(p) {
			return i
		}
		trial.media = trial.media.Plus(p.Engines)
		switch mig.MediaOf(p.Query) {
		case mig.AllMedia:
			trial.allMe++
		case mig.SomeMedia:
			trial.others++
		}
	}
	return n
}

func (h *gpuHandle) GetGpuInstanceRemainingCapacity(info *nvml.GpuInstanceProfileInfo) (int, nvml.Return) {
	g, m, r := h.begin()
	if r != nvml.SUCCESS {
		return 0, r
	}
	defer h.lib.mu.Unlock()
	if info == nil {
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	if !g.MigEnabled {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	p, ok := m.ProfileByID(info.Id)
	if !ok {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	u := usageOf(m, g)
	return u.remaining(p), nvml.SUCCESS
}

// CreateGpuInstance places the instance at the lowest free placement that
// fits. Real drivers choose their own order; callers that care use
// CreateGpuInstanceWithPlacement.
func (h *gpuHandle) CreateGpuInstance(info *nvml.GpuInstanceProfileInfo) (nvml.GpuInstance, nvml.Return) {
	return h.createGpuInstance(info, nil)
}

func (h *gpuHandle) CreateGpuInstanceWithPlacement(info *nvml.GpuInstanceProfileInfo, placement *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
	if placement == nil {
		// Checked before locking; the library state does not matter.
		if _, _, r := h.begin(); r != nvml.SUCCESS {
			return nil, r
		}
		h.lib.mu.Unlock()
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return h.createGpuInstance(info, placement)
}

// createGpuInstance checks, in the order real NVML documents its errors:
// arguments (ERROR_INVALID_ARGUMENT for a nil info, an unknown profile id or
// a placement not in the profile's list), MIG mode (ERROR_NOT_SUPPORTED when
// MIG is not currently enabled), then resources (ERROR_INSUFFICIENT_RESOURCES
// for overlap, the profile's max count, or the GPU's 7 compute slices).
func (h *gpuHandle) createGpuInstance(info *nvml.GpuInstanceProfileInfo, placement *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
	l := h.lib
	if r := l.callFault(CallCreateGpuInstance, h.index); r != nvml.SUCCESS {
		return nil, r
	}
	if r := l.beginWrite(); r != nvml.SUCCESS {
		return nil, r
	}
	defer l.mu.Unlock()
	if r := lostErr(&l.st, h.index); r != nvml.SUCCESS {
		return nil, r
	}
	if info == nil {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	m, g := l.models[h.index], &l.st.GPUs[h.index]
	p, ok := m.ProfileByID(info.Id)
	if !ok {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	if placement != nil && (placement.Size != uint32(p.MemorySlices) || !p.HasPlacement(int(placement.Start))) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	if !g.MigEnabled {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	u := usageOf(m, g)
	start := -1
	if placement != nil {
		if r := u.fits(p, int(placement.Start)); r != nvml.SUCCESS {
			return nil, r
		}
		start = int(placement.Start)
	} else {
		for _, s := range p.Placements { // ascending: first fit
			if u.fits(p, s) == nvml.SUCCESS {
				start = s
				break
			}
		}
		if start < 0 {
			return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
		}
	}
	next := l.st.clone()
	ng := &next.GPUs[h.index]
	gi := giState{ID: lowestFreeGI(ng), ProfileID: p.ID, Start: start, serial: l.serial()}
	ng.Instances = append(ng.Instances, gi)
	slices.SortFunc(ng.Instances, func(a, b giState) int { return int(a.ID) - int(b.ID) })
	if r := l.commit(next); r != nvml.SUCCESS {
		return nil, r
	}
	return &giHandle{lib: l, gpu: h.index, id: gi.ID, serial: gi.serial}, nvml.SUCCESS
}

// lowestFreeGI assigns GPU instance ids like a driver reusing the lowest free
// one. They start at 1, keeping 0 for "the whole GPU" in SetBusy. (Real
// drivers derive the id from the placement; nothing above NVML may rely on
// particular ids.)
func lowestFreeGI(g *gpuState) uint32 {
	for id := uint32(1); ; id++ {
		if _, used := g.instance(id); !used {
			return id
		}
	}
}

func (h *gpuHandle) GetGpuInstances(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstance, nvml.Return) {
	g, m, r := h.begin()
	if r != nvml.SUCCESS {
		return nil, r
	}
	defer h.lib.mu.Unlock()
	if info == nil {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	if !g.MigEnabled {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	if _, ok := m.ProfileByID(info.Id); !ok {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	var out []nvml.GpuInstance
	for _, gi := range g.Instances {
		if gi.ProfileID == info.Id {
			out = append(out, &giHandle{lib: h.lib, gpu: h.index, id: gi.ID, serial: gi.serial})
		}
	}
	return out, nvml.SUCCESS
}

func (h *gpuHandle) GetGpuInstanceById(id int) (nvml.GpuInstance, nvml.Return) {
	g, _, r := h.begin()
	if r != nvml.SUCCESS {
		return nil, r
	}
	defer h.lib.mu.Unlock()
	if !g.MigEnabled {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	if id < 0 || id > noInstance {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	gi, ok := g.instance(uint32(id))
	if !ok {
		return nil, nvml.ERROR_NOT_FOUND
	}
	return &giHandle{lib: h.lib, gpu: h.index, id: gi.ID, serial: gi.serial}, nvml.SUCCESS
}

// giHandle is an nvml.GpuInstance. It goes stale when the instance is
// destroyed (or the GPU reset or rebooted); a stale handle answers
// ERROR_INVALID_ARGUMENT even if a new instance got the same id.
type giHandle struct {
	unsupportedGpuInstance
	lib    *Lib
	gpu    int
	id     uint32
	serial uint64
}

var _ nvml.GpuInstance = (*giHandle)(nil)

// lookup finds the handle's instance in st. Call with the lock held.
func (h *giHandle) lookup(st *state) (*gpuState, *giState, *gpumodel.Profile, nvml.Return) {
	if r := lostErr(st, h.gpu); r != nvml.SUCCESS {
		return nil, nil, nil, r
	}
	g := &st.GPUs[h.gpu]
	gi, ok := g.instance(h.id)
	if !ok || gi.serial != h.serial {
		return nil, nil, nil, nvml.ERROR_INVALID_ARGUMENT
	}
	p, _ := h.lib.models[h.gpu].ProfileByID(gi.ProfileID)
	return g, gi, p, nvml.SUCCESS
}

// begin locks the library and finds the instance; the caller unlocks on
// SUCCESS.
func (h *giHandle) begin() (*giState, *gpumodel.Profile, nvml.Return) {
	if r := h.lib.begin(); r != nvml.SUCCESS {
		return nil, nil, r
	}
	_, gi, p, r := h.lookup(&h.lib.st)
	if r != nvml.SUCCESS {
		h.lib.mu.Unlock()
	}
	return gi, p, r
}

func (h *giHandle) GetInfo() (nvml.GpuInstanceInfo, nvml.Return) {
	gi, p, r := h.begin()
	if r != nvml.SUCCESS {
		return nvml.GpuInstanceInfo{}, r
	}
	defer h.lib.mu.Unlock()
	return nvml.GpuInstanceInfo{
		Device:    h.lib.gpus[h.gpu],
		Id:        gi.ID,
		ProfileId: gi.ProfileID,
		Placement: nvml.GpuInstancePlacement{Start: uint32(gi.Start), Size: uint32(p.MemorySlices)},
	}, nvml.SUCCESS
}

// Destroy fails with ERROR_IN_USE while the instance has compute instances
// or processes (SetBusy), like real hardware.
func (h *giHandle) Destroy() nvml.Return {
	l := h.lib
	if r := l.callFault(CallDestroyGpuInstance, h.gpu); r != nvml.SUCCESS {
		return r
	}
	if r := l.beginWrite(); r != nvml.SUCCESS {
		return r
	}
	defer l.mu.Unlock()
	_, gi, _, r := h.lookup(&l.st)
	if r != nvml.SUCCESS {
		return r
	}
	if gi.Busy || len(gi.CIs) > 0 {
		return nvml.ERROR_IN_USE
	}
	next := l.st.clone()
	ng := &next.GPUs[h.gpu]
	ng.Instances = slices.DeleteFunc(ng.Instances, func(x giState) bool { return x.ID == h.id })
	return l.commit(next)
}

func computeProfile(p *gpumodel.Profile, query int) (*gpumodel.ComputeProfile, bool) {
	cps := p.ComputeProfilesOrFull()
	for i := range cps {
		if cps[i].Query == query {
			return &cps[i], true
		}
	}
	return nil, false
}

// GetComputeInstanceProfileInfo answers for the compute-instance profiles
// of the model's table (by default the one spanning the GPU instance) with
// the shared engine profile; others answer ERROR_NOT_SUPPORTED.
func (h *giHandle) GetComputeInstanceProfileInfo(profile, engProfile int) (nvml.ComputeInstanceProfileInfo, nvml.Return) {
	_, p, r := h.begin()
	if r != nvml.SUCCESS {
		return nvml.ComputeInstanceProfileInfo{}, r
	}
	defer h.lib.mu.Unlock()
	if profile < 0 || profile >= nvml.COMPUTE_INSTANCE_PROFILE_COUNT ||
		engProfile < 0 || engProfile >= nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT {
		return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_INVALID_ARGUMENT
	}
	c, ok := computeProfile(p, profile)
	if !ok {
		return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
	}
	return ciProfileInfo(c), nvml.SUCCESS
}

func ciProfileInfo(c *gpumodel.ComputeProfile) nvml.ComputeInstanceProfileInfo {
	return nvml.ComputeInstanceProfileInfo{
		Id:                  uint32(c.Query),
		SliceCount:          uint32(c.Slices),
		InstanceCount:       uint32(c.MaxCount),
		MultiprocessorCount: uint32(c.SMs),
	}
}

// ciProfile finds the compute-instance profile info names:
// ERROR_INVALID_ARGUMENT for no or a malformed info, ERROR_NOT_SUPPORTED for
// one the GPU instance does not have.
func ciProfile(p *gpumodel.Profile, info *nvml.ComputeInstanceProfileInfo) (*gpumodel.ComputeProfile, nvml.Return) {
	if info == nil || info.Id >= nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	c, ok := computeProfile(p, int(info.Id))
	if !ok {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	return c, nvml.SUCCESS
}

func (h *giHandle) GetComputeInstancePossiblePlacements(info *nvml.ComputeInstanceProfileInfo) ([]nvml.ComputeInstancePlacement, nvml.Return) {
	_, p, r := h.begin()
	if r != nvml.SUCCESS {
		return nil, r
	}
	defer h.lib.mu.Unlock()
	c, r := ciProfile(p, info)
	if r != nvml.SUCCESS {
		return nil, r
	}
	out := make([]nvml.ComputeInstancePlacement, len(c.Placements))
	for i, s := range c.Placements {
		out[i] = nvml.ComputeInstancePlacement{Start: uint32(s), Size: uint32(c.Slices)}
	}
	return out, nvml.SUCCESS
}

// GetComputeInstanceRemainingCapacity: the simulator only ever creates the
// full-size compute instance, which leaves room for no other; before it
// exists, a profile's capacity is its count.
func (h *giHandle) GetComputeInstanceRemainingCapacity(info *nvml.ComputeInstanceProfileInfo) (int, nvml.Return) {
	gi, p, r := h.begin()
	if r != nvml.SUCCESS {
		return 0, r
	}
	defer h.lib.mu.Unlock()
	c, r := ciProfile(p, info)
	if r != nvml.SUCCESS {
		return 0, r
	}
	if len(gi.CIs) > 0 {
		return 0, nvml.SUCCESS
	}
	return c.MaxCount, nvml.SUCCESS
}

func (h *giHandle) CreateComputeInstance(info *nvml.ComputeInstanceProfileInfo) (nvml.ComputeInstance, nvml.Return) {
	return h.createComputeInstance(info, nil)
}

func (h *giHandle) CreateComputeInstanceWithPlacement(info *nvml.ComputeInstanceProfileInfo, placement *nvml.ComputeInstancePlacement) (nvml.ComputeInstance, nvml.Return) {
	if placement == nil {
		if _, _, r := h.begin(); r != nvml.SUCCESS {
			return nil, r
		}
		h.lib.mu.Unlock()
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return h.createComputeInstance(info, placement)
}

// createComputeInstance creates the one full-size compute instance a GPU
// instance has room for; a second gets ERROR_INSUFFICIENT_RESOURCES.
func (h *giHandle) createComputeInstance(info *nvml.ComputeInstanceProfileInfo, placement *nvml.ComputeInstancePlacement) (nvml.ComputeInstance, nvml.Return) {
	l := h.lib
	if r := l.callFault(CallCreateComputeInstance, h.gpu); r != nvml.SUCCESS {
		return nil, r
	}
	if r := l.beginWrite(); r != nvml.SUCCESS {
		return nil, r
	}
	defer l.mu.Unlock()
	_, gi, p, r := h.lookup(&l.st)
	if r != nvml.SUCCESS {
		return nil, r
	}
	if _, r := ciProfile(p, info); r != nvml.SUCCESS {
		return nil, r
	}
	if int(info.Id) != mig.FullComputeProfile(p.Slices) {
		return nil, nvml.ERROR_NOT_SUPPORTED // smaller compute instances are not simulated
	}
	if placement != nil && (placement.Start != 0 || placement.Size != uint32(p.Slices)) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	if len(gi.CIs) > 0 {
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	next := l.st.clone()
	_, ngi, _, _ := h.lookup(&next)
	ci := ciState{ID: 0, ProfileID: info.Id, UUID: newMIGUUID(), serial: l.serial()}
	ngi.CIs = append(ngi.CIs, ci)
	if r := l.commit(next); r != nvml.SUCCESS {
		return nil, r
	}
	return &ciHandle{lib: l, gpu: h.gpu, gi: h.id, giSerial: h.serial, id: ci.ID, serial: ci.serial}, nvml.SUCCESS
}

func (h *giHandle) GetComputeInstances(info *nvml.ComputeInstanceProfileInfo) ([]nvml.ComputeInstance, nvml.Return) {
	gi, p, r := h.begin()
	if r != nvml.SUCCESS {
		return nil, r
	}
	defer h.lib.mu.Unlock()
	if info == nil || info.Id >= nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	if int(info.Id) != mig.FullComputeProfile(p.Slices) {
		return nil, nvml.SUCCESS // a profile the simulator never creates: none exist
	}
	var out []nvml.ComputeInstance
	for _, ci := range gi.CIs {
		out = append(out, &ciHandle{lib: h.lib, gpu: h.gpu, gi: h.id, giSerial: h.serial, id: ci.ID, serial: ci.serial})
	}
	return out, nvml.SUCCESS
}

func (h *giHandle) GetComputeInstanceById(id int) (nvml.ComputeInstance, nvml.Return) {
	gi, _, r := h.begin()
	if r != nvml.SUCCESS {
		return nil, r
	}
	defer h.lib.mu.Unlock()
	if id < 0 || id > noInstance {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	ci, ok := gi.ci(uint32(id))
	if !ok {
		return nil, nvml.ERROR_NOT_FOUND
	}
	return &ciHandle{lib: h.lib, gpu: h.gpu, gi: h.id, giSerial: h.serial, id: ci.ID, serial: ci.serial}, nvml.SUCCESS
}

// ciHandle is an nvml.ComputeInstance; stale like giHandle.
type ciHandle struct {
	//lint:ignore U1000 every method is modelled today; the base answers any method a go-nvml upgrade adds
	unsupportedComputeInstance
	lib      *Lib
	gpu      int
	gi       uint32
	giSerial uint64
	id       uint32
	serial   uint64
}

var _ nvml.ComputeInstance = (*ciHandle)(nil)

func (h *ciHandle) lookup(st *state) (*giState, *ciState, *gpumodel.Profile, nvml.Return) {
	parent := giHandle{lib: h.lib, gpu: h.gpu, id: h.gi, serial: h.giSerial}
	_, gi, p, r := parent.lookup(st)
	if r != nvml.SUCCESS {
		return nil, nil, nil, r
	}
	ci, ok := gi.ci(h.id)
	if !ok || ci.serial != h.serial {
		return nil, nil, nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return gi, ci, p, nvml.SUCCESS
}

func (h *ciHandle) GetInfo() (nvml.ComputeInstanceInfo, nvml.Return) {
	if r := h.lib.begin(); r != nvml.SUCCESS {
		return nvml.ComputeInstanceInfo{}, r
	}
	defer h.lib.mu.Unlock()
	_, ci, p, r := h.lookup(&h.lib.st)
	if r != nvml.SUCCESS {
		return nvml.ComputeInstanceInfo{}, r
	}
	return nvml.ComputeInstanceInfo{
		Device:      h.lib.gpus[h.gpu],
		GpuInstance: &giHandle{lib: h.lib, gpu: h.gpu, id: h.gi, serial: h.giSerial},
		Id:          ci.ID,
		ProfileId:   ci.ProfileID,
		Placement:   nvml.ComputeInstancePlacement{Start: 0, Size: uint32(p.Slices)},
	}, nvml.SUCCESS
}

// Destroy fails with ERROR_IN_USE while processes run on the GPU instance
// (SetBusy).
func (h *ciHandle) Destroy() nvml.Return {
	l := h.lib
	if r := l.callFault(CallDestroyComputeInstance, h.gpu); r != nvml.SUCCESS {
		return r
	}
	if r := l.beginWrite(); r != nvml.SUCCESS {
		return r
	}
	defer l.mu.Unlock()
	gi, _, _, r := h.lookup(&l.st)
	if r != nvml.SUCCESS {
		return r
	}
	if gi.Busy {
		return nvml.ERROR_IN_USE
	}
	next := l.st.clone()
	ngi, _, _, _ := h.lookup(&next)
	ngi.CIs = slices.DeleteFunc(ngi.CIs, func(x ciState) bool { return x.ID == h.id })
	return l.commit(next)
}
