package replay

import (
	"math"
	"slices"
)

// upperBound is a bound on the served share that no policy can beat, on
// any fleet of the given capacity (GPUs).
//
// Relax everything but capacity and time: the fleet is one pool of
// capacity, divisible; a pod may run at any rate up to its size at any
// moment after its arrival, and pause and resume at will (preemption); it
// needs its size times its duration of work (the requested GPU-slice-time,
// cut at the horizon). Any real schedule is one of these, so the most work
// the relaxation can do before the horizon bounds what any policy serves.
// The relaxation is a linear program (a max flow from pods through time to
// the pool), and every set S of saturated time gives an upper bound on it
// by weak duality (a cut):
//
//	served <= C * |S| + sum over pods j of s_j * min(d_j, |[a_j, h) \ S|)
//
// (pods do at most C of work together inside S, and each at most its size
// s_j times its time outside S, and at most s_j * d_j in all). The best S
// is a union of whole intervals between arrivals, since the right side is
// concave in how much of each interval S takes; a dynamic program over the
// intervals, backwards in time with the unsaturated time after them as its
// state, finds it up to a time grid, and the bound is then evaluated
// exactly for the S it found: any S gives a true bound, the program only
// makes it tight.
//
// A greedy divisible pool (pods started whole in queue order when they
// fit, the fluid row of the report) is not such a bound: a policy that
// starts a long whole-GPU pod before a short small one can serve more.
func upperBound(templates []podTemplate, capacity float64, cfg *runConfig) float64 {
	h := cfg.horizon
	type pod struct{ a, s, d float64 }
	var pods []pod
	requested := 0.0
	for _, t := range templates {
		w := t.req.total() * max(0, min(t.duration, h-t.arrival))
		if w <= 0 {
			continue
		}
		requested += w
		pods = append(pods, pod{a: max(t.arrival, cfg.start), s: t.req.total(), d: t.duration})
	}
	if requested == 0 {
		return 1
	}
	if capacity <= 0 {
		return 0
	}
	slices.SortFunc(pods, func(x, y pod) int {
		switch {
		case x.a < y.a:
			return -1
		case x.a > y.a:
			return 1
		}
		return 0
	})
	// Intervals [t[m], t[m+1]) between distinct arrivals, the last ending at
	// the horizon; first[m] is the first pod arriving at t[m].
	var t []float64
	var first []int
	for i, p := range pods {
		if len(t) == 0 || p.a > t[len(t)-1] {
			t = append(t, p.a)
			first = append(first, i)
		}
	}
	M := len(t)
	t = append(t, h)
	first = append(first, len(pods))
	span := h - t[0]
	const grid = 4096
	delta := span / grid
	if delta <= 0 {
		delta = 1
	}
	// idx is a time's place on the grid, counted back from the horizon, so
	// that interval lengths telescope.
	idx := func(x float64) int { return int(math.Round((h - x) / delta)) }
	inf := math.Inf(1)
	// v[L] is the least cost of the intervals after the current one with L
	// grid steps of them unsaturated.
	v := make([]float64, grid+2)
	next := make([]float64, grid+2)
	for i := range v {
		v[i] = inf
	}
	v[0] = 0
	sat := make([][]bool, M) // sat[m][L]: interval m saturated on the best path to L
	for m := M - 1; m >= 0; m-- {
		length := t[m+1] - t[m]
		steps := idx(t[m]) - idx(t[m+1])
		row := make([]bool, grid+2)
		for L := range next {
			best, s := inf, false
			if v[L] < inf {
				best, s = v[L]+capacity*length, true
			}
			if L-steps >= 0 && v[L-steps] <= best {
				best, s = v[L-steps], false
			}
			if best < inf {
				for _, p := range pods[first[m]:first[m+1]] {
					best += p.s * min(p.d, float64(L)*delta)
				}
			}
			next[L], row[L] = best, s
		}
		sat[m] = row
		v, next = next, v
	}
	bestL := 0
	for L := range v {
		if v[L] < v[bestL] {
			bestL = L
		}
	}
	// Walk the choices forward and evaluate that S exactly.
	saturated := make([]bool, M)
	L := bestL
	for m := 0; m < M; m++ {
		saturated[m] = sat[m][L]
		if !saturated[m] {
			L -= idx(t[m]) - idx(t[m+1])
		}
	}
	bound := 0.0
	free := 0.0 // unsaturated time from t[m] to the horizon
	for m := M - 1; m >= 0; m-- {
		length := t[m+1] - t[m]
		if saturated[m] {
			bound += capacity * length
		} else {
			free += length
		}
		for _, p := range pods[first[m]:first[m+1]] {
			bound += p.s * min(p.d, free)
		}
	}
	return min(1, bound/requested)
}
