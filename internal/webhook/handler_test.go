package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/webhook/fallback"
)

const (
	mig1g10 corev1.ResourceName = "nvidia.com/mig-1g.10gb"
	mig2g20 corev1.ResourceName = "nvidia.com/mig-2g.20gb"
)

func gpuNode(name string, alloc map[corev1.ResourceName]int64) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}}}
	n.Status.Allocatable = corev1.ResourceList{}
	for r, v := range alloc {
		n.Status.Allocatable[r] = *resource.NewQuantity(v, resource.DecimalSI)
	}
	return n
}

func snapshotOf(nodes ...*corev1.Node) *schedview.Snapshot {
	var ns []schedview.Node
	for _, n := range nodes {
		ns = append(ns, schedview.NodeFromAPI(n))
	}
	return schedview.NewSnapshot(ns)
}

func gpuPod(name string, r corev1.ResourceName, n string) *corev1.Pod {
	q := resource.MustParse(n)
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:  "main",
			Image: "cuda",
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{r: q},
				Limits:   corev1.ResourceList{r: q},
			},
		}}},
	}
}

func cpuPod(name string) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:      "main",
			Image:     "busybox",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}},
		}}},
	}
}

// reviewFor wraps an object in an admission.k8s.io/v1 AdmissionReview for a
// pod CREATE; edit adjusts the request.
func reviewFor(t testing.TB, obj any, edit func(*admissionv1.AdmissionRequest)) []byte {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	req := &admissionv1.AdmissionRequest{
		UID:       types.UID("0b4a7d6c-1111-2222-3333-444455556666"),
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Namespace: "default",
		Operation: admissionv1.Create,
		Object:    runtime.RawExtension{Raw: raw},
	}
	if edit != nil {
		edit(req)
	}
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  req,
	})
	if err != nil {
		t.Fatal(err)
	}
	return body
}

type fixture struct {
	h   *Handler
	reg *prometheus.Registry
	m   *Metrics
}

func newFixture(t testing.TB, src SnapshotSource, o fallback.Options) *fixture {
	t.Helper()
	if o.Policy.Chains == nil && !o.Policy.AllowDown {
		o.Policy = fallback.DefaultPolicy()
	}
	d, err := fallback.NewDecider(o)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	// Fuzzing logs nothing (millions of rewrites); tests log through t.
	logger := logr.Discard()
	if tt, ok := t.(*testing.T); ok {
		logger = ktesting.NewLogger(tt, ktesting.NewConfig())
	}
	h, err := NewHandler(HandlerOptions{Decider: d, Source: src, Metrics: m, MaxRequestBytes: 64 << 10, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{h: h, reg: reg, m: m}
}

func (f *fixture) post(method, contentType string, body []byte) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, "/mutate", bytes.NewReader(body))
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	return w
}

func decodeResponse(t *testing.T, w *httptest.ResponseRecorder) *admissionv1.AdmissionResponse {
	t.Helper()
	if w.Code != http.StatusOK {
		t.Fatalf("status = %d (%s), want 200", w.Code, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("content type = %q", ct)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
		t.Fatalf("response: %v", err)
	}
	if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" || out.Response == nil {
		t.Fatalf("response = %s", w.Body)
	}
	return out.Response
}

func TestHandlerRefusesBadRequests(t *testing.T) {
	f := newFixture(t, StaticSource{snapshotOf(gpuNode("n", map[corev1.ResourceName]int64{mig1g10: 7}))}, fallback.Options{})
	valid := reviewFor(t, gpuPod("p", mig2g20, "1"), nil)
	big := reviewFor(t, gpuPod("p", mig2g20, "1"), func(r *admissionv1.AdmissionRequest) {
		r.UserInfo.Extra = map[string]authenticationv1.ExtraValue{"pad": {strings.Repeat("x", 70<<10)}}
	})
	tests := map[string]struct {
		method, contentType string
		body                []byte
		status              int
		reason              string
	}{
		"GET":                      {http.MethodGet, "application/json", nil, http.StatusMethodNotAllowed, "method GET not allowed"},
		"no content type":          {http.MethodPost, "", valid, http.StatusUnsupportedMediaType, `content type ""`},
		"yaml":                     {http.MethodPost, "application/yaml", valid, http.StatusUnsupportedMediaType, "is not application/json"},
		"json with charset is ok":  {http.MethodPost, "application/json; charset=utf-8", valid, http.StatusOK, ""},
		"empty body":               {http.MethodPost, "application/json", nil, http.StatusBadRequest, "empty request body"},
		"not json":                 {http.MethodPost, "application/json", []byte("{{"), http.StatusBadRequest, "malformed AdmissionReview"},
		"json array":               {http.MethodPost, "application/json", []byte("[]"), http.StatusBadRequest, "malformed AdmissionReview"},
		"wrong field type":         {http.MethodPost, "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":7}}`), http.StatusBadRequest, "malformed AdmissionReview"},
		"v1beta1":                  {http.MethodPost, "application/json", bytes.Replace(valid, []byte("admission.k8s.io/v1"), []byte("admission.k8s.io/v1beta1"), 1), http.StatusBadRequest, `unsupported review apiVersion "admission.k8s.io/v1beta1"`},
		"no apiVersion":            {http.MethodPost, "application/json", []byte(`{"kind":"AdmissionReview"}`), http.StatusBadRequest, "only admission.k8s.io/v1 AdmissionReview"},
		"wrong kind":               {http.MethodPost, "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"ConversionReview"}`), http.StatusBadRequest, `kind "ConversionReview"`},
		"no request":               {http.MethodPost, "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), http.StatusBadRequest, "has no request"},
		"no uid":                   {http.MethodPost, "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"kind":{"version":"v1","kind":"Pod"}}}`), http.StatusBadRequest, "has no uid"},
		"UID is not uid":           {http.MethodPost, "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"UID":"x"}}`), http.StatusBadRequest, "has no uid"},
		"no object":                {http.MethodPost, "application/json", reviewFor(t, nil, func(r *admissionv1.AdmissionRequest) { r.Object.Raw = nil }), http.StatusBadRequest, "has no object"},
		"malformed pod":            {http.MethodPost, "application/json", reviewFor(t, map[string]any{"spec": map[string]any{"containers": "nvidia"}}, nil), http.StatusBadRequest, "malformed pod"},
		"object is not a pod":      {http.MethodPost, "application/json", reviewFor(t, map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "nvidia"}}, nil), http.StatusBadRequest, `kind "Deployment", want v1 Pod`},
		"pod without metadata":     {http.MethodPost, "application/json", reviewFor(t, map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "nvidia"}}}}, nil), http.StatusBadRequest, "neither metadata.name nor metadata.generateName"},
		"body over the size limit": {http.MethodPost, "application/json", big, http.StatusRequestEntityTooLarge, "request body exceeds 65536 bytes"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			w := f.post(tc.method, tc.contentType, tc.body)
			if w.Code != tc.status {
				t.Fatalf("status = %d (%s), want %d", w.Code, strings.TrimSpace(w.Body.String()), tc.status)
			}
			if !strings.Contains(w.Body.String(), tc.reason) {
				t.Errorf("body %q does not contain %q", w.Body, tc.reason)
			}
			if tc.status == http.StatusMethodNotAllowed && w.Header().Get("Allow") != http.MethodPost {
				t.Errorf("Allow = %q, want POST", w.Header().Get("Allow"))
			}
		})
	}
	if got := counterValue(t, f.m.admissions.WithLabelValues(resultBadRequest)); got != float64(len(tests)-1) {
		t.Errorf("bad_request count = %v, want %d", got, len(tests)-1)
	}
}

// A patch the webhook cannot encode is its own fault, not the request's:
// a 500 with its own result label, so that it is not counted (or alerted
// on) as a client's bad request.
func TestHandlerPatchEncodingFailureIsInternal(t *testing.T) {
	f := newFixture(t, StaticSource{snapshotOf(gpuNode("n", map[corev1.ResourceName]int64{mig1g10: 7}))}, fallback.Options{})
	f.h.marshal = func(any) ([]byte, error) { return nil, errors.New("out of bytes") }
	w := f.post(http.MethodPost, "application/json", reviewFor(t, gpuPod("p", mig2g20, "1"), nil))
	if w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), "encoding patch: out of bytes") {
		t.Fatalf("status %d (%s), want 500 with the reason", w.Code, strings.TrimSpace(w.Body.String()))
	}
	if got := counterValue(t, f.m.admissions.WithLabelValues(resultInternalError)); got != 1 {
		t.Errorf("admissions{result=%q} = %v, want 1", resultInternalError, got)
	}
	if got := counterValue(t, f.m.admissions.WithLabelValues(resultBadRequest)); got != 0 {
		t.Errorf("admissions{result=%q} = %v, want 0", resultBadRequest, got)
	}
}

func TestHandlerDecides(t *testing.T) {
	snap := snapshotOf(gpuNode("a100", map[corev1.ResourceName]int64{mig1g10: 28}))
	tests := map[string]struct {
		src     SnapshotSource
		opts    fallback.Options
		body    []byte
		allowed bool
		// patched is the pod after the response's patch; nil means no patch.
		patched  *corev1.Pod
		code     int32
		message  string
		warnings []string
		result   string
	}{
		"no-GPU pod: allowed untouched": {
			body:    reviewFor(t, cpuPod("web"), nil),
			allowed: true,
			result:  "no_gpu",
		},
		"no-GPU fast path does not decode the pod": {
			// Not a valid pod, but nothing in it can name a GPU type.
			body:    reviewFor(t, map[string]any{"spec": map[string]any{"containers": "x"}}, nil),
			allowed: true,
			result:  "no_gpu",
		},
		// The byte scan lets this pod through to the decode; only its
		// resources count, so it is still a pod without a GPU request, and
		// answered as one before the cache is consulted: not synced here,
		// which would add a warning.
		"GPU names outside resources: no GPU request": {
			src: StaticSource{},
			body: reviewFor(t, func() *corev1.Pod {
				p := cpuPod("nvidia-smi")
				p.Annotations = map[string]string{"example.com/wants": string(mig2g20)}
				p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "RESOURCE", Value: string(mig2g20)}}
				return p
			}(), nil),
			allowed: true,
			result:  "no_gpu",
		},
		"rewrite": {
			body:    reviewFor(t, gpuPod("train", mig2g20, "2"), nil),
			allowed: true,
			patched: func() *corev1.Pod {
				p := gpuPod("train", mig1g10, "2")
				p.Annotations = map[string]string{
					fallback.AnnotationFallback: "2g.20gb->1g.10gb",
					fallback.AnnotationReason:   "2g.20gb->1g.10gb=absent",
					fallback.AnnotationOriginal: `{"containers":{"main":{"requests":{"nvidia.com/mig-2g.20gb":"2"},"limits":{"nvidia.com/mig-2g.20gb":"2"}}}}`,
				}
				return p
			}(),
			result: "rewritten",
		},
		"dry run is answered the same": {
			body: reviewFor(t, gpuPod("train", mig2g20, "1"), func(r *admissionv1.AdmissionRequest) {
				r.DryRun = ptr.To(true)
			}),
			allowed: true,
			patched: func() *corev1.Pod {
				p := gpuPod("train", mig1g10, "1")
				p.Annotations = map[string]string{
					fallback.AnnotationFallback: "2g.20gb->1g.10gb",
					fallback.AnnotationReason:   "2g.20gb->1g.10gb=absent",
					fallback.AnnotationOriginal: `{"containers":{"main":{"requests":{"nvidia.com/mig-2g.20gb":"1"},"limits":{"nvidia.com/mig-2g.20gb":"1"}}}}`,
				}
				return p
			}(),
			result: "rewritten",
		},
		"denied with a message": {
			src:     StaticSource{snapshotOf(gpuNode("cpu", nil))},
			body:    reviewFor(t, gpuPod("train", mig2g20, "1"), nil),
			code:    http.StatusForbidden,
			message: "nvidia.com/mig-2g.20gb is on no node this pod can be scheduled to (1 node of the cluster's 1)",
			result:  "denied",
		},
		"unsatisfiable allowed with a warning": {
			src:      StaticSource{snapshotOf(gpuNode("cpu", nil))},
			opts:     fallback.Options{OnUnsatisfiable: fallback.UnsatisfiableAllow},
			body:     reviewFor(t, gpuPod("train", mig2g20, "1"), nil),
			allowed:  true,
			warnings: []string{"no GPU type fits: nvidia.com/mig-2g.20gb is on no node this pod can be scheduled to (1 node of the cluster's 1); it has no GPU types (left unchanged)"},
			result:   "unsatisfiable_allowed",
		},
		"caches not synced: allowed unchecked with a warning": {
			src:      StaticSource{},
			body:     reviewFor(t, gpuPod("train", mig2g20, "1"), nil),
			allowed:  true,
			warnings: []string{"migflex GPU webhook: node cache not synced yet, GPU request not checked"},
			result:   "not_ready",
		},
		"pod UPDATE is ignored": {
			body: reviewFor(t, gpuPod("train", mig2g20, "1"), func(r *admissionv1.AdmissionRequest) {
				r.Operation = admissionv1.Update
			}),
			allowed: true,
			result:  "ignored",
		},
		"pod subresource is ignored": {
			body: reviewFor(t, gpuPod("train", mig2g20, "1"), func(r *admissionv1.AdmissionRequest) {
				r.SubResource = "status"
			}),
			allowed: true,
			result:  "ignored",
		},
		"other kinds are ignored": {
			body: reviewFor(t, map[string]any{"kind": "Deployment"}, func(r *admissionv1.AdmissionRequest) {
				r.Kind = metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
				r.Resource = metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
			}),
			allowed: true,
			result:  "ignored",
		},
		"generateName pod": {
			body:    reviewFor(t, func() *corev1.Pod { p := gpuPod("", mig1g10, "1"); p.GenerateName = "job-"; return p }(), nil),
			allowed: true,
			result:  "unchanged",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			src := tc.src
			if src == nil {
				src = StaticSource{snap}
			}
			f := newFixture(t, src, tc.opts)
			w := f.post(http.MethodPost, "application/json", tc.body)
			resp := decodeResponse(t, w)
			if resp.UID != "0b4a7d6c-1111-2222-3333-444455556666" {
				t.Errorf("uid = %q, want the request's", resp.UID)
			}
			if resp.Allowed != tc.allowed {
				t.Fatalf("allowed = %v, want %v (%+v)", resp.Allowed, tc.allowed, resp.Result)
			}
			if diff := cmp.Diff(tc.warnings, resp.Warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
			if !tc.allowed {
				if resp.Result == nil || resp.Result.Code != tc.code || !strings.Contains(resp.Result.Message, tc.message) {
					t.Errorf("result = %+v, want code %d and a message containing %q", resp.Result, tc.code, tc.message)
				}
			}
			if tc.patched == nil {
				if resp.Patch != nil || resp.PatchType != nil {
					t.Errorf("unexpected patch %s", resp.Patch)
				}
			} else {
				if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
					t.Fatalf("patch type = %v", resp.PatchType)
				}
				var review admissionv1.AdmissionReview
				if err := json.Unmarshal(tc.body, &review); err != nil {
					t.Fatal(err)
				}
				patch, err := jsonpatch.DecodePatch(resp.Patch)
				if err != nil {
					t.Fatalf("patch %s: %v", resp.Patch, err)
				}
				out, err := patch.Apply(review.Request.Object.Raw)
				if err != nil {
					t.Fatalf("applying %s: %v", resp.Patch, err)
				}
				var got corev1.Pod
				if err := json.Unmarshal(out, &got); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tc.patched, &got, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
					t.Errorf("patched pod (-want +got):\n%s", diff)
				}
			}
			if got := counterValue(t, f.m.admissions.WithLabelValues(tc.result)); got != 1 {
				t.Errorf("admissions{result=%q} = %v, want 1", tc.result, got)
			}
			if got := len(gather(t, f.reg, "migflex_webhook_request_duration_seconds")); got != 1 {
				t.Errorf("request histogram series = %d, want 1", got)
			}
		})
	}
}

// The byte scan that answers most pods without decoding them must never
// skip a pod that asks for a GPU type, wherever the request is and however
// its JSON spells the name.
func TestHandlerFastPathKeepsGPURequests(t *testing.T) {
	snap := snapshotOf(gpuNode("a100", map[corev1.ResourceName]int64{mig1g10: 28}))
	escaped := func() json.RawMessage {
		raw, err := json.Marshal(gpuPod("escaped", mig2g20, "1"))
		if err != nil {
			t.Fatal(err)
		}
		// Valid JSON for the same name, without the bytes "nvidia".
		raw = bytes.ReplaceAll(raw, []byte(`"nvidia.com/`), []byte(`"\u006evidia.com/`))
		if bytes.Contains(raw, []byte("nvidia")) {
			t.Fatalf("escaped pod still spells nvidia: %s", raw)
		}
		return raw
	}()
	tests := map[string]*corev1.Pod{
		"init container only": func() *corev1.Pod {
			p := cpuPod("init")
			p.Spec.InitContainers = []corev1.Container{{Name: "warmup", Image: "cuda", Resources: rr(mig2g20, "1")}}
			return p
		}(),
		"limits of the second container only": func() *corev1.Pod {
			p := cpuPod("second")
			p.Spec.Containers = append(p.Spec.Containers, *limitsOnly("x", mig2g20, "1").Spec.Containers[0].DeepCopy())
			p.Spec.Containers[1].Name = "gpu"
			return p
		}(),
	}
	bodies := map[string][]byte{"name spelled with a JSON escape": reviewFor(t, escaped, nil)}
	for name, p := range tests {
		bodies[name] = reviewFor(t, p, nil)
	}
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, StaticSource{snap}, fallback.Options{})
			resp := decodeResponse(t, f.post(http.MethodPost, "application/json", body))
			// JSON pointers spell "/" as "~1".
			if want := `"add","path":"/spec/`; !resp.Allowed || !strings.Contains(string(resp.Patch), want) || !strings.Contains(string(resp.Patch), "nvidia.com~1mig-1g.10gb") {
				t.Errorf("allowed %v, patch %s: want the request rewritten to %s", resp.Allowed, resp.Patch, mig1g10)
			}
			if got := counterValue(t, f.m.admissions.WithLabelValues("rewritten")); got != 1 {
				t.Errorf("admissions{result=rewritten} = %v, want 1", got)
			}
		})
	}
}

func TestHandlerMetrics(t *testing.T) {
	f := newFixture(t, StaticSource{snapshotOf(gpuNode("v100", map[corev1.ResourceName]int64{resourcename.GPU: 4}))}, fallback.Options{})
	for range 3 {
		decodeResponse(t, f.post(http.MethodPost, "application/json", reviewFor(t, gpuPod("p", mig2g20, "1"), nil)))
	}
	decodeResponse(t, f.post(http.MethodPost, "application/json", reviewFor(t, cpuPod("c"), nil)))
	fb := gather(t, f.reg, "migflex_webhook_fallbacks_total")
	if len(fb) != 1 || labels(fb[0]) != "from=2g.20gb,to=gpu," || fb[0].GetCounter().GetValue() != 3 {
		t.Errorf("migflex_webhook_fallbacks_total = %v, want one series from=2g.20gb,to=gpu at 3", fb)
	}
	// Only pods with a GPU request reach the decision.
	dec := gather(t, f.reg, "migflex_webhook_decision_duration_seconds")
	if len(dec) != 1 || dec[0].GetHistogram().GetSampleCount() != 3 {
		t.Errorf("decision histogram = %v, want 3 samples", dec)
	}
	adm := gather(t, f.reg, "migflex_webhook_admissions_total")
	got := map[string]float64{}
	for _, m := range adm {
		got[labels(m)] = m.GetCounter().GetValue()
	}
	if diff := cmp.Diff(map[string]float64{"result=rewritten,": 3, "result=no_gpu,": 1}, got); diff != "" {
		t.Errorf("admissions (-want +got):\n%s", diff)
	}
}

// Anyone who may create pods can ask for any resource name, with a dry run
// at no cost: the fallback metric's labels must not grow with them. Names
// that are no NVIDIA GPU's profile, on no node, are left alone with a
// warning naming them, and add no series.
func TestHandlerFallbackMetricIsBounded(t *testing.T) {
	f := newFixture(t, StaticSource{snapshotOf(gpuNode("v100", map[corev1.ResourceName]int64{resourcename.GPU: 4}))}, fallback.Options{})
	dryRun := func(r *admissionv1.AdmissionRequest) { r.DryRun = ptr.To(true) }
	var names []corev1.ResourceName
	for i := range 200 {
		names = append(names,
			corev1.ResourceName(fmt.Sprintf("nvidia.com/mig-%dg.%dgb.zz.yy", 100+i, 99999-i)),
			corev1.ResourceName(fmt.Sprintf("nvidia.com/mig-1g.%dgb", 1000+i)),
			corev1.ResourceName(fmt.Sprintf("nvidia.com/mig-%dg.%dgb", i%8+1, 300+i)),
		)
	}
	for _, r := range names {
		resp := decodeResponse(t, f.post(http.MethodPost, "application/json", reviewFor(t, gpuPod("p", r, "1"), dryRun)))
		if !resp.Allowed || resp.Patch != nil || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], string(r)) {
			t.Fatalf("%s: allowed %v, patch %s, warnings %q: want it left alone with a warning naming it", r, resp.Allowed, resp.Patch, resp.Warnings)
		}
	}
	// Real profiles keep their names, absent from the cluster or not.
	for _, r := range []corev1.ResourceName{mig2g20, "nvidia.com/mig-7g.141gb"} {
		decodeResponse(t, f.post(http.MethodPost, "application/json", reviewFor(t, gpuPod("p", r, "1"), nil)))
	}
	got := map[string]float64{}
	for _, m := range gather(t, f.reg, "migflex_webhook_fallbacks_total") {
		got[labels(m)] = m.GetCounter().GetValue()
	}
	want := map[string]float64{
		"from=2g.20gb,to=gpu,":  1,
		"from=7g.141gb,to=gpu,": 1,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("migflex_webhook_fallbacks_total (-want +got):\n%s", diff)
	}
	if got := counterValue(t, f.m.admissions.WithLabelValues(string(fallback.OutcomeUnknown))); got != float64(len(names)) {
		t.Errorf("admissions{result=unknown_type} = %v, want %d", got, len(names))
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// gather returns the series of one metric family.
func gather(t *testing.T, reg *prometheus.Registry, name string) []*dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()
		}
	}
	return nil
}

func labels(m *dto.Metric) string {
	var b strings.Builder
	for _, l := range m.GetLabel() {
		b.WriteString(l.GetName() + "=" + l.GetValue() + ",")
	}
	return b.String()
}

func TestNewHandlerRequiresDependencies(t *testing.T) {
	d, err := fallback.NewDecider(fallback.Options{Policy: fallback.DefaultPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(prometheus.NewRegistry())
	for name, o := range map[string]HandlerOptions{
		"decider": {Source: StaticSource{}, Metrics: m},
		"source":  {Decider: d, Metrics: m},
		"metrics": {Decider: d, Source: StaticSource{}},
	} {
		if _, err := NewHandler(o); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("without %s: err = %v", name, err)
		}
	}
}

func TestReadBody(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789"), 300)
	errRead := errors.New("connection reset")
	for name, tc := range map[string]struct {
		r       func() io.Reader
		size    int64
		want    []byte
		wantErr error
	}{
		"declared length":              {r: func() io.Reader { return bytes.NewReader(body) }, size: int64(len(body)), want: body},
		"unknown length":               {r: func() io.Reader { return bytes.NewReader(body) }, size: -1, want: body},
		"longer than declared":         {r: func() io.Reader { return bytes.NewReader(body) }, size: 10, want: body},
		"shorter than declared":        {r: func() io.Reader { return bytes.NewReader(body[:5]) }, size: int64(len(body)), want: body[:5]},
		"a byte at a time":             {r: func() io.Reader { return iotest.OneByteReader(bytes.NewReader(body)) }, size: int64(len(body)), want: body},
		"an error after some bytes":    {r: func() io.Reader { return io.MultiReader(bytes.NewReader(body[:7]), iotest.ErrReader(errRead)) }, size: int64(len(body)), want: body[:7], wantErr: errRead},
		"the error with the last read": {r: func() io.Reader { return iotest.DataErrReader(bytes.NewReader(body)) }, size: int64(len(body)), want: body},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := readBody(tc.r(), tc.size)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			if !bytes.Equal(got, tc.want) {
				t.Errorf("read %d bytes, want %d", len(got), len(tc.want))
			}
		})
	}
	// The point of it: one buffer for a body of the declared length.
	rd := bytes.NewReader(body)
	allocs := testing.AllocsPerRun(100, func() {
		rd.Reset(body)
		if _, err := readBody(rd, int64(len(body))); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1 {
		t.Errorf("%v allocations to read a body of its declared length, want 1", allocs)
	}
}
