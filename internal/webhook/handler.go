package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/sync/semaphore"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"

	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/platform/textcut"
	"github.com/migflex/migflex/internal/webhook/fallback"
)

// DefaultMaxRequestBytes bounds a /mutate body. The API server accepts
// objects up to 3 MiB; the review wraps one pod and some metadata.
const DefaultMaxRequestBytes = 8 << 20

// DefaultMaxInflightBytes bounds the request bodies served at once.
// Decoding a pod of many resource names takes many times its JSON
// (docs/BENCHMARKS.md), so this bounds the memory admissions take together;
// ordinary pods, a few KiB each, do not wait for it.
const DefaultMaxInflightBytes = 8 << 20

// HandlerOptions configure the /mutate handler.
type HandlerOptions struct {
	Decider *fallback.Decider
	Source  SnapshotSource
	Metrics *Metrics
	// MaxRequestBytes bounds the request body; 0 means DefaultMaxRequestBytes.
	MaxRequestBytes int64
	// MaxInflightBytes bounds the bodies of the requests served at once;
	// a request that would go over waits until its context ends. 0 means
	// DefaultMaxInflightBytes.
	MaxInflightBytes int64
	// Logger receives one line per rewrite and per denial; zero means klog's.
	Logger klog.Logger
	// Reshaper, when set, gives the decision the planner's word
	// (reshape-first): a requested type with no free device is kept, or
	// rewritten to one of its chain, when the planner serves it in its
	// next round, and the pod annotated migflex.io/reshape=expected.
	Reshaper Reshaper
}

// Handler serves /mutate.
type Handler struct {
	opts     HandlerOptions
	log      klog.Logger
	inflight *semaphore.Weighted
	// waiting is called when a request starts to wait for the in-flight
	// budget; nil but in tests.
	waiting func()
	// marshal encodes the patch; json.Marshal, replaced in tests.
	marshal func(any) ([]byte, error)
}

// NewHandler returns the /mutate handler. Decider, Source and Metrics are required.
func NewHandler(o HandlerOptions) (*Handler, error) {
	switch {
	case o.Decider == nil:
		return nil, errors.New("webhook handler: no decider")
	case o.Source == nil:
		return nil, errors.New("webhook handler: no snapshot source")
	case o.Metrics == nil:
		return nil, errors.New("webhook handler: no metrics")
	}
	if o.MaxRequestBytes <= 0 {
		o.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if o.MaxInflightBytes <= 0 {
		o.MaxInflightBytes = DefaultMaxInflightBytes
	}
	log := o.Logger
	if log.GetSink() == nil {
		log = klog.Background()
	}
	return &Handler{opts: o, log: log, inflight: semaphore.NewWeighted(o.MaxInflightBytes), marshal: json.Marshal}, nil
}

var _ http.Handler = (*Handler)(nil)

// ServeHTTP answers one AdmissionReview. Dry-run requests are answered like
// any other: deciding has no side effects.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	code, result := h.serve(w, r)
	h.opts.Metrics.admissions.WithLabelValues(result).Inc()
	h.opts.Metrics.request.WithLabelValues(strconv.Itoa(code)).Observe(time.Since(start).Seconds())
}

func (h *Handler) serve(w http.ResponseWriter, r *http.Request) (int, string) {
	ctx, cancel := requestContext(r)
	defer cancel()
	// The request's share of the in-flight budget: its declared length, or
	// the most it may send when it declares none.
	weight := h.opts.MaxRequestBytes
	if r.ContentLength >= 0 {
		weight = min(weight, max(r.ContentLength, 1))
	}
	weight = min(weight, h.opts.MaxInflightBytes)
	if !h.inflight.TryAcquire(weight) {
		h.log.V(1).Info("Waiting for other admissions to finish: in-flight request bytes at their limit",
			"bytes", weight, "limit", h.opts.MaxInflightBytes)
		if h.waiting != nil {
			h.waiting()
		}
		if err := h.inflight.Acquire(ctx, weight); err != nil {
			return h.refuse(w, canceled(err))
		}
	}
	defer h.inflight.Release(weight)
	review, err := readReview(w, r, h.opts.MaxRequestBytes)
	if err != nil {
		return h.refuse(w, err)
	}
	req := review.Request
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	result, err := h.admit(ctx, req, resp)
	if err != nil {
		return h.refuse(w, err)
	}
	return h.respond(w, resp), result
}

// requestContext is the request's context, which ends when the caller goes
// away, bounded by the timeout the API server asks with: it passes its
// webhook timeout (timeoutSeconds) as the query parameter "timeout", as
// Kubernetes rest clients do, and once that has passed it has applied the
// failure policy and reads no answer.
func requestContext(r *http.Request) (context.Context, context.CancelFunc) {
	if d, err := time.ParseDuration(r.URL.Query().Get("timeout")); err == nil && d > 0 {
		return context.WithTimeout(r.Context(), d)
	}
	return context.WithCancel(r.Context())
}

// admit fills resp for one request and returns the result label. Its
// steps: the pod, if the request is a pod's creation that may ask for GPUs
// (podOf); the decision, and the planner's word in reshape-first mode
// (decide); then the answer: left for the planner (answerReshape), or the
// decision's (answer).
func (h *Handler) admit(ctx context.Context, req *admissionv1.AdmissionRequest, resp *admissionv1.AdmissionResponse) (string, error) {
	pod, result, err := h.podOf(ctx, req)
	if pod == nil {
		return result, err
	}
	snap, ok := h.opts.Source.Snapshot()
	if !ok {
		resp.Warnings = []string{"migflex GPU webhook: node cache not synced yet, GPU request not checked"}
		return resultNotReady, nil
	}
	if h.opts.Reshaper != nil && hasReshapeAnnotation(pod) {
		// Left for the planner at an earlier invocation.
		return string(fallback.OutcomeAlreadyProcessed), nil
	}
	d := h.decide(ctx, pod, snap)
	if d.Outcome == fallback.OutcomeCanceled {
		return "", canceled(d.Err)
	}
	ref := podRef(req, pod)
	if d.Err != nil {
		return "", internalError("deciding for pod %s: %v", ref, d.Err)
	}
	if d.Allowed && d.Planned != nil {
		return h.answerReshape(ctx, req, resp, ref, pod, d, snap)
	}
	return h.answer(req, resp, ref, d, snap)
}

// podOf decodes the pod of a request to create one that may ask for GPUs;
// otherwise it returns no pod, and the result label or the error to answer
// with.
func (h *Handler) podOf(ctx context.Context, req *admissionv1.AdmissionRequest) (*corev1.Pod, string, error) {
	if !isPodCreate(req) {
		h.log.V(2).Info("Ignoring request that is not a pod CREATE",
			"kind", req.Kind, "subResource", req.SubResource, "operation", req.Operation)
		return nil, resultIgnored, nil
	}
	if len(req.Object.Raw) == 0 {
		return nil, "", badRequest("AdmissionReview request has no object")
	}
	if !mayHaveGPU(req.Object.Raw) {
		return nil, string(fallback.OutcomeNoGPU), nil
	}
	pod, err := decodePod(req)
	if err != nil {
		return nil, "", err
	}
	if !schedview.HasGPURequest(pod) {
		return nil, string(fallback.OutcomeNoGPU), nil
	}
	if err := ctx.Err(); err != nil {
		return nil, "", canceled(err)
	}
	return pod, "", nil
}

// decide is the decision for pod, timed; in reshape-first mode, with the
// planner's word once it can answer (fallback.Decider.DecideWith).
func (h *Handler) decide(ctx context.Context, pod *corev1.Pod, snap *schedview.Snapshot) fallback.Decision {
	start := time.Now()
	var p fallback.Planner
	if h.opts.Reshaper != nil {
		if rp, ok := h.opts.Reshaper.Planner(); ok {
			p = rp
		}
	}
	d := h.opts.Decider.DecideWith(ctx, pod, snap, p)
	h.opts.Metrics.decision.Observe(time.Since(start).Seconds())
	return d
}

// podRef names the pod in logs. At CREATE a generated name is not assigned
// yet; names are validated after mutating admission, so one longer than any
// valid name is cut, and cannot make every log line as long.
func podRef(req *admissionv1.AdmissionRequest, pod *corev1.Pod) klog.ObjectRef {
	name := pod.Name
	if name == "" {
		name = pod.GenerateName + "*"
	}
	if len(name) > validation.DNS1123SubdomainMaxLength {
		name = textcut.Prefix(name, validation.DNS1123SubdomainMaxLength) + "..."
	}
	return klog.KRef(req.Namespace, name)
}

// answerReshape answers a decision that counts on the planner: its patch,
// if it rewrites, and the migflex.io/reshape annotation, with a warning
// saying what the pod will get and what it would have without the planner.
// Rewrites are counted and logged as answer does.
func (h *Handler) answerReshape(ctx context.Context, req *admissionv1.AdmissionRequest, resp *admissionv1.AdmissionResponse, ref klog.ObjectRef, pod *corev1.Pod, d fallback.Decision, snap *schedview.Snapshot) (string, error) {
	ops := d.Patch
	if len(ops) == 0 {
		ops = reshapePatch(pod)
	} else {
		// The decision's patch has made the annotations.
		ops = append(ops[:len(ops):len(ops)], reshapeOp())
	}
	patch, err := h.marshal(ops)
	if err != nil {
		return "", internalError("encoding patch: %v", err)
	}
	pt := admissionv1.PatchTypeJSONPatch
	resp.Patch, resp.PatchType = patch, &pt
	alone := h.opts.Decider.DecideContext(ctx, pod, snap)
	resp.Warnings = append([]string{reshapeWarning(pod, d, alone)}, d.Warnings...)
	h.countRewrites(req, ref, d, snap)
	h.log.Info("Left GPU request for the planner", "pod", ref, "uid", req.UID, "dryRun", isDryRun(req),
		"node", d.Planned.Node, "reshape", d.Planned.Reshape, "rewrites", len(d.Rewrites), "instead", alone.Outcome)
	return resultReshapeExpected, nil
}

// answer is the decision's answer: a denial, or the pod allowed with its
// patch and warnings; each rewrite is counted and logged.
func (h *Handler) answer(req *admissionv1.AdmissionRequest, resp *admissionv1.AdmissionResponse, ref klog.ObjectRef, d fallback.Decision, snap *schedview.Snapshot) (string, error) {
	resp.Warnings = d.Warnings
	if !d.Allowed {
		resp.Allowed = false
		resp.Result = &metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    http.StatusForbidden,
			Reason:  metav1.StatusReasonForbidden,
			Message: d.Message,
		}
		h.log.Info("Denied pod: no GPU type fits", "pod", ref, "uid", req.UID, "dryRun", isDryRun(req), "reason", d.Message)
		return string(d.Outcome), nil
	}
	if len(d.Patch) > 0 {
		patch, err := h.marshal(d.Patch)
		if err != nil {
			// Operations hold strings and string maps, so this should not
			// fail; if it does, the fault is the webhook's.
			return "", internalError("encoding patch: %v", err)
		}
		pt := admissionv1.PatchTypeJSONPatch
		resp.Patch, resp.PatchType = patch, &pt
	}
	h.countRewrites(req, ref, d, snap)
	h.logOutcome(req, ref, d)
	return string(d.Outcome), nil
}

// countRewrites counts and logs each rewrite of d.
func (h *Handler) countRewrites(req *admissionv1.AdmissionRequest, ref klog.ObjectRef, d fallback.Decision, snap *schedview.Snapshot) {
	for _, rw := range d.Rewrites {
		// Labels from a bounded set, whatever names pods ask for.
		from, to := h.opts.Decider.MetricLabel(rw.From, snap), h.opts.Decider.MetricLabel(rw.To, snap)
		h.opts.Metrics.fallbacks.WithLabelValues(from, to).Inc()
		h.log.Info("Rewrote GPU request", "pod", ref, "uid", req.UID, "dryRun", isDryRun(req),
			"from", string(rw.From), "to", string(rw.To), "reason", rw.Reason)
	}
}

// logOutcome logs a pod allowed as it is for a reason worth a line.
func (h *Handler) logOutcome(req *admissionv1.AdmissionRequest, ref klog.ObjectRef, d fallback.Decision) {
	switch d.Outcome {
	case fallback.OutcomeUnsatisfiable:
		h.log.Info("Allowed pod although no GPU type fits", "pod", ref, "uid", req.UID, "reason", d.Warnings)
	case fallback.OutcomeTooManyTypes, fallback.OutcomeTooLarge:
		h.log.Info("Left pod unchanged", "pod", ref, "uid", req.UID, "dryRun", isDryRun(req), "outcome", d.Outcome, "reason", d.Message)
	case fallback.OutcomeInvalid:
		// The API server rejects the pod next, with its own message.
		h.log.V(2).Info("Left pod with invalid quantities unchanged", "pod", ref, "uid", req.UID, "reason", d.Message)
	default:
		if len(d.Warnings) > 0 {
			h.log.V(1).Info("Warned about pod", "pod", ref, "uid", req.UID, "outcome", d.Outcome, "warnings", d.Warnings)
		}
	}
}

func isDryRun(req *admissionv1.AdmissionRequest) bool { return req.DryRun != nil && *req.DryRun }

func (h *Handler) respond(w http.ResponseWriter, resp *admissionv1.AdmissionResponse) int {
	out := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: reviewV1, Kind: "AdmissionReview"},
		Response: resp,
	}
	w.Header().Set("Content-Type", "application/json")
	// Encode writes from the encoder's pooled buffer, where Marshal would
	// copy the answer into a new slice per admission. It writes nothing
	// when the answer cannot be encoded, so the 500 below is still the
	// response's status.
	if err := json.NewEncoder(w).Encode(out); err != nil {
		h.log.Error(err, "Encoding AdmissionReview response")
		http.Error(w, "encoding response failed", http.StatusInternalServerError)
		return http.StatusInternalServerError
	}
	return http.StatusOK
}

// refuse answers a request that could not be decided on with its status
// (a 4xx for the request's fault, a 5xx for the webhook's) and the reason in
// the body, and returns the status and the result label. The API server
// applies the failure policy.
func (h *Handler) refuse(w http.ResponseWriter, err error) (int, string) {
	status := http.StatusBadRequest
	var he *httpError
	if errors.As(err, &he) {
		status = he.status
	}
	if he != nil && he.canceled {
		// Written for form's sake: the caller has stopped reading.
		http.Error(w, err.Error(), status)
		h.log.V(1).Info("Stopped deciding: the caller gave up", "reason", err.Error())
		return status, resultCanceled
	}
	if status == http.StatusMethodNotAllowed {
		w.Header().Set("Allow", http.MethodPost)
	}
	http.Error(w, err.Error(), status)
	if status >= http.StatusInternalServerError {
		h.log.Error(err, "Failed to answer admission request", "status", status)
		return status, resultInternalError
	}
	h.log.V(1).Info("Refused admission request", "status", status, "reason", err.Error())
	return status, resultBadRequest
}
