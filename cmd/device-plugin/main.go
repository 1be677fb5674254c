// Command device-plugin is migflex's node agent: it partitions the node's GPUs
// as the Node's mig.config asks and serves the resulting devices to the
// kubelet. Subcommands expose the config engine and the simulator offline.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/migflex/migflex/internal/offline"
)

// subcommands maps a first argument to its handler; no argument (or a flag)
// runs the node agent.
var subcommands = map[string]func(args []string, stdout, stderr io.Writer) int{
	"validate": offline.Validate,
	"models":   offline.Models,
	"sim":      offline.Sim,
	"probe":    offline.Probe,
}

const usage = `usage: device-plugin [flags]            run the node agent
       device-plugin validate -f FILE --gpus MODEL:N[,...] [--config-name N]
       device-plugin models [--models-file FILE]
       device-plugin sim COMMAND [flags]    inspect or poke the simulated GPUs
       device-plugin probe [--compare] [-o FILE]   dump the GPUs as a simulator config (read-only)
`

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if run, ok := subcommands[args[0]]; ok {
			return run(args[1:], stdout, stderr)
		}
		switch args[0] {
		case "help", "-h", "--help":
			// The subcommands have their own --help; the agent's flags are
			// the ones a user of the bare command needs to see.
			fmt.Fprint(stdout, usage+"\nnode agent flags:\n")
			return runAgent([]string{"--help"}, stdout, stdout)
		}
	}
	return runAgent(args, stdout, stderr)
}
