package nodeinfo

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/migflex/migflex/internal/domain/mig"
)

// Model is one GPU model's MIG profile table in the profiles annotation.
type Model struct {
	Name     string    `json:"model"`
	Profiles []Profile `json:"profiles"`
}

// Profile is one GPU-instance profile of a model, as NVML reports it (see
// mig.Profile, its domain form).
type Profile struct {
	Name         string `json:"name"`
	ID           uint32 `json:"id"`
	Query        int    `json:"query"`
	Slices       int    `json:"slices"`
	MemorySlices int    `json:"memorySlices"`
	// MemoryMiB is in MiB, as NVML reports it; its key says MB because it
	// did before the field was named for its unit, and readers of other
	// versions read it under that key.
	MemoryMiB  uint64  `json:"memoryMB"`
	SMs        int     `json:"sms"`
	MaxCount   int     `json:"maxCount"`
	Placements []int   `json:"placements"`
	Engines    Engines `json:"engines,omitzero"`
}

// Engines are a profile's copy and media engine counts.
type Engines struct {
	CopyEngines int `json:"copyEngines,omitempty"`
	Decoders    int `json:"decoders,omitempty"`
	Encoders    int `json:"encoders,omitempty"`
	JPEGs       int `json:"jpegs,omitempty"`
	OFAs        int `json:"ofas,omitempty"`
}

// NewModel is the wire form of a model's profile table.
func NewModel(name string, profiles []mig.Profile) Model {
	m := Model{Name: name, Profiles: make([]Profile, len(profiles))}
	for i, p := range profiles {
		m.Profiles[i] = Profile{
			Name: p.Name, ID: p.ID, Query: p.Query, Slices: p.Slices, MemorySlices: p.MemorySlices,
			MemoryMiB: p.MemoryMiB, SMs: p.SMs, MaxCount: p.MaxCount, Placements: p.Placements, Engines: Engines(p.Engines),
		}
	}
	return m
}

// MIGProfiles is the model's table in its domain form.
func (m Model) MIGProfiles() []mig.Profile {
	out := make([]mig.Profile, len(m.Profiles))
	for i, p := range m.Profiles {
		out[i] = mig.Profile{
			Name: p.Name, ID: p.ID, Query: p.Query, Slices: p.Slices, MemorySlices: p.MemorySlices,
			MemoryMiB: p.MemoryMiB, SMs: p.SMs, MaxCount: p.MaxCount, Placements: p.Placements, Engines: mig.Engines(p.Engines),
		}
	}
	return out
}

// Models are the profile tables of the MIG-capable GPU models among gpus,
// each model once, by name.
func Models(gpus []mig.GPU) []Model {
	var out []Model
	for _, g := range gpus {
		if !g.MigCapable || len(g.Profiles) == 0 || slices.ContainsFunc(out, func(m Model) bool { return m.Name == g.Model }) {
			continue
		}
		out = append(out, NewModel(g.Model, g.Profiles))
	}
	slices.SortFunc(out, func(a, b Model) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// EncodeProfiles is the value of AnnotationProfiles for gpus (see
// Models); empty when no GPU is MIG capable, and the annotation is then
// left out.
func EncodeProfiles(gpus []mig.GPU) (string, error) {
	models := Models(gpus)
	if len(models) == 0 {
		return "", nil
	}
	b, err := json.Marshal(models)
	if err != nil {
		return "", fmt.Errorf("encoding annotation %s: %w", AnnotationProfiles, err)
	}
	return string(b), nil
}

// ParseProfiles decodes the value of AnnotationProfiles.
func ParseProfiles(s string) ([]Model, error) {
	var out []Model
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", AnnotationProfiles, err)
	}
	for i, m := range out {
		if m.Name == "" {
			return nil, fmt.Errorf("annotation %s: model %d has no name", AnnotationProfiles, i)
		}
	}
	return out, nil
}
