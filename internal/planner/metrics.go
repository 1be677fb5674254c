package planner

import (
	"fmt"

	"github.com/migflex/migflex/internal/platform/metricsserver"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
)

// Results of a round, the "result" label of the round metrics.
const (
	resultChanged   = "changed"
	resultUnchanged = "unchanged"
	resultFailed    = "failed"
)

// Results of a write to a Node.
const (
	writeSuccess  = "success"
	writeConflict = "conflict"
	writeError    = "error"
)

// Modes of a reshape, by --dry-run.
const (
	modeApplied = "applied"
	modeDryRun  = "dry-run"
)

type metrics struct {
	rounds     *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	demand     *prometheus.GaugeVec
	reshapes   *prometheus.CounterVec
	served     *prometheus.CounterVec
	impossible prometheus.Gauge
	writes     *prometheus.CounterVec
	leader     prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		rounds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "migflex", Subsystem: "planner", Name: "rounds_total",
			Help: "Planning rounds by result: changed (layouts written), unchanged (nothing to write), failed.",
		}, []string{"result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "migflex", Subsystem: "planner", Name: "round_duration_seconds",
			Help:    "Time one round took, from reading the caches to the last write, by result.",
			Buckets: []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}, []string{"result"}),
		demand: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "migflex", Subsystem: "planner", Name: "pending_demand",
			Help: "Devices asked for by pods the scheduler found no room for, by resource, at the last round.",
		}, []string{"resource"}),
		reshapes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "migflex", Subsystem: "planner", Name: "reshapes_total",
			Help: "GPUs repartitioned by a layout the planner wrote (applied) or proposed (dry-run).",
		}, []string{"mode"}),
		served: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "migflex", Subsystem: "planner", Name: "pods_served_total",
			Help: "Pending pods a written (applied) or proposed (dry-run) layout is for.",
		}, []string{"mode"}),
		impossible: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "migflex", Subsystem: "planner", Name: "impossible_pods",
			Help: "Pending pods no change the planner may make could serve, at the last round.",
		}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "migflex", Subsystem: "planner", Name: "node_writes_total",
			Help: "Server-side applies of the planner's annotations sent to Nodes, by result (success, conflict, error).",
		}, []string{"result"}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "migflex", Subsystem: "planner", Name: "leader",
			Help: "1 while this replica holds the leader Lease and runs rounds, 0 otherwise.",
		}),
	}
	for _, c := range []prometheus.Collector{m.rounds, m.duration, m.demand, m.reshapes, m.served, m.impossible, m.writes, m.leader} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering planner metrics: %w", err)
		}
	}
	return m, nil
}

// setDemand makes the demand gauge exactly d: resources no pod asks for
// any more read 0.
func (m *metrics) setDemand(d map[corev1.ResourceName]float64, known map[corev1.ResourceName]bool) {
	for res := range known {
		if _, ok := d[res]; !ok {
			m.demand.WithLabelValues(string(res)).Set(0)
		}
	}
	for res, v := range d {
		known[res] = true
		m.demand.WithLabelValues(string(res)).Set(v)
	}
}

func newRegistry() *prometheus.Registry {
	reg := metricsserver.NewRegistry()
	return reg
}
