package migconfig

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/migflex/migflex/internal/domain/mig"
)

// slot is one instance the placement search has to put somewhere.
type slot struct {
	prof   mig.Profile
	pinned bool
	start  int // when pinned
}

// layout is a placement problem on one GPU: put every slot at one of its
// profile's starts with no two overlapping, keeping as many of the GPU's
// current instances as possible.
type layout struct {
	slots []slot
	// keepable marks current instances that may stay: profile name and start.
	keepable map[placementKey]bool
}

type placementKey struct {
	profile string
	start   int
}

// newLayout builds the search over the GPU's profiles. Unknown profiles must
// have been rejected before. Slots are ordered for the search: pinned ones
// first, then the biggest profiles, whose few starts constrain the most.
func newLayout(g *mig.GPU, profiles map[string]int, pins []Placement) *layout {
	l := &layout{keepable: map[placementKey]bool{}}
	profile := func(name string) mig.Profile {
		p, _ := g.Profile(name)
		// Ascending starts make the first layout found the lowest one.
		p.Placements = slices.Sorted(slices.Values(p.Placements))
		return p
	}
	for _, pin := range pins {
		l.slots = append(l.slots, slot{prof: profile(pin.Profile), pinned: true, start: pin.Start})
	}
	var free []slot
	for name, n := range profiles {
		p := profile(name)
		for range n {
			free = append(free, slot{prof: p})
		}
	}
	slices.SortStableFunc(free, func(a, b slot) int { return compareProfiles(a.prof, b.prof) })
	l.slots = append(l.slots, free...)
	return l
}

// compareProfiles orders bigger profiles first, then by name.
func compareProfiles(a, b mig.Profile) int {
	if c := cmp.Compare(b.MemorySlices, a.MemorySlices); c != 0 {
		return c
	}
	if c := cmp.Compare(b.Slices, a.Slices); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}

// solve returns a start per slot (in l.slots order) and how many of those
// land on a keepable instance, or ok false when no layout exists. Among the
// layouts keeping the most, it returns the one with the lowest starts,
// compared slot by slot in search order, so the answer is deterministic.
//
// The search is exhaustive (backtracking over each profile's placement list
// with a memory-slice occupancy mask), which is what finds 4g+2g+1g where the
// driver's first fit in a bad order fails. It stays small: equal unpinned
// slots take strictly increasing starts, so each set of starts is tried once,
// and a branch that cannot beat the best kept count is cut. Compute slices
// do not depend on placement, so checkGPU checks them before the search.
func (l *layout) solve() (starts []int, kept int, ok bool) {
	n := len(l.slots)
	cur := make([]int, n)
	best := -1
	// bound is the most slots that could still be kept from slot i on.
	bound := make([]int, n+1)
	for i := n - 1; i >= 0; i-- {
		bound[i] = bound[i+1]
		if l.canKeep(l.slots[i]) {
			bound[i]++
		}
	}
	var dfs func(i int, occupied uint64, score int) bool
	dfs = func(i int, occupied uint64, score int) bool {
		if score+bound[i] <= best {
			return false
		}
		if i == n {
			best = score
			starts = slices.Clone(cur)
			return best == bound[0] // nothing can beat this
		}
		s := l.slots[i]
		for _, start := range s.candidates() {
			if !s.pinned && i > 0 && !l.slots[i-1].pinned && l.slots[i-1].prof.Name == s.prof.Name && start <= cur[i-1] {
				continue
			}
			m, fits := mask(start, s.prof.MemorySlices)
			if !fits || occupied&m != 0 {
				continue
			}
			cur[i] = start
			gain := 0
			if l.keepable[placementKey{s.prof.Name, start}] {
				gain = 1
			}
			if dfs(i+1, occupied|m, score+gain) {
				return true
			}
		}
		return false
	}
	dfs(0, 0, 0)
	if best < 0 {
		return nil, 0, false
	}
	return starts, best, true
}

func (s slot) candidates() []int {
	if s.pinned {
		return []int{s.start}
	}
	return s.prof.Placements
}

func (l *layout) canKeep(s slot) bool {
	for k := range l.keepable {
		if k.profile == s.prof.Name && (!s.pinned || k.start == s.start) {
			return true
		}
	}
	return false
}

// mask is the occupancy bit mask of memory slices start..start+size-1.
func mask(start, size int) (uint64, bool) {
	if start < 0 || size < 1 || start+size > 64 {
		return 0, false
	}
	return ((uint64(1) << size) - 1) << start, true
}

// memorySlices is the number of memory slices on the GPU: the end of the
// furthest placement any profile has (8 on every GPU in the field today).
func memorySlices(g *mig.GPU) int {
	total := 0
	for _, p := range g.Profiles {
		for _, s := range p.Placements {
			total = max(total, s+p.MemorySlices)
		}
	}
	return total
}

// computeSlices is the number of compute slices on the GPU: those of its
// largest profile, the one spanning the whole GPU (7 on A100, H100, H200).
// Placements alone keep the built-in models within it, except in layouts
// that no placement fits anyway; a custom model's table may not.
func computeSlices(g *mig.GPU) int {
	total := 0
	for _, p := range g.Profiles {
		total = max(total, p.Slices)
	}
	return total
}

// describeCounts writes a request as "4g.40gb + 2g.20gb x2", biggest first.
func describeCounts(g *mig.GPU, counts map[string]int) string {
	names := make([]string, 0, len(counts))
	for n := range counts {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int {
		pa, _ := g.Profile(a)
		pb, _ := g.Profile(b)
		pa.Name, pb.Name = a, b
		return compareProfiles(pa, pb)
	})
	parts := make([]string, 0, len(names))
	for _, n := range names {
		if counts[n] == 1 {
			parts = append(parts, n)
		} else {
			parts = append(parts, fmt.Sprintf("%s x%d", n, counts[n]))
		}
	}
	return strings.Join(parts, " + ")
}
