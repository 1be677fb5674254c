package subcmd

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

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
  fault --kind K [--call SITE] [--gpu N] [--nth N] [--times N | --always]
        [--return ERROR_X] [--duration D] [--xid N --events N [--interval D]
        [--gi N [--ci N]]] [--permanent] [--mib N] [--name NAME]
                                            arm a fault in the running simulator (see
                                            docs/MODELS.md, Faults): K is error, hang,
                                            xidStorm, lost, reboot or oom
  clear-faults [--name NAME]                disarm a fault, or all; a GPU it lost comes back
  faults                                    list the faults of the simulator on stateDir and
                                            what they did

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
	var fault sim.Fault
	var hang, interval time.Duration
	switch cmd {
	case "inject-xid":
		gi = fs.Uint64("gi", uint64(sim.NoInstance), "GPU instance the Xid is attributed to (default: the whole GPU)")
		ci = fs.Uint64("ci", uint64(sim.NoInstance), "compute instance in --gi the Xid is attributed to")
		xid = fs.Uint64("xid", 0, "Xid error number, e.g. 79 (GPU fallen off the bus)")
	case "busy":
		gi = fs.Uint64("gi", 0, "GPU instance id; 0 marks the whole GPU")
		off = fs.FlagSet.Bool("off", false, "clear the busy mark instead")
	case "fault":
		// No environment twins: a stray MIGFLEX_AGENT_NAME must not
		// change a fault.
		f := fs.FlagSet
		f.StringVar((*string)(&fault.Kind), "kind", "", "what goes wrong: "+strings.Join(kindNames(), ", "))
		f.StringVar((*string)(&fault.Call), "call", "", "the call site it fires at: "+strings.Join(callNames(), ", "))
		f.StringVar(&fault.Name, "name", "", "name to list and clear it by (default <kind>-<n>)")
		f.IntVar(&fault.Nth, "nth", 0, "the first call at --call that fires (default 1)")
		f.IntVar(&fault.Times, "times", 0, "how many calls fire from the --nth on (default 1)")
		f.BoolVar(&fault.Always, "always", false, "every call from the --nth on fires")
		f.StringVar(&fault.Return, "return", "", "the NVML error an error fault returns (default ERROR_UNKNOWN)")
		f.DurationVar(&hang, "duration", 0, "how long a hang lasts")
		f.Uint64Var(&fault.Xid, "xid", 0, "Xid error a storm raises")
		f.IntVar(&fault.Events, "events", 0, "how many Xids a storm raises")
		f.DurationVar(&interval, "interval", 0, "pause between a storm's Xids")
		gi = f.Uint64("gi", uint64(sim.NoInstance), "GPU instance a storm's Xids are attributed to (default: the whole GPU)")
		ci = f.Uint64("ci", uint64(sim.NoInstance), "compute instance in --gi a storm's Xids are attributed to")
		f.BoolVar(&fault.Permanent, "permanent", false, "a lost GPU stays lost across reboots until the fault is cleared")
		f.IntVar(&fault.MiB, "mib", 0, "the memory an oom fault allocates in the simulator's process, in MiB")
	case "clear-faults":
		fs.FlagSet.StringVar(&fault.Name, "name", "", "the fault to clear (default: all)")
	case "show", "reset", "reboot", "faults":
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
	case "faults":
		return simFaults(cfg, stdout, stderr)
	case "fault":
		if *gi > uint64(sim.NoInstance) || *ci > uint64(sim.NoInstance) {
			fmt.Fprintln(stderr, "sim fault: --gi and --ci must fit in 32 bits")
			return simExitUsage
		}
		// Only the flags given: a fault's GPU, GI and CI are "any" when
		// absent, which no number can say.
		fs.FlagSet.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "gpu":
				fault.GPU = gpu
			case "gi":
				v := uint32(*gi)
				fault.GI = &v
			case "ci":
				v := uint32(*ci)
				fault.CI = &v
			}
		})
		fault.Duration, fault.Interval = sim.Duration(hang), sim.Duration(interval)
		c = sim.Command{Op: sim.OpFault, Fault: &fault}
	case "clear-faults":
		c = sim.Command{Op: sim.OpClearFaults, Name: fault.Name}
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
		fmt.Fprintf(stdout, "GPU %d  %s  %s  MIG %s%s%s\n", g.Index, g.Model, g.UUID, enabledWord(g.MigEnabled), pendingNote(g.MigEnabled, g.MigPending, g.Busy), lostNote(g.Lost, g.LostPermanent))
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

func lostNote(lost, permanent bool) string {
	switch {
	case lost && permanent:
		return " (fallen off the bus, for good)"
	case lost:
		return " (fallen off the bus until a reboot)"
	}
	return ""
}

// simFaults prints the faults the simulator on stateDir listed last.
func simFaults(cfg sim.Config, stdout, stderr io.Writer) int {
	list, err := sim.ReadFaults(cfg.StateDir)
	if err != nil {
		fmt.Fprintf(stderr, "sim faults: %v\n", err)
		return simExitFailed
	}
	if len(list) == 0 {
		fmt.Fprintf(stdout, "no faults armed in the simulator on %s\n", cfg.StateDir)
		return simExitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSOURCE\tCALLS\tFIRED\tHANGING\tXIDS\tDONE\tFAULT")
	for _, f := range list {
		done := "no"
		if f.Done {
			done = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", f.Fault.Name, f.Source, f.Calls, f.Fired, f.Hanging, f.XidsSent, done, f.Fault)
	}
	tw.Flush()
	return simExitOK
}

func kindNames() []string {
	out := make([]string, len(sim.FaultKinds))
	for i, k := range sim.FaultKinds {
		out[i] = string(k)
	}
	return out
}

func callNames() []string {
	out := make([]string, len(sim.CallSites))
	for i, c := range sim.CallSites {
		out[i] = string(c)
	}
	return out
}
