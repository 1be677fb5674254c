package solver

import (
	"cmp"
	"math"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/domain/schedview"
)

// mixWeights is the demand mix of a round, normalized to sum to one.
type mixWeights struct {
	// prof[tab][p] is the weight of one-device requests served by profile
	// p of table tab.
	prof [][]float64
	// whole[k] is the weight of requests for k whole GPUs on one node.
	whole []float64
}

// wholeValue is the whole-GPU part of a node's usable capacity when c of
// its GPUs are idle: for each k, the weight of k-GPU requests times the
// GPUs that k-GPU pods could fill.
func (m *mixWeights) wholeValue(c int) float64 {
	if c <= 0 {
		return 0
	}
	v := 0.0
	for k, w := range m.whole {
		if k > 0 && w > 0 {
			v += w * float64(k*(c/k))
		}
	}
	return v
}

// asksWhole reports whether the mix has requests for whole GPUs.
func (m *mixWeights) asksWhole() bool {
	for _, w := range m.whole {
		if w > 0 {
			return true
		}
	}
	return false
}

func (r *round) mixFrom(demands []Demand) mixWeights {
	if len(demands) == 0 {
		for i := range r.pods {
			for _, n := range r.pods[i].needs {
				demands = append(demands, Demand{Resource: r.res.names[n.res], Count: n.count, Weight: 1})
			}
		}
	}
	m := mixWeights{prof: make([][]float64, len(r.tabs))}
	for ti, t := range r.tabs {
		m.prof[ti] = make([]float64, len(t.profiles))
	}
	// Each request kind weighs what it asks for: its share of the demand
	// in GPUs, not in pods, so that a rare eight-GPU pod counts for what it
	// holds.
	size := func(res corev1.ResourceName) float64 {
		if res == resourcename.GPU {
			return 1
		}
		for _, t := range r.tabs {
			if p := t.profileOf(res); p >= 0 {
				return t.size[p]
			}
		}
		return 0
	}
	weight := func(d Demand) float64 { return d.Weight * float64(d.Count) * size(d.Resource) }
	total := 0.0
	for _, d := range demands {
		if d.Weight > 0 && d.Count > 0 && !math.IsInf(d.Weight, 0) {
			total += weight(d)
		}
	}
	if total == 0 {
		return m
	}
	for _, d := range demands {
		if d.Weight <= 0 || d.Count <= 0 || math.IsInf(d.Weight, 0) {
			continue
		}
		w := weight(d) / total
		if d.Resource == resourcename.GPU {
			k := int(min(d.Count, 64))
			for len(m.whole) <= k {
				m.whole = append(m.whole, 0)
			}
			m.whole[k] += w
			continue
		}
		// A pod asking for several devices of one profile counts as that
		// many one-device requests.
		for ti, t := range r.tabs {
			if p := t.profileOf(d.Resource); p >= 0 {
				m.prof[ti][p] += w
			}
		}
	}
	return m
}

// MixTracker follows the recent demand mix: every pod observed adds its
// needs with weight one, and weights halve every half-life. Time is given,
// never read.
type MixTracker struct {
	halfLife time.Duration
	last     time.Time
	w        map[demandKey]float64
}

type demandKey struct {
	res   corev1.ResourceName
	count int64
}

// NewMixTracker returns an empty tracker; halfLife <= 0 means no decay.
func NewMixTracker(halfLife time.Duration) *MixTracker {
	return &MixTracker{halfLife: halfLife, w: map[demandKey]float64{}}
}

// Observe adds a pod's GPU needs at time now.
func (m *MixTracker) Observe(now time.Time, pod *corev1.Pod) {
	for res, n := range schedview.Devices(pod) {
		m.ObserveDemand(now, res, n)
	}
}

// ObserveDemand adds one request for count devices of res at time now.
func (m *MixTracker) ObserveDemand(now time.Time, res corev1.ResourceName, count int64) {
	m.decay(now)
	m.w[demandKey{res, count}]++
}

// Mix returns the mix at time now, largest weight first.
func (m *MixTracker) Mix(now time.Time) []Demand {
	m.decay(now)
	out := make([]Demand, 0, len(m.w))
	for k, w := range m.w {
		out = append(out, Demand{Resource: k.res, Count: k.count, Weight: w})
	}
	slices.SortFunc(out, func(a, b Demand) int {
		return cmp.Or(cmp.Compare(b.Weight, a.Weight), cmp.Compare(a.Resource, b.Resource), cmp.Compare(a.Count, b.Count))
	})
	return out
}

// decay ages the weights to now; time never runs backwards here.
func (m *MixTracker) decay(now time.Time) {
	if m.last.IsZero() || !now.After(m.last) {
		if m.last.IsZero() {
			m.last = now
		}
		return
	}
	if m.halfLife > 0 {
		f := math.Exp2(-float64(now.Sub(m.last)) / float64(m.halfLife))
		for k, w := range m.w {
			if w *= f; w < 1e-6 {
				delete(m.w, k)
			} else {
				m.w[k] = w
			}
		}
	}
	m.last = now
}
