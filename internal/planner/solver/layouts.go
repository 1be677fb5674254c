package solver

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Layouts answers placement questions about one GPU model from the
// planner's table (layouts migconfig accepts), for tools that place
// instances without planning a round, such as the trace replay.
type Layouts struct {
	t *table
}

// NewLayouts returns the model's layouts.
func NewLayouts(m Model) (*Layouts, error) {
	t, err := tables.get(m)
	if err != nil {
		return nil, err
	}
	return &Layouts{t: t}, nil
}

// Add returns the lowest start at which one more instance of profile fits
// next to instances, which stay where they are; false when none does (or
// instances are not a valid layout).
func (l *Layouts) Add(instances []Instance, profile string) (int, bool) {
	t := l.t
	id, ok := l.layout(instances)
	if !ok {
		return 0, false
	}
	p := -1
	for i, pr := range t.profiles {
		if pr.Name == profile {
			p = i
		}
	}
	if p < 0 {
		return 0, false
	}
	best := -1
	for _, x := range t.byProfile[p] {
		if t.add(id, x) >= 0 && (best < 0 || t.xs[x].start < t.xs[best].start) {
			best = x
		}
	}
	if best < 0 {
		return 0, false
	}
	return t.xs[best].start, true
}

// Valid reports whether instances form a layout of the model.
func (l *Layouts) Valid(instances []Instance) bool {
	_, ok := l.layout(instances)
	return ok
}

func (l *Layouts) layout(instances []Instance) (int32, bool) {
	var set uint64
	for _, in := range instances {
		x := l.t.find(in.Profile, in.Start)
		if x < 0 || set&(1<<x) != 0 {
			return 0, false
		}
		set |= 1 << x
	}
	return l.t.layoutOf(set)
}

// Geometries lists the layouts no instance can be added to, as profile
// counts, without profiles that have attributes (+me): most instances
// first, then by their text. Layouts with the same counts are listed once.
func (l *Layouts) Geometries() []map[string]int {
	t := l.t
	seen := map[string]bool{}
	var out []map[string]int
	for id, set := range t.sets {
		maximal, plain := true, true
		for x := range t.xs {
			if t.trans[id*len(t.xs)+x] >= 0 && !t.attrs[t.xs[x].prof] {
				maximal = false
			}
			if set&(1<<x) != 0 && t.attrs[t.xs[x].prof] {
				plain = false
			}
		}
		if !maximal || !plain {
			continue
		}
		counts := map[string]int{}
		for x := range t.xs {
			if set&(1<<x) != 0 {
				counts[t.profiles[t.xs[x].prof].Name]++
			}
		}
		key := geometryString(counts)
		if !seen[key] {
			seen[key] = true
			out = append(out, counts)
		}
	}
	slices.SortStableFunc(out, func(a, b map[string]int) int {
		return cmp.Or(cmp.Compare(total(b), total(a)), cmp.Compare(geometryString(a), geometryString(b)))
	})
	return out
}

func total(counts map[string]int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

func geometryString(counts map[string]int) string {
	parts := make([]string, 0, len(counts))
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s:%d", name, counts[name]))
	}
	return strings.Join(parts, ",")
}
