package testutil

import (
	"os/exec"
	"strings"
	"testing"
)

// TestProductionLinksNoTestSupport: the binaries link neither the shared
// test support (internal/testsupport) nor a package's fake (kubeletstub,
// podresourcestest, simtest, migconfigtest, certtest, nvmlcalltest), which sit beside the
// package they stand in for only so a reader finds them there.
func TestProductionLinksNoTestSupport(t *testing.T) {
	const mod = "github.com/migflex/migflex/"
	out, err := exec.Command("go", "list", "-deps", mod+"cmd/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	fakes := []string{"/kubeletstub", "/podresourcestest", "/simtest", "/migconfigtest", "/certtest", "/nvmlcalltest"}
	var ours int
	for line := range strings.Lines(string(out)) {
		path := strings.TrimSpace(line)
		if !strings.HasPrefix(path, mod) {
			continue
		}
		ours++
		if strings.HasPrefix(path, mod+"internal/testsupport/") {
			t.Errorf("a binary links %s", path)
		}
		for _, f := range fakes {
			if strings.HasSuffix(path, f) {
				t.Errorf("a binary links the fake %s", path)
			}
		}
	}
	// The check means something only if go list saw the binaries' own
	// packages.
	if ours < 20 {
		t.Errorf("go list -deps cmd/... named %d of migflex's packages, want the binaries' whole tree:\n%s", ours, out)
	}
}
