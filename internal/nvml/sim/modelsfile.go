package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"sigs.k8s.io/yaml"
)

// FileVersion is the only version of the simulator's YAML files (config and
// models) this code reads.
const FileVersion = "v1"

// queryNames spells the GPU_INSTANCE_PROFILE_* constants without their prefix,
// indexed by value.
var queryNames = [nvml.GPU_INSTANCE_PROFILE_COUNT]string{
	nvml.GPU_INSTANCE_PROFILE_1_SLICE:        "1_SLICE",
	nvml.GPU_INSTANCE_PROFILE_2_SLICE:        "2_SLICE",
	nvml.GPU_INSTANCE_PROFILE_3_SLICE:        "3_SLICE",
	nvml.GPU_INSTANCE_PROFILE_4_SLICE:        "4_SLICE",
	nvml.GPU_INSTANCE_PROFILE_7_SLICE:        "7_SLICE",
	nvml.GPU_INSTANCE_PROFILE_8_SLICE:        "8_SLICE",
	nvml.GPU_INSTANCE_PROFILE_6_SLICE:        "6_SLICE",
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1:   "1_SLICE_REV1",
	nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1:   "2_SLICE_REV1",
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2:   "1_SLICE_REV2",
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_GFX:    "1_SLICE_GFX",
	nvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX:    "2_SLICE_GFX",
	nvml.GPU_INSTANCE_PROFILE_4_SLICE_GFX:    "4_SLICE_GFX",
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME:  "1_SLICE_NO_ME",
	nvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME:  "2_SLICE_NO_ME",
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME: "1_SLICE_ALL_ME",
	nvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME: "2_SLICE_ALL_ME",
	nvml.GPU_INSTANCE_PROFILE_3_SLICE_GFX:    "3_SLICE_GFX",
}

// QueryName returns the GPU_INSTANCE_PROFILE_* constant's name without the
// prefix ("3_SLICE"), or the number for a value go-nvml does not define.
func QueryName(q int) string {
	if q >= 0 && q < len(queryNames) {
		return queryNames[q]
	}
	return strconv.Itoa(q)
}

// parseQuery accepts "3_SLICE", "GPU_INSTANCE_PROFILE_3_SLICE" or a number.
func parseQuery(s string) (int, error) {
	name := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(s)), "GPU_INSTANCE_PROFILE_")
	if i := slices.Index(queryNames[:], name); i >= 0 {
		return i, nil
	}
	if n, err := strconv.Atoi(name); err == nil && n >= 0 && n < len(queryNames) {
		return n, nil
	}
	return 0, fmt.Errorf("unknown GPU instance profile query %q (want one of %s)", s, strings.Join(queryNames[:], ", "))
}

// conventionalIDs are the NVML profile ids A100, H100 and H200 use for each
// query constant; a custom profile that gives no id gets this one.
var conventionalIDs = map[int]uint32{
	nvml.GPU_INSTANCE_PROFILE_1_SLICE:      19,
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1: 20,
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2: 15,
	nvml.GPU_INSTANCE_PROFILE_2_SLICE:      14,
	nvml.GPU_INSTANCE_PROFILE_3_SLICE:      9,
	nvml.GPU_INSTANCE_PROFILE_4_SLICE:      5,
	nvml.GPU_INSTANCE_PROFILE_7_SLICE:      0,
}

// defaultQuery picks the query constant for a custom profile that gives none:
// the plain N_SLICE constant, or 1_SLICE_REV2 for one compute slice with two
// memory slices (like 1g.20gb on an 80 GB card).
func defaultQuery(slices, memorySlices int) (int, bool) {
	switch {
	case slices == 1 && memorySlices == 2:
		return nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, true
	case slices == 1:
		return nvml.GPU_INSTANCE_PROFILE_1_SLICE, true
	case slices == 2:
		return nvml.GPU_INSTANCE_PROFILE_2_SLICE, true
	case slices == 3:
		return nvml.GPU_INSTANCE_PROFILE_3_SLICE, true
	case slices == 4:
		return nvml.GPU_INSTANCE_PROFILE_4_SLICE, true
	case slices == 6:
		return nvml.GPU_INSTANCE_PROFILE_6_SLICE, true
	case slices == 7:
		return nvml.GPU_INSTANCE_PROFILE_7_SLICE, true
	}
	return 0, false
}

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
			errs = append(errs, fmt.Errorf("profile %q: query %s already used by %q", p.Name, QueryName(p.Query), other))
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
	if p.Query < 0 || p.Query >= nvml.GPU_INSTANCE_PROFILE_COUNT {
		errs = append(errs, fmt.Errorf("query: %d is not a GPU_INSTANCE_PROFILE_* constant", p.Query))
	}
	if p.Slices < 1 || p.Slices > computeSlices || fullCIProfile(p.Slices) < 0 {
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
	if len(p.ComputeProfiles) > 0 && fullCIProfile(p.Slices) >= 0 && !queries[fullCIProfile(p.Slices)] {
		errs = append(errs, fmt.Errorf("computeProfiles: the full-size profile (query %d, %d slices) is missing: it is the one migflex creates", fullCIProfile(p.Slices), p.Slices))
	}
	return errors.Join(errs...)
}

func (c *ComputeProfile) validate(p *Profile) error {
	var errs []error
	if c.Query < 0 || c.Query >= nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
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

// modelsFile is the YAML form of a custom models file.
type modelsFile struct {
	Version string      `json:"version"`
	Models  []modelSpec `json:"models"`
}

// modelSpec is a Model as written in YAML. Optional fields are pointers so
// that an omitted id or query (0 is a valid value for both) can be defaulted.
type modelSpec struct {
	Name         string       `json:"name"`
	ProductName  string       `json:"productName,omitempty"`
	PCIDeviceID  hexUint32    `json:"pciDeviceID"`
	MemoryMiB    uint64       `json:"memoryMiB"`
	SMs          int          `json:"sms"`
	Architecture Architecture `json:"architecture"`
	// MemorySlices and ComputeSlices default to 8 and 7.
	MemorySlices  int           `json:"memorySlices,omitempty"`
	ComputeSlices int           `json:"computeSlices,omitempty"`
	Profiles      []profileSpec `json:"profiles"`

	// PCISubsystemID is optional: left out, it is 0 (unknown).
	PCISubsystemID hexUint32 `json:"pciSubsystemID,omitempty"`
}

type profileSpec struct {
	Name string `json:"name"`
	// ID defaults to the id A100/H100 use for the query constant.
	ID *uint32 `json:"id,omitempty"`
	// Query defaults from slices and memorySlices (N_SLICE, or 1_SLICE_REV2
	// for 1 compute and 2 memory slices).
	Query           *queryConstant       `json:"query,omitempty"`
	Slices          int                  `json:"slices"`
	MemorySlices    int                  `json:"memorySlices"`
	MemoryMiB       uint64               `json:"memoryMiB"`
	SMs             int                  `json:"sms"`
	MaxCount        int                  `json:"maxCount"`
	Placements      []int                `json:"placements"`
	Engines         *enginesSpec         `json:"engines,omitempty"`
	ComputeProfiles []computeProfileSpec `json:"computeProfiles,omitempty"`
}

// enginesSpec is Engines in YAML; omitted counts are 0.
type enginesSpec struct {
	CopyEngines int `json:"copyEngines,omitempty"`
	Decoders    int `json:"decoders,omitempty"`
	Encoders    int `json:"encoders,omitempty"`
	JPEGs       int `json:"jpegs,omitempty"`
	OFAs        int `json:"ofas,omitempty"`
}

type computeProfileSpec struct {
	Query      computeQuery `json:"query"`
	Slices     int          `json:"slices"`
	SMs        int          `json:"sms"`
	MaxCount   int          `json:"maxCount"`
	Placements []int        `json:"placements"`
}

func (s *modelSpec) model() (Model, error) {
	m := Model{
		Name:          s.Name,
		ProductName:   s.ProductName,
		PCIDeviceID:   uint32(s.PCIDeviceID),
		MemoryMiB:     s.MemoryMiB,
		SMs:           s.SMs,
		Architecture:  Architecture(strings.ToLower(string(s.Architecture))),
		MemorySlices:  s.MemorySlices,
		ComputeSlices: s.ComputeSlices,
	}
	m.PCISubsystemID = uint32(s.PCISubsystemID)
	m.MemorySlices, m.ComputeSlices = m.Geometry()
	for _, ps := range s.Profiles {
		p := Profile{
			Name:         ps.Name,
			Slices:       ps.Slices,
			MemorySlices: ps.MemorySlices,
			MemoryMiB:    ps.MemoryMiB,
			SMs:          ps.SMs,
			MaxCount:     ps.MaxCount,
			Placements:   slices.Clone(ps.Placements),
		}
		if ps.Engines != nil {
			p.Engines = Engines(*ps.Engines)
		}
		for _, cs := range ps.ComputeProfiles {
			p.ComputeProfiles = append(p.ComputeProfiles, ComputeProfile{
				Query: int(cs.Query), Slices: cs.Slices, SMs: cs.SMs, MaxCount: cs.MaxCount, Placements: slices.Clone(cs.Placements),
			})
		}
		if ps.Query != nil {
			p.Query = int(*ps.Query)
		} else if q, ok := defaultQuery(ps.Slices, ps.MemorySlices); ok {
			p.Query = q
		} else {
			return Model{}, fmt.Errorf("model %q: profile %q: query: no default for %d slices, set it", s.Name, ps.Name, ps.Slices)
		}
		if ps.ID != nil {
			p.ID = *ps.ID
		} else if id, ok := conventionalIDs[p.Query]; ok {
			p.ID = id
		} else {
			return Model{}, fmt.Errorf("model %q: profile %q: id: no default for query %s, set it", s.Name, ps.Name, QueryName(p.Query))
		}
		m.Profiles = append(m.Profiles, p)
	}
	slices.SortStableFunc(m.Profiles, func(a, b Profile) int { return a.Query - b.Query })
	if err := m.Validate(); err != nil {
		return Model{}, err
	}
	return m, nil
}

// spec is the YAML form of m with every field spelled out, the inverse of
// modelSpec.model.
func (m *Model) spec() modelSpec {
	s := modelSpec{
		Name:         m.Name,
		ProductName:  m.ProductName,
		PCIDeviceID:  hexUint32(m.PCIDeviceID),
		MemoryMiB:    m.MemoryMiB,
		SMs:          m.SMs,
		Architecture: m.Architecture,
	}
	s.PCISubsystemID = hexUint32(m.PCISubsystemID)
	s.MemorySlices, s.ComputeSlices = m.Geometry()
	for i := range m.Profiles {
		p := &m.Profiles[i]
		id, q := p.ID, queryConstant(p.Query)
		ps := profileSpec{
			Name:         p.Name,
			ID:           &id,
			Query:        &q,
			Slices:       p.Slices,
			MemorySlices: p.MemorySlices,
			MemoryMiB:    p.MemoryMiB,
			SMs:          p.SMs,
			MaxCount:     p.MaxCount,
			Placements:   slices.Clone(p.Placements),
		}
		if p.Engines != (Engines{}) {
			e := enginesSpec(p.Engines)
			ps.Engines = &e
		}
		for _, c := range p.ComputeProfiles {
			ps.ComputeProfiles = append(ps.ComputeProfiles, computeProfileSpec{
				Query: computeQuery(c.Query), Slices: c.Slices, SMs: c.SMs, MaxCount: c.MaxCount, Placements: slices.Clone(c.Placements),
			})
		}
		s.Profiles = append(s.Profiles, ps)
	}
	return s
}

func modelsFromSpecs(specs []modelSpec) ([]Model, error) {
	var out []Model
	var errs []error
	for i := range specs {
		m, err := specs[i].model()
		if err != nil {
			errs = append(errs, fmt.Errorf("models[%d]: %w", i, err))
			continue
		}
		out = append(out, m)
	}
	return out, errors.Join(errs...)
}

// ParseModels parses a custom models file:
//
//	version: v1
//	models:
//	- name: H100-PCIE-70GB
//	  pciDeviceID: 0x233110DE
//	  memoryMiB: 71680
//	  sms: 114
//	  architecture: hopper
//	  profiles:
//	  - {name: 3g.30gb, slices: 3, memorySlices: 4, memoryMiB: 30720, sms: 42, maxCount: 2, placements: [0, 4]}
//
// Unknown fields are errors. Each model is validated.
func ParseModels(data []byte) ([]Model, error) {
	var f modelsFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, fmt.Errorf("parsing models: %w", err)
	}
	if f.Version != FileVersion {
		return nil, fmt.Errorf("parsing models: version: got %q, want %q", f.Version, FileVersion)
	}
	if len(f.Models) == 0 {
		return nil, errors.New("parsing models: models: at least one model is required")
	}
	return modelsFromSpecs(f.Models)
}

// LoadModelsFile reads and parses a custom models file.
func LoadModelsFile(path string) ([]Model, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading models file: %w", err)
	}
	models, err := ParseModels(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return models, nil
}

// hexUint32 reads a number or a string such as "0x233010DE" and writes the
// string.
type hexUint32 uint32

func (h hexUint32) MarshalJSON() ([]byte, error) {
	return json.Marshal(fmt.Sprintf("0x%08X", uint32(h)))
}

func (h *hexUint32) UnmarshalJSON(b []byte) error {
	var n uint32
	if err := json.Unmarshal(b, &n); err == nil {
		*h = hexUint32(n)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a number or a string like \"0x233010DE\", got %s", b)
	}
	v, err := strconv.ParseUint(s, 0, 32)
	if err != nil {
		return fmt.Errorf("want a 32-bit number like \"0x233010DE\", got %q", s)
	}
	*h = hexUint32(v)
	return nil
}

// queryConstant reads "3_SLICE", "GPU_INSTANCE_PROFILE_3_SLICE" or a number
// and writes the name.
type queryConstant int

func (q queryConstant) MarshalJSON() ([]byte, error) { return json.Marshal(QueryName(int(q))) }

func (q *queryConstant) UnmarshalJSON(b []byte) error {
	var n int
	if err := json.Unmarshal(b, &n); err == nil {
		b = []byte(strconv.Quote(strconv.Itoa(n)))
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a GPU_INSTANCE_PROFILE_* name like \"3_SLICE\", got %s", b)
	}
	v, err := parseQuery(s)
	if err != nil {
		return err
	}
	*q = queryConstant(v)
	return nil
}

// computeQueryNames spells the COMPUTE_INSTANCE_PROFILE_* constants without
// their prefix, indexed by value.
var computeQueryNames = [nvml.COMPUTE_INSTANCE_PROFILE_COUNT]string{
	nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE:      "1_SLICE",
	nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE:      "2_SLICE",
	nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE:      "3_SLICE",
	nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE:      "4_SLICE",
	nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE:      "7_SLICE",
	nvml.COMPUTE_INSTANCE_PROFILE_8_SLICE:      "8_SLICE",
	nvml.COMPUTE_INSTANCE_PROFILE_6_SLICE:      "6_SLICE",
	nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1: "1_SLICE_REV1",
	nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE_NVL:  "7_SLICE_NVL",
}

// ComputeQueryName returns the COMPUTE_INSTANCE_PROFILE_* constant's name
// without the prefix ("3_SLICE"), or the number for a value go-nvml does not
// define.
func ComputeQueryName(q int) string {
	if q >= 0 && q < len(computeQueryNames) {
		return computeQueryNames[q]
	}
	return strconv.Itoa(q)
}

// computeQuery reads "3_SLICE", "COMPUTE_INSTANCE_PROFILE_3_SLICE" or a
// number and writes the name.
type computeQuery int

func (q computeQuery) MarshalJSON() ([]byte, error) { return json.Marshal(ComputeQueryName(int(q))) }

func (q *computeQuery) UnmarshalJSON(b []byte) error {
	var n int
	if err := json.Unmarshal(b, &n); err == nil {
		if n < 0 || n >= len(computeQueryNames) {
			return fmt.Errorf("compute instance profile query %d is not a COMPUTE_INSTANCE_PROFILE_* constant", n)
		}
		*q = computeQuery(n)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a COMPUTE_INSTANCE_PROFILE_* name like \"3_SLICE\", got %s", b)
	}
	name := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(s)), "COMPUTE_INSTANCE_PROFILE_")
	if i := slices.Index(computeQueryNames[:], name); i >= 0 {
		*q = computeQuery(i)
		return nil
	}
	return fmt.Errorf("unknown compute instance profile query %q (want one of %s)", s, strings.Join(computeQueryNames[:], ", "))
}
