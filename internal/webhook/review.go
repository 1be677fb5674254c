package webhook

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	kjson "sigs.k8s.io/json"
)

// httpError is a request refused without a decision, with its status.
type httpError struct {
	status int
	msg    string
	// canceled: the request's context ended (the caller gave up) before
	// the decision.
	canceled bool
}

func (e *httpError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &httpError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// internalError is a request the webhook cannot answer for a fault of its
// own, not of the request: a 500, so that the API server applies the
// webhook's failure policy.
func internalError(format string, args ...any) error {
	return &httpError{status: http.StatusInternalServerError, msg: fmt.Sprintf(format, args...)}
}

// canceled is a request whose context ended before it was decided: 503,
// which the API server, gone or past its timeout, does not read.
func canceled(err error) error {
	return &httpError{status: http.StatusServiceUnavailable, msg: fmt.Sprintf("admission request abandoned: %v", err), canceled: true}
}

var reviewV1 = admissionv1.SchemeGroupVersion.String()

// readReview checks the HTTP envelope and decodes an admission.k8s.io/v1
// AdmissionReview with a request. The object stays raw: most pods are
// answered without decoding it.
func readReview(w http.ResponseWriter, r *http.Request, maxBytes int64) (*admissionv1.AdmissionReview, error) {
	if r.Method != http.MethodPost {
		return nil, &httpError{status: http.StatusMethodNotAllowed, msg: "method " + r.Method + " not allowed, use POST"}
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return nil, &httpError{status: http.StatusUnsupportedMediaType,
			msg: fmt.Sprintf("content type %q is not application/json", r.Header.Get("Content-Type"))}
	}
	body, err := readBody(http.MaxBytesReader(w, r.Body, maxBytes), min(r.ContentLength, maxBytes))
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			return nil, &httpError{status: http.StatusRequestEntityTooLarge,
				msg: fmt.Sprintf("request body exceeds %d bytes", mbe.Limit)}
		}
		return nil, badRequest("reading request body: %v", err)
	}
	return decodeReview(body)
}

// readBody reads r to its end into one buffer of the declared length
// (size; unknown when not positive), which io.ReadAll would grow step by
// step from 512 bytes, leaving each smaller buffer as garbage per
// admission, a share of what sets how often the collector runs. The
// declared length is already counted against the in-flight budget (serve),
// and a body longer than declared still reads whole (the buffer grows).
func readBody(r io.Reader, size int64) ([]byte, error) {
	if size <= 0 {
		return io.ReadAll(r)
	}
	// One byte more than declared: the read that finds the end needs room.
	b := make([]byte, 0, size+1)
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
	}
}

// decodeReview decodes the body of a /mutate request. Every error is an
// *httpError with status 400; it never panics on any input (see the fuzz test).
func decodeReview(body []byte) (*admissionv1.AdmissionReview, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, badRequest("empty request body, want an AdmissionReview")
	}
	review := &admissionv1.AdmissionReview{}
	// Case-sensitive like the API server's own decoding, so "UID" is not "uid".
	if err := kjson.UnmarshalCaseSensitivePreserveInts(body, review); err != nil {
		return nil, badRequest("malformed AdmissionReview: %v", err)
	}
	if review.APIVersion != reviewV1 || review.Kind != "AdmissionReview" {
		return nil, badRequest("unsupported review apiVersion %q kind %q: only %s AdmissionReview is served (set admissionReviewVersions: [v1])",
			review.APIVersion, review.Kind, reviewV1)
	}
	req := review.Request
	switch {
	case req == nil:
		return nil, badRequest("AdmissionReview has no request")
	case req.UID == "":
		return nil, badRequest("AdmissionReview request has no uid")
	}
	return review, nil
}

// isPodCreate is what this webhook is for; anything else is allowed as is.
func isPodCreate(req *admissionv1.AdmissionRequest) bool {
	return req.Kind.Group == "" && req.Kind.Kind == "Pod" &&
		req.Resource.Group == "" && req.Resource.Resource == "pods" &&
		req.SubResource == "" && req.Operation == admissionv1.Create
}

// decodePod decodes the request's object.
func decodePod(req *admissionv1.AdmissionRequest) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(req.Object.Raw, pod); err != nil {
		return nil, badRequest("malformed pod in AdmissionReview: %v", err)
	}
	if pod.Kind != "" && (pod.Kind != "Pod" || pod.APIVersion != "v1") {
		return nil, badRequest("object is apiVersion %q kind %q, want v1 Pod", pod.APIVersion, pod.Kind)
	}
	// The API server always sends metadata; the patch adds annotations to it.
	if pod.Name == "" && pod.GenerateName == "" {
		return nil, badRequest("pod has neither metadata.name nor metadata.generateName")
	}
	return pod, nil
}

// mayHaveGPU is a byte scan of the raw pod: without "nvidia" no resource
// name can be a GPU type, so the pod is allowed without being decoded.
// A JSON escape could spell the name differently; the API server writes
// none, but if "\u" occurs the pod is decoded to be sure.
func mayHaveGPU(raw []byte) bool {
	return bytes.Contains(raw, []byte("nvidia")) || bytes.Contains(raw, []byte(`\u`))
}
