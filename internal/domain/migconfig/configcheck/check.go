// Package configcheck is the agent's validation of a mig.config against a
// node's GPUs, printed for people: what `device-plugin validate` shows for
// simulated GPUs and `kubectl migflex validate` for a real node's. It is
// the same migconfig code the agent runs (Parse, PlanConfig), with no NVML
// and no cgo, so the plugin stays a static binary.
package configcheck

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/migconfig"
)

// Exit codes of a check, which both commands return.
const (
	ExitOK      = 0
	ExitInvalid = 1 // the configuration the agent would apply, or the document, does not hold
	ExitUsage   = 2 // the command line or the input file is wrong
	ExitOthers  = 3 // linting: other configurations of the file do not hold
)

// Input is one check.
type Input struct {
	// Source names the document ("file.yaml", "standard input").
	Source string
	Data   []byte
	// GPUs are the node's, as the agent's discovery reports them; On
	// describes them ("2 x H100-SXM5-80GB (simulated)", "node gpu-1").
	GPUs []mig.GPU
	On   string
	// ConfigName is the configuration to check; empty: "selected", or
	// the only one, or with several every one (linting).
	ConfigName string
	Scope      migconfig.Scope
}

// Check prints what the agent would do with in.Data on in.GPUs and returns
// its exit code.
func Check(w io.Writer, in Input) int {
	spec, err := migconfig.Parse(in.Data)
	if err != nil {
		fmt.Fprintf(w, "%s: invalid:\n%s", in.Source, IndentLines(err))
		return ExitInvalid
	}
	if in.ConfigName == "" && len(spec.Configs) > 1 {
		return checkEach(w, spec, in)
	}
	name := in.ConfigName
	if name == "" {
		name = spec.Names()[0] // the only one
	}
	cfg, ok := spec.Configs[name]
	if !ok {
		_, err := spec.Select(name)
		fmt.Fprintf(w, "%s: %v\n", in.Source, err)
		return ExitInvalid
	}
	r, err := migconfig.PlanConfig(cfg, in.GPUs, in.Scope)
	if err != nil {
		fmt.Fprintf(w, "config %q on %s: invalid:\n%s", cfg.Name, in.On, IndentLines(err))
		return ExitInvalid
	}
	fmt.Fprintf(w, "config %q on %s: ok\n", cfg.Name, in.On)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	fmt.Fprintln(w)
	printPlan(w, in.GPUs, r.Plan)
	return ExitOK
}

// checkEach lints every configuration, one line each, in name order,
// and says which are invalid. Its exit code tells the configuration the
// agent would pick without a name ("selected") failing from only others
// failing.
func checkEach(w io.Writer, spec *migconfig.Spec, in Input) int {
	fmt.Fprintf(w, "%d configs on %s:\n", len(spec.Configs), in.On)
	var invalid []string
	for _, name := range spec.Names() {
		r, err := migconfig.PlanConfig(spec.Configs[name], in.GPUs, in.Scope)
		if err != nil {
			invalid = append(invalid, name)
			fmt.Fprintf(w, "%s: %s\n", name, strings.ReplaceAll(err.Error(), "\n", "; "))
			continue
		}
		if len(r.Notes) > 0 {
			fmt.Fprintf(w, "%s: ok (%s)\n", name, strings.Join(r.Notes, "; "))
			continue
		}
		fmt.Fprintf(w, "%s: ok\n", name)
	}
	if len(invalid) == 0 {
		return ExitOK
	}
	fmt.Fprintf(w, "%d of %d configs invalid: %s\n", len(invalid), len(spec.Configs), strings.Join(invalid, ", "))
	if slices.Contains(invalid, migconfig.SelectedName) {
		return ExitInvalid
	}
	return ExitOthers
}

// printPlan prints the layout each GPU ends with, then the steps.
func printPlan(w io.Writer, gpus []mig.GPU, plan migconfig.Plan) {
	byGPU := map[int]migconfig.GPUPlan{}
	for _, p := range plan.GPUs {
		byGPU[p.GPU] = p
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GPU\tMODEL\tMIG\tPROFILE\tPLACEMENT")
	for _, g := range gpus {
		p, covered := byGPU[g.Index]
		switch {
		case !covered:
			fmt.Fprintf(tw, "%d\t%s\t%s\t-\tnot in the config, left as it is\n", g.Index, g.Model, onOff(g.MigPending))
		case p.Mode == migconfig.ModeDisable || (p.Mode == migconfig.ModeUnchanged && !p.BeforeMode):
			fmt.Fprintf(tw, "%d\t%s\toff\t-\t-\n", g.Index, g.Model)
		case len(p.After()) == 0:
			fmt.Fprintf(tw, "%d\t%s\ton\t-\tno instances\n", g.Index, g.Model)
		default:
			for _, pl := range p.After() {
				fmt.Fprintf(tw, "%d\t%s\ton\t%s\t%d:%d\n", g.Index, g.Model, pl.Profile, pl.Start, pl.Size)
			}
		}
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	for _, p := range plan.GPUs {
		fmt.Fprintln(w, p.Summary())
	}
}

// IndentLines is err's text, each line indented by two spaces.
func IndentLines(err error) string {
	var b strings.Builder
	for _, line := range strings.Split(err.Error(), "\n") {
		b.WriteString("  " + line + "\n")
	}
	return b.String()
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
