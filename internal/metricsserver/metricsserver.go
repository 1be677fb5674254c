// Package metricsserver serves a component's /metrics and /healthz on a
// plain HTTP address, as the agent and the planner do.
package metricsserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
)

// Handler serves /metrics from reg and /healthz, which answers 200 while
// healthy holds and 503 with why otherwise.
func Handler(reg prometheus.Gatherer, healthy *atomic.Bool, why string) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !healthy.Load() {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// Start listens on addr and serves h until ctx is done; wg counts its
// goroutines, so that the caller can wait for them. Only the listen can
// fail here: an address in use is an error at start, not a log line.
func Start(ctx context.Context, wg *sync.WaitGroup, addr string, h http.Handler) (net.Addr, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("serving metrics on %s: %w", addr, err)
	}
	log := klog.FromContext(ctx)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
			log.Error(err, "Metrics server stopped")
		}
	}()
	go func() {
		defer wg.Done()
		<-ctx.Done()
		_ = srv.Close()
	}()
	return l.Addr(), nil
}
