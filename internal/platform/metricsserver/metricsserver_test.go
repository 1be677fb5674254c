package metricsserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/migflex/migflex/internal/platform/certwatch/certtest"
)

func testRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "migflex_test_total", Help: "a test counter"})
	reg.MustRegister(c)
	c.Inc()
	return reg
}

// start runs a server on a free loopback port until the test ends.
func start(t *testing.T, o Options) *Server {
	t.Helper()
	o.Addr = "127.0.0.1:0"
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return s
}

func client(tlsConfig *tls.Config) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig, ForceAttemptHTTP2: true}}
}

func get(t *testing.T, c *http.Client, url, token string) (int, string, *http.Response) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b), resp
}

// With no certificate given the server makes its own; /metrics needs a
// token that may read it, /healthz answers anyone.
func TestServesSelfSignedToAuthorizedClients(t *testing.T) {
	var healthy atomic.Bool
	s := start(t, Options{Name: "migflex-test", Handler: Handler(testRegistry(), &healthy, "not synced yet"), Reviewer: NewReviewer(newFakeAPI())})
	base := "https://" + s.Addr().String()
	insecure := client(&tls.Config{InsecureSkipVerify: true})

	healthy.Store(false)
	if code, body, _ := get(t, insecure, base+"/healthz", ""); code != 503 || !strings.Contains(body, "not synced yet") {
		t.Errorf("unhealthy /healthz: %d %q", code, body)
	}
	healthy.Store(true)
	if code, body, _ := get(t, insecure, base+"/healthz", ""); code != 200 || !strings.Contains(body, "ok") {
		t.Errorf("healthy /healthz: %d %q", code, body)
	}
	if code, _, _ := get(t, insecure, base+"/metrics", ""); code != 401 {
		t.Errorf("/metrics without a token: %d, want 401", code)
	}
	if code, _, _ := get(t, insecure, base+"/metrics", "other-token"); code != 403 {
		t.Errorf("/metrics with a token that may not read: %d, want 403", code)
	}
	code, body, resp := get(t, insecure, base+"/metrics", "reader-token")
	if code != 200 || !strings.Contains(body, "migflex_test_total 1") {
		t.Errorf("/metrics with a reader's token: %d %q", code, body)
	}
	if resp.ProtoMajor != 1 {
		t.Errorf("served over %s; HTTP/2 is off", resp.Proto)
	}
	leaf := resp.TLS.PeerCertificates[0]
	if leaf.Subject.CommonName != "migflex-test" || !slices.Contains(leaf.DNSNames, "migflex-test") || leaf.NotAfter.Before(time.Now().Add(300*24*time.Hour)) {
		t.Errorf("served a certificate for %s %v until %s, want one naming the component, valid for a year", leaf.Subject, leaf.DNSNames, leaf.NotAfter)
	}
	// A client that trusts that very certificate verifies it.
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	if code, _, _ := get(t, client(&tls.Config{RootCAs: roots, ServerName: "localhost"}), base+"/healthz", ""); code != 200 {
		t.Errorf("a client trusting the served certificate: %d", code)
	}

	// Verifying clients refuse the self-signed certificate...
	if _, err := client(&tls.Config{}).Get(base + "/healthz"); err == nil || !errors.As(err, new(*tls.CertificateVerificationError)) {
		t.Errorf("a verifying client: %v, want a certificate verification error", err)
	}
	// ...and plain HTTP is no way in.
	if code, body, _ := get(t, client(nil), "http://"+s.Addr().String()+"/metrics", "reader-token"); code != 400 || !strings.Contains(body, "HTTPS") {
		t.Errorf("plain HTTP: %d %q, want 400", code, body)
	}
}

// A mounted key pair is served, and a rotated one replaces it without a
// restart.
func TestServesAndReloadsAMountedCertificate(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t)
	first := ca.Issue(t, "localhost")
	certtest.WriteSecretDir(t, dir, first)
	var healthy atomic.Bool
	healthy.Store(true)
	s := start(t, Options{CertDir: dir, CertPollInterval: 100 * time.Millisecond, Handler: Handler(testRegistry(), &healthy, ""), Reviewer: NewReviewer(newFakeAPI())})
	_, port, _ := net.SplitHostPort(s.Addr().String())
	url := "https://localhost:" + port + "/metrics"
	verifying := func() *http.Client {
		return client(&tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"})
	}
	code, _, resp := get(t, verifying(), url, "reader-token")
	if code != 200 {
		t.Fatalf("%d", code)
	}
	serial := resp.TLS.PeerCertificates[0].SerialNumber

	certtest.WriteSecretDir(t, dir, ca.Issue(t, "localhost"))
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, _, resp := get(t, verifying(), url, "reader-token")
		if resp.TLS.PeerCertificates[0].SerialNumber.Cmp(serial) != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the rotated certificate was never served")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestNewFailsAtStart(t *testing.T) {
	var healthy atomic.Bool
	h, r := Handler(testRegistry(), &healthy, ""), NewReviewer(newFakeAPI())
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"no address", Options{Handler: h, Reviewer: r}, "no listen address"},
		{"no reviewer", Options{Addr: "127.0.0.1:0", Handler: h}, "reviewer"},
		{"a bad address", Options{Addr: "no-such-host-:-1", Handler: h, Reviewer: r}, "serving metrics on no-such-host-:-1"},
		{"a port in use", Options{Addr: busy.Addr().String(), Handler: h, Reviewer: r}, "serving metrics on " + busy.Addr().String()},
		{"no certificate in the directory", Options{Addr: "127.0.0.1:0", CertDir: t.TempDir(), Handler: h, Reviewer: r}, "metrics server certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(tc.o)
			if err == nil {
				_ = s.ln.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// RunAlongside stops the server when the work ends, and the work when the
// server fails.
func TestRunAlongside(t *testing.T) {
	var healthy atomic.Bool
	o := Options{Addr: "127.0.0.1:0", Handler: Handler(testRegistry(), &healthy, ""), Reviewer: NewReviewer(newFakeAPI())}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	workErr := errors.New("work failed")
	if err := s.RunAlongside(t.Context(), func(context.Context) error { return workErr }); !errors.Is(err, workErr) {
		t.Errorf("RunAlongside: %v, want the work's error", err)
	}
	if _, err := http.Get("http://" + s.Addr().String() + "/healthz"); err == nil {
		t.Error("still serving after the work ended")
	}

	s, err = New(o)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.ln.Close() // serving fails at once
	err = s.RunAlongside(t.Context(), func(ctx context.Context) error {
		<-ctx.Done()
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "metrics server") {
		t.Errorf("RunAlongside with a failed server: %v, want its error", err)
	}
}
