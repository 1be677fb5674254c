package webhook

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Result labels of migflex_webhook_admissions_total besides the decision
// outcomes (fallback.Outcome).
const (
	resultIgnored    = "ignored"     // not a pod CREATE
	resultNotReady   = "not_ready"   // caches not synced: allowed unchecked
	resultBadRequest = "bad_request" // refused with a 4xx: the request's fault
	// the request's context ended (the API server gave up) before an answer
	resultCanceled = "canceled"
	// refused with a 5xx: the webhook's fault (a decision or a patch it
	// could not encode)
	resultInternalError = "internal_error"
	// reshape-first: left as asked, the planner can serve the request
	resultReshapeExpected = "reshape_expected"
)

// Metrics are the webhook's Prometheus metrics, named migflex_webhook_*
// like the agent's migflex_agent_* (docs/METRICS.md).
type Metrics struct {
	admissions *prometheus.CounterVec
	fallbacks  *prometheus.CounterVec
	decision   prometheus.Histogram
	request    *prometheus.HistogramVec
}

// NewMetrics registers the metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		admissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "migflex", Subsystem: "webhook", Name: "admissions_total",
			Help: "Admission requests by result: no_gpu, already_processed, unchanged, rewritten, denied, unsatisfiable_allowed, unknown_type, too_many_types, invalid_quantity, annotations_too_large, ignored, not_ready, bad_request, canceled, internal_error.",
		}, []string{"result"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "migflex", Subsystem: "webhook", Name: "fallbacks_total",
			Help: "GPU type rewrites, by requested and chosen type as in the fallback annotation (2g.20gb, gpu); a requested type that is no NVIDIA GPU's MIG profile, on no node and not in the policy is \"other\".",
		}, []string{"from", "to"}),
		decision: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "migflex", Subsystem: "webhook", Name: "decision_duration_seconds",
			Help:    "Time to decide for one pod that requests a GPU type, from decoded pod to patch.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 4, 11), // 1µs .. ~1s
		}),
		request: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "migflex", Subsystem: "webhook", Name: "request_duration_seconds",
			Help:    "Time to serve one /mutate request, by HTTP status code.",
			Buckets: prometheus.ExponentialBuckets(1e-5, 4, 10), // 10µs .. ~2.6s
		}, []string{"code"}),
	}
	reg.MustRegister(m.admissions, m.fallbacks, m.decision, m.request)
	return m
}
