package migconfig

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/migflex/migflex/internal/domain/mig"
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

// Scope says whom a configuration was written for, which decides what
// becomes of the parts of it that do not fit the node.
type Scope int

const (
	// ScopeNode is a document written for this node: an annotation. An
	// entry naming GPUs the node lacks (or none: devices: []), or a
	// configuration none of whose entries applies here, is a mistake and
	// an error.
	ScopeNode Scope = iota
	// ScopeFleet is a file shared by many nodes: the GPU operator's config
	// file, one configuration of which a node's label selects. As mig-parted
	// reads it, what does not apply to this node's GPUs is left out, and a
	// configuration of which nothing applies changes nothing; the
	// Validation's Notes say what was left out.
	ScopeFleet
)

// Validation is what a configuration asks of one node.
type Validation struct {
	// Desired is the state of every GPU an entry covers, ordered by GPU
	// index; GPUs no entry covers are absent and left untouched.
	Desired []Desired
	// Notes say what of the configuration does not apply to this node: an
	// entry whose device-filter matches none of its GPUs, and under
	// ScopeFleet an entry naming GPUs it lacks or a configuration of which
	// nothing applies. At most MaxErrors, then how many more.
	Notes []string
}

// Validate checks a configuration written for this node (ScopeNode)
// against its GPUs and returns the desired state of every GPU an entry
// covers; see ValidateFor.
func Validate(cfg Config, gpus []mig.GPU) ([]Desired, error) {
	r, err := ValidateFor(cfg, gpus, ScopeNode)
	return r.Desired, err
}

// ValidateFor checks a configuration against the node's GPUs. An entry
// applies to a GPU its device-filter (if any) matches and its devices name:
// "all" is every MIG-capable GPU (and, with mig-enabled: false, every GPU),
// as in mig-parted. A GPU matched by two entries is an error (mig-parted
// would apply both in turn, the last silently winning). It returns every
// problem it finds, joined (at most MaxErrors of them, then how many more),
// and the configuration's own Err first.
func ValidateFor(cfg Config, gpus []mig.GPU, scope Scope) (Validation, error) {
	if cfg.Err != nil {
		return Validation{}, cfg.Err
	}
	byIndex := make(map[int]*mig.GPU, len(gpus))
	for i := range gpus {
		byIndex[gpus[i].Index] = &gpus[i]
	}
	var errs, notes errorList
	// shape is a part of the configuration the node's GPUs do not fit.
	shape := func(format string, args ...any) {
		if scope == ScopeFleet {
			notes.addf(format, args...)
		} else {
			errs.addf(format, args...)
		}
	}
	owner := map[int]int{} // GPU index -> entry index
	for i := range cfg.Entries {
		e := &cfg.Entries[i]
		if len(e.DeviceFilter) > 0 && !slices.ContainsFunc(gpus, func(g mig.GPU) bool { return e.matchesFilter(&g) }) {
			// As in mig-parted: an entry for a GPU model this node lacks
			// does not apply here.
			notes.addf("%s: its device-filter (%s) matches no GPU on this node (%s)", entryPath(cfg, i), filterList(e.DeviceFilter), pciList(gpus))
			continue
		}
		if !e.AllDevices && len(e.Devices) == 0 {
			shape("%s: devices: [] names no GPU", entryPath(cfg, i))
			continue
		}
		for _, d := range e.Devices {
			if _, ok := byIndex[d]; !ok {
				shape("%s: GPU %d does not exist (node has %s)", entryPath(cfg, i), d, indexList(gpus))
			}
		}
		for _, g := range gpus {
			if !e.matchesFilter(&g) || !e.matchesIndex(&g) {
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
	case len(owner) == 0 && errs.len() == 0:
		// mig-parted would do nothing and succeed. For a shared file that
		// is right; for a document written for this node, reporting
		// success while ignoring it is worse than saying it is not for
		// this node.
		what := fmt.Sprintf("mig-configs.%s: no entry applies to this node's GPUs (%s)", clipName(cfg.Name), pciList(gpus))
		if scope == ScopeFleet {
			notes.addf("%s; they are left as they are", what)
		} else {
			errs.addf("%s", what)
		}
	}
	var r Validation
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
		r.Desired = append(r.Desired, d)
	}
	if err := errs.err(); err != nil {
		return Validation{}, err
	}
	if err := notes.err(); err != nil {
		r.Notes = strings.Split(err.Error(), "\n")
	}
	return r, nil
}

// checkGPU adds to errs everything that keeps d from being applied to g, on
// an empty GPU (the plan may destroy whatever is there now), and reports
// whether there was nothing.
func checkGPU(g *mig.GPU, d Desired, errs *errorList) bool {
	if !d.MigEnabled {
		return true
	}
	c := gpuCheck{g: g, errs: errs, prefix: gpuName(g) + ": "}
	if !g.MigCapable {
		errs.add(errors.New(c.prefix + "MIG is not supported on this GPU"))
		return false
	}
	before := errs.len()
	c.names(d)
	c.pins(d)
	if errs.len() > before {
		return false
	}
	return c.fits(d)
}

// gpuCheck is checkGPU's steps on one GPU, each adding what it finds.
type gpuCheck struct {
	g      *mig.GPU
	errs   *errorList
	prefix string
}

func (c gpuCheck) fail(format string, args ...any) {
	if c.errs.full() {
		c.errs.extra++ // counted, not spelled out: no formatting
		return
	}
	c.errs.addf(c.prefix+format, args...)
}

// names: every profile asked for is one of the GPU's.
func (c gpuCheck) names(d Desired) {
	supported := ""
	for _, name := range requestedNames(d) {
		if _, ok := c.g.Profile(name); ok {
			continue
		}
		if supported == "" {
			supported = supportedNames(c.g)
		}
		if lower := strings.ToLower(name); lower != name {
			if _, ok := c.g.Profile(lower); ok {
				// mig-parted reads "+ME" as an attribute of its own;
				// no GPU has one.
				c.fail("unknown profile %s: profile names are lower case (%q)", name, lower)
				continue
			}
		}
		c.fail("unknown profile %s (supported: %s)", name, supported)
	}
}

// pins: each pinned placement of a known profile has the profile's size,
// one of its starts, and overlaps no other.
func (c gpuCheck) pins(d Desired) {
	var known []int // indices of d.Placements with a known profile
	for i, pin := range d.Placements {
		p, ok := c.g.Profile(pin.Profile)
		if !ok {
			continue
		}
		known = append(known, i)
		if pin.Size != p.MemorySlices {
			c.fail("%s at position %d has size %d, but the profile takes %d memory slices", pin.Profile, pin.Start, pin.Size, p.MemorySlices)
		}
		if !slices.Contains(p.Placements, pin.Start) {
			c.fail("%s cannot start at position %d (valid: %s)", pin.Profile, pin.Start, intList(slices.Sorted(slices.Values(p.Placements))))
		}
	}
	for _, o := range countOverlaps(d.Placements, overlaps(d.Placements, known)) {
		if o.n == 1 {
			c.fail("%s overlaps %s", o.later, o.earlier)
			continue
		}
		c.fail("%s overlaps %s (%d times)", o.later, o.earlier, o.n)
	}
}

// fits: the layout of known profiles fits the GPU. One explanation per
// GPU, the plainest first: memory, then profile counts, then compute
// slices, then media engines, then placements. A layout that breaks
// several rules breaks them for one reason; listing them all is noise.
func (c gpuCheck) fits(d Desired) bool {
	g := c.g
	total := memorySlices(g)
	counts := maps.Clone(d.Profiles)
	if counts == nil {
		counts = map[string]int{}
	}
	for _, pin := range d.Placements {
		counts[pin.Profile]++
	}
	needed, compute := 0, 0
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		p, _ := g.Profile(name)
		needed += counts[name] * p.MemorySlices
		compute += counts[name] * p.Slices
	}
	if needed > total {
		c.fail("%s needs %d of %d memory slices", describeCounts(g, counts), needed, total)
		return false
	}
	ok := true
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		if p, _ := g.Profile(name); counts[name] > p.MaxCount {
			c.fail("%s x%d exceeds the maximum of %d per GPU", name, counts[name], p.MaxCount)
			ok = false
		}
	}
	if !ok {
		return false
	}
	if s := computeSlices(g); compute > s {
		c.fail("%s needs %d of %d compute slices", describeCounts(g, counts), compute, s)
		return false
	}
	if why := mediaShortfall(g, counts); why != "" {
		c.fail("%s: %s", describeCounts(g, counts), why)
		return false
	}
	if _, _, ok := newLayout(g, d.Profiles, d.Placements).solve(); !ok {
		c.fail("no placement fits %s on %d memory slices (%s)", describeCounts(g, counts), total, startsOf(g, counts))
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

// overlap is one overlap of pinned placements, and how often the same
// two placements overlap in the entry.
type overlap struct {
	later, earlier Placement
	n              int
}

// countOverlaps folds the identical pairs of pairs (indices into pins) into
// one overlap each, in the order each first occurs: a placement pinned a
// hundred times is one mistake, said once with its count.
func countOverlaps(pins []Placement, pairs [][2]int) []overlap {
	var out []overlap
	at := map[[2]Placement]int{}
	for _, p := range pairs {
		key := [2]Placement{pins[p[0]], pins[p[1]]}
		if i, ok := at[key]; ok {
			out[i].n++
			continue
		}
		at[key] = len(out)
		out = append(out, overlap{later: key[0], earlier: key[1], n: 1})
	}
	return out
}

// requestedNames lists the profiles d names, sorted, each once.
func requestedNames(d Desired) []string {
	names := slices.AppendSeq(make([]string, 0, len(d.Profiles)+len(d.Placements)), maps.Keys(d.Profiles))
	for _, p := range d.Placements {
		names = append(names, p.Profile)
	}
	slices.Sort(names)
	return slices.Compact(names)
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

// pciList names the node's GPU models by PCI id, for filter messages.
func pciList(gpus []mig.GPU) string {
	if len(gpus) == 0 {
		return "it has no GPUs"
	}
	var parts []string
	seen := map[string]bool{}
	for _, g := range gpus {
		id := fmt.Sprintf("0x%08X", g.PCIDeviceID)
		if g.PCISubsystemID != 0 {
			id += fmt.Sprintf(":0x%08X", g.PCISubsystemID)
		}
		if !g.MigCapable {
			id += ", without MIG"
		}
		if p := fmt.Sprintf("%s is %s", g.Model, id); !seen[p] {
			seen[p] = true
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, "; ")
}

// filterList shows a device-filter for a message.
func filterList(ids []DeviceID) string {
	parts := make([]string, 0, len(ids))
	for _, id := range ids[:min(len(ids), MaxErrors)] {
		parts = append(parts, quote(id.Text))
	}
	if len(ids) > MaxErrors {
		parts = append(parts, fmt.Sprintf("and %d more", len(ids)-MaxErrors))
	}
	return strings.Join(parts, ", ")
}
