package manifests

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// minorsFile is the one list of supported Kubernetes minors (see its
// header); each is pinned by the wrapper module hack/cluster/k8s/<minor>.
const minorsFile = "hack/cluster/k8s/minors"

// minor is one line of minorsFile.
type minor struct {
	name    string // 1.35
	n       int    // 35
	release string // v1.35.4, from its wrapper go.mod
	isDef   bool
	until   string
	gates   string
}

var (
	minorsOnce sync.Once
	minors     []minor
	minorsErr  error
)

// supportedMinors reads minorsFile and each minor's pinned release, oldest
// first.
func supportedMinors(t testing.TB) []minor {
	t.Helper()
	root := repoRoot(t)
	minorsOnce.Do(func() { minors, minorsErr = readMinors(root) })
	if minorsErr != nil {
		t.Fatal(minorsErr)
	}
	return minors
}

var requireKubernetes = regexp.MustCompile(`(?m)^require k8s\.io/kubernetes (v1\.(\d+)\.\d+)$`)

func readMinors(root string) ([]minor, error) {
	data, err := os.ReadFile(filepath.Join(root, minorsFile))
	if err != nil {
		return nil, err
	}
	var out []minor
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) != 4 {
			return nil, fmt.Errorf("%s: %q: want 4 columns (minor, default, until, gates)", minorsFile, sc.Text())
		}
		m := minor{name: f[0], isDef: f[1] == "default", until: f[2], gates: strings.TrimPrefix(f[3], "-")}
		n, err := strconv.Atoi(strings.TrimPrefix(m.name, "1."))
		if err != nil || !strings.HasPrefix(m.name, "1.") {
			return nil, fmt.Errorf("%s: minor %q is not 1.<n>", minorsFile, m.name)
		}
		m.n = n
		mod, err := os.ReadFile(filepath.Join(root, "hack/cluster/k8s", m.name, "go.mod"))
		if err != nil {
			return nil, fmt.Errorf("minor %s has no wrapper module: %w", m.name, err)
		}
		r := requireKubernetes.FindSubmatch(mod)
		if r == nil || string(r[2]) != strconv.Itoa(n) {
			return nil, fmt.Errorf("hack/cluster/k8s/%s/go.mod does not require a k8s.io/kubernetes v1.%d release", m.name, n)
		}
		m.release = string(r[1])
		if len(out) > 0 && out[len(out)-1].n >= n {
			return nil, fmt.Errorf("%s: %s after %s: want oldest first", minorsFile, m.name, out[len(out)-1].name)
		}
		out = append(out, m)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s lists no minor", minorsFile)
	}
	return out, sc.Err()
}

// defaultMinor is the minor the local cluster and envtest run unless told.
func defaultMinor(t testing.TB) minor {
	t.Helper()
	var def []minor
	for _, m := range supportedMinors(t) {
		if m.isDef {
			def = append(def, m)
		}
	}
	if len(def) != 1 {
		t.Fatalf("%s marks %d minors default, want one", minorsFile, len(def))
	}
	return def[0]
}

// kubeVersion is the cluster version helm renders for: the default minor's
// release, as the harness runs it.
func kubeVersion(t testing.TB) string { return strings.TrimPrefix(defaultMinor(t).release, "v") }

// The list is whole: one default, every wrapper module listed, and a
// wrapper module for every minor listed.
func TestSupportedMinorsArePinned(t *testing.T) {
	root := repoRoot(t)
	defaultMinor(t)
	listed := map[string]bool{}
	for _, m := range supportedMinors(t) {
		listed[m.name] = true
	}
	dirs, err := filepath.Glob(filepath.Join(root, "hack/cluster/k8s/*/go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		name := filepath.Base(filepath.Dir(d))
		if !listed[name] {
			t.Errorf("hack/cluster/k8s/%s pins a Kubernetes that %s does not list: add it there or remove it", name, minorsFile)
		}
	}
}

// What users read agrees with the list: README.md, docs/INSTALL.md and
// docs/SUPPORT.md name every supported release, the chart's kubeVersion
// and hack/kind-up.sh's check start at the oldest minor.
func TestSupportMatrixInDocs(t *testing.T) {
	root := repoRoot(t)
	ms := supportedMinors(t)
	for _, f := range []string{"README.md", "docs/INSTALL.md", "docs/SUPPORT.md"} {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if !bytes.Contains(data, []byte(m.release)) {
				t.Errorf("%s does not name Kubernetes %s (%s)", f, m.release, minorsFile)
			}
		}
		if !bytes.Contains(data, []byte("`"+defaultMinor(t).release+"`")) && !bytes.Contains(data, []byte(defaultMinor(t).release+" (default)")) {
			t.Errorf("%s does not say that %s is the default", f, defaultMinor(t).release)
		}
	}
	chart, err := os.ReadFile(filepath.Join(root, chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("kubeVersion: \">=%s.0-0\"", ms[0].name)
	if !bytes.Contains(chart, []byte(want)) {
		t.Errorf("%s/Chart.yaml: want %s (the oldest supported minor)", chartDir, want)
	}
	kindUp, err := os.ReadFile(filepath.Join(root, "hack/kind-up.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("\nMIN_MINOR=%d\n", ms[0].n); !bytes.Contains(kindUp, []byte(want)) {
		t.Errorf("hack/kind-up.sh: want MIN_MINOR=%d (the oldest supported minor)", ms[0].n)
	}
}
