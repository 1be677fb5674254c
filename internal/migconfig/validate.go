package migconfig

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/migflex/migflex/internal/mig"
)

// Desired is the state a configuration asks for on one GPU.
type Desired struct {
	GPU        int
	MigEnabled bool
	// Profiles counts instances wanted per profile, wherever they fit.
	Profiles map[string]int
	// Placements are instances pinned to a memory-slice range.
	Placements []Placement
}

// Validate checks a configuration against the node's GPUs and returns the
// desired state of every GPU an entry covers, ordered by GPU index; GPUs no
// entry covers are absent and left untouched. It returns every problem it
// finds, joined.
func Validate(cfg Config, gpus []mig.GPU) ([]Desired, error) {
	byIndex := make(map[int]*mig.GPU, len(gpus))
	for i := range gpus {
		byIndex[gpus[i].Index] = &gpus[i]
	}
	var errs []error
	owner := map[int]int{} // GPU index -> entry index
	for i := range cfg.Entries {
		e := &cfg.Entries[i]
		matched := 0
		for _, g := range gpus {
			if e.matchesFilter(g.PCIDeviceID) {
				matched++
			}
		}
		if len(e.DeviceFilter) > 0 && matched == 0 {
			// As in mig-parted: an entry for a GPU model this node lacks
			// does not apply here.
			continue
		}
		for _, d := range e.Devices {
			if _, ok := byIndex[d]; !ok {
				errs = append(errs, fmt.Errorf("%s: GPU %d does not exist (node has %s)", entryPath(cfg, i), d, indexList(gpus)))
			}
		}
		for _, g := range gpus {
			if !e.matchesFilter(g.PCIDeviceID) || !e.matchesIndex(g.Index) {
				continue
			}
			if first, taken := owner[g.Index]; taken {
				errs = append(errs, fmt.Errorf("%s: matched by %s and %s; each GPU may be matched by one entry", gpuName(&g), entryPath(cfg, first), entryPath(cfg, i)))
				continue
			}
			owner[g.Index] = i
		}
	}
	switch {
	case len(cfg.Entries) == 0:
		errs = append(errs, fmt.Errorf("mig-configs.%s: no entries", cfg.Name))
	case len(gpus) == 0 && len(errs) == 0:
		errs = append(errs, fmt.Errorf("mig-configs.%s: the node has no GPUs", cfg.Name))
	case len(owner) == 0 && len(errs) == 0:
		// Every entry filtered itself out. mig-parted would do nothing and
		// succeed; an agent reporting success while ignoring the config is
		// worse than saying the config is not for this node.
		errs = append(errs, fmt.Errorf("mig-configs.%s: no entry's device-filter matches a GPU on this node (%s)", cfg.Name, pciList(gpus)))
	}
	var desired []Desired
	for _, idx := range slices.Sorted(maps.Keys(owner)) {
		g := byIndex[idx]
		e := &cfg.Entries[owner[idx]]
		d := Desired{GPU: idx, MigEnabled: e.MigEnabled}
		if e.MigEnabled {
			d.Profiles = maps.Clone(e.Profiles)
			d.Placements = slices.Clone(e.Placements)
		}
		if gerrs := checkGPU(g, d); len(gerrs) > 0 {
			errs = append(errs, gerrs...)
			continue
		}
		desired = append(desired, d)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return desired, nil
}

// checkGPU returns everything that keeps d from being applied to g, on an
// empty GPU: the plan may destroy whatever is there now.
func checkGPU(g *mig.GPU, d Desired) []error {
	if !d.MigEnabled {
		return nil
	}
	prefix := gpuName(g) + ": "
	if !g.MigCapable {
		return []error{errors.New(prefix + "MIG is not supported on this GPU")}
	}
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(prefix+format, args...))
	}
	unknown := map[string]bool{}
	for _, name := range requestedNames(d) {
		if _, ok := g.Profile(name); !ok {
			unknown[name] = true
			fail("unknown profile %s (supported: %s)", name, supportedNames(g))
		}
	}
	total := memorySlices(g)
	counts := maps.Clone(d.Profiles)
	if counts == nil {
		counts = map[string]int{}
	}
	for i, pin := range d.Placements {
		counts[pin.Profile]++
		if unknown[pin.Profile] {
			continue
		}
		p, _ := g.Profile(pin.Profile)
		if pin.Size != p.MemorySlices {
			fail("%s at position %d has size %d, but the profile takes %d memory slices", pin.Profile, pin.Start, pin.Size, p.MemorySlices)
		}
		if !slices.Contains(p.Placements, pin.Start) {
			fail("%s cannot start at position %d (valid: %s)", pin.Profile, pin.Start, intList(slices.Sorted(slices.Values(p.Placements))))
		}
		for _, other := range d.Placements[:i] {
			if pin.Start < other.Start+other.Size && other.Start < pin.Start+pin.Size {
				fail("%s overlaps %s", pin, other)
			}
		}
	}
	if len(errs) > 0 {
		return errs
	}
	// One explanation per GPU, the plainest first: memory, then profile
	// counts, then compute slices, then placements. A layout that breaks
	// several rules breaks them for one reason; listing them all is noise.
	needed, compute := 0, 0
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		p, _ := g.Profile(name)
		needed += counts[name] * p.MemorySlices
		compute += counts[name] * p.Slices
	}
	if needed > total {
		fail("%s needs %d of %d memory slices", describeCounts(g, counts), needed, total)
		return errs
	}
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		if p, _ := g.Profile(name); counts[name] > p.MaxCount {
			fail("%s x%d exceeds the maximum of %d per GPU", name, counts[name], p.MaxCount)
		}
	}
	if len(errs) > 0 {
		return errs
	}
	if c := computeSlices(g); compute > c {
		fail("%s needs %d of %d compute slices", describeCounts(g, counts), compute, c)
		return errs
	}
	if _, _, ok := newLayout(g, d.Profiles, d.Placements).solve(); !ok {
		fail("no placement fits %s on %d memory slices (%s)", describeCounts(g, counts), total, startsOf(g, counts))
	}
	return errs
}

// requestedNames lists the profiles d names, sorted, each once.
func requestedNames(d Desired) []string {
	set := maps.Clone(d.Profiles)
	if set == nil {
		set = map[string]int{}
	}
	for _, p := range d.Placements {
		set[p.Profile]++
	}
	return slices.Sorted(maps.Keys(set))
}

func gpuName(g *mig.GPU) string {
	return fmt.Sprintf("GPU %d (%s)", g.Index, g.Model)
}

func entryPath(cfg Config, i int) string {
	return fmt.Sprintf("mig-configs.%s[%d]", cfg.Name, i)
}

func supportedNames(g *mig.GPU) string {
	names := make([]string, 0, len(g.Profiles))
	for _, p := range g.Profiles {
		names = append(names, p.Name)
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// startsOf lists where each requested profile may start.
func startsOf(g *mig.GPU, counts map[string]int) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		p, _ := g.Profile(name)
		parts = append(parts, fmt.Sprintf("%s starts at %s", name, intList(slices.Sorted(slices.Values(p.Placements)))))
	}
	return strings.Join(parts, "; ")
}

func indexList(gpus []mig.GPU) string {
	if len(gpus) == 0 {
		return "no GPUs"
	}
	idx := make([]int, 0, len(gpus))
	for _, g := range gpus {
		idx = append(idx, g.Index)
	}
	slices.Sort(idx)
	return "GPUs " + intList(idx)
}

func intList(v []int) string {
	parts := make([]string, len(v))
	for i, n := range v {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ", ")
}

// pciList names the node's GPU models by PCI id, for filter errors.
func pciList(gpus []mig.GPU) string {
	var parts []string
	seen := map[uint32]bool{}
	for _, g := range gpus {
		if !seen[g.PCIDeviceID] {
			seen[g.PCIDeviceID] = true
			parts = append(parts, fmt.Sprintf("%s is 0x%08X", g.Model, g.PCIDeviceID))
		}
	}
	return strings.Join(parts, ", ")
}
