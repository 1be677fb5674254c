// Command webhookbench measures the fallback webhook against a real API
// server at several cluster sizes, the product (cmd/webhook, informer cache)
// and the baseline (listwebhook, a list per admission) side by side, and
// writes webhook.json and webhook.md into --out. It exits non-zero when a
// run fails or any admission got a wrong answer, never because of a time.
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
	"strconv"
	"strings"
	"syscall"

	"github.com/migflex/migflex/test/bench/harness"
	benchreport "github.com/migflex/migflex/test/bench/report"
)

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// parseBaseline parses "100=2000,1000=400": requests per cluster size.
func parseBaseline(s string) (map[int]int, error) {
	out := map[int]int{}
	for _, f := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(f), "=")
		size, err1 := strconv.Atoi(k)
		n, err2 := strconv.Atoi(v)
		if !ok || err1 != nil || err2 != nil || size <= 0 || n < 0 {
			return nil, fmt.Errorf("%q is not nodes=requests", f)
		}
		out[size] = n
	}
	return out, nil
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("webhookbench", flag.ContinueOnError)
	o := harness.Options{Progress: os.Stderr}
	out := fs.String("out", "_output/bench", "directory for webhook.json, webhook.md and the processes' logs")
	fs.StringVar(&o.Assets, "assets", ".cache/envtest", "directory with etcd, kube-apiserver and kubectl")
	fs.StringVar(&o.WebhookBin, "webhook-bin", "bin/webhook", "the cmd/webhook binary")
	fs.StringVar(&o.ListWebhookBin, "list-webhook-bin", "", "the test/bench/cmd/listwebhook binary")
	fs.StringVar(&o.FloorWebhookBin, "floor-webhook-bin", "", "the test/bench/cmd/floorwebhook binary; when set, measured at each size after the other two (existence mode)")
	sizes := fs.String("sizes", "100,1000,5000", "cluster sizes in nodes")
	fs.IntVar(&o.Pods, "pods", 50000, "pods bound to the largest cluster for the capacity-mode runs; 0 skips them")
	fs.IntVar(&o.Concurrency, "concurrency", 8, "admissions in flight")
	fs.IntVar(&o.Requests, "requests", 20000, "measured admissions per informer-cache run")
	baseline := fs.String("baseline-requests", "100=2000,1000=400,5000=100", "measured admissions per list-per-admission run, by cluster size")
	fs.IntVar(&o.CapacityBaselineRequests, "capacity-baseline-requests", 24, "measured admissions per capacity-mode list-per-admission run")
	fs.IntVar(&o.SetupWorkers, "setup-workers", 16, "parallel creates while filling the cluster")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if o.Sizes, err = parseInts(*sizes); err != nil {
		return fmt.Errorf("--sizes: %w", err)
	}
	if o.BaselineRequests, err = parseBaseline(*baseline); err != nil {
		return fmt.Errorf("--baseline-requests: %w", err)
	}
	if o.ListWebhookBin == "" {
		return errors.New("--list-webhook-bin is required")
	}
	o.WorkDir = filepath.Join(*out, "webhook")
	report, runErr := harness.Run(ctx, o)
	if err := benchreport.Write(*out, "webhook", report, func(w io.Writer) error { return harness.WriteMarkdown(w, report) }); err != nil {
		return errors.Join(runErr, err)
	}
	if runErr != nil {
		return runErr
	}
	if p := report.Problems(); len(p) > 0 {
		return fmt.Errorf("invalid run (see %s):\n%s", filepath.Join(*out, "webhook.md"), strings.Join(p, "\n"))
	}
	return nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "webhookbench:", err)
		os.Exit(1)
	}
}
