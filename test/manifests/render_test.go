package manifests

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/migflex/migflex/internal/testsupport/testenv"
)

const (
	// namespace is where the manifests install migflex (the seed's name).
	namespace = "gpu-webhook"
	chartDir  = "deployments/helm/migflex"
	kustomize = "deployments/kustomize"
)

var (
	rootOnce sync.Once
	rootDir  string
	rootErr  error
)

// repoRoot is the directory of the migflex go.mod above this package.
func repoRoot(t testing.TB) string {
	t.Helper()
	rootOnce.Do(func() {
		dir, err := os.Getwd()
		if err != nil {
			rootErr = err
			return
		}
		for {
			if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.Contains(b, []byte("module github.com/migflex/migflex\n")) {
				rootDir = dir
				return
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				rootErr = errors.New("no migflex go.mod above the working directory")
				return
			}
			dir = parent
		}
	})
	if rootErr != nil {
		t.Fatal(rootErr)
	}
	return rootDir
}

// requireTool returns path when it is an executable file; otherwise it skips
// the test, or fails it when MIGFLEX_REQUIRE_ENVTEST=1, saying how to get it.
func requireTool(t testing.TB, name, path, howto string) string {
	t.Helper()
	if fi, err := os.Stat(path); err == nil && !fi.IsDir() && fi.Mode().Perm()&0o111 != 0 {
		return path
	}
	msg := fmt.Sprintf("%s not found at %s; %s", name, path, howto)
	if os.Getenv(testenv.EnvRequire) == "1" {
		t.Fatalf("%s (%s=1)", msg, testenv.EnvRequire)
	}
	t.Skip(msg)
	return ""
}

// helmPath is $HELM, else the pinned Helm that install-helm.sh puts in
// .cache/tools.
func helmPath(t testing.TB) string {
	t.Helper()
	p := os.Getenv("HELM")
	if p == "" {
		p = filepath.Join(repoRoot(t), ".cache/tools/helm")
	}
	return requireTool(t, "helm", p, "run deployments/hack/install-helm.sh (or set HELM)")
}

// kubectlPath is $KUBECTL, else the envtest assets' kubectl (the pinned
// build of the default minor; never the host's).
func kubectlPath(t testing.TB) string {
	t.Helper()
	p := os.Getenv("KUBECTL")
	if p == "" {
		dir := os.Getenv(testenv.EnvAssets)
		if dir == "" {
			dir = filepath.Join(repoRoot(t), ".cache/envtest")
		}
		p = filepath.Join(dir, "kubectl")
	}
	return requireTool(t, "kubectl", p, "run `make envtest-assets` (or set KUBECTL)")
}

// run runs a command in the repository root and returns its stdout; a
// failure reports stderr.
func run(t testing.TB, name string, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = repoRoot(t)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// scenario is one way of installing migflex with Helm.
type scenario struct {
	name string
	// set are --set arguments; values is a values file's content.
	set    []string
	values string
}

// helmArgs are the arguments after `helm template|lint` for s.
func (s scenario) helmArgs(t testing.TB) []string {
	args := []string{"--kube-version", kubeVersion(t)}
	for _, v := range s.set {
		args = append(args, "--set", v)
	}
	if s.values != "" {
		f := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(f, []byte(s.values), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-f", f)
	}
	return args
}

// helmTemplate renders the chart for s into the gpu-webhook namespace.
func helmTemplate(t testing.TB, s scenario) objects {
	t.Helper()
	args := append([]string{"template", "migflex", chartDir, "--namespace", namespace}, s.helmArgs(t)...)
	out, err := run(t, helmPath(t), args...)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, out)
}

// kustomizeBuild renders a kustomization under deployments/kustomize.
func kustomizeBuild(t testing.TB, dir string) objects {
	t.Helper()
	out, err := run(t, kubectlPath(t), "kustomize", filepath.Join(kustomize, dir))
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, out)
}

// objects are rendered manifests in their order.
type objects []*unstructured.Unstructured

// decode splits a multi-document YAML stream into objects, skipping empty
// documents.
func decode(t testing.TB, data []byte) objects {
	t.Helper()
	var out objects
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("decoding rendered manifests: %v\n%s", err, data)
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}

// key names an object: Kind/namespace/name, or Kind/name when cluster-scoped.
func key(o *unstructured.Unstructured) string {
	if o.GetNamespace() == "" {
		return o.GetKind() + "/" + o.GetName()
	}
	return o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
}

// keys lists the objects' keys, sorted.
func (objs objects) keys() []string {
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		out = append(out, key(o))
	}
	sort.Strings(out)
	return out
}

// find returns the object with the kind and name (in any namespace), or nil.
func (objs objects) find(kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// ofKind returns the objects of a kind.
func (objs objects) ofKind(kind string) objects {
	var out objects
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// get decodes the object kind/name into a typed object, failing the test
// when there is none.
func get[T any](t testing.TB, objs objects, kind, name string) *T {
	t.Helper()
	o := objs.find(kind, name)
	if o == nil {
		t.Fatalf("no %s %s among %v", kind, name, objs.keys())
	}
	return as[T](t, o)
}

func as[T any](t testing.TB, o *unstructured.Unstructured) *T {
	t.Helper()
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, out, true); err != nil {
		t.Fatalf("%s: %v", key(o), err)
	}
	return out
}
