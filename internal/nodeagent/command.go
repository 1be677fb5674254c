package nodeagent

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/nodeagent/agent"
	"github.com/migflex/migflex/internal/nodeagent/cdi"
	"github.com/migflex/migflex/internal/nodeagent/deviceplugin"
	"github.com/migflex/migflex/internal/nodeagent/draplugin"
	"github.com/migflex/migflex/internal/nodeagent/health"
	"github.com/migflex/migflex/internal/nodeagent/podresources"
	"github.com/migflex/migflex/internal/nodeagent/subcmd"
	"github.com/migflex/migflex/internal/platform/cli"
	"k8s.io/klog/v2"
)

const agentUsage = `usage: device-plugin [flags]

Runs the node agent: partitions this node's GPUs as the Node's
nvidia.com/mig.config asks, serves the devices to the kubelet and reports on
the Node. Every flag --foo has an environment variable twin,
MIGFLEX_AGENT_FOO (older names, in its help, still count); a flag given on
the command line wins.

`

// flags declares the agent's flags into c, one line each: default,
// help and environment twin. The aliases are the names manifests and
// NVIDIA's device plugin set before MIGFLEX_AGENT_*.
func flags(c *Config) *cli.Flags {
	f := cli.New("device-plugin", "agent")
	f.String(&c.NodeName, "node-name", "", "this node's name, whose Node the agent watches and reports to; required", cli.Alias("NODE_NAME"))
	c.NVML.AddFlags(f)
	f.String(&c.Kubeconfig, "kubeconfig", "", "kubeconfig file; empty means $KUBECONFIG (a list, as kubectl reads it), else the in-cluster service account", cli.NoEnv())
	cli.EnumVar(f, &c.Serving, "serving", ServingDevicePlugin, Servings, "the kubelet API the GPUs are served through: the device plugin, or DRA (ResourceSlices of driver "+dra.DriverName+"; the device plugin is then not registered at all)")
	cli.EnumVar(f, &c.DRAMode, "dra-mode", draplugin.ModeStatic, DRAModes, "what the DRA driver offers (--serving=dra): static, the MIG instances that exist; dynamic, every profile at every placement, the instance created at Prepare and destroyed at Unprepare (needs partitionable devices, Kubernetes 1.36; else static is served and the Node gets a Warning Event)")
	f.String(&c.CDIDir, "cdi-dir", cdi.DefaultDir, "where the DRA driver writes its CDI specs, which the container runtime must read (--serving=dra)")
	f.String(&c.PluginDir, "device-plugin-dir", deviceplugin.DefaultPluginDir, "kubelet device-plugin directory (kubelet.sock and the plugin sockets)", cli.Alias("DEVICE_PLUGIN_DIR"))
	f.String(&c.PodResourcesSocket, "pod-resources-socket", podresources.DefaultSocket, "kubelet pod-resources socket, asked which devices pods hold", cli.Alias("POD_RESOURCES_SOCKET"))
	cli.EnumVar(f, &c.MigStrategy, "mig-strategy", deviceplugin.MigStrategyMixed, deviceplugin.MigStrategies, "how MIG devices are named as resources", cli.Alias("MIG_STRATEGY"))
	cli.EnumVar(f, &c.DeviceListStrategy, "device-list-strategy", deviceplugin.DeviceListEnvvar, deviceplugin.DeviceListStrategies, "how containers are told their devices", cli.Alias("DEVICE_LIST_STRATEGY"))
	cli.EnumVar(f, &c.AllocationPolicy, "allocation-policy", deviceplugin.AllocationPacked, deviceplugin.AllocationPolicies, "preferred allocation across GPUs", cli.Alias("ALLOCATION_POLICY"))
	f.String(&c.HostRoot, "host-root", "/", "where the host's filesystem is mounted in this container (for /proc/driver/nvidia-caps and /dev)", cli.Alias("HOST_ROOT"))
	f.String(&c.DriverRoot, "driver-root", "/", "host root of the NVIDIA driver's device nodes, e.g. /run/nvidia/driver", cli.Alias("NVIDIA_DRIVER_ROOT"))
	f.String(&c.DisableHealthChecks, "disable-health-checks", "", `"all" or "xids" turns Xid health checks off; a comma-separated list of Xids ignores them besides --health-ignored-xids`, cli.Alias("DP_DISABLE_HEALTHCHECKS"))
	f.String(&c.HealthIgnoredXids, "health-ignored-xids", health.FormatXids(health.DefaultIgnoredXids()), `comma-separated Xids that are never device faults (application errors); replaces the default list, "" ignores none (an empty variable counts too)`, cli.Alias("HEALTH_IGNORED_XIDS"), cli.EmptyCounts())
	f.Duration(&c.HealthQuietPeriod, "health-quiet-period", health.DefaultQuietPeriod, "how long an unhealthy device must go without a new Xid to be healthy again; negative: never", cli.Alias("HEALTH_QUIET_PERIOD"))
	f.String(&c.ConfigFile, "config-file", "", "mig-parted config file whose configurations the nvidia.com/mig.config label names (e.g. a mounted ConfigMap); re-read on change", cli.Alias("MIG_CONFIG_FILE"))
	f.String(&c.SharingConfig, "sharing-config", "", "NVIDIA device plugin config file whose sharing section (time-slicing, MPS) the device plugin serves as replicas <uuid>::<n>; or a directory of named configs (a mounted ConfigMap) of which the nvidia.com/device-plugin.config label picks one; re-read on change; device plugin only")
	f.String(&c.SharingConfigDefault, "sharing-config-default", "", `the config of a --sharing-config directory for a node without the nvidia.com/device-plugin.config label; "": a config named "default", else the only one`)
	f.String(&c.MPSRoot, "mps-root", deviceplugin.DefaultMPSRoot, "host directory of the MPS control daemons' pipe and shm directories, mounted into the containers of a resource shared with MPS")
	cli.EnumVar(f, &c.BusyPolicy, "busy-policy", agent.BusyWait, agent.BusyPolicies, "a GPU in use by pods: wait until they are gone, or evict them through the Eviction API", cli.Alias("BUSY_POLICY"))
	f.String(&c.MetricsAddr, "metrics-addr", agent.DefaultMetricsAddr, `HTTPS listen address for /metrics (to clients whose token the API server authorizes for it) and /healthz (to anyone); "" disables both`, cli.Alias("METRICS_ADDR"))
	f.String(&c.MetricsCertDir, "metrics-cert-dir", "", "directory with tls.crt and tls.key for --metrics-addr (a mounted Secret), reloaded on change; empty: a self-signed certificate made at start")
	f.Duration(&c.RetryInterval, "retry-interval", agent.DefaultRetryInterval, "how often a pending change (busy GPUs) or a transient failure is retried; a GPU whose change failed is retried after it, the wait doubling at each failure in a row up to 5m", cli.Alias("RETRY_INTERVAL"))
	f.Duration(&c.ResyncInterval, "resync-interval", agent.DefaultResyncInterval, "how often the GPUs are compared with the desired layout unprompted", cli.Alias("RESYNC_INTERVAL"))
	f.Duration(&c.AllocatableTimeout, "allocatable-timeout", agent.DefaultAllocatableTimeout, "state success waits until the Node's allocatable shows the new layout, at most this long (then failed until it does); 0 reports success once the layout is served, without waiting for the kubelet", cli.Alias("ALLOCATABLE_TIMEOUT"))
	f.Bool(&c.PublishAllocatable, "publish-allocatable", true, "write the served nvidia.com/mig-* and nvidia.com/gpu counts into the Node's status (capacity, allocatable) as soon as the kubelet's device manager holds them, the values the kubelet itself publishes at its next node status update (needs patch on nodes/status); device plugin only, never under --serving=dra")
	f.Duration(&c.NVMLCallTimeout, "nvml-call-timeout", agent.DefaultNVMLCallTimeout, "how long an NVML call may take: one that changes a GPU (MIG mode, an instance's create or destroy) or reads the GPUs, past which the state is failed naming the call and the GPU is left alone (the GPUs are not read again) until it returns; a DRA Prepare's, past which the Prepare fails naming it; the health checks', past which devices keep their last health until it returns. NVML calls cannot be cancelled; the rest of the agent goes on meanwhile")
	f.Duration(&c.InUseInterval, "in-use-interval", agent.DefaultInUseInterval, "how often the kubelet is asked which devices pods hold, published in the layout annotation when it changed (at most one Node write per interval); negative turns it off")
	f.Float64(&c.KubeAPIQPS, "kube-api-qps", DefaultKubeAPIQPS, "requests per second the agent's API client may make on average", cli.Alias("KUBE_API_QPS"))
	f.Int(&c.KubeAPIBurst, "kube-api-burst", DefaultKubeAPIBurst, "requests the agent's API client may make in a burst", cli.Alias("KUBE_API_BURST"))
	cli.KlogFlags(f)
	return f
}

// parseFlags parses args with defaults from lookupEnv. It returns the
// exit code to end with, or -1 to run.
func parseFlags(args []string, lookupEnv func(string) (string, bool), stderr io.Writer) (Config, int) {
	var c Config
	f := flags(&c)
	f.Usage(stderr, agentUsage)
	if err := f.Parse(args, lookupEnv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, 0
		}
		return c, 2
	}
	if err := c.Validate(f.Name); err != nil {
		f.Fail(err)
		return c, 2
	}
	return c, -1
}

// runAgent runs the node agent until ctx ends.
func runAgent(ctx context.Context, args []string, env cli.Env) int {
	c, code := parseFlags(args, env.LookupEnv, env.Stderr)
	if code >= 0 {
		return code
	}
	cli.LogMemoryLimit(klog.FromContext(ctx))
	if err := Run(ctx, c, env.Getenv); err != nil {
		fmt.Fprintf(env.Stderr, "device-plugin: %v\n", err)
		return cli.ExitFailed
	}
	return cli.ExitOK
}

// subcommands maps a first argument to its handler; no argument (or a flag)
// runs the node agent.
var subcommands = map[string]func(args []string, stdout, stderr io.Writer) int{
	"validate": subcmd.Validate,
	"models":   subcmd.Models,
	"sim":      subcmd.Sim,
	"probe":    subcmd.Probe,
}

const usage = `usage: device-plugin [flags]            run the node agent
       device-plugin validate -f FILE --gpus MODEL:N[,...] [--config-name N]
       device-plugin models [--models-file FILE]
       device-plugin sim COMMAND [flags]    inspect or poke the simulated GPUs
       device-plugin probe [--compare] [-o FILE]   dump the GPUs as a simulator config (read-only)
`

// Main is the device-plugin binary: a subcommand, or the node agent until
// ctx ends.
func Main(ctx context.Context, args []string, env cli.Env) int {
	if len(args) > 0 {
		if run, ok := subcommands[args[0]]; ok {
			return run(args[1:], env.Stdout, env.Stderr)
		}
		switch args[0] {
		case "help", "-h", "--help":
			// The subcommands have their own --help; the agent's flags are
			// the ones a user of the bare command needs to see.
			fmt.Fprint(env.Stdout, usage+"\nnode agent flags:\n")
			env.Stderr = env.Stdout
			return runAgent(ctx, []string{"--help"}, env)
		}
	}
	return runAgent(ctx, args, env)
}
