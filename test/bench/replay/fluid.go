package replay

import (
	"container/heap"
	"slices"

	"github.com/migflex/migflex/internal/domain/resourcename"
)

// fluid is a reference for waits, not a bound: the fleet as one pool of
// GPU capacity, divisible without slices, placements, nodes or changes;
// pods start in queue order as soon as the pool has room for them (a pod
// that does not fit does not hold back smaller ones behind it). Greedy in
// queue order, it can serve less than a policy that starts a long large
// pod first (TestBoundBeatsGreedyPool); upperBound is the bound.
func fluid(templates []podTemplate, capacity float64, cfg *runConfig) Result {
	pods := make([]*simPod, len(templates))
	for i, t := range templates {
		pods[i] = &simPod{id: i, name: t.name, req: t.req, asked: t.req.total(), askedKind: t.req.kind(), wholeAsk: t.req.res == resourcename.GPU, prio: t.prio,
			arrival: t.arrival, duration: t.duration, start: -1}
	}
	arrivals := slices.Clone(pods)
	slices.SortStableFunc(arrivals, func(a, b *simPod) int {
		switch {
		case a.arrival < b.arrival:
			return -1
		case a.arrival > b.arrival:
			return 1
		}
		return 0
	})
	var ends eventQueue
	var pending []*simPod
	free := capacity
	now := cfg.start
	var m metrics
	seq := 0
	next := 0
	for {
		t := cfg.horizon
		if next < len(arrivals) {
			t = min(t, arrivals[next].arrival)
		}
		if ends.Len() > 0 {
			t = min(t, ends[0].t)
		}
		if dt := t - now; dt > 0 && len(pending) > 0 {
			demand := 0.0
			for _, p := range pending {
				demand += p.asked
			}
			m.observe(dt, free, capacity, demand)
		}
		now = t
		if now >= cfg.horizon {
			break
		}
		for ends.Len() > 0 && ends[0].t == now {
			e := heap.Pop(&ends).(event)
			free += e.pod.asked
		}
		for next < len(arrivals) && arrivals[next].arrival == now {
			p := arrivals[next]
			i, _ := slices.BinarySearchFunc(pending, p, queueOrder)
			pending = slices.Insert(pending, i, p)
			next++
		}
		kept := pending[:0]
		for _, p := range pending {
			if p.asked <= free+1e-9 {
				free -= p.asked
				p.start, p.got = now, p.asked
				heap.Push(&ends, event{t: now + p.duration, seq: seq, pod: p})
				seq++
				continue
			}
			kept = append(kept, p)
		}
		pending = kept
	}
	r := summarize(PolicyFluid, pods, cfg, capacity, &m)
	return r
}
