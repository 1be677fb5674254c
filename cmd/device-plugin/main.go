// Command device-plugin is migflex's node agent: it partitions the node's GPUs
// as the Node's mig.config asks and serves the resulting devices to the
// kubelet. Subcommands expose the config engine and the simulator offline
// (internal/nodeagent).
package main

import (
	"github.com/migflex/migflex/internal/nodeagent"
	"github.com/migflex/migflex/internal/platform/cli"
)

func main() { cli.ServerMain(nodeagent.Main) }
