package agent

import (
	"fmt"
	"sync/atomic"

	"github.com/migflex/migflex/internal/platform/metricsserver"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
)

// Results of one reconcile, the "result" label of the reconcile metrics.
const (
	resultSuccess = "success"
	resultPending = "pending"
	resultFailed  = "failed"
	resultInvalid = "invalid"
	// resultNone: the Node asks for no layout.
	resultNone = "none"
	// resultHeld: every GPU to change waits: its apply of this source
	// failed on this very layout and its retry is not due (see Agent.held
	// and retryBackoff), or a call on it has not returned (callGuard).
	resultHeld = "held"
)

// Stages a reconcile error comes from, the "stage" label of
// migflex_agent_reconcile_errors_total.
const (
	stageDiscover  = "discover"
	stageConfig    = "config"
	stageBusyCheck = "busy-check"
	stageEvict     = "evict"
	stageApply     = "apply"
	stageReset     = "reset"
	stageServe     = "serve"
	stageReport    = "report"
	// stageSharing: the sharing config could not be read or applied.
	stageSharing = "sharing"
)

// Causes of a write to the Node, the "cause" label of
// migflex_agent_node_writes_total.
const (
	causeReconcile = "reconcile"
	causeAnnounce  = "announce"
	causeHealth    = "health"
	causeInUse     = "in-use"
	// causeInstances: a reconcile on the server's InstanceChanges (a DRA
	// driver in dynamic mode made or destroyed a claim's instance).
	causeInstances = "instances"
)

type metrics struct {
	writes *prometheus.CounterVec
	// allocatable counts the writes of the Node's allocatable by the
	// server's publisher (CountAllocatableWrite).
	allocatable *prometheus.CounterVec
	reconciles  *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	errors      *prometheus.CounterVec
	state       *prometheus.GaugeVec
	// callTimeouts counts NVML calls that did not return in time.
	callTimeouts *prometheus.CounterVec
	node         string
	// inUse holds the device IDs pods hold, as the loop last learnt them
	// (setInUse); the device collector reads it at scrape time.
	inUse atomic.Pointer[map[string]bool]
	// instances serves the per-instance series.
	instances *instanceCollector
}

// configStates are the values of the state label of
// migflex_agent_config_state.
var configStates = []string{nodeinfo.StatePending, nodeinfo.StateSuccess, nodeinfo.StateFailed}

// newMetrics registers the agent's metrics on reg; serving is the
// serving path (nodeinfo.ServingDevicePlugin or ServingDRA) the
// per-instance series name.
func newMetrics(reg prometheus.Registerer, srv Server, node, serving string) (*metrics, error) {
	m := &metrics{
		node:      node,
		instances: &instanceCollector{node: node, serving: serving},
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "migflex", Subsystem: "agent", Name: "config_state",
			Help: "1 for the state the Node shows in its nvidia.com/mig.config.state label (pending, success, failed), 0 for the others; all 0 while the Node has no state (no mig.config was ever set).",
		}, []string{"node", "state"}),
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "migflex", Subsystem: "agent", Name: "reconciles_total",
			Help: "Reconciles of the Node's mig.config, by result (success, pending, failed, invalid, none, held).",
		}, []string{"result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "migflex", Subsystem: "agent", Name: "reconcile_duration_seconds",
			Help: "Time one reconcile took, NVML changes included, by result.",
			// MIG changes on real GPUs take seconds per instance.
			Buckets: []float64{0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120},
		}, []string{"result"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "migflex", Subsystem: "agent", Name: "reconcile_errors_total",
			Help: "Reconcile errors by stage (discover, config, busy-check, evict, apply, reset, serve, report).",
		}, []string{"stage"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "migflex", Subsystem: "agent", Name: "node_writes_total",
			Help: "Server-side applies of the agent's labels and annotations sent to its Node, by cause (reconcile, announce, health, in-use, instances).",
		}, []string{"cause"}),
		allocatable: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "migflex", Subsystem: "agent", Name: "allocatable_writes_total",
			Help: "Writes of the served GPU counts into the Node's status ahead of the kubelet's status update (--publish-allocatable), by result (written, refused, failed, left).",
		}, []string{"result"}),
		callTimeouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "migflex", Subsystem: "agent", Name: "nvml_call_timeouts_total",
			Help: "NVML calls that had not returned within --nvml-call-timeout, by call: the agent's and DRA Prepare's (SetMigMode, CreateGpuInstance/CreateComputeInstance, DestroyComputeInstance/DestroyGpuInstance, GPU reset, or discover for a reading of the GPUs) and the health checks' (EventSet.Wait, DeviceGetHandleByUUID/RegisterEvents, Init/EventSetCreate); what the call was made on is left alone until it returns.",
		}, []string{"call"}),
	}
	m.setState("")
	for _, c := range []prometheus.Collector{m.reconciles, m.duration, m.errors, m.state, m.writes, m.allocatable, m.callTimeouts, deviceCollector{srv, &m.inUse}, m.instances, makeableCollector{srv, node}} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering agent metrics: %w", err)
		}
	}
	return m, nil
}

// setState makes state the one the config state gauge shows.
func (m *metrics) setState(state string) {
	for _, s := range configStates {
		v := 0.0
		if s == state {
			v = 1
		}
		m.state.WithLabelValues(m.node, s).Set(v)
	}
}

// setInUse records which devices pods hold: inUse maps device IDs to the
// pods holding them (Agent.inUse).
func (m *metrics) setInUse(inUse map[string][]string) {
	ids := make(map[string]bool, len(inUse))
	for id := range inUse {
		ids[id] = true
	}
	m.inUse.Store(&ids)
}

// newRegistry is the registry used when Options.Registry is nil: the
// agent's metrics plus the Go runtime and process collectors.
func newRegistry() *prometheus.Registry {
	reg := metricsserver.NewRegistry()
	return reg
}

var (
	devicesDesc = prometheus.NewDesc("migflex_agent_devices",
		"Devices served to the kubelet, by resource and health (healthy, unhealthy). A resource whose devices went away stays at 0.",
		[]string{"resource", "health"}, nil)
	devicesInUseDesc = prometheus.NewDesc("migflex_agent_devices_in_use",
		"Served devices that pods hold, as the kubelet's pod-resources API last said, by resource and health; migflex_agent_devices minus these are free.",
		[]string{"resource", "health"}, nil)
)

// deviceCollector reads the served devices at scrape time, so the gauges
// are never staler than the server itself, and which of them pods hold
// from inUse.
type deviceCollector struct {
	srv   Server
	inUse *atomic.Pointer[map[string]bool]
}

func (c deviceCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- devicesDesc
	ch <- devicesInUseDesc
}

func (c deviceCollector) Collect(ch chan<- prometheus.Metric) {
	var inUse map[string]bool
	if p := c.inUse.Load(); p != nil {
		inUse = *p
	}
	for name, devs := range c.srv.Served() {
		// [healthy, unhealthy]
		var served, used [2]int
		for id, ok := range devs {
			h := 0
			if !ok {
				h = 1
			}
			served[h]++
			if inUse[id] {
				used[h]++
			}
		}
		for h, health := range []string{"healthy", "unhealthy"} {
			ch <- prometheus.MustNewConstMetric(devicesDesc, prometheus.GaugeValue, float64(served[h]), name, health)
			ch <- prometheus.MustNewConstMetric(devicesInUseDesc, prometheus.GaugeValue, float64(used[h]), name, health)
		}
	}
}
