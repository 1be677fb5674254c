// Package jointfit is the exact, bounded search behind the question "can
// these parts serve several wants at once": a pod asking for a 3g.40gb and
// two 2g.20gb on one node whose GPUs make instances on demand (DRA dynamic
// mode), where each want alone fits and together they may not. Its
// readers are schedview's Pool.Together (the webhook, kubectl migflex
// explain), on a pool's counters, and the planner's solver, on its table
// of a model's valid layouts: they share the search, and each brings its
// own rule for what one part (a GPU) can hold.
//
// The search has two steps. Subsets walks, on one part, every set of its
// candidates (placements) the part's rule admits, each given to one want
// it matches, and reports each set as a count vector (how many of each
// want it serves, capped at the want's count). Combine then asks whether
// one vector per part adds up to every want, and which (the first found);
// Cheapest, given each vector's cost, which choice costs least. All are
// bounded: a caller answers as it did without the search past the bound.
package jointfit

import "slices"

// Bounds that keep a search to a few milliseconds: the sets one part's
// walk may visit (2^7 per profile on the built-in models, far below), and
// the count vectors Combine may track (a pod's GPU needs on one node are
// a few devices of a few types).
const (
	DefaultMaxSteps  = 1 << 16
	DefaultMaxStates = 1 << 12
)

// Subsets walks every set of candidates 0..len(matches)-1 in which
// candidate j, when taken, serves one want of matches[j], no want is
// served more than count[i] times, and take admits each step: take(j, i)
// adds candidate j, for want i, to the set being walked and says whether
// the part can still hold the set; give(j, i) undoes it, and is called
// after every take, admitted or not. leaf is called once per set with its
// count vector (reused: copy it to keep it). Subsets returns false, having
// stopped, past maxSteps steps.
func Subsets(matches [][]int, count []int64, take func(j, i int) bool, give func(j, i int), leaf func(vec []int64), maxSteps int) bool {
	vec := make([]int64, len(count))
	steps := 0
	var walk func(j int) bool
	walk = func(j int) bool {
		if steps++; steps > maxSteps {
			return false
		}
		if j == len(matches) {
			leaf(vec)
			return true
		}
		if !walk(j + 1) {
			return false
		}
		for _, i := range matches[j] {
			if vec[i] >= count[i] {
				continue
			}
			ok := true
			if take(j, i) {
				vec[i]++
				ok = walk(j + 1)
				vec[i]--
			}
			give(j, i)
			if !ok {
				return false
			}
		}
		return true
	}
	return walk(0)
}

// Distinct collects the distinct count vectors Subsets reports, each with
// a witness (which set made it): the first mark returned for it (Add), or
// the cheapest (AddCost, whose costs are in Cost).
type Distinct[W any] struct {
	Vectors [][]int64
	Witness []W
	Cost    []float64
	seen    map[string]int
}

// Add records vec with the witness mark makes, unless vec was seen.
func (d *Distinct[W]) Add(vec []int64, mark func() W) {
	if d.seen == nil {
		d.seen = map[string]int{}
	}
	k := Key(vec)
	if _, ok := d.seen[k]; ok {
		return
	}
	d.seen[k] = len(d.Vectors)
	d.Vectors = append(d.Vectors, append([]int64(nil), vec...))
	d.Witness = append(d.Witness, mark())
	d.Cost = append(d.Cost, 0)
}

// AddCost records vec with the witness mark makes and its cost, or, when
// vec was seen, replaces its witness if this one costs less (ties keep
// the first).
func (d *Distinct[W]) AddCost(vec []int64, cost float64, mark func() W) {
	if d.seen == nil {
		d.seen = map[string]int{}
	}
	k := Key(vec)
	if i, ok := d.seen[k]; ok {
		if cost < d.Cost[i] {
			d.Witness[i], d.Cost[i] = mark(), cost
		}
		return
	}
	d.seen[k] = len(d.Vectors)
	d.Vectors = append(d.Vectors, append([]int64(nil), vec...))
	d.Witness = append(d.Witness, mark())
	d.Cost = append(d.Cost, cost)
}

// Combine reports whether one vector of each unit (units[u] lists what
// part u can serve, as count vectors; each must offer the zero vector for
// "nothing") adds up to need, and which: choice[u] indexes units[u]. It
// tracks the sums reachable so far, capped at need; past maxStates of
// them it stops with bounded true (found false).
func Combine(units [][][]int64, need []int64, maxStates int) (choice []int, found, bounded bool) {
	type state struct {
		sum  []int64
		prev string // the state before this unit's choice
		pick int
	}
	zero := make([]int64, len(need))
	want := Key(need)
	layers := []map[string]state{{Key(zero): {sum: zero}}}
	done := func(u int) ([]int, bool, bool) {
		choice := make([]int, len(units))
		for i := range choice {
			choice[i] = -1
		}
		k := want
		for l := u; l > 0; l-- {
			s := layers[l][k]
			choice[l-1] = s.pick
			k = s.prev
		}
		// Parts after u serve nothing: their zero vector.
		for i := u; i < len(units); i++ {
			choice[i] = zeroIndex(units[i])
		}
		return choice, true, false
	}
	if _, ok := layers[0][want]; ok {
		return done(0)
	}
	for u, opts := range units {
		next := make(map[string]state, len(layers[u]))
		for pk, a := range layers[u] {
			for oi, b := range opts {
				v := make([]int64, len(need))
				for i := range v {
					v[i] = min(a.sum[i]+b[i], need[i])
				}
				k := Key(v)
				if _, ok := next[k]; !ok {
					next[k] = state{sum: v, prev: pk, pick: oi}
				}
			}
		}
		layers = append(layers, next)
		if _, ok := next[want]; ok {
			return done(u + 1)
		}
		if len(next) > maxStates {
			return nil, false, true
		}
	}
	return nil, false, false
}

// Cheapest is Combine's question answered with the cheapest choice: one
// vector of each unit (units[u], with its cost in costs[u]; each unit must
// offer the zero vector) adding up to exactly need, of the least total
// cost (a tie goes the same way on every run). Where Combine stops
// at the first sum that reaches need, capped, Cheapest walks every unit
// and never lets a sum pass need, so it never serves a want more often
// than asked (Combine's capped sums may); no fit is lost by that where
// each unit offers every sub-vector of what it holds, as Subsets reports
// a part whose rule only ever forbids adding (MIG's, the counters'). It
// tracks, per reachable sum, the cheapest way there: a
// unit's step costs the states times its options, so past maxStates sums,
// or maxSteps such pairs in all, it stops with bounded true (found
// false), and the caller answers as it did without it.
func Cheapest(units [][][]int64, costs [][]float64, need []int64, maxStates, maxSteps int) (choice []int, found, bounded bool) {
	type state struct {
		sum  []int64
		cost float64
		prev string
		pick int
	}
	zero := make([]int64, len(need))
	layers := []map[string]state{{Key(zero): {sum: zero}}}
	steps := 0
	for u, opts := range units {
		prev := layers[u]
		next := make(map[string]state, len(prev))
		// Sorted, so that ties go the same way on every run.
		keys := make([]string, 0, len(prev))
		for k := range prev {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, pk := range keys {
			a := prev[pk]
			for oi, b := range opts {
				if steps++; steps > maxSteps {
					return nil, false, true
				}
				v := make([]int64, len(need))
				over := false
				for i := range v {
					v[i] = a.sum[i] + b[i]
					over = over || v[i] > need[i]
				}
				if over {
					continue
				}
				c := a.cost + costs[u][oi]
				k := Key(v)
				if old, ok := next[k]; !ok || c < old.cost {
					next[k] = state{sum: v, cost: c, prev: pk, pick: oi}
				}
			}
		}
		if len(next) > maxStates {
			return nil, false, true
		}
		layers = append(layers, next)
	}
	k := Key(need)
	if _, ok := layers[len(units)][k]; !ok {
		return nil, false, false
	}
	choice = make([]int, len(units))
	for l := len(units); l > 0; l-- {
		s := layers[l][k]
		choice[l-1] = s.pick
		k = s.prev
	}
	return choice, true, false
}

// zeroIndex is the index of the zero vector in opts, -1 if none.
func zeroIndex(opts [][]int64) int {
	for i, v := range opts {
		zero := true
		for _, n := range v {
			zero = zero && n == 0
		}
		if zero {
			return i
		}
	}
	return -1
}

// Key is a count vector as a map key.
func Key(v []int64) string {
	b := make([]byte, 0, 2*len(v))
	for _, n := range v {
		b = append(b, byte(n), byte(n>>8))
	}
	return string(b)
}
