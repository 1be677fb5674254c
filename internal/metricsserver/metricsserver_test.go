package metricsserver

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestServes(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "migflex_test_total", Help: "a test counter"})
	reg.MustRegister(c)
	c.Inc()
	var healthy atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	addr, err := Start(ctx, &wg, "127.0.0.1:0", Handler(reg, &healthy, "not synced yet"))
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + addr.String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	tests := []struct {
		name, path string
		healthy    bool
		wantCode   int
		wantBody   string
	}{
		{"unhealthy says why", "/healthz", false, http.StatusServiceUnavailable, "not synced yet"},
		{"healthy", "/healthz", true, http.StatusOK, "ok"},
		{"metrics", "/metrics", false, http.StatusOK, "migflex_test_total 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			healthy.Store(tc.healthy)
			code, body := get(tc.path)
			if code != tc.wantCode || !strings.Contains(body, tc.wantBody) {
				t.Errorf("GET %s: %d %q, want %d containing %q", tc.path, code, body, tc.wantCode, tc.wantBody)
			}
		})
	}
	cancel()
	wg.Wait()
	if _, err := http.Get("http://" + addr.String() + "/healthz"); err == nil {
		t.Error("still serving after ctx ended")
	}
}

func TestStartFailsOnABadAddress(t *testing.T) {
	var wg sync.WaitGroup
	if _, err := Start(context.Background(), &wg, "no-such-host-:-1", http.NotFoundHandler()); err == nil || !strings.Contains(err.Error(), "serving metrics on no-such-host-:-1") {
		t.Fatalf("error %v, want one naming the address", err)
	}
}
