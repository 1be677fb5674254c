package replay

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/migflex/migflex/internal/domain/resourcename"
)

// lpByFlow solves the relaxation upperBound bounds, exactly, as a max flow:
// source -> pod (its requested work) -> interval between arrivals (its
// size times the interval, once arrived) -> sink (capacity times the
// interval). Small instances only.
func lpByFlow(templates []podTemplate, capacity float64, cfg *runConfig) float64 {
	h := cfg.horizon
	var times []float64
	requested := 0.0
	for _, t := range templates {
		times = append(times, t.arrival)
		requested += t.req.total() * max(0, min(t.duration, h-t.arrival))
	}
	times = append(times, h)
	slices.Sort(times)
	times = slices.Compact(times)
	P, M := len(templates), len(times)-1
	n := 2 + P + M
	src, sink := 0, 1
	capm := make([][]float64, n)
	for i := range capm {
		capm[i] = make([]float64, n)
	}
	for j, t := range templates {
		capm[src][2+j] = t.req.total() * max(0, min(t.duration, h-t.arrival))
		for m := range M {
			if times[m] >= t.arrival {
				capm[2+j][2+P+m] = t.req.total() * (times[m+1] - times[m])
			}
		}
	}
	for m := range M {
		capm[2+P+m][sink] = capacity * (times[m+1] - times[m])
	}
	flow := 0.0
	for {
		// BFS for an augmenting path.
		prev := make([]int, n)
		for i := range prev {
			prev[i] = -1
		}
		prev[src] = src
		q := []int{src}
		for len(q) > 0 && prev[sink] < 0 {
			u := q[0]
			q = q[1:]
			for v := range n {
				if prev[v] < 0 && capm[u][v] > 1e-9 {
					prev[v] = u
					q = append(q, v)
				}
			}
		}
		if prev[sink] < 0 {
			break
		}
		f := math.Inf(1)
		for v := sink; v != src; v = prev[v] {
			f = min(f, capm[prev[v]][v])
		}
		for v := sink; v != src; v = prev[v] {
			capm[prev[v]][v] -= f
			capm[v][prev[v]] += f
		}
		flow += f
	}
	return flow / requested
}

// TestUpperBoundMatchesLP: on random small instances the bound is never
// below the relaxation's exact optimum (it is a bound on it) and within a
// hair above it (the dynamic program finds the best cut).
func TestUpperBoundMatchesLP(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	sizes := []float64{0.125, 0.25, 0.5, 1, 2, 4}
	for trial := range 40 {
		var pods []podTemplate
		cfg := &runConfig{}
		for range 5 + rng.IntN(25) {
			s := sizes[rng.IntN(len(sizes))]
			p := podTemplate{req: request{res: resourcename.GPU, count: 1, size: s}, arrival: float64(rng.IntN(5000)), duration: float64(1 + rng.IntN(8000))}
			pods = append(pods, p)
			cfg.horizon = max(cfg.horizon, p.arrival)
		}
		cfg.horizon += float64(rng.IntN(4000))
		capacity := float64(1 + rng.IntN(8))
		lp := lpByFlow(pods, capacity, cfg)
		got := upperBound(pods, capacity, cfg)
		if got < lp-1e-9 || got > lp+0.005 {
			t.Errorf("trial %d: bound %.6f, relaxation %.6f", trial, got, lp)
		}
	}
}
