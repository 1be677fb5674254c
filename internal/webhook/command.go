package webhook

import (
	"context"

	clientfeatures "k8s.io/client-go/features"

	"github.com/migflex/migflex/internal/planner/plansnap"
	"github.com/migflex/migflex/internal/planner/solver"
	"github.com/migflex/migflex/internal/platform/cli"
	"github.com/migflex/migflex/internal/platform/kubeclient"
	"github.com/migflex/migflex/internal/webhook/certgen"
	"github.com/migflex/migflex/internal/webhook/fallback"
	"k8s.io/klog/v2"
)

// flags declares the webhook's flags into c, one line each: default,
// help and environment twin (MIGFLEX_WEBHOOK_<FLAG>).
func flags(c *Config) *cli.Flags {
	f := cli.New("webhook", "webhook")
	f.String(&c.Listen, "listen", ":8443", "HTTPS listen address for /mutate, /healthz and /readyz")
	f.String(&c.CertDir, "tls-cert-dir", "/etc/webhook/certs", "directory with tls.crt and tls.key (the mounted Secret); reloaded on change")
	f.String(&c.MetricsAddr, "metrics-addr", DefaultMetricsAddr, `HTTPS listen address for /metrics, to clients whose token the API server authorizes for it; "" disables`)
	f.String(&c.MetricsCertDir, "metrics-cert-dir", "", "directory with tls.crt and tls.key for --metrics-addr (a mounted Secret), reloaded on change; empty: a self-signed certificate made at start")
	f.String(&c.Kubeconfig, "kubeconfig", "", "kubeconfig file; empty means $KUBECONFIG when set, else the in-cluster configuration", cli.NoEnv())
	f.String(&c.PolicyFile, "config", "", "FallbackPolicy file (apiVersion migflex.io/v1alpha1); empty means the default policy")
	cli.EnumVar(f, &c.Mode, "mode", fallback.ModeExistence, fallback.Modes, "existence: a type fits when a node has it; capacity: prefer types with a free device (watches pods)")
	cli.EnumVar(f, &c.OnUnsatisfiable, "on-unsatisfiable", fallback.UnsatisfiableDeny, fallback.Unsatisfiables, "deny or allow a pod for which no GPU type fits")
	cli.EnumVar(f, &c.OnInsufficientCount, "on-insufficient-count", fallback.UnsatisfiableAllow, fallback.Unsatisfiables, "allow (with a warning) or deny a pod that needs more devices of a GPU type on one node than any node it can be scheduled to has")
	f.Int64(&c.MaxRequestBytes, "max-request-bytes", DefaultMaxRequestBytes, "largest AdmissionReview body accepted")
	f.Int64(&c.MaxInflightBytes, "max-inflight-bytes", DefaultMaxInflightBytes, "most request bytes decoded at once; further requests wait (bounds the memory parallel admissions take)")
	f.Duration(&c.Resync, "resync", 0, "informer resync period; 0 disables")
	f.Bool(&c.ReusePort, "reuse-port", false, "bind --listen with SO_REUSEPORT, so that replicas on one host's network share the port during a rolling update; connections are then accepted only once the caches have synced")
	f.Bool(&c.ReshapeFirst, "reshape-first", false, "leave a MIG request as asked (annotated migflex.io/reshape=expected) when the planner can serve it on a node the pod may land on, instead of rewriting it; for clusters running the planner")
	f.Duration(&c.PlannerCooldown, "planner-cooldown", solver.DefaultPolicy().Cooldown, "the planner's --cooldown: a GPU of a node the planner changed less than this ago is not counted on for --reshape-first")
	f.Duration(&c.PlannerManualHold, "planner-manual-hold", plansnap.DefaultManualHold, "the planner's --manual-hold: how long it leaves an opted-in node alone after someone else changed its nvidia.com/mig.config")
	cli.KlogFlags(f)
	return f
}

func run(ctx context.Context, args []string, lookupEnv func(string) (string, bool)) error {
	getenv := func(k string) string { v, _ := lookupEnv(k); return v }
	if len(args) > 0 && args[0] == "certgen" {
		return runCertgen(ctx, args[1:], lookupEnv)
	}
	var c Config
	if err := flags(&c).Parse(args, lookupEnv); err != nil {
		return err
	}
	enableWatchList(getenv)
	cli.LogMemoryLimit(klog.FromContext(ctx))
	return Run(ctx, c, getenv)
}

// enableWatchList makes the informers stream their initial lists item by
// item (client-go's WatchListClient) instead of decoding one response
// holding every node and pod, which was the webhook's peak memory at scale
// (docs/BENCHMARKS.md). An API server without streaming gets a normal list.
// KUBE_FEATURE_WatchListClient, set in the environment, decides instead.
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

// Main is the webhook binary: `webhook certgen`, or the webhook until ctx
// ends.
func Main(ctx context.Context, args []string, env cli.Env) int {
	return cli.Exit(run(ctx, args, env.LookupEnv), "Webhook")
}

// runCertgen is `webhook certgen`: the one-shot Job that provisions the
// self-signed serving certificate and injects its CA into the webhook
// configuration, for installs without cert-manager.
func runCertgen(ctx context.Context, args []string, lookupEnv func(string) (string, bool)) error {
	var o certgen.Options
	var kubeconfig string
	f := cli.New("webhook certgen", "certgen")
	certgen.RegisterFlags(f, &o)
	f.String(&kubeconfig, "kubeconfig", "", "kubeconfig file; empty means $KUBECONFIG when set, else the in-cluster configuration", cli.NoEnv())
	cli.KlogFlags(f)
	if err := f.Parse(args, lookupEnv); err != nil {
		return err
	}
	getenv := func(k string) string { v, _ := lookupEnv(k); return v }
	client, err := kubeclient.New(kubeclient.Options{Kubeconfig: kubeconfig, UserAgent: "migflex-certgen"}, getenv)
	if err != nil {
		return err
	}
	return certgen.Run(ctx, client, o)
}
