package solver

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/migconfig"
)

// simModels are the simulator's built-in models (simmodels would import
// this package).
func simModels() []Model {
	var out []Model
	for _, m := range gpumodel.Builtin() {
		pm := Model{Name: m.Name}
		for _, p := range m.Profiles {
			pm.Profiles = append(pm.Profiles, mig.Profile{Name: p.Name, Slices: p.Slices, MemorySlices: p.MemorySlices, MaxCount: p.MaxCount, Placements: p.Placements})
		}
		out = append(out, pm)
	}
	return out
}

// TestTableAgreesWithMigconfig: a set of placements is in the table exactly
// when migconfig accepts it, checked on every layout of the table plus
// random sets, for every built-in model.
func TestTableAgreesWithMigconfig(t *testing.T) {
	for _, m := range simModels() {
		t.Run(m.Name, func(t *testing.T) {
			tab, err := tables.get(m)
			if err != nil {
				t.Fatal(err)
			}
			g := mig.GPU{Model: m.Name, MigCapable: true, MigEnabled: true, MigPending: true, Profiles: tab.profiles}
			// At least the empty layout and one instance of each profile.
			if len(tab.sets) <= len(tab.profiles) {
				t.Errorf("only %d layouts", len(tab.sets))
			}
			rng := rand.New(rand.NewPCG(1, 2))
			for i := range len(tab.sets) + 1000 {
				var set uint64
				if i < len(tab.sets) {
					set = tab.sets[i]
				} else {
					set = rng.Uint64() & (1<<len(tab.xs) - 1)
					// Sparse sets, or nearly all would overlap.
					set &= rng.Uint64() & rng.Uint64()
				}
				_, inTable := tab.layoutOf(set)
				accepted := tab.validate(g, set) == nil
				if inTable != accepted {
					t.Fatalf("layout %v: in table %v, migconfig accepts %v", tab.placements(set), inTable, accepted)
				}
			}
		})
	}
}

// TestTableRoom checks room (how many more of a profile fit) on layouts
// whose answer is known from the MIG tables.
func TestTableRoom(t *testing.T) {
	var h100 Model
	for _, m := range simModels() {
		if m.Name == "H100-SXM5-80GB" {
			h100 = m
		}
	}
	tab, err := tables.get(h100)
	if err != nil {
		t.Fatal(err)
	}
	layout := func(placements ...string) int32 {
		var set uint64
		for _, p := range placements {
			in := parseAt(t, p)
			x := tab.find(in.Profile, in.Start)
			if x < 0 {
				t.Fatalf("no placement %s", p)
			}
			set |= 1 << x
		}
		id, ok := tab.layoutOf(set)
		if !ok {
			t.Fatalf("layout %v not in the table", placements)
		}
		return id
	}
	for _, tc := range []struct {
		layout  []string
		profile string
		want    int
	}{
		{nil, "1g.10gb", 7},
		{nil, "2g.20gb", 3},
		{nil, "3g.40gb", 2},
		{nil, "1g.20gb", 4},
		{nil, "7g.80gb", 1},
		{nil, "1g.10gb+me", 1},
		{[]string{"1g.10gb@0"}, "3g.40gb", 1},
		{[]string{"1g.10gb@0"}, "4g.40gb", 0},
		{[]string{"1g.10gb@1"}, "2g.20gb", 2},
		{[]string{"4g.40gb@0"}, "1g.10gb", 3},
		{[]string{"4g.40gb@0", "2g.20gb@4"}, "1g.10gb", 1},
		{[]string{"3g.40gb@0", "3g.40gb@4"}, "1g.10gb", 0},
		{[]string{"1g.10gb+me@3"}, "1g.10gb+me", 0},
		{[]string{"7g.80gb@0"}, "1g.10gb", 0},
	} {
		if got := tab.room(layout(tc.layout...), profileIndex(t, tab, tc.profile)); got != tc.want {
			t.Errorf("room for %s next to %v = %d, want %d", tc.profile, tc.layout, got, tc.want)
		}
	}
}

// TestKeepFree: the free instances kept are the most that fit.
func TestKeepFree(t *testing.T) {
	var h100 Model
	for _, m := range simModels() {
		if m.Name == "H100-SXM5-80GB" {
			h100 = m
		}
	}
	r := &round{keepMemo: map[keepKey]uint64{}}
	tab, err := tables.get(h100)
	if err != nil {
		t.Fatal(err)
	}
	r.tabs = []*table{tab}
	x := func(s string) int {
		in := parseAt(t, s)
		return tab.find(in.Profile, in.Start)
	}
	free := uint64(0)
	for _, s := range []string{"1g.10gb@0", "1g.10gb@1", "1g.10gb@2", "1g.10gb@3", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6"} {
		free |= 1 << x(s)
	}
	occ, _ := tab.layoutOf(1 << x("3g.40gb@4"))
	keep := r.keepFree(0, occ, free)
	if got := bits.OnesCount64(keep); got != 4 {
		t.Errorf("kept %v next to 3g@4, want the four 1g below it", tab.placements(keep))
	}
	// Compute slices: next to a 4g and a 2g only one 1g may stay.
	occ, _ = tab.layoutOf(1<<x("4g.40gb@0") | 1<<x("2g.20gb@4"))
	if got := bits.OnesCount64(r.keepFree(0, occ, free)); got != 1 {
		t.Errorf("kept %d 1g next to 4g+2g, want 1", got)
	}
}

func parseAt(t *testing.T, s string) migconfig.Placement {
	t.Helper()
	var p migconfig.Placement
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '@' {
			p.Profile = s[:i]
			for _, c := range s[i+1:] {
				p.Start = p.Start*10 + int(c-'0')
			}
			return p
		}
	}
	t.Fatalf("bad placement %q", s)
	return p
}

func profileIndex(t *testing.T, tab *table, name string) int {
	t.Helper()
	for i, p := range tab.profiles {
		if p.Name == name {
			return i
		}
	}
	t.Fatalf("no profile %s", name)
	return -1
}

// oneSliceModel is a profile table no GPU has: n one-memory-slice
// placements beside a whole-GPU profile. Its layouts grow as the subsets of
// up to 7 of n placements (n=63: about 6e8).
func oneSliceModel(name string, n int) Model {
	starts := make([]int, n)
	for i := range starts {
		starts[i] = i
	}
	return Model{Name: name, Profiles: []mig.Profile{
		{Name: "1g.1gb", Slices: 1, MemorySlices: 1, MaxCount: n, Placements: starts},
		{Name: "7g.80gb", Slices: 7, MemorySlices: n, MaxCount: 1, Placements: []int{0}},
	}}
}

// TestTableBounds: the layout enumeration of a published profile table
// stops at maxTableChecks with an error that says so, far above what the
// tables of real GPUs need, and the table cache stays bounded however many
// tables nodes publish.
func TestTableBounds(t *testing.T) {
	for _, m := range simModels() {
		tab, err := buildTable(m)
		if err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		if tab.checks > maxTableChecks/8 {
			t.Errorf("%s: %d checks, too near the bound %d for a real table", m.Name, tab.checks, maxTableChecks)
		}
	}
	for name, m := range map[string]Model{
		"63 one-slice placements": oneSliceModel("evil-63", 63),
		"32 one-slice placements": oneSliceModel("evil-32", 32),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := buildTable(m)
			if err == nil || !strings.Contains(err.Error(), "more layouts than the planner enumerates") {
				t.Errorf("buildTable = %v, want the enumeration bound", err)
			}
		})
	}
	// A table just under the bound is built: the bound refuses only what
	// is past it.
	if tab, err := buildTable(oneSliceModel("small", 12)); err != nil || tab.checks > maxTableChecks {
		t.Errorf("12 one-slice placements: %v", err)
	}

	var c tableCache
	for i := range 3 * maxCachedTables {
		m := oneSliceModel(fmt.Sprintf("rotating-%d", i), 4)
		if _, err := c.get(m); err != nil {
			t.Fatal(err)
		}
		if n := len(c.m); n > maxCachedTables {
			t.Fatalf("%d tables cached after %d models, want at most %d", n, i+1, maxCachedTables)
		}
	}
}
