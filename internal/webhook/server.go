// Package webhook is the HTTPS adapter around internal/webhook/fallback: it decodes
// AdmissionReviews, keeps the cluster view in informer caches, serves
// /mutate, /healthz and /readyz, and reloads its certificate. Its metrics
// are served on a port of their own (MetricsHandler, through
// internal/platform/metricsserver in Run), not to whoever reaches the admission
// port.
package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/migflex/migflex/internal/platform/metricsserver"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sys/unix"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/migflex/migflex/internal/platform/certwatch"
	"github.com/migflex/migflex/internal/webhook/fallback"
)

// Options configure a Server.
type Options struct {
	// Listen is the HTTPS address; default ":8443".
	Listen string
	// CertDir holds tls.crt and tls.key (the mounted Secret).
	CertDir string
	// CertPollInterval re-reads the certificate this often besides the
	// directory watch (certwatch.Options.PollInterval: 0 is
	// certwatch.DefaultPollInterval, negative disables).
	CertPollInterval time.Duration

	Decider *fallback.Decider
	// Source overrides the informer-backed view (tests, benchmarks); when it
	// is nil, Client is required.
	Source SnapshotSource
	Client kubernetes.Interface
	// Resync is the informers' resync period; 0 disables resync.
	Resync time.Duration

	MaxRequestBytes int64
	// MaxInflightBytes bounds the request bodies served at once (see
	// HandlerOptions).
	MaxInflightBytes int64
	// Registry receives the metrics; nil means a new one with the Go and
	// process collectors.
	Registry *prometheus.Registry
	// DrainPeriod is how long a stopping server keeps its open connections
	// after it stopped accepting new ones (see Run); default 5s, negative
	// for none.
	DrainPeriod time.Duration
	// ShutdownTimeout bounds the wait for in-flight requests after the
	// drain; default 10s.
	ShutdownTimeout time.Duration
	// ReusePort binds Listen with SO_REUSEPORT, so that two webhook
	// processes on one host can share the port: a rolling update of
	// replicas on the host network, where the new pod starts before the
	// old one stops. With it the server also accepts connections only
	// once its caches have synced: the kernel spreads connections over
	// every process bound to the port, ready or not, and one not ready
	// would admit pods unchecked. Connections that arrive meanwhile wait
	// in the listen queue.
	ReusePort bool
	// ReshapeFirst leaves a request as asked when the planner can serve it
	// (see HandlerOptions.Reshaper), judged from the Node informer with the
	// planner's field manager, manual hold and cooldown
	// (PlannerFieldManager, PlannerManualHold, PlannerCooldown). Reshaper
	// overrides the informer-backed judge (tests).
	ReshapeFirst        bool
	PlannerFieldManager string
	PlannerManualHold   time.Duration
	PlannerCooldown     time.Duration
	Reshaper            Reshaper
}

// Server is the webhook's HTTPS server.
type Server struct {
	opts     Options
	ln       net.Listener
	certs    *certwatch.Watcher
	informer *InformerSource
	source   SnapshotSource
	metrics  *Metrics
	http     *http.Server

	// draining is set once the server stops accepting connections: every
	// answer from then on closes its connection.
	draining atomic.Bool
	conns    openConns
}

// DefaultDrainPeriod is Options.DrainPeriod's default: with the preStop
// sleep (5 s) and ShutdownTimeout (10 s) it fits the Deployment's 30 s
// grace period.
const DefaultDrainPeriod = 5 * time.Second

// idleTimeout is how long the server keeps an idle connection.
const idleTimeout = 2 * time.Minute

// NewServer validates the options, loads the certificate, creates the
// informers (not started) and binds the listener, so that Addr is known
// before Run.
func NewServer(o Options) (*Server, error) {
	if o.Listen == "" {
		o.Listen = ":8443"
	}
	if o.DrainPeriod == 0 {
		o.DrainPeriod = DefaultDrainPeriod
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = 10 * time.Second
	}
	if o.Decider == nil {
		return nil, errors.New("webhook: no decider")
	}
	if o.Registry == nil {
		o.Registry = metricsserver.NewRegistry()
	}
	s := &Server{opts: o, source: o.Source}
	if s.source == nil {
		if o.Client == nil {
			return nil, errors.New("webhook: neither a snapshot source nor a client")
		}
		inf, err := NewInformerSource(o.Client, o.Decider.Mode() == fallback.ModeCapacity, o.Resync)
		if err != nil {
			return nil, err
		}
		s.informer, s.source = inf, inf
	}
	reshaper := o.Reshaper
	if o.ReshapeFirst && reshaper == nil {
		if s.informer == nil {
			return nil, errors.New("webhook: reshape-first needs the informers (a client) or a Reshaper")
		}
		v, err := NewReshapeView(o.PlannerFieldManager, o.PlannerManualHold, o.PlannerCooldown, 0)
		if err != nil {
			return nil, err
		}
		if err := s.informer.WithReshape(v); err != nil {
			return nil, err
		}
		reshaper = v
	}
	certs, err := certwatch.New(certwatch.Options{Dir: o.CertDir, PollInterval: o.CertPollInterval})
	if err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	s.certs = certs

	s.metrics = NewMetrics(o.Registry)
	h, err := NewHandler(HandlerOptions{
		Decider:          o.Decider,
		Source:           s.source,
		Metrics:          s.metrics,
		MaxRequestBytes:  o.MaxRequestBytes,
		MaxInflightBytes: o.MaxInflightBytes,
		Reshaper:         reshaper,
	})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/mutate", h)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", s.readyz)

	s.http = &http.Server{
		Handler:   s.closeWhileDraining(mux),
		ConnState: s.conns.track,
		TLSConfig: &tls.Config{
			MinVersion:     tls.VersionTLS12,
			GetCertificate: certs.GetCertificate,
		},
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		// Longer than the API server keeps an idle connection (its
		// transport's 90 s), so that the client, which knows when it sends
		// next, closes one first: the server closing it races a request
		// on its way, lost then (see drain).
		IdleTimeout: idleTimeout,
		// TLS handshake errors are what users look for when the caBundle
		// and the certificate disagree; send them to the structured log.
		ErrorLog: klog.NewStandardLogger("WARNING"),
	}
	var lc net.ListenConfig
	if o.ReusePort {
		lc.Control = reusePort
	}
	ln, err := lc.Listen(context.Background(), "tcp", o.Listen)
	if err != nil {
		return nil, fmt.Errorf("webhook: listening on %s: %w", o.Listen, err)
	}
	s.ln = ln
	return s, nil
}

// Addr is the bound address (useful with ":0").
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// MetricsHandler serves /metrics from the webhook's registry; Run serves it
// on --metrics-addr to authorized clients.
func (s *Server) MetricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.opts.Registry, promhttp.HandlerOpts{}))
	return mux
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if _, ok := s.source.Snapshot(); !ok {
		http.Error(w, "caches not synced", http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok"))
}

// Run serves until ctx is done, then drains: it accepts no new connection,
// answers the next request on each open one with "Connection: close"
// (drain), closes those left idle after DrainPeriod and waits for
// in-flight requests (http.Server.Shutdown). It starts
// the certificate watch and, unless a source was injected, the informers.
func (s *Server) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var wg sync.WaitGroup
	errs := make(chan error, 3)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := s.certs.Start(ctx); err != nil {
			errs <- err
		}
	}()
	if s.informer != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.informer.Run(ctx)
		}()
	}
	stopAccepting := make(chan struct{})
	served := make(chan struct{})
	go func() {
		defer close(served)
		if s.opts.ReusePort && s.informer != nil {
			logger.Info("Waiting for the caches before accepting connections on the shared port", "addr", s.ln.Addr().String())
			select {
			case <-s.informer.Ready():
			case <-stopAccepting:
				return
			}
		}
		logger.Info("Serving HTTPS", "addr", s.ln.Addr().String(), "mode", s.opts.Decider.Mode(), "reshapeFirst", s.opts.ReshapeFirst)
		// The drain closes the listener: Serve then fails, as planned.
		if err := s.http.ServeTLS(s.ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) && !s.draining.Load() {
			errs <- fmt.Errorf("webhook: serving: %w", err)
		}
	}()

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errs:
		logger.Error(runErr, "Stopping")
	}
	s.drain(logger, stopAccepting, served)
	shutdownCtx, stop := context.WithTimeout(context.WithoutCancel(ctx), s.opts.ShutdownTimeout)
	defer stop()
	if err := s.http.Shutdown(shutdownCtx); err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("webhook: shutdown: %w", err))
	}
	cancel()
	wg.Wait()
	return runErr
}

// drain stops accepting connections and keeps the open ones for up to
// DrainPeriod, closing each after its next answer. The API server keeps
// its connections to a webhook alive and sends a request on an idle one
// whenever it likes: a server that closes an idle connection (as
// http.Server.Shutdown does at once) races such a request, which is then
// lost, and a POST is not retried: with failurePolicy Ignore the pod is
// admitted unchecked. Draining, a request on an open connection is
// answered with "Connection: close", and the API server's next one dials
// a replica that accepts. Shutdown then closes only connections idle for
// the whole drain. The drain ends early once no connection is left.
func (s *Server) drain(logger klog.Logger, stopAccepting chan<- struct{}, served <-chan struct{}) {
	s.draining.Store(true)
	close(stopAccepting)
	// With SO_REUSEPORT and net.ipv4.tcp_migrate_req=1 the kernel hands
	// the connections waiting in this listener's queue to another replica.
	_ = s.ln.Close()
	<-served // Serve has returned: every connection it accepted is counted
	if s.opts.DrainPeriod < 0 {
		return
	}
	open, changed := s.conns.watch()
	logger.Info("Draining: accepting no new connection, closing each open one after its next answer", "open", open, "drainPeriod", s.opts.DrainPeriod)
	timer := time.NewTimer(s.opts.DrainPeriod)
	defer timer.Stop()
	for open > 0 {
		select {
		case <-timer.C:
			logger.Info("Drain period over: closing the connections left idle", "open", open)
			return
		case <-changed:
			open, changed = s.conns.watch()
		}
	}
	logger.Info("Drained: no connection left")
}

// closeWhileDraining answers with "Connection: close" once the server
// drains, so that the client sends its next request elsewhere.
func (s *Server) closeWhileDraining(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.draining.Load() {
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
}

// openConns counts the server's open connections (http.Server.ConnState).
type openConns struct {
	mu     sync.Mutex
	n      int
	notify chan struct{} // closed and replaced on every change
}

func (c *openConns) track(_ net.Conn, state http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch state {
	case http.StateNew:
		c.n++
	case http.StateClosed, http.StateHijacked:
		c.n--
	default:
		return
	}
	if c.notify != nil {
		close(c.notify)
		c.notify = nil
	}
}

// watch is the count and a channel closed at its next change, read
// together so that no change goes unnoticed.
func (c *openConns) watch() (int, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.notify == nil {
		c.notify = make(chan struct{})
	}
	return c.n, c.notify
}

// reusePort sets SO_REUSEPORT on a listening socket before it is bound.
func reusePort(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("setting SO_REUSEPORT: %w", serr)
	}
	return nil
}
