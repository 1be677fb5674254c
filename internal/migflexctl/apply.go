package migflexctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/migflex/migflex/internal/domain/migconfig"
	"github.com/migflex/migflex/internal/domain/migconfig/configcheck"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
)

// annotationPatch is the merge patch setting one annotation: the document
// travels in the request body, never on a command line, so its size is
// bounded by the API server's limit on annotations, not the OS's 128 KiB
// per argument.
func annotationPatch(key, value string) ([]byte, error) {
	return json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}})
}

func applyCommand() command {
	var v validateFlags
	var key string
	var force bool
	c := command{name: "apply", args: "-f FILE NODE [--key nvidia.com/mig.config|run.ai/mig.config] [--force]"}
	c.flags = func(fs *pflag.FlagSet) {
		v.register(fs)
		fs.StringVar(&key, "key", nodeinfo.AnnotationMigConfig, "annotation to write: "+nodeinfo.AnnotationMigConfig+" or "+nodeinfo.AnnotationRunAIConfig)
		fs.BoolVar(&force, "force", false, "write the file even when the agent's validation against the node refuses it")
	}
	c.run = func(ctx context.Context, r *runner, args []string) int {
		if len(args) != 1 || v.file == "" {
			return r.usageError(&c, "apply needs -f FILE and one NODE")
		}
		if key != nodeinfo.AnnotationMigConfig && key != nodeinfo.AnnotationRunAIConfig {
			return r.usageError(&c, "--key must be %s or %s, got %q", nodeinfo.AnnotationMigConfig, nodeinfo.AnnotationRunAIConfig, key)
		}
		if _, err := v.scope(); err != nil {
			return r.usageError(&c, "%v", err)
		}
		v.node = args[0]
		data, err := migconfig.ReadDocumentFile(v.file, r.In)
		if errors.Is(err, migconfig.ErrTooLarge) {
			fmt.Fprintf(r.Err, "error: %s: %v; the agent would refuse it, so it is not written\n", v.file, err)
			return ExitAttention
		}
		if err != nil {
			return r.fail(err)
		}
		node, err := r.node(ctx, v.node)
		if err != nil {
			return r.fail(err)
		}
		code, err := v.check(io.Discard, node, data)
		switch {
		case err != nil && !force:
			return r.fail(fmt.Errorf("cannot check the file against node %s (--force writes it anyway): %w", v.node, err))
		case code != configcheck.ExitOK && !force:
			fmt.Fprintf(r.Err, "error: the agent would refuse %s on node %s; not written (--force writes it anyway):\n", v.file, v.node)
			_, _ = v.check(r.Err, node, data)
			return ExitAttention
		}
		patch, err := annotationPatch(key, string(data))
		if err != nil {
			return r.fail(err)
		}
		client, _, err := r.kube()
		if err != nil {
			return r.fail(err)
		}
		if _, err := client.CoreV1().Nodes().Patch(ctx, v.node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "kubectl-migflex"}); err != nil {
			return r.fail(fmt.Errorf("writing %s on node %s: %w", key, v.node, err))
		}
		fmt.Fprintf(r.Out, "node/%s annotated: %s (%d bytes)\n", v.node, key, len(data))
		if node.Labels[nodeinfo.LabelPlanner] == nodeinfo.PlannerEnabled && key == nodeinfo.AnnotationMigConfig {
			fmt.Fprintf(r.Out, "note: the node is opted in to the planner, which leaves it alone for a while after another writer's change, then owns %s again\n", key)
		}
		fmt.Fprintf(r.Out, "The agent reports the result in the label %s (kubectl migflex status %s).\n", nodeinfo.LabelMigConfigState, v.node)
		return ExitOK
	}
	return c
}
