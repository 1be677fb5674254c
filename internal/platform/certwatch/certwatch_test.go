package certwatch

import (
	"context"
	"crypto/tls"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/migflex/migflex/internal/platform/certwatch/certtest"
	"github.com/migflex/migflex/internal/testsupport/testutil"
)

func servedSerial(t *testing.T, w *Watcher) *big.Int {
	t.Helper()
	c, err := w.GetCertificate(nil)
	if err != nil || c == nil || c.Leaf == nil {
		t.Fatalf("GetCertificate = %v, %v", c, err)
	}
	return c.Leaf.SerialNumber
}

func start(t *testing.T, w *Watcher) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	})
}

func TestNewErrors(t *testing.T) {
	ca := certtest.NewCA(t)
	a, b := ca.Issue(t), ca.Issue(t)
	write := func(dir, name string, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tests := map[string]struct {
		setup func(dir string)
		want  string
	}{
		"no certificate": {
			setup: func(string) {},
			want:  "reading certificate",
		},
		"no key": {
			setup: func(dir string) { write(dir, "tls.crt", a.Cert) },
			want:  "reading key",
		},
		"key of another certificate": {
			setup: func(dir string) {
				write(dir, "tls.crt", a.Cert)
				write(dir, "tls.key", b.Key)
			},
			want: "loading key pair",
		},
		"garbage": {
			setup: func(dir string) {
				write(dir, "tls.crt", []byte("not pem"))
				write(dir, "tls.key", []byte("not pem"))
			},
			want: "loading key pair",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(dir)
			_, err := New(Options{Dir: dir})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New error = %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := New(Options{}); err == nil {
		t.Error("New without a directory succeeded")
	}
}

func TestReloadKeepsPairOnMismatch(t *testing.T) {
	ca := certtest.NewCA(t)
	dir := t.TempDir()
	first := ca.Issue(t)
	certtest.WriteFiles(t, dir, first)
	w, err := New(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	// Half of an update: the new certificate, still the old key.
	second := ca.Issue(t)
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), second.Cert, 0o600); err != nil {
		t.Fatal(err)
	}
	if changed, err := w.reload(); err == nil || changed {
		t.Fatalf("reload of a mismatched pair = %v, %v; want an error", changed, err)
	}
	if got := servedSerial(t, w); got.Cmp(first.Serial) != 0 {
		t.Fatalf("serial = %v after a failed reload, want the old %v", got, first.Serial)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), second.Key, 0o600); err != nil {
		t.Fatal(err)
	}
	if changed, err := w.reload(); err != nil || !changed {
		t.Fatalf("reload of the completed pair = %v, %v", changed, err)
	}
	if changed, err := w.reload(); err != nil || changed {
		t.Fatalf("reload of unchanged files = %v, %v; want no change", changed, err)
	}
	if got := servedSerial(t, w); got.Cmp(second.Serial) != 0 {
		t.Fatalf("serial = %v, want %v", got, second.Serial)
	}
	if got := w.Reloads(); got != 1 {
		t.Errorf("Reloads() = %d, want 1", got)
	}
}

func TestSecretSymlinkSwap(t *testing.T) {
	ca := certtest.NewCA(t)
	dir := t.TempDir()
	first := ca.Issue(t)
	certtest.WriteSecretDir(t, dir, first)
	w, err := New(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if got := servedSerial(t, w); got.Cmp(first.Serial) != 0 {
		t.Fatalf("serial = %v, want %v", got, first.Serial)
	}
	start(t, w)

	// Serve TLS with the watcher, and check what a client is handed.
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: w.GetCertificate, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				_ = c.(*tls.Conn).Handshake()
				c.Close()
			}()
		}
	}()
	dialSerial := func() *big.Int {
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"})
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber
	}
	if got := dialSerial(); got.Cmp(first.Serial) != 0 {
		t.Fatalf("served serial = %v, want %v", got, first.Serial)
	}

	for range 3 {
		next := ca.Issue(t)
		certtest.WriteSecretDir(t, dir, next)
		testutil.Eventually(t, "the swapped certificate to be served", func() bool { return dialSerial().Cmp(next.Serial) == 0 })
	}
}

func TestPlainFilesReplaced(t *testing.T) {
	ca := certtest.NewCA(t)
	dir := t.TempDir()
	certtest.WriteFiles(t, dir, ca.Issue(t))
	w, err := New(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	start(t, w)
	// The certificate lands before its key: the watcher must not give up on
	// the mismatch in between.
	next := ca.Issue(t)
	certtest.WriteFiles(t, dir, next)
	testutil.Eventually(t, "the new pair", func() bool { return servedSerial(t, w).Cmp(next.Serial) == 0 })
}

func TestPollingCatchesAReplacedDirectory(t *testing.T) {
	ca := certtest.NewCA(t)
	parent := t.TempDir()
	dir := filepath.Join(parent, "certs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	certtest.WriteFiles(t, dir, ca.Issue(t))
	w, err := New(Options{Dir: dir, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start(t, w)
	// Replace the directory itself: the inotify watch stays on the old one.
	fresh := filepath.Join(parent, "certs.new")
	if err := os.Mkdir(fresh, 0o755); err != nil {
		t.Fatal(err)
	}
	next := ca.Issue(t)
	certtest.WriteFiles(t, fresh, next)
	if err := os.Rename(dir, filepath.Join(parent, "certs.old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(fresh, dir); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the polled pair", func() bool { return servedSerial(t, w).Cmp(next.Serial) == 0 })
}

func TestStartFailsWithoutDirectory(t *testing.T) {
	ca := certtest.NewCA(t)
	dir := t.TempDir()
	certtest.WriteFiles(t, dir, ca.Issue(t))
	w, err := New(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err == nil {
		t.Fatal("Start on a removed directory succeeded")
	}
	// The pair loaded before is still served.
	if _, err := w.GetCertificate(nil); err != nil {
		t.Fatal(err)
	}
}

// A pair that fails to load is logged at the default verbosity, so that one
// that stays broken is seen; the same failure again only once per
// repeatLogInterval, a different one at once. The pair in use stays.
func TestReloadFailureIsLogged(t *testing.T) {
	ca := certtest.NewCA(t)
	dir := t.TempDir()
	first := ca.Issue(t)
	certtest.WriteFiles(t, dir, first)
	w, err := New(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w.now = func() time.Time { return now }
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(0), ktesting.BufferLogs(true)))
	// failures are the log entries at the default verbosity about a failed reload.
	failures := func() []string {
		var out []string
		for _, e := range logger.GetSink().(ktesting.Underlier).GetBuffer().Data() {
			if e.Verbosity == 0 && strings.Contains(e.Message, "not reloaded") {
				out = append(out, e.Err.Error())
			}
		}
		return out
	}
	write := func(name string, data []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	second := ca.Issue(t)
	write("tls.crt", second.Cert) // the key is still first's
	w.reloadAndLog(logger)
	w.reloadAndLog(logger)
	if got := failures(); len(got) != 1 || !strings.Contains(got[0], "private key does not match public key") {
		t.Fatalf("after a mismatched pair, twice: logged %q, want the mismatch once", got)
	}
	now = now.Add(repeatLogInterval)
	w.reloadAndLog(logger)
	if got := len(failures()); got != 2 {
		t.Fatalf("the same failure after %v: %d lines, want it logged again (2)", repeatLogInterval, got)
	}
	write("tls.key", []byte("not pem"))
	w.reloadAndLog(logger)
	if got := failures(); len(got) != 3 || !strings.Contains(got[2], "failed to find any PEM data in key input") {
		t.Fatalf("a different failure: logged %q, want it at once", got)
	}
	if got := servedSerial(t, w); got.Cmp(first.Serial) != 0 {
		t.Fatalf("serial = %v after failed reloads, want the old %v", got, first.Serial)
	}

	write("tls.key", second.Key)
	w.reloadAndLog(logger)
	if got := servedSerial(t, w); got.Cmp(second.Serial) != 0 {
		t.Fatalf("serial = %v, want %v", got, second.Serial)
	}
	// After a good pair, the first failure is news again.
	write("tls.crt", ca.Issue(t).Cert)
	w.reloadAndLog(logger)
	if got := len(failures()); got != 4 {
		t.Fatalf("a failure after a good pair: %d lines, want it logged (4)", got)
	}
}

// TestPollIntervalDefault: the watcher, not its callers, owns the default.
func TestPollIntervalDefault(t *testing.T) {
	dir := t.TempDir()
	certtest.WriteFiles(t, dir, certtest.NewCA(t).Issue(t))
	for in, want := range map[time.Duration]time.Duration{0: DefaultPollInterval, -1: -1, time.Second: time.Second} {
		w, err := New(Options{Dir: dir, PollInterval: in})
		if err != nil {
			t.Fatal(err)
		}
		if w.opts.PollInterval != want {
			t.Errorf("PollInterval %v: the watcher polls every %v, want %v", in, w.opts.PollInterval, want)
		}
	}
}
