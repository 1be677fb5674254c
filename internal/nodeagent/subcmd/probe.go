package subcmd

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend"
	"github.com/migflex/migflex/internal/nvml/probe"
	"github.com/migflex/migflex/internal/platform/cli"
)

// Exit codes of the probe subcommand.
const (
	probeExitOK     = 0
	probeExitDiffer = 1 // --compare found a difference
	probeExitFailed = 2 // bad command line, or NVML could not be read
)

const probeUsage = `usage: device-plugin probe [--nvml-backend BACKEND] [--sim-config FILE] [-o FILE] [--compare]

Reads the node's GPUs through NVML, without changing anything (no MIG mode
change, no instance created or destroyed): identity, MIG mode, every
GPU-instance profile the driver reports with its placements and engines,
compute-instance profiles of existing instances, and the current instances.
Writes them as a simulator config with the models inline, so that
--nvml-backend=simulated --sim-config FILE runs a simulated copy of the node.

--compare also compares each GPU's table with the built-in model of its name
(the model whose product name or PCI device id it has) and prints every
difference on standard error.

Exit status: 0 done (and no difference with --compare), 1 a difference,
2 bad command line or NVML failure.

`

// Probe is `device-plugin probe`.
func Probe(args []string, stdout, stderr io.Writer) int {
	// The agent's own variables name its backend: run in its container
	// (kubectl exec), probe reads what the agent reads.
	fs := cli.New("probe", "agent")
	var opts nvmlbackend.Options
	opts.AddFlags(fs)
	fs.String(&opts.NodeName, "node-name", "", "node whose settings to use from the simulator config", cli.Alias("NODE_NAME"))
	var out string
	var compare bool
	fs.String(&out, "o", "", "write the dump to this file instead of standard output", cli.NoEnv())
	fs.Bool(&compare, "compare", false, "compare with the built-in models and exit 1 on a difference", cli.NoEnv())
	fs.Usage(stderr, probeUsage)
	if err := fs.Parse(args, os.LookupEnv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return probeExitOK
		}
		fmt.Fprintf(stderr, "probe: %v\n", err)
		return probeExitFailed
	}
	// A simulator another process runs keeps its state directory locked:
	// read it without the lock, as `sim show` does.
	opts.ReadOnly = true
	lib, err := nvmlbackend.Open(opts)
	if err != nil {
		fmt.Fprintf(stderr, "probe: %v\n", err)
		return probeExitFailed
	}
	defer lib.Close()
	builtins := gpumodel.Builtin()
	r, err := probe.Probe(lib, builtins)
	if err != nil {
		fmt.Fprintf(stderr, "probe: %v\n", err)
		return probeExitFailed
	}
	data, err := r.Marshal()
	if err != nil {
		fmt.Fprintf(stderr, "probe: writing the dump: %v\n", err)
		return probeExitFailed
	}
	if out == "" {
		_, err = stdout.Write(data)
	} else {
		err = os.WriteFile(out, data, 0o644)
	}
	if err != nil {
		fmt.Fprintf(stderr, "probe: %v\n", err)
		return probeExitFailed
	}
	if !compare {
		return probeExitOK
	}
	diffs := probe.CompareWithBuiltin(r, builtins)
	for _, d := range diffs {
		fmt.Fprintln(stderr, d)
	}
	if len(diffs) > 0 {
		fmt.Fprintf(stderr, "probe: %d difference(s) from the built-in models\n", len(diffs))
		return probeExitDiffer
	}
	fmt.Fprintf(stderr, "probe: %d model(s) equal to the built-in ones\n", len(r.Config.Models))
	return probeExitOK
}
