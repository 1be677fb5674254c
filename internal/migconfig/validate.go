package migconfig

import (
	"cmp"
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
// finds, joined (at most MaxErrors of them, then how many more).
func Validate(cfg Config, gpus []mig.GPU) ([]Desired, error) {
	byIndex := make(map[int]*mig.GPU, len(gpus))
	for i := range gpus {
		byIndex[gpus[i].Index] = &gpus[i]
	}
	var errs errorList
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
				errs.addf("%s: GPU %d does not exist (node has %s)", entryPath(cfg, i), d, indexList(gpus))
			}
		}
		for _, g := range gpus {
			if !e.matchesFilter(g.PCIDeviceID) || !e.matchesIndex(g.Index) {
				continue
			}
			if first, taken := owner[g.Index]; taken {
				errs.addf("%s: matched by %s and %s; each GPU may be matched by one entry", gpuName(&g), entryPath(cfg, first), entryPath(cfg, i))
				continue
			}
			owner[g.Index] = i
		}
	}
	switch {
	case len(cfg.Entries) == 0:
		errs.addf("mig-configs.%s: no entries", clipName(cfg.Name))
	case len(gpus) == 0 && errs.len() == 0:
		errs.addf("mig-configs.%s: the node has no GPUs", clipName(cfg.Name))
	case len(owner) == 0 && errs.len() == 0:
		// Every entry filtered itself out. mig-parted would do nothing and
		// succeed; an agent reporting success while ignoring the config is
		// worse than saying the config is not for this node.
		errs.addf("mig-configs.%s: no entry's device-filter matches a GPU on this node (%s)", clipName(cfg.Name), pciList(gpus))
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
		if !checkGPU(g, d, &errs) {
			continue
		}
		desired = append(desired, d)
	}
	if err := errs.err(); err != nil {
		return nil, err
	}
	return desired, nil
}

// checkGPU adds to errs everything that keeps d from being applied to g, on
// an empty GPU (the plan may destroy whatever is there now), and reports
// whether there was nothing.
func checkGPU(g *mig.GPU, d Desired, errs *errorList) bool {
	if !d.MigEnabled {
		return true
	}
	prefix := gpuName(g) + ": "
	if !g.MigCapable {
		errs.add(errors.New(prefix + "MIG is not supported on this GPU"))
		return false
	}
	before := errs.len()
	fail := func(format string, args ...any) {
		errs.addf(prefix+format, args...)
	}
	failed := func() bool { return errs.len() > before }
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
	var known []int // indices of d.Placements with a known profile
	for i, pin := range d.Placements {
		counts[pin.Profile]++
		if unknown[pin.Profile] {
			continue
		}
		known = append(known, i)
		p, _ := g.Profile(pin.Profile)
		if pin.Size != p.MemorySlices {
			fail("%s at position %d has size %d, but the profile takes %d memory slices", pin.Profile, pin.Start, pin.Size, p.MemorySlices)
		}
		if !slices.Contains(p.Placements, pin.Start) {
			fail("%s cannot start at position %d (valid: %s)", pin.Profile, pin.Start, intList(slices.Sorted(slices.Values(p.Placements))))
		}
	}
	for _, o := range overlaps(d.Placements, known) {
		fail("%s overlaps %s", d.Placements[o[0]], d.Placements[o[1]])
	}
	if failed() {
		return false
	}
	// One explanation per GPU, the plainest first: memory, then profile
	// counts, then compute slices, then media engines, then placements. A
	// layout that breaks several rules breaks them for one reason; listing
	// them all is noise.
	needed, compute := 0, 0
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		p, _ := g.Profile(name)
		needed += counts[name] * p.MemorySlices
		compute += counts[name] * p.Slices
	}
	if needed > total {
		fail("%s needs %d of %d memory slices", describeCounts(g, counts), needed, total)
		return false
	}
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		if p, _ := g.Profile(name); counts[name] > p.MaxCount {
			fail("%s x%d exceeds the maximum of %d per GPU", name, counts[name], p.MaxCount)
		}
	}
	if failed() {
		return false
	}
	if c := computeSlices(g); compute > c {
		fail("%s needs %d of %d compute slices", describeCounts(g, counts), compute, c)
		return false
	}
	if why := mediaShortfall(g, counts); why != "" {
		fail("%s: %s", describeCounts(g, counts), why)
		return false
	}
	if _, _, ok := newLayout(g, d.Profiles, d.Placements).solve(); !ok {
		fail("no placement fits %s on %d memory slices (%s)", describeCounts(g, counts), total, startsOf(g, counts))
		return false
	}
	return true
}

// overlaps finds the pinned placements, among pins[i] for i in idx, whose
// memory slices overlap an earlier one's, in O(n log n): sorted by start,
// each is compared with the one reaching furthest before it. It returns
// pairs of indices, the later placement in the document first; each
// overlapping placement is named once.
func overlaps(pins []Placement, idx []int) [][2]int {
	order := slices.Clone(idx)
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(pins[a].Start, pins[b].Start) })
	var out [][2]int
	reach := -1 // index of the placement ending furthest so far
	for _, i := range order {
		if reach >= 0 && pins[i].Start < pins[reach].Start+pins[reach].Size {
			out = append(out, [2]int{max(i, reach), min(i, reach)})
		}
		if reach < 0 || pins[i].Start+pins[i].Size > pins[reach].Start+pins[reach].Size {
			reach = i
		}
	}
	return out
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
	return fmt.Sprintf("mig-configs.%s[%d]", clipName(cfg.Name), i)
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
