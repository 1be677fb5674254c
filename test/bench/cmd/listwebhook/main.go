// Command listwebhook is the benchmarks' baseline webhook: the product's
// server and /mutate handler (internal/webhook) with the cluster view
// replaced by test/bench/listsource, which lists the Nodes (and Pods in
// capacity mode) from the API server on every admission. It runs as its own
// process, like cmd/webhook, so that both are measured the same way.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/migflex/migflex/internal/webhook"
	"github.com/migflex/migflex/internal/webhook/fallback"
	"github.com/migflex/migflex/test/bench/listsource"
)

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("listwebhook", flag.ContinueOnError)
	klog.InitFlags(fs)
	listen := fs.String("listen", "127.0.0.1:8443", "HTTPS listen address")
	certDir := fs.String("tls-cert-dir", "", "directory with tls.crt and tls.key")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the API server to list from")
	modeFlag := fs.String("mode", string(fallback.ModeExistence), "existence (list nodes) or capacity (list nodes and pods)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	mode, err := fallback.Modes.Parse(*modeFlag)
	if err != nil {
		return fmt.Errorf("--mode: %w", err)
	}
	d, err := fallback.NewDecider(fallback.Options{Policy: fallback.DefaultPolicy(), Mode: mode})
	if err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("--kubeconfig: %w", err)
	}
	// The design notes used client-go's defaults, whose client-side limit
	// (5 requests/s, bursts of 10) would cap the baseline at about five
	// admissions a second; lifting it measures the cost of the lists
	// themselves. Content type stays client-go's default (JSON), as for
	// cmd/webhook.
	cfg.QPS, cfg.Burst = -1, 0
	cfg.UserAgent = "migflex-bench-listwebhook"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	srv, err := webhook.NewServer(webhook.Options{
		Listen:  *listen,
		CertDir: *certDir,
		Decider: d,
		Source:  listsource.New(client, mode == fallback.ModeCapacity, klog.Background()),
	})
	if err != nil {
		return err
	}
	return srv.Run(ctx)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	err := run(ctx, os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		klog.ErrorS(err, "listwebhook failed")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.Flush()
}
