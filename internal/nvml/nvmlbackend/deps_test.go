package nvmlbackend

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNVMLLinksNoServing: the NVML layer (the backends, the simulator, the
// adapter and the probe, their tests too) knows nothing of how devices are
// served. What the simulator's devices need in a container is declared
// here (SimulatedDevices) and turned into an Allocate response or a CDI
// spec by the device plugin and the DRA driver, through interfaces of
// their own; an import the other way would tie the backends to the
// serving layer's APIs.
func TestNVMLLinksNoServing(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-test", "github.com/migflex/migflex/internal/nvml/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const own = "github.com/migflex/migflex/internal/"
	forbidden := []string{own + "nodeagent", own + "webhook", own + "planner", "k8s.io/kubelet/"}
	found := false
	for line := range strings.Lines(string(out)) {
		path, _, _ := strings.Cut(strings.TrimSpace(line), " ") // "p [p.test]"
		if path == own+"nvml/nvmlbackend/sim" {
			found = true
		}
		for _, f := range forbidden {
			if path == f || strings.HasPrefix(path, strings.TrimSuffix(f, "/")+"/") {
				t.Errorf("internal/nvml links %s: the NVML layer must not know the serving layer", path)
			}
		}
	}
	if !found {
		t.Errorf("go list -deps internal/nvml/... does not list the simulator:\n%s", out)
	}
}
