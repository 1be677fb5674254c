package migflexctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/migconfig"
	"github.com/migflex/migflex/internal/domain/migconfig/configcheck"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
)

// NodeGPUs are a node's GPUs as its agent's discovery reported them, read
// back from what it publishes: the layout annotation (GPUs, MIG modes,
// instances) and the profiles annotation (each model's profile table).
// The PCI device id, which a device-filter matches, is not published: it
// comes from the built-in model of that name or product name; notes say
// which GPUs have none.
func NodeGPUs(n *corev1.Node) ([]mig.GPU, []string, error) {
	raw, ok := n.Annotations[nodeinfo.AnnotationLayout]
	if !ok {
		return nil, nil, fmt.Errorf("node %s has no %s annotation: its agent has not reported its GPUs", n.Name, nodeinfo.AnnotationLayout)
	}
	layout, err := nodeinfo.ParseLayout(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("node %s: %w", n.Name, err)
	}
	var models []nodeinfo.Model
	if raw, ok := n.Annotations[nodeinfo.AnnotationProfiles]; ok {
		if models, err = nodeinfo.ParseProfiles(raw); err != nil {
			return nil, nil, fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	builtin := gpumodel.Builtin()
	var notes []string
	out := make([]mig.GPU, 0, len(layout))
	for _, g := range layout {
		mode, pending, _ := strings.Cut(g.MigMode, " (pending ")
		pending = strings.TrimSuffix(pending, ")")
		if pending == "" {
			pending = mode
		}
		mg := mig.GPU{
			Index: g.Index, UUID: g.UUID, Model: g.Model,
			MigCapable: g.MigMode != nodeinfo.MigModeNA,
			MigEnabled: mode == nodeinfo.MigModeEnabled, MigPending: pending == nodeinfo.MigModeEnabled,
		}
		for _, m := range models {
			if m.Name == g.Model {
				mg.Profiles = m.MIGProfiles()
			}
		}
		for _, bm := range builtin {
			if bm.Name == g.Model || bm.ProductName == g.Model {
				mg.PCIDeviceID = bm.PCIDeviceID
			}
		}
		if mg.PCIDeviceID == 0 {
			notes = append(notes, fmt.Sprintf("GPU %d (%s): PCI device id unknown, so no device-filter matches it", g.Index, g.Model))
		}
		for _, in := range g.Instances {
			mg.Instances = append(mg.Instances, mig.Instance{
				Profile: in.Profile, Start: in.Placement.Start, Size: in.Placement.Size,
				GIID: in.GI, CIID: in.CI, HasCI: in.UUID != "", UUID: in.UUID,
			})
		}
		out = append(out, mg)
	}
	return out, notes, nil
}

// describeNode says "node gpu-1 (2 x H100-SXM5-80GB)".
func describeNode(name string, gpus []mig.GPU) string {
	var parts []string
	for i := 0; i < len(gpus); {
		j := i
		for j < len(gpus) && gpus[j].Model == gpus[i].Model {
			j++
		}
		parts = append(parts, fmt.Sprintf("%d x %s", j-i, gpus[i].Model))
		i = j
	}
	if len(parts) == 0 {
		return "node " + name + " (no GPUs)"
	}
	return "node " + name + " (" + strings.Join(parts, ", ") + ")"
}

type validateFlags struct {
	file, node, configName, source string
}

func (v *validateFlags) register(fs *pflag.FlagSet) {
	fs.StringVarP(&v.file, "filename", "f", "", "mig.config file; - reads standard input")
	fs.StringVar(&v.configName, "config-name", "", `configuration to check (default "selected", or the only one; with several, each)`)
	fs.StringVar(&v.source, "source", "annotation", "how the agent reads the file: annotation (written for this node) or file (the label's config file, shared by a fleet)")
}

func (v *validateFlags) scope() (migconfig.Scope, error) {
	switch v.source {
	case "annotation":
		return migconfig.ScopeNode, nil
	case "file":
		return migconfig.ScopeFleet, nil
	}
	return 0, fmt.Errorf("--source must be annotation or file, got %q", v.source)
}

// check runs the agent's validation of data on node and returns its exit
// code; w gets what it prints.
func (v *validateFlags) check(w io.Writer, node *corev1.Node, data []byte) (int, error) {
	scope, err := v.scope()
	if err != nil {
		return ExitUsage, err
	}
	gpus, notes, err := NodeGPUs(node)
	if err != nil {
		return ExitError, err
	}
	for _, n := range notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	source := v.file
	if source == "-" {
		source = "standard input"
	}
	return configcheck.Check(w, configcheck.Input{
		Source: source, Data: data, GPUs: gpus, On: describeNode(node.Name, gpus), ConfigName: v.configName, Scope: scope,
	}), nil
}

func validateCommand() command {
	var v validateFlags
	c := command{name: "validate", args: "-f FILE --node NODE [--config-name NAME] [--source annotation|file]"}
	c.flags = func(fs *pflag.FlagSet) {
		v.register(fs)
		fs.StringVar(&v.node, "node", "", "node whose GPUs to check against")
	}
	c.run = func(ctx context.Context, r *runner, args []string) int {
		if len(args) > 0 || v.file == "" || v.node == "" {
			return r.usageError(&c, "validate needs -f FILE and --node NODE, and no arguments")
		}
		if _, err := v.scope(); err != nil {
			return r.usageError(&c, "%v", err)
		}
		data, err := migconfig.ReadDocumentFile(v.file, r.In)
		if errors.Is(err, migconfig.ErrTooLarge) {
			fmt.Fprintf(r.Out, "%s: invalid:\n  %v\n", v.file, err)
			return ExitAttention
		}
		if err != nil {
			return r.fail(err)
		}
		node, err := r.node(ctx, v.node)
		if err != nil {
			return r.fail(err)
		}
		code, err := v.check(r.Out, node, data)
		if err != nil {
			return r.fail(err)
		}
		return code
	}
	return c
}

// node reads the named Node, for the commands that check a file against
// its GPUs.
func (r *runner) node(ctx context.Context, name string) (*corev1.Node, error) {
	client, _, err := r.kube()
	if err != nil {
		return nil, err
	}
	n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	return n, nil
}
