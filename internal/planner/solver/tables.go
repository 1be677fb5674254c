package solver

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/migconfig"
	"github.com/migflex/migflex/internal/domain/resourcename"
)

// maxPlacements bounds a model's placements (profile, start) so that a
// layout is one uint64 bit set. The MIG tables in the field have about 25.
const maxPlacements = 64

// maxTableChecks bounds the layout enumeration of one model, counted in
// migconfig checks: a profile table is published by each node's agent, and
// one with many small placements (63 one-slice placements has about 6e8
// layouts of at most 7 instances) would otherwise hold the planner for
// hours and its memory. The built-in tables need at most 2,990 (see
// TestTableBounds).
const maxTableChecks = 1 << 16

// table is every valid layout of one GPU model, precomputed once: the
// placement search of a round is then array lookups. Which layouts are valid
// is decided by migconfig.Validate, the rules the agent applies; the
// enumeration only skips sets with overlapping memory slices, which no MIG
// layout can have, before asking it.
type table struct {
	model    string
	profiles []mig.Profile
	// resources[p] is the Kubernetes resource that serves profiles[p].
	resources []corev1.ResourceName
	// size[p] is profiles[p]'s share of the GPU's memory slices.
	size []float64
	// attrs marks profiles with attributes (+me, ...): never filled
	// speculatively, as they are rare and often capped at one per GPU.
	attrs []bool
	// xs are the placements, ordered by profile then start; byProfile[p]
	// lists profile p's.
	xs        []placement
	byProfile [][]int
	// at finds a placement by profile name and start.
	at map[migconfig.Placement]int
	// sets[id] is layout id as a bit set over xs; ids are ordered by size,
	// id 0 is the empty layout.
	sets  []uint64
	byset map[uint64]int32
	// trans[id*len(xs)+x] is the layout with xs[x] added to id, or -1.
	trans []int32
	// maxAdd[id*len(profiles)+p] is how many more instances of profile p fit
	// next to layout id.
	maxAdd []uint8
	// checks is how many migconfig checks the enumeration made.
	checks int
}

type placement struct {
	prof  int
	start int
	size  int
	mask  uint64 // memory slices
}

func (x placement) String(t *table) string {
	return fmt.Sprintf("%s@%d", t.profiles[x.prof].Name, x.start)
}

// tables is shared by every Planner: a table depends only on its model.
var tables tableCache

// maxCachedTables bounds the table cache: tables come from what nodes
// publish, so a node that kept publishing new ones would otherwise grow it
// for ever. Clusters have a few models; past the bound the cache starts
// over and tables in use are rebuilt (about 0.1 s each).
const maxCachedTables = 32

// tableCache builds each model's table once per process. Models are keyed by
// their whole profile table, so two models with the same name and different
// tables (a custom simulator model) never share one.
type tableCache struct {
	mu sync.Mutex
	m  map[string]*tableEntry
}

type tableEntry struct {
	once sync.Once
	t    *table
	err  error
}

func (c *tableCache) get(m Model) (*table, error) {
	key := modelKey(m)
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]*tableEntry{}
	}
	e := c.m[key]
	if e == nil {
		if len(c.m) >= maxCachedTables {
			clear(c.m)
		}
		e = &tableEntry{}
		c.m[key] = e
	}
	c.mu.Unlock()
	e.once.Do(func() { e.t, e.err = buildTable(m) })
	return e.t, e.err
}

func modelKey(m Model) string {
	var b strings.Builder
	b.WriteString(m.Name)
	for _, p := range m.Profiles {
		fmt.Fprintf(&b, "|%s/%d/%d/%d/%v", p.Name, p.Slices, p.MemorySlices, p.MaxCount, p.Placements)
	}
	return b.String()
}

// buildTable enumerates the model's layouts and keeps those migconfig
// accepts.
func buildTable(m Model) (*table, error) {
	if len(m.Profiles) == 0 {
		return nil, fmt.Errorf("model %q: no MIG profiles", m.Name)
	}
	t := &table{model: m.Name, profiles: slices.Clone(m.Profiles)}
	slices.SortStableFunc(t.profiles, func(a, b mig.Profile) int {
		return cmp.Or(cmp.Compare(a.Slices, b.Slices), cmp.Compare(a.MemorySlices, b.MemorySlices), cmp.Compare(a.Name, b.Name))
	})
	if err := t.addPlacements(); err != nil {
		return nil, fmt.Errorf("model %q: %w", m.Name, err)
	}
	sets, err := t.enumerate()
	if err != nil {
		return nil, fmt.Errorf("model %q: %w", m.Name, err)
	}
	t.index(sets)
	return t, nil
}

// addPlacements lists every placement of every profile (xs), by profile
// and by profile and start, with each profile's resource name and share
// of the GPU's memory.
func (t *table) addPlacements() error {
	memSlices := 0
	for i, p := range t.profiles {
		if i > 0 && p.Name == t.profiles[i-1].Name {
			return fmt.Errorf("profile %s listed twice", p.Name)
		}
		if p.MemorySlices < 1 {
			return fmt.Errorf("profile %s has %d memory slices", p.Name, p.MemorySlices)
		}
		for _, s := range slices.Sorted(slices.Values(p.Placements)) {
			if s < 0 || s+p.MemorySlices > 64 {
				return fmt.Errorf("profile %s placement %d is outside 64 memory slices", p.Name, s)
			}
			t.xs = append(t.xs, placement{prof: i, start: s, size: p.MemorySlices, mask: ((uint64(1) << p.MemorySlices) - 1) << s})
			memSlices = max(memSlices, s+p.MemorySlices)
		}
		t.resources = append(t.resources, resourcename.MIG(p.Name))
		t.attrs = append(t.attrs, strings.ContainsAny(p.Name, "+-"))
	}
	if len(t.xs) > maxPlacements {
		return fmt.Errorf("%d placements, more than the %d the planner handles", len(t.xs), maxPlacements)
	}
	t.byProfile = make([][]int, len(t.profiles))
	t.at = make(map[migconfig.Placement]int, len(t.xs))
	for x, pl := range t.xs {
		t.byProfile[pl.prof] = append(t.byProfile[pl.prof], x)
		t.at[migconfig.Placement{Profile: t.profiles[pl.prof].Name, Start: pl.start}] = x
	}
	for _, p := range t.profiles {
		t.size = append(t.size, float64(p.MemorySlices)/float64(memSlices))
	}
	return nil
}

// enumerate is every layout migconfig accepts, as sets of placements,
// grown one placement at a time. MIG's rules only ever forbid adding an
// instance (overlap, counts, compute slices), so a set migconfig rejects
// has no valid superset and its branch ends there; if a rule were ever
// not of that kind, layouts would be missed, never invented.
func (t *table) enumerate() ([]uint64, error) {
	gpu := mig.GPU{Model: t.model, MigCapable: true, MigEnabled: true, MigPending: true, Profiles: t.profiles}
	if err := t.validate(gpu, 0); err != nil {
		return nil, fmt.Errorf("migconfig rejects the empty layout: %w", err)
	}
	sets := []uint64{0}
	checks := 0
	var grow func(from int, set, mem uint64) bool
	grow = func(from int, set, mem uint64) bool {
		for x := from; x < len(t.xs); x++ {
			if mem&t.xs[x].mask != 0 {
				continue
			}
			if checks++; checks > maxTableChecks {
				return false
			}
			next := set | 1<<x
			if t.validate(gpu, next) != nil {
				continue
			}
			sets = append(sets, next)
			if !grow(x+1, next, mem|t.xs[x].mask) {
				return false
			}
		}
		return true
	}
	if !grow(0, 0, 0) {
		return nil, fmt.Errorf("its profile table allows more layouts than the planner enumerates (over %d checked, %d valid so far); MIG tables in the field have a few thousand", maxTableChecks, len(sets))
	}
	t.checks = checks
	return sets, nil
}

// index orders the layouts by size and keeps, for each, the layout each
// placement added leads to (trans) and how many more of each profile fit
// (maxAdd).
func (t *table) index(sets []uint64) {
	slices.SortFunc(sets, func(a, b uint64) int {
		return cmp.Or(cmp.Compare(bits.OnesCount64(a), bits.OnesCount64(b)), cmp.Compare(a, b))
	})
	t.sets = sets
	t.byset = make(map[uint64]int32, len(sets))
	for i, s := range sets {
		t.byset[s] = int32(i)
	}
	nx, np := len(t.xs), len(t.profiles)
	t.trans = make([]int32, len(sets)*nx)
	for id, s := range sets {
		for x := range t.xs {
			next := int32(-1)
			if s&(1<<x) == 0 {
				if n, ok := t.byset[s|1<<x]; ok {
					next = n
				}
			}
			t.trans[id*nx+x] = next
		}
	}
	// Larger layouts come later, so a reverse walk sees every successor
	// before the layout itself.
	t.maxAdd = make([]uint8, len(sets)*np)
	for id := len(sets) - 1; id >= 0; id-- {
		for x, pl := range t.xs {
			n := t.trans[id*nx+x]
			if n < 0 {
				continue
			}
			if v := t.maxAdd[int(n)*np+pl.prof] + 1; v > t.maxAdd[id*np+pl.prof] {
				t.maxAdd[id*np+pl.prof] = v
			}
		}
	}
}

// validate asks migconfig whether the placements of set form a layout the
// agent accepts on an empty GPU of the model.
func (t *table) validate(g mig.GPU, set uint64) error {
	e := migconfig.Entry{AllDevices: true, MigEnabled: true}
	for x := range t.xs {
		if set&(1<<x) != 0 {
			e.Placements = append(e.Placements, t.placementOf(x))
		}
	}
	_, err := migconfig.Validate(migconfig.Config{Name: "planner", Entries: []migconfig.Entry{e}}, []mig.GPU{g})
	return err
}

func (t *table) placementOf(x int) migconfig.Placement {
	pl := t.xs[x]
	return migconfig.Placement{Profile: t.profiles[pl.prof].Name, Start: pl.start, Size: pl.size}
}

// find returns the placement index of profile name at start, or -1.
func (t *table) find(name string, start int) int {
	if x, ok := t.at[migconfig.Placement{Profile: name, Start: start}]; ok {
		return x
	}
	return -1
}

// profileOf returns the index of the profile served as resource r, or -1.
func (t *table) profileOf(r corev1.ResourceName) int {
	for p, res := range t.resources {
		if res == r {
			return p
		}
	}
	return -1
}

// layoutOf returns the id of the layout with the given placements, or false
// when migconfig would not accept it.
func (t *table) layoutOf(set uint64) (int32, bool) {
	id, ok := t.byset[set]
	return id, ok
}

// add returns the layout id with placement x added, or -1.
func (t *table) add(id int32, x int) int32 {
	return t.trans[int(id)*len(t.xs)+x]
}

// room is how many more instances of profile p fit next to layout id.
func (t *table) room(id int32, p int) int {
	return int(t.maxAdd[int(id)*len(t.profiles)+p])
}

// placements lists the layout's placements in start order.
func (t *table) placements(set uint64) []migconfig.Placement {
	var out []migconfig.Placement
	for x := range t.xs {
		if set&(1<<x) != 0 {
			out = append(out, t.placementOf(x))
		}
	}
	slices.SortFunc(out, func(a, b migconfig.Placement) int {
		return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(a.Profile, b.Profile))
	})
	return out
}
