package migconfig

import (
	"fmt"
	"slices"
	"strings"
)

// Version is the only document version Parse accepts.
const Version = "v1"

// SelectedName is the configuration chosen when no name is given and the
// document has more than one.
const SelectedName = "selected"

// Spec is a parsed mig.config document.
type Spec struct {
	Version string
	// Configs maps a configuration name to its entries.
	Configs map[string]Config
}

// Config is one named configuration: entries applied to matching GPUs.
type Config struct {
	Name    string
	Entries []Entry
}

// Entry is one item of a configuration's list.
type Entry struct {
	// DeviceFilter lists PCI ids (device<<16 | vendor, e.g. 0x233010DE);
	// empty matches every GPU.
	DeviceFilter []uint32
	// AllDevices is true for "devices: all"; otherwise Devices lists GPU
	// indices.
	AllDevices bool
	Devices    []int
	MigEnabled bool
	// Profiles counts instances wanted per profile, wherever they fit.
	Profiles map[string]int
	// Placements are instances pinned to a memory-slice range (Run:ai form).
	Placements []Placement
}

// Placement is an instance of a profile at a memory-slice range.
type Placement struct {
	Profile string
	Start   int
	Size    int
}

func (p Placement) String() string {
	return fmt.Sprintf("%s@%d:%d", p.Profile, p.Start, p.Size)
}

// Names returns the configuration names, sorted.
func (s *Spec) Names() []string {
	names := make([]string, 0, len(s.Configs))
	for n := range s.Configs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Select returns the configuration to apply: name when it is not empty, else
// the one named "selected", else the only one. It fails, listing the names,
// when that does not identify exactly one.
func (s *Spec) Select(name string) (Config, error) {
	if name != "" {
		c, ok := s.Configs[name]
		if !ok {
			return Config{}, fmt.Errorf("mig-config %s not found (have: %s)", quote(name), nameList(s.Names()))
		}
		return c, nil
	}
	if c, ok := s.Configs[SelectedName]; ok {
		return c, nil
	}
	if len(s.Configs) == 1 {
		for _, c := range s.Configs {
			return c, nil
		}
	}
	return Config{}, fmt.Errorf("%d mig-configs and none named %q: choose one of %s", len(s.Configs), SelectedName, nameList(s.Names()))
}

// nameList lists configuration names for a message: the first MaxErrors,
// then how many more.
func nameList(names []string) string {
	shown := names[:min(len(names), MaxErrors)]
	parts := make([]string, len(shown))
	for i, n := range shown {
		parts[i] = clipName(n)
	}
	out := strings.Join(parts, ", ")
	if more := len(names) - len(shown); more > 0 {
		out += fmt.Sprintf(" and %d more", more)
	}
	return out
}

// matches reports whether the entry's device-filter accepts a PCI id.
func (e *Entry) matchesFilter(pciID uint32) bool {
	return len(e.DeviceFilter) == 0 || slices.Contains(e.DeviceFilter, pciID)
}

// matchesIndex reports whether the entry's devices include a GPU index.
func (e *Entry) matchesIndex(index int) bool {
	return e.AllDevices || slices.Contains(e.Devices, index)
}
