// Package metricsserver serves a component's /metrics the way
// controller-runtime does by default and Kubernetes' own components do: on
// a port of its own, over TLS, only to clients whose bearer token the API
// server authenticates (TokenReview) and authorizes for the path
// (SubjectAccessReview). /healthz, /readyz and /livez on the same port
// answer anyone, for the kubelet's probes.
//
// The certificate is a mounted key pair (a cert-manager or other
// kubernetes.io/tls Secret), reloaded when it changes (internal/platform/certwatch),
// or, when none is given, a self-signed one generated at start: scrapers
// then skip verification (or trust that very certificate).
package metricsserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"

	"github.com/migflex/migflex/internal/platform/certwatch"
)

// Handler serves /metrics from reg and /healthz, which answers 200 while
// healthy holds and 503 with why otherwise. Server guards it.
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

// Options configure a Server.
type Options struct {
	// Addr is the HTTPS listen address, e.g. ":9123". Required.
	Addr string
	// Name names the component in the self-signed certificate and the
	// logs ("migflex-agent").
	Name string
	// CertDir holds tls.crt and tls.key, reloaded when they change; empty
	// means a self-signed certificate generated at start.
	CertDir string
	// CertPollInterval is certwatch.Options.PollInterval.
	CertPollInterval time.Duration
	// Handler serves every path; all but AlwaysAllow only to clients the
	// Reviewer lets through.
	Handler http.Handler
	// Reviewer checks the clients' tokens. Required.
	Reviewer *Reviewer
	// AlwaysAllow are the paths served without a token; nil means
	// DefaultAlwaysAllow.
	AlwaysAllow []string
	// ListenConfig binds Addr (the webhook's SO_REUSEPORT on the host
	// network); nil means a plain one.
	ListenConfig *net.ListenConfig
}

// Server is a started listener and its HTTPS server.
type Server struct {
	opts  Options
	ln    net.Listener
	certs *certwatch.Watcher
	http  *http.Server
}

// New loads or generates the certificate and binds Addr, so that a bad
// certificate or a port in use fails the process at start.
func New(o Options) (*Server, error) {
	if o.Addr == "" {
		return nil, errors.New("metrics server: no listen address")
	}
	if o.Handler == nil || o.Reviewer == nil {
		return nil, errors.New("metrics server: a handler and a reviewer are required")
	}
	if o.AlwaysAllow == nil {
		o.AlwaysAllow = DefaultAlwaysAllow
	}
	s := &Server{opts: o}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.CertDir != "" {
		w, err := certwatch.New(certwatch.Options{Dir: o.CertDir, PollInterval: o.CertPollInterval})
		if err != nil {
			return nil, fmt.Errorf("metrics server certificate: %w", err)
		}
		s.certs = w
		tlsConfig.GetCertificate = w.GetCertificate
	} else {
		cert, err := selfSigned(o.Name, time.Now())
		if err != nil {
			return nil, err
		}
		tlsConfig.Certificates = []tls.Certificate{cert}
	}
	// HTTP/1.1 only, as controller-runtime's metrics server by default: a
	// scrape needs nothing more, and HTTP/2's stream resets were an attack
	// on every Go server (CVE-2023-44487, CVE-2023-39325).
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	s.http = &http.Server{
		Handler:           o.Reviewer.Wrap(o.Handler, o.AlwaysAllow),
		TLSConfig:         tlsConfig,
		Protocols:         &protocols,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		// A cold scrape waits for two reviews of up to reviewTimeout.
		WriteTimeout: 3 * reviewTimeout,
		IdleTimeout:  90 * time.Second,
		// TLS handshake errors (a scraper that verifies against the
		// wrong CA) go to the structured log.
		ErrorLog: klog.NewStandardLogger("WARNING"),
	}
	lc := o.ListenConfig
	if lc == nil {
		lc = &net.ListenConfig{}
	}
	ln, err := lc.Listen(context.Background(), "tcp", o.Addr)
	if err != nil {
		return nil, fmt.Errorf("serving metrics on %s: %w", o.Addr, err)
	}
	s.ln = ln
	return s, nil
}

// selfSignedValidity is how long a generated certificate is valid; a
// process that runs longer serves an expired one, which scrapers that skip
// verification (the only ones that can use a self-signed certificate)
// accept.
const selfSignedValidity = 365 * 24 * time.Hour

// selfSigned is a self-signed ECDSA certificate for name, the host name
// (the pod's) and localhost, as controller-runtime's metrics server makes
// one when given none (there RSA, whose key takes seconds to generate on a
// busy node).
func selfSigned(name string, now time.Time) (tls.Certificate, error) {
	if name == "" {
		name = "migflex-metrics"
	}
	dns := []string{name, "localhost"}
	if h, err := os.Hostname(); err == nil && !slices.Contains(dns, h) {
		dns = append(dns, h)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("generating a metrics certificate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("generating a metrics certificate serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		DNSNames:              dns,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		NotBefore:             now.Add(-time.Hour), // clocks a little behind
		NotAfter:              now.Add(selfSignedValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		// Its own CA, so that a client may trust it by adding it to its
		// roots.
		IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("signing the metrics certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("parsing the metrics certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// Addr is the bound address (useful with ":0").
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Run serves until ctx is done, then closes the server. It returns an
// error only when serving or the certificate watch fails.
func (s *Server) Run(ctx context.Context) error {
	log := klog.FromContext(ctx).WithValues("addr", s.ln.Addr().String())
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	if s.certs != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.certs.Start(ctx); err != nil {
				errs <- fmt.Errorf("metrics server: %w", err)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := s.http.ServeTLS(s.ln, "", ""); !errors.Is(err, http.ErrServerClosed) {
			errs <- fmt.Errorf("metrics server: %w", err)
		}
	}()
	certificate := "self-signed"
	if s.opts.CertDir != "" {
		certificate = s.opts.CertDir
	}
	log.Info("Serving metrics over HTTPS to authorized clients", "certificate", certificate, "alwaysAllowed", s.opts.AlwaysAllow)
	var err error
	select {
	case <-ctx.Done():
	case err = <-errs:
		log.Error(err, "Metrics server stopped")
	}
	// Scrapes are short; nothing to drain.
	_ = s.http.Close()
	cancel()
	wg.Wait()
	return err
}

// RunAlongside runs the server while fn runs, with a context that ends
// when either stops; fn's error wins over the server's.
func (s *Server) RunAlongside(ctx context.Context, fn func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srvErr := make(chan error, 1)
	go func() {
		err := s.Run(ctx)
		cancel()
		srvErr <- err
	}()
	err := fn(ctx)
	cancel()
	if e := <-srvErr; err == nil {
		err = e
	}
	return err
}

// NewRegistry is a component's metrics registry with what every Go
// process reports (the Go runtime's and the process's collectors), so
// that the three binaries' /metrics start alike.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}
