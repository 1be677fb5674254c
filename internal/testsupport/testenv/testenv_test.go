package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// mkAssets creates a directory holding executable files with the given names.
func mkAssets(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestResolveAssets(t *testing.T) {
	complete := mkAssets(t, "etcd", "kube-apiserver", "kubectl")
	noEtcd := mkAssets(t, "kube-apiserver")
	rootWithCache := t.TempDir()
	if err := os.MkdirAll(filepath.Join(rootWithCache, defaultAssetsDir), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"etcd", "kube-apiserver"} {
		if err := os.WriteFile(filepath.Join(rootWithCache, defaultAssetsDir, n), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	notExec := t.TempDir()
	for _, n := range []string{"etcd", "kube-apiserver"} {
		if err := os.WriteFile(filepath.Join(notExec, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	root := func(dir string) func() (string, error) { return func() (string, error) { return dir, nil } }
	noRoot := func() (string, error) { return "", fmt.Errorf("no go.mod") }

	for name, tc := range map[string]struct {
		env      string
		root     func() (string, error)
		want     string
		wantErr  string // substring; "" means success
		noAssets bool   // the error must be errNoAssets (Start may skip)
	}{
		"env names a complete dir":          {env: complete, root: noRoot, want: complete},
		"env wins over the default cache":   {env: complete, root: root(rootWithCache), want: complete},
		"env names an incomplete dir fails": {env: noEtcd, root: root(rootWithCache), wantErr: "KUBEBUILDER_ASSETS=" + noEtcd},
		"env names non-executables fails":   {env: notExec, root: noRoot, wantErr: "not an executable"},
		"default cache under the root":      {root: root(rootWithCache), want: filepath.Join(rootWithCache, defaultAssetsDir)},
		"no env, empty root":                {root: root(t.TempDir()), wantErr: "has none", noAssets: true},
		"no env, no root":                   {root: noRoot, wantErr: "module root is unknown", noAssets: true},
	} {
		t.Run(name, func(t *testing.T) {
			getenv := func(k string) string {
				if k == EnvAssets {
					return tc.env
				}
				return ""
			}
			got, err := resolveAssets(getenv, tc.root)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("resolveAssets: %v", err)
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("dir (-want +got):\n%s", diff)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("resolveAssets error = %v, want one containing %q", err, tc.wantErr)
			}
			if got := errors.Is(err, errNoAssets); got != tc.noAssets {
				t.Errorf("errors.Is(err, errNoAssets) = %v, want %v (err: %v)", got, tc.noAssets, err)
			}
		})
	}
}

// recordingTB captures how start gives up; the methods start does not call
// panic through the nil embedded TB.
type recordingTB struct {
	testing.TB
	skipped, fatal string
}

func (r *recordingTB) Helper()                   {}
func (r *recordingTB) Skipf(f string, a ...any)  { r.skipped = fmt.Sprintf(f, a...) }
func (r *recordingTB) Fatalf(f string, a ...any) { r.fatal = fmt.Sprintf(f, a...) }

func TestStartWithoutAssets(t *testing.T) {
	emptyRoot := t.TempDir()
	incomplete := mkAssets(t, "kubectl")
	for name, tc := range map[string]struct {
		env                 map[string]string
		wantSkip, wantFatal bool
	}{
		"skips by default":                 {env: map[string]string{}, wantSkip: true},
		"fails when required":              {env: map[string]string{EnvRequire: "1"}, wantFatal: true},
		"only 1 means required":            {env: map[string]string{EnvRequire: "true"}, wantSkip: true},
		"a wrong KUBEBUILDER_ASSETS fails": {env: map[string]string{EnvAssets: incomplete}, wantFatal: true},
	} {
		t.Run(name, func(t *testing.T) {
			rec := &recordingTB{}
			cfg := start(rec, func(k string) string { return tc.env[k] }, func() (string, error) { return emptyRoot, nil }, nil)
			if cfg != nil {
				t.Errorf("start returned a config without assets")
			}
			if got := rec.skipped != ""; got != tc.wantSkip {
				t.Errorf("skipped = %v (%q), want %v", got, rec.skipped, tc.wantSkip)
			}
			if got := rec.fatal != ""; got != tc.wantFatal {
				t.Errorf("fatal = %v (%q), want %v", got, rec.fatal, tc.wantFatal)
			}
			if msg := rec.skipped + rec.fatal; !strings.Contains(msg, "make envtest-assets") {
				t.Errorf("message %q does not say how to get the assets", msg)
			}
		})
	}
}

func TestModuleRoot(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	// This package lives at <root>/internal/testsupport/testenv.
	wd, _ := os.Getwd()
	if diff := cmp.Diff(filepath.Join(root, "internal", "testsupport", "testenv"), wd); diff != "" {
		t.Errorf("package dir relative to the module root (-want +got):\n%s", diff)
	}
}

func TestDeclaresModule(t *testing.T) {
	for name, tc := range map[string]struct {
		gomod string
		want  bool
	}{
		"plain":          {"module github.com/migflex/migflex\n\ngo 1.26\n", true},
		"quoted":         {"// c\nmodule \"github.com/migflex/migflex\"\n", true},
		"nested wrapper": {"module github.com/migflex/migflex/hack/cluster/k8s\n", false},
		"no module line": {"go 1.26\n", false},
	} {
		t.Run(name, func(t *testing.T) {
			if got := declaresModule([]byte(tc.gomod), modulePath); got != tc.want {
				t.Errorf("declaresModule = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestTailBuffer(t *testing.T) {
	b := &tailBuffer{max: 8}
	for _, s := range []string{"0123", "4567", "89ab"} {
		if _, err := b.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff("456789ab", b.String()); diff != "" {
		t.Errorf("tail (-want +got):\n%s", diff)
	}
}

func TestStartServesTheAPI(t *testing.T) {
	cfg := Start(t)
	cs := kubernetes.NewForConfigOrDie(cfg)
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("server version: %v", err)
	}
	// The pinned build the assets point at (hack/cluster/build.sh links
	// .cache/envtest/kube-apiserver to .cache/k8s/<release>/bin), not some
	// other apiserver.
	dir, err := resolveAssets(os.Getenv, moduleRoot)
	if err != nil {
		t.Fatal(err)
	}
	bin, err := filepath.EvalSymlinks(filepath.Join(dir, "kube-apiserver"))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Base(filepath.Dir(filepath.Dir(bin))); !strings.HasPrefix(want, "v1.") {
		t.Logf("kube-apiserver at %s is not a pinned build's; its version is %s", bin, v.GitVersion)
	} else if v.GitVersion != want {
		t.Errorf("server version %s, want %s (the build at %s)", v.GitVersion, want, bin)
	}
	ctx := t.Context()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "testenv"}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "testenv", metav1.GetOptions{}); err != nil {
		t.Fatalf("read back namespace: %v", err)
	}
}

// Without the NamespaceLifecycle admission plugin the API server stores
// objects in namespaces that do not exist; that makes the flag observable.
func TestWithAPIServerFlag(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "does-not-exist"}}

	t.Run("default keeps NamespaceLifecycle", func(t *testing.T) {
		cs := kubernetes.NewForConfigOrDie(Start(t))
		_, err := cs.CoreV1().ConfigMaps(cm.Namespace).Create(t.Context(), cm, metav1.CreateOptions{})
		if !apierrors.IsNotFound(err) {
			t.Fatalf("create in a missing namespace: err = %v, want NotFound", err)
		}
	})
	t.Run("flag disables it", func(t *testing.T) {
		cs := kubernetes.NewForConfigOrDie(Start(t, WithAPIServerFlag("--disable-admission-plugins", "ServiceAccount,NamespaceLifecycle")))
		if _, err := cs.CoreV1().ConfigMaps(cm.Namespace).Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create in a missing namespace with NamespaceLifecycle disabled: %v", err)
		}
	})
}

// A webhook under test listens on 127.0.0.1 and is registered with a url;
// this is the path other packages' webhook tests rely on.
func TestMutatingWebhookOnLoopbackURL(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(labelConfigMaps))
	t.Cleanup(srv.Close)
	cs := kubernetes.NewForConfigOrDie(Start(t))
	ctx := t.Context()

	url := srv.URL + "/mutate"
	fail := admissionregv1.Fail
	none := admissionregv1.SideEffectClassNone
	whc := &admissionregv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "testenv"},
		Webhooks: []admissionregv1.MutatingWebhook{{
			Name: "label.testenv.migflex.io",
			ClientConfig: admissionregv1.WebhookClientConfig{
				URL:      &url,
				CABundle: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}),
			},
			Rules: []admissionregv1.RuleWithOperations{{
				Operations: []admissionregv1.OperationType{admissionregv1.Create},
				Rule:       admissionregv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, whc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create webhook configuration: %v", err)
	}

	// The API server picks the configuration up asynchronously; dry-run
	// creates until one comes back mutated.
	var got map[string]string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "default"}}
		out, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, fmt.Errorf("dry-run create: %w", err)
		}
		got = out.Labels
		return got != nil, nil
	})
	if err != nil {
		t.Fatalf("the webhook never mutated a ConfigMap: %v", err)
	}
	if diff := cmp.Diff(map[string]string{"mutated-by": "testenv"}, got); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
}

// labelConfigMaps is a minimal mutating webhook: it labels every object.
func labelConfigMaps(w http.ResponseWriter, r *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("bad AdmissionReview: %v", err), http.StatusBadRequest)
		return
	}
	pt := admissionv1.PatchTypeJSONPatch
	review.Response = &admissionv1.AdmissionResponse{
		UID:       review.Request.UID,
		Allowed:   true,
		PatchType: &pt,
		Patch:     []byte(`[{"op":"add","path":"/metadata/labels","value":{"mutated-by":"testenv"}}]`),
	}
	review.Request = nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&review)
}

// TestControlPlaneDiesWithTestBinary kills a test binary that started a
// control plane, skipping its cleanups as go test -timeout would, and
// checks that etcd and kube-apiserver do not outlive it.
func TestControlPlaneDiesWithTestBinary(t *testing.T) {
	if os.Getenv(helperEnv) == "1" {
		return // the helper's own run of this test
	}
	if _, err := resolveAssets(os.Getenv, moduleRoot); err != nil {
		Start(t) // skips or fails exactly as Start does
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperStartAndDie$", "-test.v")
	// The killed helper cannot clean up its temporary directories: keep
	// them in one of ours.
	cmd.Env = append(os.Environ(), helperEnv+"=1", "TMPDIR="+t.TempDir())
	out, _ := cmd.CombinedOutput() // it dies of SIGKILL by design
	var pids []int
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, "child-pid "); ok {
			pid, err := strconv.Atoi(strings.TrimSpace(rest))
			if err != nil {
				t.Fatalf("helper printed %q: %v", line, err)
			}
			pids = append(pids, pid)
		}
	}
	if len(pids) < 2 {
		t.Fatalf("helper reported %d control-plane processes, want etcd and kube-apiserver; output:\n%s", len(pids), out)
	}
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for _, pid := range pids {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Errorf("control-plane processes %v outlived the killed test binary: %v", pids, err)
		for _, pid := range pids { // do not leak them from this test either
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

const helperEnv = "MIGFLEX_TESTENV_HELPER"

// TestHelperStartAndDie is run by TestControlPlaneDiesWithTestBinary in a
// child test binary; on its own it does nothing.
func TestHelperStartAndDie(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		return
	}
	Start(t)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(self) {
			fmt.Printf("child-pid %d\n", pid)
		}
	}
	_ = syscall.Kill(self, syscall.SIGKILL)
}
