// Command kubectl-migflex is the `kubectl migflex` plugin: what migflex
// does with a cluster's GPUs, and why a pod waits (internal/migflexctl).
package main

import (
	"github.com/migflex/migflex/internal/migflexctl"
	"github.com/migflex/migflex/internal/platform/cli"
)

func main() { cli.Main(migflexctl.Main) }
