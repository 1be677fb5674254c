package webhook

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/webhook/fallback"
)

// BenchmarkMutate serves /mutate against a 5,000-node snapshot, the way
// the benchmark issue drives the handler with an injected source.
func BenchmarkMutate(b *testing.B) {
	bl := schedview.NewBuilder(nil)
	for i := range 5000 {
		alloc := map[corev1.ResourceName]int64{mig1g10: 7}
		if i%2 == 0 {
			alloc = map[corev1.ResourceName]int64{mig2g20: 3}
		}
		n := gpuNode(fmt.Sprintf("gpu-%04d", i), alloc)
		n.Labels["pool"] = fmt.Sprintf("pool-%d", i%10)
		bl.SetNode(schedview.NodeFromAPI(n))
	}
	fx := newFixture(b, StaticSource{bl.Snapshot()}, fallback.Options{})
	for name, body := range map[string][]byte{
		"no-gpu":  reviewFor(b, cpuPod("web"), nil),
		"present": reviewFor(b, gpuPod("p", mig2g20, "1"), nil),
		"rewrite": reviewFor(b, gpuPod("p", "nvidia.com/mig-3g.40gb", "1"), nil),
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r := httptest.NewRequest(http.MethodPost, "/mutate", bytes.NewReader(body))
				r.Header.Set("Content-Type", "application/json")
				w := httptest.NewRecorder()
				fx.h.ServeHTTP(w, r)
				if w.Code != http.StatusOK {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
		})
	}
}
