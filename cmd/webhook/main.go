// Command webhook is migflex's fallback admission webhook: it rewrites a
// pod's MIG request to a GPU type the nodes it can land on have.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/migflex/migflex/internal/fallback"
	"github.com/migflex/migflex/internal/webhook"
)

type options struct {
	listen          string
	certDir         string
	kubeconfig      string
	config          string
	mode            string
	onUnsatisfiable string
	onInsufficient  string
	maxRequestBytes int64
	maxInflight     int64
	resync          time.Duration
	reusePort       bool
}

// envTwins are the environment variables a Deployment sets instead of flags;
// a flag given on the command line wins.
var envTwins = map[string]string{
	"listen":                "MIGFLEX_WEBHOOK_LISTEN",
	"tls-cert-dir":          "MIGFLEX_WEBHOOK_TLS_CERT_DIR",
	"config":                "MIGFLEX_WEBHOOK_CONFIG",
	"mode":                  "MIGFLEX_WEBHOOK_MODE",
	"on-unsatisfiable":      "MIGFLEX_WEBHOOK_ON_UNSATISFIABLE",
	"on-insufficient-count": "MIGFLEX_WEBHOOK_ON_INSUFFICIENT_COUNT",
	"max-request-bytes":     "MIGFLEX_WEBHOOK_MAX_REQUEST_BYTES",
	"max-inflight-bytes":    "MIGFLEX_WEBHOOK_MAX_INFLIGHT_BYTES",
	"reuse-port":            "MIGFLEX_WEBHOOK_REUSE_PORT",
}

func parseFlags(args []string, getenv func(string) string) (options, error) {
	var o options
	fs := flag.NewFlagSet("webhook", flag.ContinueOnError)
	klog.InitFlags(fs)
	fs.StringVar(&o.listen, "listen", ":8443", "HTTPS listen address for /mutate, /healthz, /readyz and /metrics")
	fs.StringVar(&o.certDir, "tls-cert-dir", "/etc/webhook/certs", "directory with tls.crt and tls.key (the mounted Secret); reloaded on change")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file; empty means $KUBECONFIG when set, else the in-cluster configuration")
	fs.StringVar(&o.config, "config", "", "FallbackPolicy file (apiVersion migflex.io/v1alpha1); empty means the default policy")
	fs.StringVar(&o.mode, "mode", string(fallback.ModeExistence), "existence: a type fits when a node has it; capacity: prefer types with a free device (watches pods)")
	fs.StringVar(&o.onUnsatisfiable, "on-unsatisfiable", string(fallback.UnsatisfiableDeny), "deny or allow a pod for which no GPU type fits")
	fs.StringVar(&o.onInsufficient, "on-insufficient-count", string(fallback.UnsatisfiableAllow), "allow (with a warning) or deny a pod that needs more devices of a GPU type on one node than any node it can be scheduled to has")
	fs.Int64Var(&o.maxRequestBytes, "max-request-bytes", webhook.DefaultMaxRequestBytes, "largest AdmissionReview body accepted")
	fs.Int64Var(&o.maxInflight, "max-inflight-bytes", webhook.DefaultMaxInflightBytes, "most request bytes decoded at once; further requests wait (bounds the memory parallel admissions take)")
	fs.DurationVar(&o.resync, "resync", 0, "informer resync period; 0 disables")
	fs.BoolVar(&o.reusePort, "reuse-port", false, "bind --listen with SO_REUSEPORT, so that replicas on one host's network share the port during a rolling update; connections are then accepted only once the caches have synced")
	for name, env := range envTwins {
		f := fs.Lookup(name)
		f.Usage += " (env " + env + ")"
		if v := getenv(env); v != "" {
			if err := f.Value.Set(v); err != nil {
				return o, fmt.Errorf("%s=%q: %w", env, v, err)
			}
		}
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return o, nil
}

func newDecider(o options) (*fallback.Decider, error) {
	policy := fallback.DefaultPolicy()
	if o.config != "" {
		data, err := os.ReadFile(o.config)
		if err != nil {
			return nil, fmt.Errorf("reading --config: %w", err)
		}
		if policy, err = fallback.ParsePolicy(data); err != nil {
			return nil, fmt.Errorf("--config %s: %w", o.config, err)
		}
	}
	mode, err := fallback.ParseMode(o.mode)
	if err != nil {
		return nil, fmt.Errorf("--mode: %w", err)
	}
	unsat, err := fallback.ParseUnsatisfiable(o.onUnsatisfiable)
	if err != nil {
		return nil, fmt.Errorf("--on-unsatisfiable: %w", err)
	}
	insufficient, err := fallback.ParseUnsatisfiable(o.onInsufficient)
	if err != nil {
		return nil, fmt.Errorf("--on-insufficient-count: %w", err)
	}
	return fallback.NewDecider(fallback.Options{Policy: policy, Mode: mode, OnUnsatisfiable: unsat, OnInsufficientCount: insufficient})
}

func run(ctx context.Context, args []string, getenv func(string) string) error {
	if len(args) > 0 && args[0] == "certgen" {
		return runCertgen(ctx, args[1:], getenv)
	}
	o, err := parseFlags(args, getenv)
	if err != nil {
		return err
	}
	d, err := newDecider(o)
	if err != nil {
		return err
	}
	cfg, err := restConfig(o.kubeconfig, getenv)
	if err != nil {
		return fmt.Errorf("kubernetes client configuration: %w", err)
	}
	cfg.UserAgent = "migflex-webhook"
	enableWatchList(getenv)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	srv, err := webhook.NewServer(webhook.Options{
		Listen:           o.listen,
		CertDir:          o.certDir,
		Decider:          d,
		Client:           client,
		Resync:           o.resync,
		MaxRequestBytes:  o.maxRequestBytes,
		MaxInflightBytes: o.maxInflight,
		ReusePort:        o.reusePort,
	})
	if err != nil {
		return err
	}
	return srv.Run(ctx)
}

// enableWatchList makes the informers stream their initial lists item by
// item (client-go's WatchListClient) instead of decoding one response holding
// every node and pod: with 5,000 nodes and 50,000 pods that response was the
// webhook's peak memory, 686 MiB, against 173 MiB streamed
// (docs/BENCHMARKS.md). An API server without streaming gets a normal list.
// KUBE_FEATURE_WatchListClient=false, set in the environment, turns it off.
func enableWatchList(getenv func(string) string) {
	if !wantWatchList(getenv) {
		return
	}
	gates, ok := clientfeatures.FeatureGates().(interface {
		Set(clientfeatures.Feature, bool) error
	})
	if !ok {
		return
	}
	if err := gates.Set(clientfeatures.WatchListClient, true); err != nil {
		klog.ErrorS(err, "Streaming informer lists stay off")
	}
}

// wantWatchList is false when the environment already decides, as client-go
// reads KUBE_FEATURE_<name> itself.
func wantWatchList(getenv func(string) string) bool {
	return getenv("KUBE_FEATURE_"+string(clientfeatures.WatchListClient)) == ""
}

func restConfig(kubeconfig string, getenv func(string) string) (*rest.Config, error) {
	env := getenv("KUBECONFIG")
	if kubeconfig == "" && env == "" {
		return rest.InClusterConfig()
	}
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig, Precedence: filepath.SplitList(env)}
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	err := run(ctx, os.Args[1:], os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		klog.ErrorS(err, "Webhook failed")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.Flush()
}
