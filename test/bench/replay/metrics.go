package replay

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// metrics are what the engine counts while it runs.
type metrics struct {
	repartitions int
	// failedChanges are layout changes a policy asked for that the agent
	// would refuse (nos does not know placements).
	failedChanges int
	downgraded    int
	rounds        []time.Duration
	// waitingTime is the time some pod waited; idleWhileWaiting integrates
	// the share of capacity idle over that time.
	waitingTime      float64
	idleWhileWaiting float64
	// saturatedTime is the time the pending pods asked for at least the
	// idle capacity (a divisible pool would have been full);
	// strandedWhileSaturated integrates the share of capacity idle then.
	saturatedTime          float64
	strandedWhileSaturated float64
	// reservations counts those made, bound (their pod started on their
	// node) and lapsed (their deadline passed first); withheld integrates
	// the GPUs' worth of free devices they withheld, in GPU-seconds.
	reservations, reservationsBound, reservationsLapsed int
	withheld                                            float64
}

// observe integrates dt seconds with pods waiting, idle GPUs' worth of
// capacity free and the pending pods asking for demand.
func (m *metrics) observe(dt, idle, capacity, demand float64) {
	m.waitingTime += dt
	m.idleWhileWaiting += dt * idle / capacity
	if demand >= idle-1e-9 {
		m.saturatedTime += dt
		m.strandedWhileSaturated += dt * idle / capacity
	}
}

// Result is one policy's replay.
type Result struct {
	Policy string `json:"policy"`
	Pods   int    `json:"pods"`
	// ServedShare is the requested GPU-slice-time served before the
	// horizon: each pod's size (memory share of its profile, or GPUs)
	// times how long it ran, over its size times its duration (cut at the
	// horizon). A pod run on a smaller device than it asked for is
	// credited with the smaller one.
	ServedShare float64 `json:"servedShare"`
	// ServedWhole and ServedMIG split ServedShare by what the pods asked
	// for: whole GPUs, or MIG profiles.
	ServedWhole float64 `json:"servedWhole"`
	ServedMIG   float64 `json:"servedMIG"`
	// Within1m and Within10m are the shares of pods started within a
	// minute and ten minutes of arriving.
	Within1m  float64 `json:"within1m"`
	Within10m float64 `json:"within10m"`
	// Waits are in seconds, over every pod; a pod never served counts
	// with its wait up to the horizon (a lower bound).
	WaitP50  float64 `json:"waitP50"`
	WaitP99  float64 `json:"waitP99"`
	WaitMean float64 `json:"waitMean"`
	// NeverServed is the pods not started by the horizon.
	NeverServed int `json:"neverServed"`
	// Downgraded is the pods the fallback webhook moved to a smaller
	// device.
	Downgraded int `json:"downgraded"`
	// Repartitions counts GPU layout changes (a carved instance created or
	// destroyed counts as one); PerGPUHour divides by the fleet's GPUs and
	// the replayed hours.
	Repartitions           int     `json:"repartitions"`
	RepartitionsPerGPUHour float64 `json:"repartitionsPerGPUHour"`
	FailedChanges          int     `json:"failedChanges"`
	// IdleWhileWaiting is the share of the fleet's capacity (memory
	// slices) that was idle, averaged over the time some pod waited:
	// fragmentation when the cluster is saturated.
	IdleWhileWaiting float64 `json:"idleWhileWaiting"`
	// WaitingTimeShare is the share of the replay during which some pod
	// waited.
	WaitingTimeShare float64 `json:"waitingTimeShare"`
	// Stranded is the share of capacity idle, averaged over the time the
	// fleet was saturated: the pending pods asked for at least the idle
	// capacity, so a divisible pool would have been full. Capacity idle
	// then is what placement (fragmentation, gangs waiting for a whole
	// node, layouts being changed) cost. SaturatedShare is the share of
	// the replay that was.
	Stranded       float64 `json:"strandedWhenSaturated"`
	SaturatedShare float64 `json:"saturatedShare"`
	// Rounds is the planning rounds run; RoundP50/P99 their wall time in
	// milliseconds on this machine.
	Rounds   int     `json:"rounds"`
	RoundP50 float64 `json:"roundP50ms"`
	RoundP99 float64 `json:"roundP99ms"`
	// Reservations counts the nodes reserved for pods waiting for several
	// whole GPUs (migflex, internal/planner/reserve); ReservationsBound
	// those whose pod started there, ReservationsLapsed those whose
	// deadline came first. WithheldGPUHours is the GPU-time their free
	// devices sat withheld from other pods.
	Reservations       int     `json:"reservations,omitempty"`
	ReservationsBound  int     `json:"reservationsBound,omitempty"`
	ReservationsLapsed int     `json:"reservationsLapsed,omitempty"`
	WithheldGPUHours   float64 `json:"withheldGPUHours,omitempty"`
	// ByKind splits the pods by what they asked for (a MIG profile, or k
	// whole GPUs), largest requested GPU-time first.
	ByKind []KindResult `json:"byKind,omitempty"`
	// Seconds is the wall time of the whole replay of this policy.
	Seconds float64 `json:"seconds"`
}

// KindResult is one request kind's part of a replay.
type KindResult struct {
	// Kind is the resource asked for, without "nvidia.com/", and how many
	// ("gpu x8", "mig-3g.40gb x1").
	Kind string `json:"kind"`
	Pods int    `json:"pods"`
	// RequestedShare is the kind's share of the requested GPU-slice-time;
	// ServedShare the share of its own requested time it was served.
	RequestedShare float64 `json:"requestedShare"`
	ServedShare    float64 `json:"servedShare"`
	NeverServed    int     `json:"neverServed"`
	WaitP99        float64 `json:"waitP99"`
	WaitMean       float64 `json:"waitMean"`
}

// result sums up a finished replay.
func (s *sim) result() Result {
	return summarize(s.pol.name(), s.pods, s.cfg, s.f.capacity, &s.m)
}

func summarize(name string, pods []*simPod, cfg *runConfig, capacity float64, m *metrics) Result {
	r := Result{Policy: name, Pods: len(pods), Repartitions: m.repartitions,
		FailedChanges: m.failedChanges, Downgraded: m.downgraded, Rounds: len(m.rounds),
		Reservations: m.reservations, ReservationsBound: m.reservationsBound, ReservationsLapsed: m.reservationsLapsed, WithheldGPUHours: m.withheld / 3600}
	h := cfg.horizon
	var requested, served, reqWhole, servedWhole float64
	waits := make([]float64, 0, len(pods))
	type kindAcc struct {
		KindResult
		req, served float64
		waits       []float64
	}
	kinds := map[string]*kindAcc{}
	for _, p := range pods {
		kk := p.askedKind
		if kk == "" {
			kk = p.req.kind()
		}
		ka := kinds[kk]
		if ka == nil {
			ka = &kindAcc{KindResult: KindResult{Kind: kk}}
			kinds[kk] = ka
		}
		ka.Pods++
		req := p.asked * max(0, min(p.duration, h-p.arrival))
		requested += req
		ka.req += req
		whole := p.wholeAsk
		if whole {
			reqWhole += req
		}
		wait := h - p.arrival
		if p.start >= 0 && p.start < h {
			wait = p.start - p.arrival
			sv := min(p.asked, p.got) * (min(p.start+p.duration, h) - p.start)
			served += sv
			ka.served += sv
			if whole {
				servedWhole += sv
			}
		} else {
			r.NeverServed++
			ka.NeverServed++
		}
		if p.start >= 0 && p.start < h && wait <= 60 {
			r.Within1m++
		}
		if p.start >= 0 && p.start < h && wait <= 600 {
			r.Within10m++
		}
		waits = append(waits, wait)
		ka.waits = append(ka.waits, wait)
	}
	for _, ka := range kinds {
		if requested > 0 {
			ka.RequestedShare = ka.req / requested
		}
		if ka.req > 0 {
			ka.ServedShare = ka.served / ka.req
		}
		ka.WaitP99, ka.WaitMean = quantile(ka.waits, 0.99), mean(ka.waits)
		r.ByKind = append(r.ByKind, ka.KindResult)
	}
	slices.SortFunc(r.ByKind, func(a, b KindResult) int {
		return cmp.Or(cmp.Compare(b.RequestedShare, a.RequestedShare), cmp.Compare(a.Kind, b.Kind))
	})
	if requested > 0 {
		r.ServedShare = served / requested
	}
	if reqWhole > 0 {
		r.ServedWhole = servedWhole / reqWhole
	}
	if requested > reqWhole {
		r.ServedMIG = (served - servedWhole) / (requested - reqWhole)
	}
	if n := float64(len(pods)); n > 0 {
		r.Within1m /= n
		r.Within10m /= n
	}
	r.WaitP50, r.WaitP99, r.WaitMean = quantile(waits, 0.5), quantile(waits, 0.99), mean(waits)
	span := h - cfg.start
	if span > 0 && capacity > 0 {
		r.RepartitionsPerGPUHour = float64(m.repartitions) / (capacity * span / 3600)
		r.WaitingTimeShare = m.waitingTime / span
	}
	if m.waitingTime > 0 {
		r.IdleWhileWaiting = m.idleWhileWaiting / m.waitingTime
	}
	if m.saturatedTime > 0 {
		r.Stranded = m.strandedWhileSaturated / m.saturatedTime
	}
	if span > 0 {
		r.SaturatedShare = m.saturatedTime / span
	}
	ms := make([]float64, len(m.rounds))
	for i, d := range m.rounds {
		ms[i] = float64(d) / float64(time.Millisecond)
	}
	r.RoundP50, r.RoundP99 = quantile(ms, 0.5), quantile(ms, 0.99)
	return r
}

// quantile is the nearest-rank quantile; 0 for no values.
func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	t := 0.0
	for _, x := range v {
		t += x
	}
	return t / float64(len(v))
}
