package webhook

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/migflex/migflex/internal/webhook/fallback"
)

// The steps of admit, each on its own; handler_test.go runs them over HTTP.

func TestPodOf(t *testing.T) {
	f := newFixture(t, StaticSource{snapshotOf()}, fallback.Options{})
	podReq := func(pod string) *admissionv1.AdmissionRequest {
		return &admissionv1.AdmissionRequest{
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Operation: admissionv1.Create,
			Object:    runtime.RawExtension{Raw: []byte(pod)},
		}
	}
	const gpuPod = `{"metadata":{"name":"p"},"spec":{"containers":[{"name":"c","resources":{"limits":{"nvidia.com/mig-1g.10gb":"1"}}}]}}`
	update := podReq(gpuPod)
	update.Operation = admissionv1.Update
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := map[string]struct {
		ctx        context.Context
		req        *admissionv1.AdmissionRequest
		wantPod    bool
		wantResult string
		wantStatus int // of the error; 0: none
	}{
		"a GPU pod":            {req: podReq(gpuPod), wantPod: true},
		"an update":            {req: update, wantResult: resultIgnored},
		"no object":            {req: podReq(""), wantStatus: http.StatusBadRequest},
		"no GPU word in it":    {req: podReq(`{"spec":{"containers":[{"name":"c"}]}}`), wantResult: string(fallback.OutcomeNoGPU)},
		"a GPU word, no ask":   {req: podReq(`{"metadata":{"name":"p","annotations":{"x":"nvidia.com/gpu"}},"spec":{"containers":[{"name":"c"}]}}`), wantResult: string(fallback.OutcomeNoGPU)},
		"malformed":            {req: podReq(`{"spec":{"containers":"nvidia.com/gpu"}}`), wantStatus: http.StatusBadRequest},
		"the caller went away": {ctx: canceled, req: podReq(gpuPod), wantStatus: statusOf(canceledErr())},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			pod, result, err := f.h.podOf(ctx, tc.req)
			if (pod != nil) != tc.wantPod || result != tc.wantResult {
				t.Errorf("podOf() = pod %v, result %q; want pod %v, result %q", pod != nil, result, tc.wantPod, tc.wantResult)
			}
			if got := statusOf(err); got != tc.wantStatus {
				t.Errorf("podOf() error %v (status %d), want status %d", err, got, tc.wantStatus)
			}
		})
	}
}

func canceledErr() error { return canceled(context.Canceled) }

func statusOf(err error) int {
	var he *httpError
	if errors.As(err, &he) {
		return he.status
	}
	if err != nil {
		return -1
	}
	return 0
}

func TestPodRef(t *testing.T) {
	req := &admissionv1.AdmissionRequest{Namespace: "ml"}
	for _, tc := range []struct {
		pod  corev1.Pod
		want string
	}{
		{corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "train"}}, "ml/train"},
		{corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "train-"}}, "ml/train-*"},
		{corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("é", 200)}}, "ml/" + strings.Repeat("é", 126) + "..."},
	} {
		if got := podRef(req, &tc.pod); got.Namespace+"/"+got.Name != tc.want {
			t.Errorf("podRef() = %s/%s, want %s", got.Namespace, got.Name, tc.want)
		}
	}
}
