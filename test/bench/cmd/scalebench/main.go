// Command scalebench measures the planner and the reshape-first webhook
// against thousands of opted-in Nodes on a real API server (test/bench/scale)
// and writes scale.json and scale.md into --out. It exits non-zero when the
// run fails or is invalid (a pod never told, a failed or doubled write),
// never because of a time.
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
	"strings"
	"syscall"
	"time"

	benchreport "github.com/migflex/migflex/test/bench/report"
	"github.com/migflex/migflex/test/bench/scale"
)

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("scalebench", flag.ContinueOnError)
	o := scale.Options{Progress: os.Stderr}
	out := fs.String("out", "_output/bench", "directory for scale.json, scale.md and the processes' logs")
	fs.StringVar(&o.Assets, "assets", ".cache/envtest", "directory with etcd, kube-apiserver and kubectl")
	fs.StringVar(&o.PlannerBin, "planner-bin", "bin/planner", "the cmd/planner binary")
	fs.StringVar(&o.WebhookBin, "webhook-bin", "bin/webhook", "the cmd/webhook binary")
	fs.IntVar(&o.Nodes, "nodes", 5000, "opted-in nodes")
	fs.IntVar(&o.Pods, "pods", 1000, "pending pods")
	fs.IntVar(&o.Burst, "burst", 50, "pods per burst")
	fs.DurationVar(&o.BurstGap, "burst-gap", 3*time.Second, "time between bursts")
	fs.Float64Var(&o.ChurnShare, "churn", 0.2, "share of the nodes that change their published layout at once after the pods (0: none)")
	planner := fs.String("planner-args", "", "extra planner flags, space separated")
	fs.DurationVar(&o.Settle, "settle", time.Minute, "how long to wait for the pods' Events, and to watch the churn")
	fs.IntVar(&o.SetupWorkers, "setup-workers", 16, "parallel API calls while filling the cluster")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.PlannerArgs = strings.Fields(*planner)
	o.WorkDir = filepath.Join(*out, "scale")
	report, runErr := scale.Run(ctx, o)
	if err := benchreport.Write(*out, "scale", report, func(w io.Writer) error { return scale.WriteMarkdown(w, report) }); err != nil {
		return errors.Join(runErr, err)
	}
	if runErr != nil {
		return runErr
	}
	if p := report.Problems(); len(p) > 0 {
		return fmt.Errorf("invalid run (see %s):\n%s", filepath.Join(*out, "scale.md"), strings.Join(p, "\n"))
	}
	return nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "scalebench:", err)
		os.Exit(1)
	}
}
