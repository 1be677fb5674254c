// Command planner is migflex's planner in the cluster: it turns pods the
// scheduler could not place for lack of a MIG profile into layouts on
// opted-in nodes (internal/reshape).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/migflex/migflex/internal/planner"
	"github.com/migflex/migflex/internal/reshape"
)

// envPrefix names every flag's environment twin: --batch-idle is
// MIGFLEX_PLANNER_BATCH_IDLE. A flag given on the command line wins.
const envPrefix = "MIGFLEX_PLANNER_"

type config struct {
	opts       reshape.Options
	kubeconfig string
	qps        float64
	burst      int
}

func parseFlags(args []string, getenv func(string) string) (config, error) {
	c := config{opts: reshape.Options{Policy: planner.DefaultPolicy()}}
	o := &c.opts
	fs := flag.NewFlagSet("planner", flag.ContinueOnError)
	host, _ := os.Hostname()
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig file; empty means $KUBECONFIG when set, else the in-cluster configuration")
	fs.BoolVar(&o.DryRun, "dry-run", false, "plan and explain (Events, the "+"migflex.io/mig.config.proposed annotation) but never write nvidia.com/mig.config")
	fs.DurationVar(&o.Policy.Cooldown, "cooldown", o.Policy.Cooldown, "how long a GPU is left alone after the planner changed it")
	fs.IntVar(&o.Policy.MaxGPUsPerRound, "max-gpus-per-round", o.Policy.MaxGPUsPerRound, "GPUs one round may repartition (0: no cap)")
	fs.IntVar(&o.MaxNodesPerRound, "max-nodes-per-round", reshape.DefaultMaxNodesPerRound, "nodes one round may change")
	fs.DurationVar(&o.ManualHold, "manual-hold", reshape.DefaultManualHold, "how long an opted-in node is left alone after someone else changed its nvidia.com/mig.config (negative: not at all)")
	fs.DurationVar(&o.BatchIdle, "batch-idle", reshape.DefaultBatchIdle, "a round starts once the cluster has not changed for this long")
	fs.DurationVar(&o.BatchMax, "batch-max", reshape.DefaultBatchMax, "... or this long after the first change it waits for")
	fs.DurationVar(&o.Recheck, "recheck", reshape.DefaultRecheck, "how soon a round runs again while pods wait and nothing changes")
	fs.DurationVar(&o.StartGrace, "start-grace", reshape.DefaultStartGrace, "how long a node whose pods just started is left alone until its agent reports their devices")
	fs.DurationVar(&o.MixHalfLife, "mix-half-life", reshape.DefaultMixHalfLife, "how fast the demand mix the planner keeps free capacity usable for forgets")
	fs.BoolVar(&o.LeaderElection, "leader-elect", true, "run rounds only in the replica holding the leader Lease")
	fs.StringVar(&o.LeaseNamespace, "leader-elect-namespace", "", "namespace of the leader Lease (the Deployment sets its own)")
	fs.StringVar(&o.LeaseName, "leader-elect-name", reshape.DefaultLeaseName, "name of the leader Lease")
	fs.StringVar(&o.Identity, "leader-elect-identity", host, "this replica's name in the Lease (the pod's name), to which each process adds a random suffix")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", reshape.DefaultLeaseDuration, "how long followers wait before taking a Lease its holder stopped renewing")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", reshape.DefaultRenewDeadline, "how long the leader keeps trying to renew before it gives up leading")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", reshape.DefaultRetryPeriod, "how often the Lease is tried")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", reshape.DefaultMetricsAddr, `listen address for /metrics and /healthz; "" disables`)
	fs.Float64Var(&c.qps, "kube-api-qps", 20, "requests per second the API client may make on average")
	fs.IntVar(&c.burst, "kube-api-burst", 40, "requests the API client may make in a burst")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	for _, name := range []string{"v", "vmodule"} {
		f := klogFlags.Lookup(name)
		fs.Var(f.Value, f.Name, f.Usage)
	}

	var envErrs []error
	fs.VisitAll(func(f *flag.Flag) {
		env := envPrefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		f.Usage += " (env " + env + ")"
		if v := getenv(env); v != "" {
			if err := f.Value.Set(v); err != nil {
				envErrs = append(envErrs, fmt.Errorf("%s=%q: %w", env, v, err))
			}
		}
	})
	if err := errors.Join(envErrs...); err != nil {
		return c, err
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	// A restarted process must not pass for the one that held the Lease
	// (it would take the Lease back at once, as if nothing had happened):
	// each process is its own candidate.
	o.Identity += "_" + rand.String(8)
	if c.qps <= 0 || c.burst < 1 {
		return c, fmt.Errorf("--kube-api-qps must be above 0 and --kube-api-burst at least 1, got %g and %d", c.qps, c.burst)
	}
	return c, nil
}

func run(ctx context.Context, args []string, getenv func(string) string) error {
	c, err := parseFlags(args, getenv)
	if err != nil {
		return err
	}
	cfg, err := restConfig(c.kubeconfig, getenv)
	if err != nil {
		return fmt.Errorf("kubernetes client configuration: %w", err)
	}
	cfg.UserAgent = "migflex-planner"
	cfg.QPS, cfg.Burst = float32(c.qps), c.burst
	if c.opts.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	ctl, err := reshape.New(c.opts)
	if err != nil {
		return err
	}
	return ctl.Run(ctx)
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
		klog.ErrorS(err, "Planner failed")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.Flush()
}
