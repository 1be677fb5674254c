package planner

import (
	"os/exec"
	"strings"
	"testing"
)

// TestPlannerLinksNoWebhook: the planner reads pods and nodes through the
// shared scheduling view (schedview) and the Node contract (nodeinfo), not
// through the webhook's decision or the node agent's packages. Serving
// certificates (certgen, certwatch) are shared: the planner's metrics are
// served over TLS too.
func TestPlannerLinksNoWebhook(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/migflex/migflex/cmd/planner").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const own = "github.com/migflex/migflex/internal/"
	forbidden := []string{"webhook", "nodeagent"}
	found := false
	for line := range strings.Lines(string(out)) {
		path := strings.TrimSpace(line)
		if path == own+"planner" {
			found = true
		}
		for _, f := range forbidden {
			if path == own+f || strings.HasPrefix(path, own+f+"/") {
				t.Errorf("cmd/planner links %s", path)
			}
		}
	}
	if !found {
		t.Errorf("go list -deps cmd/planner does not list internal/planner:\n%s", out)
	}
}
