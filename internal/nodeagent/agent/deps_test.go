package agent

import (
	"os/exec"
	"strings"
	"testing"
)

// TestAgentLinksNoDevicePlugin: the agent reaches the kubelet's device side
// only through its Server port, so that another server (a DRA kubelet
// plugin) is a new package and wiring, not a change here. It may read the
// kubelet's pod-resources API (the busy check), never the device-plugin API
// or migflex's device plugin.
func TestAgentLinksNoDevicePlugin(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/migflex/migflex/internal/nodeagent/agent").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	forbidden := []string{"k8s.io/kubelet/pkg/apis/deviceplugin/", "github.com/migflex/migflex/internal/nodeagent/deviceplugin"}
	deps := 0
	for line := range strings.Lines(string(out)) {
		path := strings.TrimSpace(line)
		deps++
		for _, f := range forbidden {
			if strings.HasPrefix(path, f) {
				t.Errorf("internal/nodeagent/agent links %s: it must serve through its Server port only", path)
			}
		}
	}
	if deps < 10 {
		t.Errorf("go list printed %d packages, fewer than the agent has:\n%s", deps, out)
	}
}
