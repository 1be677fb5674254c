package nvmlbackend

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
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

// TestFaultsStayInTheSimulator: the simulator's faults (sim.Fault,
// ArmFault, ...) are named only by the simulator, the `device-plugin sim`
// subcommand that sends them, and tests, so no code path can arm one in
// production or on the real backend. The real backend has no method to
// take one either.
func TestFaultsStayInTheSimulator(t *testing.T) {
	type faultArmer interface {
		ArmFault(sim.Fault) (string, error)
	}
	if _, ok := any(realLibrary{}).(faultArmer); ok {
		t.Error("the real backend can arm a fault")
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	allowed := []string{"internal/nvml/nvmlbackend/sim/", "internal/nodeagent/subcmd/sim.go"}
	faultAPI := regexp.MustCompile(`^(Fault\w*|CallSite\w*|Call[A-Z]\w*|ArmFault|ClearFaults|Faults|ReadFaults|OpFault|OpClearFaults|MaxHang|MaxStorm\w*)$`)
	const simPath = "github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if name := d.Name(); rel != "." && (strings.HasPrefix(name, ".") || name == "vendor" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") || slices.ContainsFunc(allowed, func(a string) bool { return strings.HasPrefix(rel, a) }) {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		checked++
		simName := ""
		for _, imp := range f.Imports {
			if strings.Trim(imp.Path.Value, `"`) == simPath {
				simName = "sim"
				if imp.Name != nil {
					simName = imp.Name.Name
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			x, isIdent := sel.X.(*ast.Ident)
			onSim := isIdent && simName != "" && x.Name == simName && faultAPI.MatchString(sel.Sel.Name)
			if onSim || sel.Sel.Name == "ArmFault" || sel.Sel.Name == "ClearFaults" {
				t.Errorf("%s names the simulator's fault %s: faults must stay in the simulator, its sim subcommand and tests", rel, sel.Sel.Name)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Errorf("checked only %d files under %s", checked, root)
	}
}
