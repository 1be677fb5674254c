package manifests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// cgoProbe is a cgo program with one deprecation warning, as go-nvml's
// wrappers have (every warning its first build printed), and one other
// warning, which must still show.
const cgoProbe = `package main

/*
__attribute__((deprecated)) static int old_call(void) { return 1; }
static int use_old(void) { return old_call(); }
#warning "migflex-other-warning"
*/
import "C"

func main() { _ = C.use_old() }
`

// TestBuildSilencesOnlyDeprecationWarnings: the C flags the Makefile gives
// its recipes (make build, make test) silence deprecation warnings and no
// other.
func TestBuildSilencesOnlyDeprecationWarnings(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no gcc: cgo cannot build here")
	}
	root := repoRoot(t)
	// What a recipe of the Makefile sees in its environment.
	printer := filepath.Join(t.TempDir(), "print.mk")
	if err := os.WriteFile(printer, []byte("print-cgo-cflags:\n\t@printf '%s' \"$$CGO_CFLAGS\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", "--no-print-directory", "-s", "-f", "Makefile", "-f", printer, "print-cgo-cflags")
	cmd.Dir = root
	cmd.Env = withoutEnv(os.Environ(), "CGO_CFLAGS", "MAKEFLAGS", "MFLAGS")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make: %v\n%s", err, out)
	}
	flags := string(out)
	t.Logf("CGO_CFLAGS in the Makefile's recipes: %q", flags)

	dir := t.TempDir()
	for name, content := range map[string]string{"go.mod": "module probe\n\ngo 1.22\n", "main.go": cgoProbe} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "probe"), ".")
	build.Dir = dir
	build.Env = append(withoutEnv(os.Environ(), "CGO_CFLAGS", "GOFLAGS"), "CGO_ENABLED=1", "CGO_CFLAGS="+flags)
	out, err = build.CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "deprecated") {
		t.Errorf("the build prints deprecation warnings with CGO_CFLAGS=%q:\n%s", flags, out)
	}
	if !strings.Contains(string(out), "migflex-other-warning") {
		t.Errorf("the build hides other C warnings with CGO_CFLAGS=%q:\n%s", flags, out)
	}
}

// withoutEnv is env without the variables named.
func withoutEnv(env []string, names ...string) []string {
	var out []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		keep := true
		for _, n := range names {
			if name == n {
				keep = false
			}
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}
