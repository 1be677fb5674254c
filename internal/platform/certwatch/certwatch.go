// Package certwatch serves a TLS key pair from a directory and reloads it when
// the files change, so that a rotated certificate is used without a restart.
//
// It watches the directory, not the files: Kubernetes updates a mounted
// Secret by writing a new timestamped directory and atomically renaming the
// "..data" symlink over the old one, which a watch on the file paths (the
// old symlink targets) would never see. Every event in the directory
// triggers a reload; one that fails (a half-written pair, a key that does
// not match the certificate yet) keeps the pair in use, is logged as an
// error (repeats of the same failure at most every ten minutes), and the
// next event retries.
package certwatch

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/klog/v2"
)

// Default file names in the directory, as in a kubernetes.io/tls Secret.
const (
	DefaultCertFile = "tls.crt"
	DefaultKeyFile  = "tls.key"
)

// Options configure a Watcher.
type Options struct {
	// Dir is the directory holding the pair (the Secret's mount point).
	Dir string
	// CertFile and KeyFile are names in Dir; empty means tls.crt and tls.key.
	CertFile, KeyFile string
	// PollInterval re-reads the files this often as well, a safety net for
	// an event fsnotify cannot deliver (the directory itself replaced).
	// Zero means DefaultPollInterval; negative disables polling.
	PollInterval time.Duration
}

// DefaultPollInterval is how often the files are re-read besides the
// watch: a missed event costs a rotation at most this long.
const DefaultPollInterval = time.Minute

// Watcher holds the current key pair.
type Watcher struct {
	opts Options

	mu       sync.RWMutex
	cert     *tls.Certificate
	certPEM  []byte
	keyPEM   []byte
	reloaded int

	// now is the clock of the failure log's rate limit.
	now func() time.Time
	// failed is the last reload failure logged at the default verbosity,
	// and failedLogged when; "" once a pair loads again. Only Start's
	// goroutine uses them.
	failed       string
	failedLogged time.Time
}

// repeatLogInterval is how often a reload failure that repeats the last one
// is logged again at the default verbosity.
const repeatLogInterval = 10 * time.Minute

// New loads the pair once; it fails when the files are missing or invalid,
// so that a server never starts without a certificate.
func New(o Options) (*Watcher, error) {
	if o.Dir == "" {
		return nil, errors.New("certwatch: no directory")
	}
	if o.CertFile == "" {
		o.CertFile = DefaultCertFile
	}
	if o.KeyFile == "" {
		o.KeyFile = DefaultKeyFile
	}
	if o.PollInterval == 0 {
		o.PollInterval = DefaultPollInterval
	}
	w := &Watcher{opts: o, now: time.Now}
	if _, err := w.reload(); err != nil {
		return nil, err
	}
	return w, nil
}

// GetCertificate is the tls.Config callback.
func (w *Watcher) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.cert, nil
}

// Reloads is how many times a changed pair was loaded after the first.
func (w *Watcher) Reloads() int {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.reloaded
}

// Start watches the directory until ctx is done. It returns an error only
// when the watch cannot be set up.
func (w *Watcher) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("dir", w.opts.Dir)
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("certwatch: creating watcher: %w", err)
	}
	defer fw.Close()
	if err := fw.Add(w.opts.Dir); err != nil {
		return fmt.Errorf("certwatch: watching %s: %w", w.opts.Dir, err)
	}
	// The files may have changed between New and the watch.
	w.reloadAndLog(logger)

	var tick <-chan time.Time
	if w.opts.PollInterval > 0 {
		t := time.NewTicker(w.opts.PollInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-fw.Events:
			if !ok {
				return nil
			}
			// Chmod alone (atime, permission changes) changes no content.
			if ev.Op == fsnotify.Chmod {
				continue
			}
			w.reloadAndLog(logger)
		case err, ok := <-fw.Errors:
			if !ok {
				return nil
			}
			logger.Error(err, "Certificate directory watch error")
		case <-tick:
			w.reloadAndLog(logger)
		}
	}
}

func (w *Watcher) reloadAndLog(logger klog.Logger) {
	changed, err := w.reload()
	if err != nil {
		w.logFailure(logger, err)
		return
	}
	// The files form a valid pair again (new or the one in use): a later
	// failure is news.
	w.failed = ""
	if changed {
		w.mu.RLock()
		leaf := w.cert.Leaf
		w.mu.RUnlock()
		kv := []any{}
		if leaf != nil {
			kv = append(kv, "serial", leaf.SerialNumber.String(), "notAfter", leaf.NotAfter, "dnsNames", leaf.DNSNames)
		}
		logger.Info("Loaded new TLS certificate", kv...)
	}
}

// logFailure reports a pair that did not load. The old pair stays in use.
// A pair replaced file by file fails for a moment; one that stays broken
// (a renewed certificate with the wrong key, say) would otherwise go
// unnoticed until the old certificate expires, so failures are logged at
// the default verbosity: a new one at once, a repeat of the last one every
// repeatLogInterval, and at V(2) in between.
func (w *Watcher) logFailure(logger klog.Logger, err error) {
	now := w.now()
	if msg := err.Error(); msg != w.failed || now.Sub(w.failedLogged) >= repeatLogInterval {
		w.failed, w.failedLogged = msg, now
		kv := []any{}
		w.mu.RLock()
		if leaf := w.cert.Leaf; leaf != nil {
			kv = append(kv, "servingSerial", leaf.SerialNumber.String(), "servingNotAfter", leaf.NotAfter)
		}
		w.mu.RUnlock()
		logger.Error(err, "Certificate not reloaded, still serving the previous one", kv...)
		return
	}
	logger.V(2).Info("Certificate still not reloaded, still serving the previous one", "err", err)
}

// reload reads both files and swaps the pair in when their content changed
// and they form a valid pair.
func (w *Watcher) reload() (bool, error) {
	certPEM, err := os.ReadFile(filepath.Join(w.opts.Dir, w.opts.CertFile))
	if err != nil {
		return false, fmt.Errorf("certwatch: reading certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(w.opts.Dir, w.opts.KeyFile))
	if err != nil {
		return false, fmt.Errorf("certwatch: reading key: %w", err)
	}
	w.mu.RLock()
	same := w.cert != nil && bytes.Equal(certPEM, w.certPEM) && bytes.Equal(keyPEM, w.keyPEM)
	w.mu.RUnlock()
	if same {
		return false, nil
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return false, fmt.Errorf("certwatch: loading key pair from %s: %w", w.opts.Dir, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cert != nil {
		w.reloaded++
	}
	w.cert, w.certPEM, w.keyPEM = &cert, certPEM, keyPEM
	return true, nil
}
