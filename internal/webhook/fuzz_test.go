package webhook

import (
	"encoding/json"
	"net/http"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/webhook/fallback"
)

// FuzzMutate feeds arbitrary bodies to /mutate: it must never panic, must
// answer 200 or 400, and a 200 must be a v1 review for the request's uid
// whose patch applies to the request's object.
func FuzzMutate(f *testing.F) {
	f.Add(reviewFor(f, gpuPod("p", mig2g20, "2"), nil))
	f.Add(reviewFor(f, gpuPod("p", mig1g10, "1"), nil))
	f.Add(reviewFor(f, cpuPod("c"), nil))
	f.Add(reviewFor(f, map[string]any{"metadata": map[string]any{"annotations": map[string]any{fallback.AnnotationPolicy: "up"}}, "spec": map[string]any{"containers": []any{map[string]any{"name": "a", "resources": map[string]any{"limits": map[string]any{"nvidia.com/mig-3g.40gb": "1"}}}}}}, nil))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"version":"v1","kind":"Pod"},"resource":{"version":"v1","resource":"pods"},"operation":"CREATE","object":{"spec":{"containers":[{"name":"x","resources":{"requests":{"nvidia.com/mig-2g.20gb":"1e3"}}}]}}}}`))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","object":"\u006evidia"}}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Add([]byte{})

	snap := snapshotOf(
		gpuNode("a", map[corev1.ResourceName]int64{mig1g10: 7, "nvidia.com/mig-4g.40gb": 1}),
		gpuNode("b", map[corev1.ResourceName]int64{resourcename.GPU: 8}),
	)
	fx := newFixture(f, StaticSource{snap}, fallback.Options{})
	f.Fuzz(func(t *testing.T, body []byte) {
		w := fx.post(http.MethodPost, "application/json", body)
		switch w.Code {
		case http.StatusBadRequest:
			if w.Body.Len() == 0 {
				t.Fatal("400 without a reason")
			}
			return
		case http.StatusOK:
		default:
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		req, err := decodeReview(body)
		if err != nil {
			t.Fatalf("answered 200 to a body decodeReview refuses: %v", err)
		}
		var out admissionv1.AdmissionReview
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || out.Response == nil {
			t.Fatalf("response %s: %v", w.Body, err)
		}
		if out.Response.UID != req.Request.UID {
			t.Fatalf("response uid %q, request uid %q", out.Response.UID, req.Request.UID)
		}
		if len(out.Response.Patch) > 0 {
			p, err := jsonpatch.DecodePatch(out.Response.Patch)
			if err != nil {
				t.Fatalf("patch %s: %v", out.Response.Patch, err)
			}
			if _, err := p.Apply(req.Request.Object.Raw); err != nil {
				t.Fatalf("patch %s does not apply to %s: %v", out.Response.Patch, req.Request.Object.Raw, err)
			}
		}
	})
}
