package manifests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/migflex/migflex/internal/testsupport/testenv"
)

// scripts are the shell scripts that come with the manifests.
var scripts = []string{"hack/kind-up.sh", "deployments/hack/install-helm.sh"}

func TestScriptsPassShellcheck(t *testing.T) {
	sc, err := exec.LookPath("shellcheck")
	if err != nil {
		msg := "shellcheck not found; apt-get install shellcheck"
		if os.Getenv(testenv.EnvRequire) == "1" {
			t.Fatalf("%s (%s=1)", msg, testenv.EnvRequire)
		}
		t.Skip(msg)
	}
	for _, s := range scripts {
		t.Run(s, func(t *testing.T) {
			if out, err := run(t, sc, "--severity=style", "--external-sources", s); err != nil {
				t.Errorf("%v\n%s", err, out)
			}
		})
	}
}

// TestMakeTestInstallsShellcheck: `make test`, typed on a machine without
// shellcheck, installs it (hack/install-debs.sh) before anything uses it,
// and `make test-integration`, where its absence fails, does too.
func TestMakeTestInstallsShellcheck(t *testing.T) {
	for _, target := range []string{"test", "test-integration"} {
		t.Run(target, func(t *testing.T) {
			cmd := exec.Command("make", "--no-print-directory", "-n", target)
			cmd.Dir = repoRoot(t)
			cmd.Env = withoutEnv(os.Environ(), "MAKEFLAGS", "MFLAGS")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("make -n %s: %v\n%s", target, err, out)
			}
			install, use := -1, -1
			for i, line := range strings.Split(string(out), "\n") {
				if install < 0 && strings.Contains(line, "hack/install-debs.sh") && strings.Contains(line, "shellcheck:shellcheck") {
					install = i
				}
				if use < 0 && (strings.Contains(line, "shellcheck -x") || strings.Contains(line, "go test")) {
					use = i
				}
			}
			if install < 0 {
				t.Fatalf("make %s never installs shellcheck:\n%s", target, out)
			}
			if use >= 0 && use < install {
				t.Errorf("make %s uses shellcheck (line %d) before installing it (line %d):\n%s", target, use+1, install+1, out)
			}
		})
	}
}

// TestInstallDebs runs hack/install-debs.sh with shellcheck hidden from
// PATH and a stand-in apt-get: it installs what is missing and nothing else.
func TestInstallDebs(t *testing.T) {
	root := repoRoot(t)
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	tests := []struct {
		name    string
		present []string // commands on the PATH the script sees
		args    []string
		want    string // apt-get calls, one per line
	}{
		{"missing", nil, []string{"shellcheck:shellcheck"}, "update -qq\ninstall -y -qq --no-install-recommends shellcheck\n"},
		{"present", []string{"shellcheck"}, []string{"shellcheck:shellcheck"}, ""},
		{"only the missing ones", []string{"curl"}, []string{"curl:curl", "shellcheck:shellcheck"}, "update -qq\ninstall -y -qq --no-install-recommends shellcheck\n"},
		{"an absolute probe", nil, []string{"containernetworking-plugins:/nonexistent/bridge"}, "update -qq\ninstall -y -qq --no-install-recommends containernetworking-plugins\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bin := t.TempDir()
			log := filepath.Join(t.TempDir(), "apt-get.log")
			stub := "#!" + bash + "\necho \"$*\" >>" + log + "\n"
			if err := os.WriteFile(filepath.Join(bin, "apt-get"), []byte(stub), 0o755); err != nil {
				t.Fatal(err)
			}
			for _, c := range append([]string{"basename"}, tc.present...) {
				target, err := exec.LookPath(c)
				if err != nil {
					target = "/bin/true" // a stand-in: only its presence counts
				}
				if err := os.Symlink(target, filepath.Join(bin, c)); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command(bash, append([]string{filepath.Join(root, "hack/install-debs.sh")}, tc.args...)...)
			cmd.Env = []string{"PATH=" + bin}
			out, err := cmd.CombinedOutput()
			calls, _ := os.ReadFile(log)
			if os.Geteuid() != 0 {
				// Not root: it must name what to install and fail, or
				// succeed when nothing is missing.
				if (err == nil) != (tc.want == "") || (tc.want != "" && !strings.Contains(string(out), "missing")) || len(calls) != 0 {
					t.Errorf("as non-root: err %v, apt-get calls %q, output %s", err, calls, out)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if string(calls) != tc.want {
				t.Errorf("apt-get calls:\n%s\nwant:\n%s", calls, tc.want)
			}
		})
	}
}
