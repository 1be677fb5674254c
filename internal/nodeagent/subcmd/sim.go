package subcmd

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/migflex/migflex/internal/nvml/nvmlbackend"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
	"github.com/migflex/migflex/internal/platform/cli"
)

const simUsage = `usage: device-plugin sim COMMAND [flags]

Maintains a simulated node: acts on the simulator that owns the config's
stateDir, through its inbox when one is running (the node agent) or on its
persisted state when none is.

Commands:
  show                                      print the GPUs, MIG modes and layout
  inject-xid --gpu N [--gi N [--ci N]] --xid N
                                            raise an Xid error (needs a running simulator)
  busy --gpu N --gi N [--off]               mark processes on a GPU instance (--gi 0: the whole GPU)
  reset --gpu N                             reset a GPU: a pending MIG mode takes effect
  reboot                                    reboot the node: instances gone, pending modes applied

Every command takes --sim-config FILE (env MIGFLEX_AGENT_SIM_CONFIG, or
SIM_CONFIG) and --node-name NAME (env MIGFLEX_AGENT_NODE_NAME, or NODE_NAME;
default the hostname).
`

// Exit codes of the sim subcommand.
const (
	simExitOK     = 0
	simExitFailed = 1 // the simulator refused or failed
	simExitUsage  = 2
)

// Sim is `device-plugin sim`.
func Sim(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, simUsage)
		if len(args) == 0 {
			return simExitUsage
		}
		return simExitOK
	}
	cmd, args := args[0], args[1:]
	fs := cli.New("sim "+cmd, "agent")
	fs.SetOutput(stderr)
	var configPath, nodeName string
	fs.String(&configPath, nvmlbackend.FlagSimConfig, "", "simulator config file", cli.Alias("SIM_CONFIG"))
	fs.String(&nodeName, "node-name", "", "node whose settings to use from the config (default the hostname)", cli.Alias("NODE_NAME"))
	gpu := fs.FlagSet.Int("gpu", 0, "GPU index")
	var gi, ci, xid *uint64
	var off *bool
	switch cmd {
	case "inject-xid":
		gi = fs.Uint64("gi", uint64(sim.NoInstance), "GPU instance the Xid is attributed to (default: the whole GPU)")
		ci = fs.Uint64("ci", uint64(sim.NoInstance), "compute instance in --gi the Xid is attributed to")
		xid = fs.Uint64("xid", 0, "Xid error number, e.g. 79 (GPU fallen off the bus)")
	case "busy":
		gi = fs.Uint64("gi", 0, "GPU instance id; 0 marks the whole GPU")
		off = fs.FlagSet.Bool("off", false, "clear the busy mark instead")
	case "show", "reset", "reboot":
	default:
		fmt.Fprintf(stderr, "sim: unknown command %q\n\n%s", cmd, simUsage)
		return simExitUsage
	}
	if err := fs.Parse(args, os.LookupEnv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return simExitOK
		}
		fmt.Fprintf(stderr, "sim %s: %v\n", cmd, err)
		return simExitUsage
	}
	if configPath == "" {
		fmt.Fprintf(stderr, "sim %s: --%s is required: it names the simulator's stateDir\n", cmd, nvmlbackend.FlagSimConfig)
		return simExitUsage
	}
	if nodeName == "" {
		nodeName, _ = os.Hostname()
	}
	cfg, err := sim.LoadConfig(configPath, nodeName)
	if err != nil {
		fmt.Fprintf(stderr, "sim %s: %v\n", cmd, err)
		return simExitUsage
	}
	if cfg.StateDir == "" {
		fmt.Fprintf(stderr, "sim %s: %s sets no stateDir: an in-memory simulator cannot be reached from another process\n", cmd, configPath)
		return simExitUsage
	}

	var c sim.Command
	switch cmd {
	case "show":
		return simShow(cfg, stdout, stderr)
	case "inject-xid":
		if *xid == 0 {
			fmt.Fprintln(stderr, "sim inject-xid: --xid is required")
			return simExitUsage
		}
		if *gi > uint64(sim.NoInstance) || *ci > uint64(sim.NoInstance) {
			fmt.Fprintln(stderr, "sim inject-xid: --gi and --ci must fit in 32 bits")
			return simExitUsage
		}
		c = sim.Command{Op: sim.OpXid, GPU: *gpu, GI: uint32(*gi), CI: uint32(*ci), Xid: *xid}
	case "busy":
		if *gi > uint64(sim.NoInstance) {
			fmt.Fprintln(stderr, "sim busy: --gi must fit in 32 bits")
			return simExitUsage
		}
		c = sim.Command{Op: sim.OpBusy, GPU: *gpu, GI: uint32(*gi), Busy: !*off}
	case "reset":
		c = sim.Command{Op: sim.OpReset, GPU: *gpu}
	case "reboot":
		c = sim.Command{Op: sim.OpReboot}
	}
	queued, err := sim.Send(cfg, c)
	if err != nil {
		fmt.Fprintf(stderr, "sim %s: %v\n", cmd, err)
		return simExitFailed
	}
	if queued {
		fmt.Fprintf(stdout, "%s: queued for the simulator running on %s\n", cmd, cfg.StateDir)
	} else {
		fmt.Fprintf(stdout, "%s: applied to the state in %s (no simulator running)\n", cmd, cfg.StateDir)
	}
	return simExitOK
}

// simShow prints the persisted state without disturbing a running
// simulator.
func simShow(cfg sim.Config, stdout, stderr io.Writer) int {
	cfg.ReadOnly = true
	l, err := sim.New(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "sim show: %v\n", err)
		return simExitFailed
	}
	defer l.Close()
	for i, g := range l.Snapshot() {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		fmt.Fprintf(stdout, "GPU %d  %s  %s  MIG %s%s\n", g.Index, g.Model, g.UUID, enabledWord(g.MigEnabled), pendingNote(g.MigEnabled, g.MigPending, g.Busy))
		if len(g.Instances) == 0 {
			continue
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  GI\tPROFILE\tPLACEMENT\tCI\tBUSY\tMIG DEVICE")
		for _, in := range g.Instances {
			ciCol, uuid := "-", "-"
			if in.HasCI {
				ciCol, uuid = fmt.Sprint(in.CI), in.UUID
			}
			busy := "-"
			if in.Busy {
				busy = "yes"
			}
			fmt.Fprintf(tw, "  %d\t%s\t%d:%d\t%s\t%s\t%s\n", in.GI, in.Profile, in.Start, in.Size, ciCol, busy, uuid)
		}
		tw.Flush()
	}
	return simExitOK
}

func enabledWord(b bool) string {
	if b {
		return "enabled"
	}
	return "disabled"
}

func pendingNote(enabled, pending, busy bool) string {
	note := ""
	if pending != enabled {
		note = fmt.Sprintf(" (%s pending until reset)", enabledWord(pending))
	}
	if busy {
		note += " (busy)"
	}
	return note
}
