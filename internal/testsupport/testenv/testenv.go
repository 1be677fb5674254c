// Package testenv starts a real etcd and kube-apiserver for package-level
// integration tests, through controller-runtime's envtest.
//
// The binaries are the project's pinned builds (make envtest-assets puts them
// in <repo>/.cache/envtest); KUBEBUILDER_ASSETS overrides that directory. When
// neither has them, Start skips the test, so `go test ./...` works on a bare
// checkout; with MIGFLEX_REQUIRE_ENVTEST=1 (set by make test-integration) it
// fails instead, so CI can never pass by skipping.
//
// Each Start call runs its own control plane (a few seconds): tests stay
// isolated from each other and may use different API server flags. A test
// that needs several API servers' worth of cases should share one through
// subtests.
package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

const (
	// EnvAssets names the directory holding etcd, kube-apiserver and kubectl.
	EnvAssets = "KUBEBUILDER_ASSETS"
	// EnvRequire turns a missing control plane from a skip into a failure.
	EnvRequire = "MIGFLEX_REQUIRE_ENVTEST"

	// defaultAssetsDir is where hack/cluster/build.sh links the assets,
	// relative to the module root.
	defaultAssetsDir = ".cache/envtest"
	modulePath       = "github.com/migflex/migflex"

	// Hang protection only: a loaded two-core CI machine starts the API
	// server in seconds, but we never want a flaky failure from a tight bound.
	startTimeout = 2 * time.Minute
	stopTimeout  = time.Minute
)

// Option adjusts the control plane that Start runs.
type Option func(*options)

type options struct {
	apiServerFlags [][]string // name followed by its values, in call order
}

// WithAPIServerFlag sets a kube-apiserver flag, replacing envtest's default
// for it if there is one, e.g.
//
//	WithAPIServerFlag("enable-admission-plugins", "MutatingAdmissionWebhook")
//
// Several values produce the flag several times (--name=v1 --name=v2).
func WithAPIServerFlag(name string, values ...string) Option {
	return func(o *options) {
		o.apiServerFlags = append(o.apiServerFlags, append([]string{strings.TrimPrefix(name, "--")}, values...))
	}
}

// Start starts etcd and kube-apiserver and returns a rest.Config for an admin
// (system:masters) user. The control plane is stopped by t.Cleanup, so
// cleanups a test registers after Start (informers, servers) run before it.
//
// Besides envtest's defaults the API server runs with
// --enable-aggregator-routing=true: a webhook or APIService that names a
// Service is dialled at the Service's endpoints (there are none here, so the
// call fails) rather than at its ClusterIP, which nothing on a test machine
// routes and which must never leave the machine. Webhooks under test should
// use a clientConfig url on 127.0.0.1; the API server reaches those directly.
func Start(t testing.TB, opts ...Option) *rest.Config {
	t.Helper()
	return start(t, os.Getenv, moduleRoot, opts)
}

func start(t testing.TB, getenv func(string) string, root func() (string, error), opts []Option) *rest.Config {
	t.Helper()
	dir, err := resolveAssets(getenv, root)
	if err != nil {
		if errors.Is(err, errNoAssets) && getenv(EnvRequire) != "1" {
			t.Skipf("testenv: %v; run `make envtest-assets` (or set %s) to run this test", err, EnvAssets)
			return nil
		}
		t.Fatalf("testenv: %v; run `make envtest-assets` or set %s", err, EnvAssets)
		return nil
	}

	var o options
	for _, opt := range opts {
		opt(&o)
	}

	silenceControllerRuntimeLog()
	apiLog := &tailBuffer{max: 64 << 10}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    dir,
		ControlPlaneStartTimeout: startTimeout,
		ControlPlaneStopTimeout:  stopTimeout,
	}
	// Explicit paths: envtest would otherwise prefer $KUBEBUILDER_ASSETS even
	// when it is set but empty.
	etcdPath, apiPath := filepath.Join(dir, "etcd"), filepath.Join(dir, "kube-apiserver")
	if wrap, err := DieWithParent(t.TempDir(), etcdPath, apiPath); err != nil {
		t.Logf("testenv: %v; etcd and kube-apiserver will outlive this test binary if it is killed", err)
	} else {
		etcdPath, apiPath = wrap[0], wrap[1]
	}
	// State in t.TempDir, which the testing package removes after the
	// control plane has stopped (cleanups run last-registered first).
	env.ControlPlane.Etcd = &envtest.Etcd{Path: etcdPath, DataDir: t.TempDir()}
	env.ControlPlane.KubectlPath = filepath.Join(dir, "kubectl")
	api := env.ControlPlane.GetAPIServer()
	api.Path = apiPath
	api.CertDir = t.TempDir()
	api.Out, api.Err = apiLog, apiLog
	args := api.Configure()
	args.Set("enable-aggregator-routing", "true")
	for _, f := range o.apiServerFlags {
		args.Set(f[0], f[1:]...)
	}

	cfg, err := env.Start()
	if err != nil {
		// envtest may have started etcd before the API server failed.
		_ = env.Stop()
		t.Fatalf("testenv: starting etcd and kube-apiserver from %s: %v\nkube-apiserver output (tail):\n%s", dir, err, apiLog)
		return nil
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("testenv: stopping the control plane: %v", err)
		}
	})
	return cfg
}

// DieWithParent writes, into dir, a wrapper script of the same name for
// each binary that execs it with PR_SET_PDEATHSIG=SIGKILL (util-linux
// setpriv), and returns their paths. envtest stops its processes in
// t.Cleanup (a benchmark tool in its own Stop), which never runs when the
// process is killed (go test -timeout, ^C); without this, etcd and
// kube-apiserver would be left running, orphaned.
func DieWithParent(dir string, bins ...string) ([]string, error) {
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		return nil, fmt.Errorf("no setpriv to tie the control plane's lifetime to this process: %w", err)
	}
	out := make([]string, len(bins))
	for i, bin := range bins {
		if strings.ContainsAny(bin+setpriv, "'\n") {
			return nil, fmt.Errorf("cannot quote %q in a shell script", bin)
		}
		script := fmt.Sprintf("#!/bin/sh\nexec '%s' --pdeathsig KILL -- '%s' \"$@\"\n", setpriv, bin)
		out[i] = filepath.Join(dir, filepath.Base(bin))
		if err := os.WriteFile(out[i], []byte(script), 0o755); err != nil {
			return nil, fmt.Errorf("writing %s: %w", out[i], err)
		}
	}
	return out, nil
}

var errNoAssets = errors.New("no envtest binaries (etcd, kube-apiserver)")

// resolveAssets finds the directory holding the control-plane binaries:
// $KUBEBUILDER_ASSETS when set (and then it must be complete), else the
// default cache under the module root found by root.
func resolveAssets(getenv func(string) string, root func() (string, error)) (string, error) {
	if dir := getenv(EnvAssets); dir != "" {
		if err := hasBinaries(dir); err != nil {
			return "", fmt.Errorf("%s=%s: %w", EnvAssets, dir, err)
		}
		return dir, nil
	}
	r, err := root()
	if err != nil {
		return "", fmt.Errorf("%w: %s is unset and the module root is unknown: %v", errNoAssets, EnvAssets, err)
	}
	dir := filepath.Join(r, defaultAssetsDir)
	if err := hasBinaries(dir); err != nil {
		return "", fmt.Errorf("%w: %s is unset and %s has none: %v", errNoAssets, EnvAssets, dir, err)
	}
	return dir, nil
}

func hasBinaries(dir string) error {
	for _, name := range []string{"etcd", "kube-apiserver"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			return fmt.Errorf("%s is not an executable file", filepath.Join(dir, name))
		}
	}
	return nil
}

// moduleRoot walks up from the working directory (a test's package
// directory) to the migflex go.mod, skipping nested modules such as the
// wrapper modules under hack/.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && declaresModule(b, modulePath) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod for %s above the working directory", modulePath)
		}
		dir = parent
	}
}

func declaresModule(gomod []byte, path string) bool {
	for _, line := range strings.Split(string(gomod), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`) == path
		}
	}
	return false
}

var silenceOnce sync.Once

// silenceControllerRuntimeLog gives controller-runtime a logger: without one
// it prints a "log.SetLogger(...) was never called" stack trace into test
// output. envtest reports its failures as errors, which Start passes on.
func silenceControllerRuntimeLog() {
	silenceOnce.Do(func() { ctrllog.SetLogger(logr.Discard()) })
}

// tailBuffer keeps the last max bytes written to it: enough of the API
// server's log to explain a failed start without holding all of it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf bytes.Buffer
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if over := b.buf.Len() - b.max; over > 0 {
		b.buf.Next(over)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
