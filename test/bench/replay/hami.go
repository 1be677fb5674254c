package replay

import (
	"cmp"
	"slices"

	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/planner/solver"
)

// hami is HAMi's dynamic MIG with the placement scoring it merged in
// 2026-08 (Project-HAMi/HAMi issue #2831, pull request #2855), modelled from
// their description, not their code: instances are carved when a pod is
// scheduled and destroyed when it ends, as for first fit, but the placement
// is chosen, not the lowest start. Per pod, its requests go larger
// profiles first; each goes to the node's most allocated GPU where it fits
// (HAMi's binpack GPU policy, which its dynamic MIG example asks for: its
// default, spread, would scatter MIG pods over every GPU), at the placement
// that leaves the largest contiguous run of free memory slices on that GPU
// (ties: the lowest start, a stable order). When that greedy choice cannot
// place every request of the pod on the node, a backtracking search over
// the GPUs and placements, bounded to hamiSearchSteps placements tried,
// looks for one that can. The node is the scheduler's bin-packing choice,
// as for every policy (HAMi's default node policy is binpack), and a GPU
// with no instance is handed out whole, as for first fit.
type hami struct{}

// hamiSearchSteps bounds the backtracking search of one pod on one node.
const hamiSearchSteps = 4096

func (hami) name() string                     { return PolicyHAMi }
func (hami) carves() bool                     { return true }
func (hami) arrive(*sim, *simPod)             {}
func (hami) batching() (solver.Cadence, bool) { return solver.Cadence{}, false }
func (hami) round(*sim)                       {}
func (hami) started(*sim, *simPod)            {}
func (hami) released(*sim, *simPod)           {}
func (hami) setup(s *sim) error {
	for _, g := range s.f.gpus {
		g.mig = true
	}
	return nil
}

// hamiCandidate is one way to place one request: a GPU and a start.
type hamiCandidate struct {
	g     *gpu
	start int
	// run is the largest contiguous run of free memory slices the GPU has
	// left after the placement; alloc is the GPU's allocated share before
	// it (binpack).
	run   int
	alloc float64
}

func (hami) carvePlan(_ *sim, p *simPod, n *node) ([]carved, bool) {
	if p.req.res == resourcename.GPU {
		return wholeGPUs(p, n)
	}
	profile := ""
	for _, g := range n.gpus {
		if profile = profileOfResource(g.model, p.req.res); profile != "" {
			break
		}
	}
	if profile == "" {
		return nil, false
	}
	// The trace's pods ask for one kind of device.
	requests := make([]string, p.req.count)
	for i := range requests {
		requests[i] = profile
	}
	return hamiPlace(n, requests)
}

// hamiPlace places a pod's MIG requests on the node: larger profiles first,
// each at its best candidate (hamiCandidates); when that greedy choice
// cannot place them all, a backtracking search in the same order, bounded
// to hamiSearchSteps placements tried.
func hamiPlace(n *node, requests []string) ([]carved, bool) {
	requests = slices.Clone(requests)
	slices.SortStableFunc(requests, func(a, b string) int {
		pa, _ := n.gpus[0].model.profile(a)
		pb, _ := n.gpus[0].model.profile(b)
		return cmp.Compare(pb.MemorySlices, pa.MemorySlices)
	})
	extra := map[*gpu][]solver.Instance{}
	var out []carved
	take := func(c hamiCandidate, profile string) {
		extra[c.g] = append(extra[c.g], solver.Instance{Profile: profile, Start: c.start})
		out = append(out, carved{g: c.g, profile: profile, start: c.start})
	}
	greedy := true
	for _, profile := range requests {
		cands := hamiCandidates(n, profile, extra)
		if len(cands) == 0 {
			greedy = false
			break
		}
		take(cands[0], profile)
	}
	if greedy {
		return out, true
	}
	clear(extra)
	out = out[:0]
	steps := 0
	var place func(i int) bool
	place = func(i int) bool {
		if i == len(requests) {
			return true
		}
		for _, c := range hamiCandidates(n, requests[i], extra) {
			if steps++; steps > hamiSearchSteps {
				return false
			}
			take(c, requests[i])
			if place(i + 1) {
				return true
			}
			extra[c.g] = extra[c.g][:len(extra[c.g])-1]
			out = out[:len(out)-1]
		}
		return false
	}
	if place(0) {
		return out, true
	}
	return nil, false
}

// hamiCandidates lists where one more instance of profile fits on the
// node's GPUs, with the instances already chosen for the pod (extra), best
// first: the most allocated GPU, then the placement leaving the largest
// contiguous free run, then the lowest GPU index and start.
func hamiCandidates(n *node, profile string, extra map[*gpu][]solver.Instance) []hamiCandidate {
	var out []hamiCandidate
	for _, g := range n.gpus {
		if g.whole >= 0 {
			continue
		}
		pr, ok := g.model.profile(profile)
		if !ok {
			continue
		}
		have := append(instances(g.insts), extra[g]...)
		var used uint64
		alloc := 0.0
		for _, in := range have {
			q, _ := g.model.profile(in.Profile)
			used |= sliceMask(in.Start, q.MemorySlices)
			alloc += float64(q.MemorySlices) / float64(g.model.slices)
		}
		for _, start := range pr.Placements {
			m := sliceMask(start, pr.MemorySlices)
			if used&m != 0 || !g.model.lay.Valid(append(have, solver.Instance{Profile: profile, Start: start})) {
				continue
			}
			out = append(out, hamiCandidate{g: g, start: start, run: longestFreeRun(used|m, g.model.slices), alloc: alloc})
		}
	}
	slices.SortStableFunc(out, func(a, b hamiCandidate) int {
		return cmp.Or(cmp.Compare(b.alloc, a.alloc), cmp.Compare(a.g.index, b.g.index), cmp.Compare(b.run, a.run), cmp.Compare(a.start, b.start))
	})
	return out
}

func sliceMask(start, size int) uint64 { return ((uint64(1) << size) - 1) << start }

// longestFreeRun is the longest run of clear bits among the first n.
func longestFreeRun(used uint64, n int) int {
	best, cur := 0, 0
	for i := range n {
		if used&(1<<i) != 0 {
			cur = 0
			continue
		}
		cur++
		best = max(best, cur)
	}
	return best
}

// wholeGPUs gives a pod asking for whole GPUs the node's GPUs with no
// instance, in index order.
func wholeGPUs(p *simPod, n *node) ([]carved, bool) {
	var out []carved
	for _, g := range n.gpus {
		if len(out) == p.req.count {
			break
		}
		if g.whole < 0 && len(g.insts) == 0 {
			out = append(out, carved{g: g, start: -1})
		}
	}
	return out, len(out) == p.req.count
}
