// Command reconfigbench measures how long the node agent takes to
// reconfigure 8 simulated GPUs: from the nvidia.com/mig.config annotation
// patch to the new ListAndWatch message at a kubelet stand-in, to the
// Node's allocatable (which the stand-in publishes as the kubelet does) and
// to nvidia.com/mig.config.state=success on the Node, over many changes,
// for the agent as it is and with --allocatable-timeout=0 in the same run. The
// agent (cmd/device-plugin) runs as its own process; the API server is a
// real etcd + kube-apiserver. It writes reconfig.json and reconfig.md into
// --out, and never fails because of a time.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/migflex/migflex/test/bench/reconfig"
	"github.com/migflex/migflex/test/bench/report"
)

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("reconfigbench", flag.ContinueOnError)
	o := reconfig.Options{Progress: os.Stderr}
	out := fs.String("out", "_output/bench", "directory for reconfig.json, reconfig.md and the logs")
	fs.StringVar(&o.Assets, "assets", ".cache/envtest", "directory with etcd, kube-apiserver and kubectl")
	fs.StringVar(&o.AgentBin, "agent-bin", "bin/device-plugin", "the cmd/device-plugin binary")
	fs.StringVar(&o.Model, "model", "H100-SXM5-80GB", "simulated GPU model")
	fs.IntVar(&o.GPUs, "gpus", 8, "simulated GPUs on the node")
	fs.IntVar(&o.Changes, "changes", 50, "annotation changes to measure per interval, alternating between the two layouts")
	intervals := fs.String("intervals", "2s,0s", "pauses between changes, one series of --changes per pause")
	agentArgs := fs.String("agent-args", "", "extra flags for the agent, space-separated (e.g. --v=3)")
	variants := fs.String("variants", "served,published", "agents to measure, one after the other: served (success once the layout is served, --allocatable-timeout=0, the behaviour before), published (success once the Node's allocatable shows it, the default)")
	fs.DurationVar(&o.StatusDelay, "status-delay", 0, "how long after a device change the kubelet stand-in publishes the Node's allocatable (the kubelet does at its next status update, within 10 s)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, f := range strings.Split(*intervals, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || d < 0 {
			return fmt.Errorf("--intervals: %q is not a duration of 0 or more", f)
		}
		o.Intervals = append(o.Intervals, d)
	}
	o.AgentArgs = strings.Fields(*agentArgs)
	for _, name := range strings.Split(*variants, ",") {
		i := slices.IndexFunc(reconfig.Variants, func(v reconfig.Variant) bool { return v.Name == strings.TrimSpace(name) })
		if i < 0 {
			return fmt.Errorf("--variants: unknown variant %q (want served or published)", name)
		}
		o.Variants = append(o.Variants, reconfig.Variants[i])
	}
	o.WorkDir = filepath.Join(*out, "reconfig")
	r, runErr := reconfig.Run(ctx, o)
	if err := report.Write(*out, "reconfig", r, func(w io.Writer) error { return reconfig.WriteMarkdown(w, r) }); err != nil {
		return errors.Join(runErr, err)
	}
	return runErr
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "reconfigbench:", err)
		os.Exit(1)
	}
}
