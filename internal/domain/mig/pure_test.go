package mig_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestPurePackagesLinkNoCgo keeps the domain, the model tables, the config
// engine, the planner (and its controller and command), the webhook's
// decision and the DRA driver (which the planner and the webhook will read
// ResourceSlices through) free of cgo: go-nvml is a
// cgo package, and one import of it (through a type, a constant) would tie
// the planner and the static webhook to glibc. The NVML adapter
// (mig/nvmlmig) and the simulator may link it; these may not.
func TestPurePackagesLinkNoCgo(t *testing.T) {
	pure := []string{
		"github.com/migflex/migflex/internal/domain/mig",
		"github.com/migflex/migflex/internal/domain/gpumodel",
		"github.com/migflex/migflex/internal/domain/migconfig/...",
		"github.com/migflex/migflex/internal/planner/solver/...",
		"github.com/migflex/migflex/internal/webhook/fallback/...",
		"github.com/migflex/migflex/internal/domain/nodeinfo",
		"github.com/migflex/migflex/internal/domain/dra/...",
		"github.com/migflex/migflex/internal/domain/schedview",
		"github.com/migflex/migflex/internal/platform/textcut",
		"github.com/migflex/migflex/internal/planner/plansnap",
		"github.com/migflex/migflex/internal/planner",
		"github.com/migflex/migflex/cmd/planner",
	}
	args := append([]string{"list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}} {{join .CgoFiles \",\"}}{{end}}"}, pure...)
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := 0
	for line := range strings.Lines(string(out)) {
		path, cgoFiles, _ := strings.Cut(strings.TrimSpace(line), " ")
		if path == "" {
			continue
		}
		deps++
		if cgoFiles != "" || strings.HasPrefix(path, "github.com/NVIDIA/go-nvml/") {
			t.Errorf("%s links cgo (%s): the pure packages %v must build with CGO_ENABLED=0", path, cgoFiles, pure)
		}
	}
	if deps < len(pure) {
		t.Errorf("go list printed %d packages, want at least %d:\n%s", deps, len(pure), out)
	}
}
