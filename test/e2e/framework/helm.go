package framework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	// Helm keeps its caches and repository config under $HOME; nothing it
	// needs here is there (the chart is a local directory).
	return c.runTool(ctx, "helm", bin, args)
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
