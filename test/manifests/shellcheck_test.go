package manifests

import (
	"os"
	"os/exec"
	"testing"

	"github.com/migflex/migflex/internal/testenv"
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
