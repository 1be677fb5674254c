package gpumodel

import (
	"errors"
	"fmt"
	"strings"

	"github.com/migflex/migflex/internal/domain/mig"
)

// Validate checks that the model can be simulated: identity set, profiles
// consistent and placements inside the GPU's 8 memory slices.
func (m *Model) Validate() error {
	if err := m.validate(); err != nil {
		return fmt.Errorf("model %q: %w", m.Name, err)
	}
	return nil
}

func (m *Model) validate() error {
	var errs []error
	if m.Name == "" {
		errs = append(errs, errors.New("name: must be set"))
	} else if strings.ContainsAny(m.Name, ":, \t\n") {
		errs = append(errs, errors.New("name: must not contain ':', ',' or spaces (GPU lists use them as separators)"))
	}
	if m.PCIDeviceID == 0 {
		errs = append(errs, errors.New("pciDeviceID: must be set (for example 0x233010DE)"))
	}
	if m.MemoryMiB == 0 {
		errs = append(errs, errors.New("memoryMiB: must be > 0"))
	}
	if m.SMs <= 0 {
		errs = append(errs, errors.New("sms: must be > 0"))
	}
	if m.MemorySlices < 0 || m.MemorySlices > maxMemorySlices {
		errs = append(errs, fmt.Errorf("memorySlices: %d is not in 1..%d", m.MemorySlices, maxMemorySlices))
	}
	if m.ComputeSlices < 0 || m.ComputeSlices > ComputeSlices {
		errs = append(errs, fmt.Errorf("computeSlices: %d is not in 1..%d", m.ComputeSlices, ComputeSlices))
	}
	switch m.Architecture {
	case Ampere, Hopper, Blackwell:
	default:
		errs = append(errs, fmt.Errorf("architecture: %q is not one of %s, %s, %s", m.Architecture, Ampere, Hopper, Blackwell))
	}
	if len(m.Profiles) == 0 {
		errs = append(errs, errors.New("profiles: at least one profile is required"))
	}
	names, ids, queries := map[string]bool{}, map[uint32]string{}, map[int]string{}
	for i := range m.Profiles {
		p := &m.Profiles[i]
		if err := p.validate(m); err != nil {
			errs = append(errs, fmt.Errorf("profile %q: %w", p.Name, err))
		}
		if names[p.Name] {
			errs = append(errs, fmt.Errorf("profile %q: name used twice", p.Name))
		}
		names[p.Name] = true
		if other, dup := ids[p.ID]; dup {
			errs = append(errs, fmt.Errorf("profile %q: id %d already used by %q", p.Name, p.ID, other))
		}
		ids[p.ID] = p.Name
		if other, dup := queries[p.Query]; dup {
			errs = append(errs, fmt.Errorf("profile %q: query %s already used by %q", p.Name, mig.QueryName(p.Query), other))
		}
		queries[p.Query] = p.Name
	}
	return errors.Join(errs...)
}

func (p *Profile) validate(m *Model) error {
	memorySlices, computeSlices := m.Geometry()
	var errs []error
	if p.Name == "" {
		errs = append(errs, errors.New("name: must be set"))
	}
	if p.Query < 0 || p.Query >= mig.GIProfileCount {
		errs = append(errs, fmt.Errorf("query: %d is not a GPU_INSTANCE_PROFILE_* constant", p.Query))
	}
	if p.Slices < 1 || p.Slices > computeSlices || mig.FullComputeProfile(p.Slices) < 0 {
		errs = append(errs, fmt.Errorf("slices: %d is not one of 1, 2, 3, 4, 6, 7 up to the GPU's %d compute slices (sizes NVML has compute instance profiles for)", p.Slices, computeSlices))
	}
	if p.MemorySlices < 1 || p.MemorySlices > memorySlices {
		errs = append(errs, fmt.Errorf("memorySlices: %d is not in 1..%d", p.MemorySlices, memorySlices))
	}
	if p.MemoryMiB == 0 || p.MemoryMiB > m.MemoryMiB {
		errs = append(errs, fmt.Errorf("memoryMiB: %d is not in 1..%d (the GPU's memory)", p.MemoryMiB, m.MemoryMiB))
	}
	if p.SMs <= 0 || (m.SMs > 0 && p.SMs > m.SMs) {
		errs = append(errs, fmt.Errorf("sms: %d is not in 1..%d (the GPU's SMs)", p.SMs, m.SMs))
	}
	if len(p.Placements) == 0 {
		errs = append(errs, errors.New("placements: at least one start is required"))
	}
	seen := map[int]bool{}
	for _, s := range p.Placements {
		if s < 0 || s+p.MemorySlices > memorySlices {
			errs = append(errs, fmt.Errorf("placements: start %d with size %d does not fit in %d memory slices", s, p.MemorySlices, memorySlices))
		}
		if seen[s] {
			errs = append(errs, fmt.Errorf("placements: start %d listed twice", s))
		}
		seen[s] = true
	}
	if p.MaxCount < 1 || p.MaxCount > len(p.Placements) {
		errs = append(errs, fmt.Errorf("maxCount: %d is not in 1..%d (the number of placements)", p.MaxCount, len(p.Placements)))
	}
	e := p.Engines
	if e.CopyEngines < 0 || e.Decoders < 0 || e.Encoders < 0 || e.JPEGs < 0 || e.OFAs < 0 {
		errs = append(errs, fmt.Errorf("engines: counts must be >= 0, got %+v", e))
	}
	queries := map[int]bool{}
	for i, c := range p.ComputeProfiles {
		if err := c.validate(p); err != nil {
			errs = append(errs, fmt.Errorf("computeProfiles[%d]: %w", i, err))
		}
		if queries[c.Query] {
			errs = append(errs, fmt.Errorf("computeProfiles[%d]: query %d listed twice", i, c.Query))
		}
		queries[c.Query] = true
	}
	if len(p.ComputeProfiles) > 0 && mig.FullComputeProfile(p.Slices) >= 0 && !queries[mig.FullComputeProfile(p.Slices)] {
		errs = append(errs, fmt.Errorf("computeProfiles: the full-size profile (query %d, %d slices) is missing: it is the one migflex creates", mig.FullComputeProfile(p.Slices), p.Slices))
	}
	return errors.Join(errs...)
}

func (c *ComputeProfile) validate(p *Profile) error {
	var errs []error
	if c.Query < 0 || c.Query >= mig.CIProfileCount {
		errs = append(errs, fmt.Errorf("query: %d is not a COMPUTE_INSTANCE_PROFILE_* constant", c.Query))
	}
	if c.Slices < 1 || c.Slices > p.Slices {
		errs = append(errs, fmt.Errorf("slices: %d is not in 1..%d (the GPU instance's)", c.Slices, p.Slices))
	}
	if c.SMs < 1 || c.SMs > p.SMs {
		errs = append(errs, fmt.Errorf("sms: %d is not in 1..%d (the GPU instance's)", c.SMs, p.SMs))
	}
	if len(c.Placements) == 0 {
		errs = append(errs, errors.New("placements: at least one start is required"))
	}
	for _, s := range c.Placements {
		if s < 0 || s+c.Slices > p.Slices {
			errs = append(errs, fmt.Errorf("placements: start %d with size %d does not fit in %d compute slices", s, c.Slices, p.Slices))
		}
	}
	if c.MaxCount < 1 || c.MaxCount > p.Slices {
		errs = append(errs, fmt.Errorf("maxCount: %d is not in 1..%d", c.MaxCount, p.Slices))
	}
	return errors.Join(errs...)
}
