package migconfig

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/migflex/migflex/internal/domain/mig"
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
	// Err is what keeps the configuration from being used, found while
	// parsing; the document's other configurations do not depend on it.
	// Select returns it.
	Err error
}

// Entry is one item of a configuration's list.
type Entry struct {
	// DeviceFilter lists the PCI ids the entry is for; empty matches every
	// GPU.
	DeviceFilter []DeviceID
	// AllDevices is true for "devices: all" (every MIG-capable GPU, as in
	// mig-parted); otherwise Devices lists GPU indices, possibly none.
	AllDevices bool
	Devices    []int
	MigEnabled bool
	// Profiles counts instances wanted per profile, wherever they fit.
	Profiles map[string]int
	// Placements are instances pinned to a memory-slice range (Run:ai form).
	Placements []Placement
}

// DeviceID is one device-filter item: a PCI device id (device<<16 |
// vendor, 0x233010DE), optionally with a subsystem id
// ("0x233010DE:0x16C110DE"), which must then match too. A text that is not
// such an id (mig-parted tolerates model names) is kept, not Valid, and
// matches no GPU.
type DeviceID struct {
	Device       uint32
	Subsystem    uint32
	HasSubsystem bool
	Valid        bool
	// Text is how the document wrote it.
	Text string
}

// ParseDeviceID reads a device-filter item as mig-parted does: one or two
// ':'-separated numbers (strconv base 0: "0x" hex, decimal, "0o" octal),
// each 32 bits.
func ParseDeviceID(s string) DeviceID {
	id := DeviceID{Text: s}
	parts := strings.Split(s, ":")
	if len(parts) > 2 {
		return id
	}
	dev, err := strconv.ParseUint(parts[0], 0, 32)
	if err != nil {
		return id
	}
	if len(parts) == 2 {
		sub, err := strconv.ParseUint(parts[1], 0, 32)
		if err != nil {
			return id
		}
		id.Subsystem, id.HasSubsystem = uint32(sub), true
	}
	id.Device, id.Valid = uint32(dev), true
	return id
}

// Matches reports whether the id is that of a GPU with PCI device id dev
// and subsystem id sub (0 when unknown).
func (d DeviceID) Matches(dev, sub uint32) bool {
	return d.Valid && d.Device == dev && (!d.HasSubsystem || d.Subsystem == sub)
}

func (d DeviceID) String() string { return d.Text }

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
		return c, c.Err
	}
	if c, ok := s.Configs[SelectedName]; ok {
		return c, c.Err
	}
	if len(s.Configs) == 1 {
		for _, c := range s.Configs {
			return c, c.Err
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

// matchesFilter reports whether the entry's device-filter accepts a GPU.
func (e *Entry) matchesFilter(g *mig.GPU) bool {
	return len(e.DeviceFilter) == 0 || slices.ContainsFunc(e.DeviceFilter, func(d DeviceID) bool {
		return d.Matches(g.PCIDeviceID, g.PCISubsystemID)
	})
}

// matchesIndex reports whether the entry's devices include a GPU: "all"
// means every MIG-capable GPU, as in mig-parted, and every GPU when the
// entry turns MIG off (which a GPU without MIG already is).
func (e *Entry) matchesIndex(g *mig.GPU) bool {
	if e.AllDevices {
		return g.MigCapable || !e.MigEnabled
	}
	return slices.Contains(e.Devices, g.Index)
}
