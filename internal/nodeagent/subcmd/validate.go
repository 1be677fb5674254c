package subcmd

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/migconfig"
	"github.com/migflex/migflex/internal/domain/migconfig/configcheck"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
	"github.com/migflex/migflex/internal/nvml/nvmlmig"
)

// Exit codes of the validate subcommand (configcheck's).
const (
	validateExitOK      = configcheck.ExitOK
	validateExitInvalid = configcheck.ExitInvalid
	validateExitUsage   = configcheck.ExitUsage
)

const validateUsage = `usage: device-plugin validate -f FILE [--gpus MODEL[:COUNT][,...]] [--config-name NAME] [--source annotation|file]

Checks a mig.config (mig-parted v1, the annotation list form or the Run:ai
placement form) against simulated GPUs and prints what the node agent would
do to a fresh node of that shape. With several configurations in FILE and no
--config-name, it lints the file: a line per configuration, each checked on
its own; name one to see its plan.

--source says how the agent would read FILE: as an annotation written for
this node (what does not fit the node is an error), or as the config file
the GPU operator's label selects from, shared by a fleet (what does not fit
is left out and said, as mig-parted does).

Exit status: 0 valid; 1 invalid: the document, the named configuration, or
when linting the one the agent would pick ("selected"); 3 when linting, only
other configurations are invalid; 2 bad command line or unreadable file.

`

// Validate is `device-plugin validate`; it reads standard input for -f -.
func Validate(args []string, stdout, stderr io.Writer) int {
	return validate(args, os.Stdin, stdout, stderr)
}

func validate(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("f", "", "mig.config file to check; - reads standard input")
	gpuList := fs.String("gpus", sim.DefaultModel, "simulated GPUs, MODEL[:COUNT][,MODEL[:COUNT]...], in index order")
	configName := fs.String("config-name", "", "configuration to check (default: \"selected\", or the only one)")
	sourceFlag := fs.String("source", "annotation", "how the agent reads FILE: annotation (written for this node) or file (the label's config file, shared by a fleet)")
	fs.Usage = func() {
		fmt.Fprint(stderr, validateUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return validateExitOK
		}
		return validateExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "validate: unexpected arguments %q\n", fs.Args())
		fs.Usage()
		return validateExitUsage
	}
	if *file == "" {
		fmt.Fprintln(stderr, "validate: -f FILE is required (- reads standard input)")
		fs.Usage()
		return validateExitUsage
	}
	data, err := migconfig.ReadDocumentFile(*file, stdin)
	if errors.Is(err, migconfig.ErrTooLarge) {
		// Readable, but more than the agent takes: the document is invalid.
		fmt.Fprintf(stdout, "%s: invalid:\n  %v\n", *file, err)
		return validateExitInvalid
	}
	if err != nil {
		fmt.Fprintf(stderr, "validate: %v\n", err)
		return validateExitUsage
	}
	gpus, err := simulatedGPUs(*gpuList)
	if err != nil {
		fmt.Fprintf(stderr, "validate: %v\n", err)
		return validateExitUsage
	}
	var scope migconfig.Scope
	switch *sourceFlag {
	case "annotation":
		scope = migconfig.ScopeNode
	case "file":
		scope = migconfig.ScopeFleet
	default:
		fmt.Fprintf(stderr, "validate: --source must be annotation or file, got %q\n", *sourceFlag)
		return validateExitUsage
	}

	source := *file
	if source == "-" {
		source = "standard input"
	}
	return configcheck.Check(stdout, configcheck.Input{
		Source: source, Data: data, GPUs: gpus, On: describeSimNode(gpus), ConfigName: *configName, Scope: scope,
	})
}

// simulatedGPUs builds an in-memory simulator of the listed GPUs and reads
// them the way the agent reads a node, through NVML and nvmlmig.Discover.
func simulatedGPUs(list string) ([]mig.GPU, error) {
	specs, err := sim.ParseGPUList(list)
	if err != nil {
		return nil, fmt.Errorf("--gpus: %w", err)
	}
	lib, err := sim.New(sim.Config{GPUs: specs})
	if err != nil {
		return nil, fmt.Errorf("--gpus: %w", err)
	}
	defer lib.Close()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("initializing the simulated NVML: %w", ret)
	}
	defer lib.Shutdown()
	return nvmlmig.Discover(lib)
}

// describeSimNode says "4 x H100-SXM5-80GB, 2 x A100-SXM4-40GB (simulated)".
func describeSimNode(gpus []mig.GPU) string {
	var parts []string
	for i := 0; i < len(gpus); {
		j := i
		for j < len(gpus) && gpus[j].Model == gpus[i].Model {
			j++
		}
		parts = append(parts, fmt.Sprintf("%d x %s", j-i, gpus[i].Model))
		i = j
	}
	return strings.Join(parts, ", ") + " (simulated)"
}
