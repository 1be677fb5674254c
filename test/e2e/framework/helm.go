package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

const (
	// EnvHelm names the helm binary; e2e.sh sets it to the pinned one
	// (deployments/hack/install-helm.sh).
	EnvHelm = "HELM"
	// Chart is the Helm chart, relative to the repository root.
	Chart = "deployments/helm/migflex"
)

// Helm runs the pinned helm against the cluster and returns its stdout;
// the error carries stderr.
func (c *Cluster) Helm(ctx context.Context, args ...string) (string, error) {
	bin, err := helmPath()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	// Helm keeps its caches and repository config under $HOME; nothing it
	// needs here is there (the chart is a local directory).
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if c.Warnings != nil {
		c.Warnings.AddOutput("helm "+strings.Join(args, " "), stderr.String())
	}
	if err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// helmPath is $HELM, else the pinned helm `make helm` installs under the
// module's .cache/tools. A helm on PATH is never used: its version is
// unknown.
func helmPath() (string, error) {
	if p := os.Getenv(EnvHelm); p != "" {
		return p, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	p := filepath.Join(root, ".cache", "tools", "helm")
	if _, err := os.Stat(p); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("no helm at %s: run `make helm` or set %s", p, EnvHelm)
		}
		return "", err
	}
	return p, nil
}
