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
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/migflex/migflex/internal/agent"
	"github.com/migflex/migflex/internal/deviceplugin"
	"github.com/migflex/migflex/internal/health"
	"github.com/migflex/migflex/internal/nvmlbackend"
	"github.com/migflex/migflex/internal/podresources"
)

const agentUsage = `usage: device-plugin [flags]

Runs the node agent: partitions this node's GPUs as the Node's
nvidia.com/mig.config asks, serves the devices to the kubelet and reports on
the Node. Every flag has an environment variable twin (named in its help);
a flag given on the command line wins.

`

// agentConfig is the node agent's command line.
type agentConfig struct {
	nodeName          string
	nvml              nvmlbackend.Options
	kubeconfig        string
	pluginDir         string
	podResources      string
	migStrategy       string
	deviceList        string
	allocation        string
	hostRoot          string
	driverRoot        string
	disableHealth     string
	healthIgnoredXids string
	healthQuietPeriod time.Duration
	configFile        string
	busyPolicy        string
	metricsAddr       string
	retryInterval     time.Duration
	resyncInterval    time.Duration
	allocTimeout      time.Duration
	kubeAPIQPS        float64
	kubeAPIBurst      int
}

// agentEnv lists the environment variable twins of the agent's flags.
var agentEnv = []string{
	"NODE_NAME", nvmlbackend.EnvBackend, nvmlbackend.EnvSimConfig, "KUBECONFIG", "DEVICE_PLUGIN_DIR",
	"POD_RESOURCES_SOCKET", "MIG_STRATEGY", "DEVICE_LIST_STRATEGY", "ALLOCATION_POLICY", "HOST_ROOT",
	"NVIDIA_DRIVER_ROOT", "DP_DISABLE_HEALTHCHECKS", "HEALTH_IGNORED_XIDS", "HEALTH_QUIET_PERIOD", "MIG_CONFIG_FILE", "BUSY_POLICY",
	"METRICS_ADDR", "RETRY_INTERVAL", "RESYNC_INTERVAL", "ALLOCATABLE_TIMEOUT", "KUBE_API_QPS", "KUBE_API_BURST",
}

// The agent's client-side rate limit. client-go's default (5 QPS, burst
// 10) throttled back-to-back reconfigurations by ~190 ms each; 20/40 still
// throttles a sustained series of changes to ~50 ms a request once the
// burst is spent (docs/BENCHMARKS.md), which only a benchmark does. An
// agent makes a handful of requests per reconcile on one Node, so either
// costs the API server nothing in steady state.
const (
	defaultKubeAPIQPS   = 20
	defaultKubeAPIBurst = 40
)

// parseAgentFlags parses args with defaults from the environment. It
// returns the exit code to end with, or -1 to run.
func parseAgentFlags(args []string, stderr io.Writer) (agentConfig, int) {
	getenv := os.Getenv
	fs := flag.NewFlagSet("device-plugin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c agentConfig
	var envErrs []error
	str := func(p *string, name, env, def, help string) {
		if v := getenv(env); v != "" {
			def = v
		}
		fs.StringVar(p, name, def, fmt.Sprintf("%s (env %s)", help, env))
	}
	dur := func(p *time.Duration, name, env string, def time.Duration, help string) {
		if v := getenv(env); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				envErrs = append(envErrs, fmt.Errorf("%s=%q: %w", env, v, err))
			}
			def = d
		}
		fs.DurationVar(p, name, def, fmt.Sprintf("%s (env %s)", help, env))
	}
	str(&c.nodeName, "node-name", "NODE_NAME", "", "this node's name, whose Node the agent watches and reports to; required")
	c.nvml = nvmlbackend.NewOptions()
	c.nvml.RegisterFlags(fs)
	str(&c.kubeconfig, "kubeconfig", "KUBECONFIG", "", "kubeconfig file; empty uses the in-cluster service account")
	str(&c.pluginDir, "device-plugin-dir", "DEVICE_PLUGIN_DIR", deviceplugin.DefaultPluginDir, "kubelet device-plugin directory (kubelet.sock and the plugin sockets)")
	str(&c.podResources, "pod-resources-socket", "POD_RESOURCES_SOCKET", podresources.DefaultSocket, "kubelet pod-resources socket, asked which devices pods hold")
	str(&c.migStrategy, "mig-strategy", "MIG_STRATEGY", string(deviceplugin.MigStrategyMixed), "how MIG devices are named as resources: mixed, single or none")
	str(&c.deviceList, "device-list-strategy", "DEVICE_LIST_STRATEGY", string(deviceplugin.DeviceListEnvvar), "how containers are told their devices: envvar, cdi-cri or cdi-annotations")
	str(&c.allocation, "allocation-policy", "ALLOCATION_POLICY", string(deviceplugin.AllocationPacked), "preferred allocation across GPUs: packed or distributed")
	str(&c.hostRoot, "host-root", "HOST_ROOT", "/", "where the host's filesystem is mounted in this container (for /proc/driver/nvidia-caps and /dev)")
	str(&c.driverRoot, "driver-root", "NVIDIA_DRIVER_ROOT", "/", "host root of the NVIDIA driver's device nodes, e.g. /run/nvidia/driver")
	str(&c.disableHealth, "disable-health-checks", "DP_DISABLE_HEALTHCHECKS", "", `"all" or "xids" turns Xid health checks off; a comma-separated list of Xids ignores them besides --health-ignored-xids`)
	// Unlike the other twins, an empty HEALTH_IGNORED_XIDS counts: it is
	// how a DaemonSet says "ignore no Xid".
	ignored := formatXids(health.DefaultIgnoredXids())
	if v, ok := os.LookupEnv(envHealthIgnoredXids); ok {
		ignored = v
	}
	fs.StringVar(&c.healthIgnoredXids, "health-ignored-xids", ignored, fmt.Sprintf(`comma-separated Xids that are never device faults (application errors); replaces the default list, "" ignores none (env %s, which counts also when set but empty)`, envHealthIgnoredXids))
	dur(&c.healthQuietPeriod, "health-quiet-period", "HEALTH_QUIET_PERIOD", health.DefaultQuietPeriod, "how long an unhealthy device must go without a new Xid to be healthy again; negative: never")
	str(&c.configFile, "config-file", "MIG_CONFIG_FILE", "", "mig-parted config file whose configurations the nvidia.com/mig.config label names (e.g. a mounted ConfigMap); re-read on change")
	str(&c.busyPolicy, "busy-policy", "BUSY_POLICY", string(agent.BusyWait), "a GPU in use by pods: wait (leave it until they are gone) or evict (evict them through the Eviction API)")
	str(&c.metricsAddr, "metrics-addr", "METRICS_ADDR", agent.DefaultMetricsAddr, `listen address for /metrics and /healthz; "" disables`)
	dur(&c.retryInterval, "retry-interval", "RETRY_INTERVAL", agent.DefaultRetryInterval, "how often a pending change (busy GPUs) or a transient failure is retried")
	dur(&c.resyncInterval, "resync-interval", "RESYNC_INTERVAL", agent.DefaultResyncInterval, "how often the GPUs are compared with the desired layout unprompted")
	dur(&c.allocTimeout, "allocatable-timeout", "ALLOCATABLE_TIMEOUT", agent.DefaultAllocatableTimeout, "state success waits until the Node's allocatable shows the new layout, at most this long (then failed until it does); 0 reports success once the layout is served, without waiting for the kubelet")
	qps, burst := float64(defaultKubeAPIQPS), defaultKubeAPIBurst
	if v := getenv("KUBE_API_QPS"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			envErrs = append(envErrs, fmt.Errorf("KUBE_API_QPS=%q: %w", v, err))
		}
		qps = f
	}
	if v := getenv("KUBE_API_BURST"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			envErrs = append(envErrs, fmt.Errorf("KUBE_API_BURST=%q: %w", v, err))
		}
		burst = n
	}
	fs.Float64Var(&c.kubeAPIQPS, "kube-api-qps", qps, "requests per second the agent's API client may make on average (env KUBE_API_QPS)")
	fs.IntVar(&c.kubeAPIBurst, "kube-api-burst", burst, "requests the agent's API client may make in a burst (env KUBE_API_BURST)")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	klogFlags.VisitAll(func(f *flag.Flag) {
		if slices.Contains([]string{"v", "vmodule"}, f.Name) {
			fs.Var(f.Value, f.Name, f.Usage)
		}
	})
	fs.Usage = func() {
		fmt.Fprint(stderr, agentUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, 0
		}
		return c, 2
	}
	problems := envErrs
	if fs.NArg() > 0 {
		problems = append(problems, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if c.nodeName == "" {
		problems = append(problems, errors.New("--node-name (env NODE_NAME) is required"))
	}
	if c.kubeAPIQPS <= 0 || c.kubeAPIBurst < 1 {
		problems = append(problems, fmt.Errorf("--kube-api-qps (env KUBE_API_QPS) must be above 0 and --kube-api-burst (env KUBE_API_BURST) at least 1, got %g and %d", c.kubeAPIQPS, c.kubeAPIBurst))
	}
	if c.allocTimeout < 0 {
		problems = append(problems, fmt.Errorf("--allocatable-timeout (env ALLOCATABLE_TIMEOUT) must be 0 (no wait) or more, got %v", c.allocTimeout))
	}
	// Both are dialled or listened on as unix sockets: a relative path would
	// depend on the working directory, and gRPC rejects it with an error
	// ("invalid (non-empty) authority") that does not name the flag.
	for _, p := range []struct{ flag, env, value string }{
		{"--device-plugin-dir", "DEVICE_PLUGIN_DIR", c.pluginDir},
		{"--pod-resources-socket", "POD_RESOURCES_SOCKET", c.podResources},
	} {
		if !filepath.IsAbs(p.value) {
			problems = append(problems, fmt.Errorf("%s (env %s) must be an absolute path, got %q", p.flag, p.env, p.value))
		}
	}
	if err := errors.Join(problems...); err != nil {
		fmt.Fprintf(stderr, "device-plugin: %v\n\n", err)
		fs.Usage()
		return c, 2
	}
	return c, -1
}

// runAgent runs the node agent until SIGINT or SIGTERM.
func runAgent(args []string, _, stderr io.Writer) int {
	c, code := parseAgentFlags(args, stderr)
	if code >= 0 {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := c.run(ctx); err != nil {
		fmt.Fprintf(stderr, "device-plugin: %v\n", err)
		return 1
	}
	return 0
}

// run wires the NVML backend, the device plugin, the pod-resources client
// and the Kubernetes client into the agent and runs it.
func (c agentConfig) run(ctx context.Context) error {
	opts, err := c.devicePluginOptions()
	if err != nil {
		return err
	}
	strategy, err := deviceplugin.ParseMigStrategy(c.migStrategy)
	if err != nil {
		return fmt.Errorf("--mig-strategy: %w", err)
	}
	busy, err := agent.ParseBusyPolicy(c.busyPolicy)
	if err != nil {
		return fmt.Errorf("--busy-policy: %w", err)
	}
	healthOpts, healthOff, err := c.healthOptions()
	if err != nil {
		return err
	}
	client, err := c.kubeClient()
	if err != nil {
		return err
	}

	c.nvml.NodeName = c.nodeName
	lib, err := nvmlbackend.Open(c.nvml)
	if err != nil {
		return err
	}
	defer func() {
		if err := lib.Close(); err != nil {
			klog.Background().Error(err, "Closing NVML")
		}
	}()
	if pa, ok := lib.(deviceplugin.PostAllocator); ok {
		opts.PostAllocator = pa
	}
	if !healthOff {
		w, err := health.New(lib, healthOpts)
		if err != nil {
			return fmt.Errorf("health checks: %w", err)
		}
		opts.Health = w
	}
	dp, err := deviceplugin.New(opts)
	if err != nil {
		return err
	}
	a, err := agent.New(agent.Options{
		NodeName:           c.nodeName,
		Client:             client,
		NVML:               lib,
		DevicePlugin:       dp,
		PodResources:       podresources.New(c.podResources),
		MigStrategy:        strategy,
		ConfigFile:         c.configFile,
		BusyPolicy:         busy,
		RetryInterval:      c.retryInterval,
		ResyncInterval:     c.resyncInterval,
		AllocatableTimeout: c.allocTimeout,
		MetricsAddr:        c.metricsAddr,
	})
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// envHealthIgnoredXids is the environment twin of --health-ignored-xids.
const envHealthIgnoredXids = "HEALTH_IGNORED_XIDS"

// healthOptions builds the health checks' options from
// --health-ignored-xids, which replaces the default ignore list, and
// --disable-health-checks, which turns the checks off (off is true) or adds
// Xids to that list, as the NVIDIA device plugin's switch does.
func (c agentConfig) healthOptions() (opts health.Options, off bool, err error) {
	ignored, err := parseXids(c.healthIgnoredXids)
	if err != nil {
		return health.Options{}, false, fmt.Errorf("--health-ignored-xids: %w", err)
	}
	off, extra, err := health.ParseDisable(c.disableHealth)
	if err != nil {
		return health.Options{}, false, fmt.Errorf("--disable-health-checks: %w", err)
	}
	return health.Options{IgnoredXids: append(ignored, extra...), QuietPeriod: c.healthQuietPeriod}, off, nil
}

// parseXids reads a comma-separated list of Xids. The result is never nil:
// health.Options reads nil as "the defaults" and an empty list as "none".
func parseXids(s string) ([]uint64, error) {
	out := []uint64{}
	for _, field := range strings.Split(s, ",") {
		field = strings.TrimSpace(field)
		if field == "" {
			continue
		}
		xid, err := strconv.ParseUint(field, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%q: %q is not an Xid (a non-negative integer)", s, field)
		}
		out = append(out, xid)
	}
	return out, nil
}

// formatXids is the flag form of xids: "13,31,43".
func formatXids(xids []uint64) string {
	parts := make([]string, len(xids))
	for i, x := range xids {
		parts[i] = strconv.FormatUint(x, 10)
	}
	return strings.Join(parts, ",")
}

func (c agentConfig) devicePluginOptions() (deviceplugin.Options, error) {
	list, err := deviceplugin.ParseDeviceListStrategy(c.deviceList)
	if err != nil {
		return deviceplugin.Options{}, fmt.Errorf("--device-list-strategy: %w", err)
	}
	alloc, err := deviceplugin.ParseAllocationPolicy(c.allocation)
	if err != nil {
		return deviceplugin.Options{}, fmt.Errorf("--allocation-policy: %w", err)
	}
	return deviceplugin.Options{
		PluginDir:          c.pluginDir,
		DeviceListStrategy: list,
		AllocationPolicy:   alloc,
		HostRoot:           c.hostRoot,
		DriverRoot:         c.driverRoot,
	}, nil
}

func (c agentConfig) kubeClient() (kubernetes.Interface, error) {
	var cfg *rest.Config
	var err error
	if c.kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("client config for the API server (--kubeconfig, or in-cluster): %w", err)
	}
	cfg.UserAgent = "migflex-agent/" + c.nodeName
	cfg.QPS, cfg.Burst = float32(c.kubeAPIQPS), c.kubeAPIBurst
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for the API server: %w", err)
	}
	return client, nil
}
