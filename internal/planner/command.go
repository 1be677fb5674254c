package planner

import (
	"context"

	"github.com/migflex/migflex/internal/planner/reserve"
	"github.com/migflex/migflex/internal/planner/solver"
	"github.com/migflex/migflex/internal/platform/cli"
	"k8s.io/klog/v2"
)

// flags declares the planner's flags into c, one line each: default,
// help and environment twin (MIGFLEX_PLANNER_<FLAG>).
func flags(c *Config) *cli.Flags {
	f := cli.New("planner", "planner")
	pol, cad, resv := solver.DefaultPolicy(), solver.DefaultCadence(), reserve.DefaultPolicy()
	c.Policy = pol
	f.String(&c.Kubeconfig, "kubeconfig", "", "kubeconfig file; empty means $KUBECONFIG when set, else the in-cluster configuration", cli.NoEnv())
	f.Bool(&c.DryRun, "dry-run", false, "plan and explain (Events, the migflex.io/mig.config.proposed annotation) but never write nvidia.com/mig.config")
	f.Duration(&c.Policy.Cooldown, "cooldown", pol.Cooldown, "how long a GPU is left alone after the planner changed it")
	f.Int(&c.Policy.MaxGPUsPerRound, "max-gpus-per-round", pol.MaxGPUsPerRound, "GPUs one round may repartition (0: no cap)")
	f.Int(&c.MaxNodesPerRound, "max-nodes-per-round", DefaultMaxNodesPerRound, "nodes one round may change (0: no cap, as for --max-gpus-per-round)")
	f.Int(&c.WriteParallelism, "write-parallelism", DefaultWriteParallelism, "Node writes of a round sent at once, each still under --kube-api-qps")
	f.Duration(&c.ManualHold, "manual-hold", DefaultManualHold, "how long an opted-in node is left alone after someone else changed its nvidia.com/mig.config (negative: not at all)")
	f.Duration(&c.Cadence.Idle, "batch-idle", cad.Idle, "a round starts once the cluster has not changed for this long")
	f.Duration(&c.Cadence.Max, "batch-max", cad.Max, "... or this long after the first change it waits for")
	f.Duration(&c.Cadence.Resync, "resync", cad.Resync, "how often a round runs again while pods wait and nothing changes")
	f.Bool(&c.Cadence.Leading, "batch-leading", cad.Leading, "run a round at once for the first change after a quiet spell (a lone pod waits no --batch-idle; a burst's first pod gets a change of its own)")
	f.Duration(&c.StartGrace, "start-grace", DefaultStartGrace, "how long a node whose pods just started is left alone until its agent reports their devices")
	f.Duration(&c.Reserve.After, "reserve-after", resv.After, "how long a pod waits for several whole GPUs before a node is reserved for it, and how long a node whose reservation lapsed is left to other pods")
	f.Int(&c.Reserve.Max, "reserve-max", resv.Max, "reservations held at once (0: none)")
	f.Duration(&c.Reserve.Lead, "reserve-lead", resv.Lead, "the longest a reservation may expect to wait for its GPUs to free")
	f.Duration(&c.Reserve.MaxLead, "reserve-max-lead", resv.MaxLead, "while no pod but those asking for several whole GPUs is pending, a pod that has waited longer than --reserve-lead has a lead as long as its wait, up to this")
	f.Duration(&c.Reserve.Grace, "reserve-grace", resv.Grace, "how long after its GPUs were expected free a reservation whose pod has not bound lapses")
	f.Duration(&c.MixHalfLife, "mix-half-life", DefaultMixHalfLife, "how fast the demand mix the planner keeps free capacity usable for forgets")
	f.Bool(&c.LeaderElection, "leader-elect", true, "run rounds only in the replica holding the leader Lease")
	f.String(&c.LeaseNamespace, "leader-elect-namespace", "", "namespace of the leader Lease (the Deployment sets its own)")
	f.String(&c.LeaseName, "leader-elect-name", DefaultLeaseName, "name of the leader Lease")
	f.String(&c.Identity, "leader-elect-identity", "", "this replica's name in the Lease (the pod's name; empty: the host name), to which each process adds a random suffix")
	f.Duration(&c.LeaseDuration, "leader-elect-lease-duration", DefaultLeaseDuration, "how long followers wait before taking a Lease its holder stopped renewing")
	f.Duration(&c.RenewDeadline, "leader-elect-renew-deadline", DefaultRenewDeadline, "how long the leader keeps trying to renew before it gives up leading")
	f.Duration(&c.RetryPeriod, "leader-elect-retry-period", DefaultRetryPeriod, "how often the Lease is tried")
	f.String(&c.MetricsAddr, "metrics-addr", DefaultMetricsAddr, `HTTPS listen address for /metrics (to clients whose token the API server authorizes for it) and /healthz (to anyone); "" disables both`)
	f.String(&c.MetricsCertDir, "metrics-cert-dir", "", "directory with tls.crt and tls.key for --metrics-addr (a mounted Secret), reloaded on change; empty: a self-signed certificate made at start")
	f.Float64(&c.KubeAPIQPS, "kube-api-qps", DefaultKubeAPIQPS, "requests per second the API client may make on average")
	f.Int(&c.KubeAPIBurst, "kube-api-burst", DefaultKubeAPIBurst, "requests the API client may make in a burst")
	cli.KlogFlags(f)
	return f
}

// parseFlags parses args with defaults from lookupEnv into a checked
// Config.
func parseFlags(args []string, lookupEnv func(string) (string, bool)) (Config, error) {
	var c Config
	f := flags(&c)
	if err := f.Parse(args, lookupEnv); err != nil {
		return c, err
	}
	if c.MaxNodesPerRound == 0 {
		c.MaxNodesPerRound = -1 // the Options' spelling of no cap; their 0 is the default
	}
	if err := c.Validate(f.Name); err != nil {
		f.Fail(err)
		return c, cli.Usage(err)
	}
	return c, nil
}

// Main is the planner binary: the planner until ctx ends.
func Main(ctx context.Context, args []string, env cli.Env) int {
	c, err := parseFlags(args, env.LookupEnv)
	if err == nil {
		cli.LogMemoryLimit(klog.FromContext(ctx))
		err = Run(ctx, c, env.Getenv)
	}
	return cli.Exit(err, "Planner")
}
