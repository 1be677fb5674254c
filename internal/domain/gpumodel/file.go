package gpumodel

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/migflex/migflex/internal/domain/mig"
)

// FileVersion is the only version of the simulator's YAML files (config and
// models) this code reads.
const FileVersion = "v1"

// conventionalIDs are the NVML profile ids A100, H100 and H200 use for each
// query constant; a custom profile that gives no id gets this one.
var conventionalIDs = map[int]uint32{
	mig.GIProfile1Slice:     19,
	mig.GIProfile1SliceRev1: 20,
	mig.GIProfile1SliceRev2: 15,
	mig.GIProfile2Slice:     14,
	mig.GIProfile3Slice:     9,
	mig.GIProfile4Slice:     5,
	mig.GIProfile7Slice:     0,
}

// defaultQuery picks the query constant for a custom profile that gives none:
// the plain N_SLICE constant, or 1_SLICE_REV2 for one compute slice with two
// memory slices (like 1g.20gb on an 80 GB card).
func defaultQuery(slices, memorySlices int) (int, bool) {
	switch {
	case slices == 1 && memorySlices == 2:
		return mig.GIProfile1SliceRev2, true
	case slices == 1:
		return mig.GIProfile1Slice, true
	case slices == 2:
		return mig.GIProfile2Slice, true
	case slices == 3:
		return mig.GIProfile3Slice, true
	case slices == 4:
		return mig.GIProfile4Slice, true
	case slices == 6:
		return mig.GIProfile6Slice, true
	case slices == 7:
		return mig.GIProfile7Slice, true
	}
	return 0, false
}

// modelsFile is the YAML form of a custom models file.
type modelsFile struct {
	Version string `json:"version"`
	Models  []Spec `json:"models"`
}

// Spec is a Model as written in YAML (a models file, or a simulator
// config's inline models). Optional fields are pointers so
// that an omitted id or query (0 is a valid value for both) can be defaulted.
type Spec struct {
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

// Model checks the spec, fills its defaults and returns the model.
func (s *Spec) Model() (Model, error) {
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
			p.Engines = mig.Engines(*ps.Engines)
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
			return Model{}, fmt.Errorf("model %q: profile %q: id: no default for query %s, set it", s.Name, ps.Name, mig.QueryName(p.Query))
		}
		m.Profiles = append(m.Profiles, p)
	}
	slices.SortStableFunc(m.Profiles, func(a, b Profile) int { return a.Query - b.Query })
	if err := m.Validate(); err != nil {
		return Model{}, err
	}
	return m, nil
}

// Spec is the YAML form of m with every field spelled out, the inverse of
// Spec.Model.
func (m *Model) Spec() Spec {
	s := Spec{
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
		if p.Engines != (mig.Engines{}) {
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

// FromSpecs returns the model of each spec; the errors name the index.
func FromSpecs(specs []Spec) ([]Model, error) {
	var out []Model
	var errs []error
	for i := range specs {
		m, err := specs[i].Model()
		if err != nil {
			errs = append(errs, fmt.Errorf("models[%d]: %w", i, err))
			continue
		}
		out = append(out, m)
	}
	return out, errors.Join(errs...)
}

// Parse parses a custom models file:
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
func Parse(data []byte) ([]Model, error) {
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
	return FromSpecs(f.Models)
}

// LoadFile reads and parses a custom models file.
func LoadFile(path string) ([]Model, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading models file: %w", err)
	}
	models, err := Parse(data)
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

func (q queryConstant) MarshalJSON() ([]byte, error) { return json.Marshal(mig.QueryName(int(q))) }

func (q *queryConstant) UnmarshalJSON(b []byte) error {
	var n int
	if err := json.Unmarshal(b, &n); err == nil {
		b = []byte(strconv.Quote(strconv.Itoa(n)))
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a GPU_INSTANCE_PROFILE_* name like \"3_SLICE\", got %s", b)
	}
	v, err := mig.ParseQuery(s)
	if err != nil {
		return err
	}
	*q = queryConstant(v)
	return nil
}

// computeQuery reads "3_SLICE", "COMPUTE_INSTANCE_PROFILE_3_SLICE" or a
// number and writes the name.
type computeQuery int

func (q computeQuery) MarshalJSON() ([]byte, error) {
	return json.Marshal(mig.ComputeQueryName(int(q)))
}

func (q *computeQuery) UnmarshalJSON(b []byte) error {
	var n int
	if err := json.Unmarshal(b, &n); err == nil {
		if n < 0 || n >= mig.CIProfileCount {
			return fmt.Errorf("compute instance profile query %d is not a COMPUTE_INSTANCE_PROFILE_* constant", n)
		}
		*q = computeQuery(n)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a COMPUTE_INSTANCE_PROFILE_* name like \"3_SLICE\", got %s", b)
	}
	v, err := mig.ParseComputeQuery(s)
	if err != nil {
		return err
	}
	*q = computeQuery(v)
	return nil
}
