package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/platform/certwatch/certtest"
	"github.com/migflex/migflex/internal/testsupport/testutil"
	"github.com/migflex/migflex/internal/webhook/fallback"
)

// gatedSource is not ready until opened.
type gatedSource struct {
	open atomic.Bool
	snap *schedview.Snapshot
}

func (g *gatedSource) Snapshot() (*schedview.Snapshot, bool) {
	if !g.open.Load() {
		return nil, false
	}
	return g.snap, true
}

func newDecider(t *testing.T) *fallback.Decider {
	t.Helper()
	d, err := fallback.NewDecider(fallback.Options{Policy: fallback.DefaultPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// startServer runs a server on 127.0.0.1 and returns its base URL.
func startServer(t *testing.T, o Options) (*Server, string) {
	t.Helper()
	s, err := NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return s, "https://" + s.Addr().String()
}

func TestServer(t *testing.T) {
	ca := certtest.NewCA(t)
	dir := t.TempDir()
	first := ca.Issue(t)
	certtest.WriteSecretDir(t, dir, first)
	src := &gatedSource{snap: snapshotOf(gpuNode("a100", map[corev1.ResourceName]int64{mig1g10: 7}))}
	srv, base := startServer(t, Options{
		Listen:           "127.0.0.1:0",
		CertDir:          dir,
		CertPollInterval: -1,
		Decider:          newDecider(t),
		Source:           src,
	})
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	defer client.CloseIdleConnections() // before the server stops, which would wait for it
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := client.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d", code)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before sync = %d %q, want 503", code, body)
	}
	src.open.Store(true)
	if code, _ := get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz after sync = %d", code)
	}

	resp, err := client.Post(base+"/mutate", "application/json", bytes.NewReader(reviewFor(t, gpuPod("p", mig2g20, "1"), nil)))
	if err != nil {
		t.Fatal(err)
	}
	var review admissionv1.AdmissionReview
	err = json.NewDecoder(resp.Body).Decode(&review)
	resp.Body.Close()
	if err != nil || review.Response == nil || !review.Response.Allowed || len(review.Response.Patch) == 0 {
		t.Fatalf("mutate over TLS: %v %+v", err, review.Response)
	}

	// Metrics have a port of their own (Run serves MetricsHandler there),
	// not the admission port anyone who reaches the webhook can use.
	if code, _ := get("/metrics"); code != http.StatusNotFound {
		t.Errorf("/metrics on the admission port: %d, want 404", code)
	}
	rec := httptest.NewRecorder()
	srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	code, metrics := rec.Code, rec.Body.String()
	for _, want := range []string{
		`migflex_webhook_admissions_total{result="rewritten"} 1`,
		`migflex_webhook_fallbacks_total{from="2g.20gb",to="1g.10gb"} 1`,
		"migflex_webhook_decision_duration_seconds_count 1",
		`migflex_webhook_request_duration_seconds_count{code="200"} 1`,
		"go_goroutines",
	} {
		if code != http.StatusOK || !strings.Contains(metrics, want) {
			t.Errorf("/metrics (%d) lacks %q", code, want)
		}
	}

	// A rotated certificate is served without a restart.
	next := ca.Issue(t)
	certtest.WriteSecretDir(t, dir, next)
	addr := strings.TrimPrefix(base, "https://")
	testutil.Eventually(t, "the rotated certificate", func() bool {
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool()})
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.Cmp(next.Serial) == 0
	})
}

// The server refuses TLS before 1.2. The client offers exactly one version
// and allows the old ones (Go's client would otherwise refuse them itself,
// and the test would pass whatever the server allows), so a refusal can only
// come from the server: it answers with a protocol_version alert.
func TestServerTLSVersions(t *testing.T) {
	ca := certtest.NewCA(t)
	dir := t.TempDir()
	certtest.WriteSecretDir(t, dir, ca.Issue(t))
	_, base := startServer(t, Options{
		Listen:           "127.0.0.1:0",
		CertDir:          dir,
		CertPollInterval: -1,
		Decider:          newDecider(t),
		Source:           StaticSource{},
	})
	addr := strings.TrimPrefix(base, "https://")
	tests := map[string]struct {
		version uint16
		served  bool
	}{
		"TLS 1.0": {tls.VersionTLS10, false},
		"TLS 1.1": {tls.VersionTLS11, false},
		"TLS 1.2": {tls.VersionTLS12, true},
		"TLS 1.3": {tls.VersionTLS13, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			conn, err := tls.Dial("tcp", addr, &tls.Config{
				RootCAs:    ca.Pool(),
				MinVersion: tc.version,
				MaxVersion: tc.version,
			})
			if tc.served {
				if err != nil {
					t.Fatalf("handshake: %v", err)
				}
				defer conn.Close()
				if got := conn.ConnectionState().Version; got != tc.version {
					t.Errorf("negotiated %s, want %s", tls.VersionName(got), tls.VersionName(tc.version))
				}
				return
			}
			if err == nil {
				conn.Close()
				t.Fatalf("the server completed a %s handshake", name)
			}
			// "remote error" is an alert the client received, not one it raised.
			if !strings.Contains(err.Error(), "remote error: tls: protocol version not supported") {
				t.Errorf("handshake error = %v, want the server's protocol version alert", err)
			}
		})
	}
}

func TestServerWithInformers(t *testing.T) {
	ca := certtest.NewCA(t)
	dir := t.TempDir()
	certtest.WriteFiles(t, dir, ca.Issue(t))
	client := fake.NewClientset(gpuNode("a100", map[corev1.ResourceName]int64{mig1g10: 7}))
	_, base := startServer(t, Options{
		Listen:  "127.0.0.1:0",
		CertDir: dir,
		Decider: newDecider(t),
		Client:  client,
	})
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	testutil.Eventually(t, "/readyz", func() bool {
		resp, err := hc.Get(base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

func TestNewServerErrors(t *testing.T) {
	ca := certtest.NewCA(t)
	dir := t.TempDir()
	certtest.WriteFiles(t, dir, ca.Issue(t))
	d := newDecider(t)
	src := StaticSource{}
	tests := map[string]struct {
		o    Options
		want string
	}{
		"no decider":          {Options{CertDir: dir, Source: src}, "no decider"},
		"no source or client": {Options{CertDir: dir, Decider: d}, "neither a snapshot source nor a client"},
		"no certificate":      {Options{CertDir: t.TempDir(), Decider: d, Source: src}, "reading certificate"},
		"bad address":         {Options{Listen: "256.0.0.1:x", CertDir: dir, Decider: d, Source: src}, "listening on 256.0.0.1:x"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := NewServer(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewServer error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}
