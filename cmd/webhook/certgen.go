package main

import (
	"context"
	"flag"
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/migflex/migflex/internal/certgen"
)

// runCertgen is `webhook certgen`: the one-shot Job that provisions the
// self-signed serving certificate and injects its CA into the webhook
// configuration, for installs without cert-manager.
func runCertgen(ctx context.Context, args []string, getenv func(string) string) error {
	var o certgen.Options
	var kubeconfig string
	fs := flag.NewFlagSet("webhook certgen", flag.ContinueOnError)
	klog.InitFlags(fs)
	certgen.RegisterFlags(fs, &o)
	fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file; empty means $KUBECONFIG when set, else the in-cluster configuration")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("certgen: unexpected arguments %q", fs.Args())
	}
	cfg, err := restConfig(kubeconfig, getenv)
	if err != nil {
		return fmt.Errorf("kubernetes client configuration: %w", err)
	}
	cfg.UserAgent = "migflex-certgen"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	return certgen.Run(ctx, client, o)
}
