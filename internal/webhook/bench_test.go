package webhook

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/debug"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/webhook/fallback"
	"github.com/migflex/migflex/test/bench/fleet"
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

// BenchmarkAdmissionTail is where the tail of one admission at a time goes
// at 5,000 Nodes (webhookbench -concurrency 1 -pods 0, without the
// network): the handler serves webhookbench's admission mix against its
// fleet, one request after another, in blocks that alternate two ways of
// collecting garbage: "gc" as the process does (the collector runs when
// the heap has grown, during admissions), "between" with the collector
// off during the block and one collection after it, untimed (the same
// memory reused, no admission ever meets the collector), and "tls" as
// "gc" but through HTTPS on loopback, one kept-alive connection, as
// webhookbench sends them (the client in this process). It reports each
// way's p50, p99 and p99.9 in µs, and the share of admissions over 1 ms.
func BenchmarkAdmissionTail(b *testing.B) {
	bl := schedview.NewBuilder(nil)
	for i := range 5000 {
		n := fleet.Node(i)
		n.Status = fleet.Status(i)
		slim, err := TransformNode(n)
		if err != nil {
			b.Fatal(err)
		}
		bl.SetNode(schedview.NodeFromAPI(slim.(*corev1.Node)))
	}
	fx := newFixture(b, StaticSource{bl.Snapshot()}, fallback.Options{})
	mix := fleet.Mix()
	seq, err := fleet.Sequence(mix)
	if err != nil {
		b.Fatal(err)
	}
	bodies := make([][]byte, len(seq))
	for i, k := range seq {
		bodies[i] = reviewFor(b, mix[k].Pod, nil)
	}
	srv := httptest.NewTLSServer(fx.h)
	defer srv.Close()
	client := srv.Client()
	overTLS := func(body []byte) {
		resp, err := client.Post(srv.URL+"/mutate", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	const block, blocks = 1000, 30
	times := map[string][]time.Duration{}
	for b.Loop() {
		for k := range blocks {
			way := [...]string{"gc", "between", "tls"}[k%3]
			if way == "between" {
				debug.SetGCPercent(-1)
			}
			for i := range block {
				body := bodies[(k*block+i)%len(bodies)]
				if way == "tls" {
					start := time.Now()
					overTLS(body)
					times[way] = append(times[way], time.Since(start))
					continue
				}
				r := httptest.NewRequest(http.MethodPost, "/mutate", bytes.NewReader(body))
				r.Header.Set("Content-Type", "application/json")
				w := httptest.NewRecorder()
				start := time.Now()
				fx.h.ServeHTTP(w, r)
				times[way] = append(times[way], time.Since(start))
				if w.Code != http.StatusOK {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
			if way == "between" {
				debug.SetGCPercent(100)
				runtime.GC()
			}
		}
	}
	for way, ts := range times {
		slices.Sort(ts)
		at := func(q float64) float64 { return float64(ts[int(q*float64(len(ts)-1))].Microseconds()) }
		over := 0
		for _, d := range ts {
			if d > time.Millisecond {
				over++
			}
		}
		b.ReportMetric(at(0.5), way+"-p50-µs")
		b.ReportMetric(at(0.99), way+"-p99-µs")
		b.ReportMetric(at(0.999), way+"-p99.9-µs")
		b.ReportMetric(100*float64(over)/float64(len(ts)), way+"-over-1ms-%")
	}
}
