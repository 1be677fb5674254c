package main

import (
	"context"
	"flag"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/migflex/migflex/internal/certgen"
	"github.com/migflex/migflex/internal/kubeclient"
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
	client, err := kubeclient.New(kubeclient.Options{Kubeconfig: kubeconfig, UserAgent: "migflex-certgen"}, getenv)
	if err != nil {
		return err
	}
	return certgen.Run(ctx, client, o)
}
