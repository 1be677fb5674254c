// Package nodeagent runs migflex's node agent process: it opens the NVML
// backend, runs the node's Xid health checks, and wires the device plugin
// (with the environment that names the backend's devices when they have
// no device nodes, and the health checks), the kubelet's pod-resources
// client and the Kubernetes client into internal/nodeagent/agent.
// cmd/device-plugin only turns flags into a Config.
package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/nodeagent/agent"
	"github.com/migflex/migflex/internal/nodeagent/cdi"
	"github.com/migflex/migflex/internal/nodeagent/deviceplugin"
	"github.com/migflex/migflex/internal/nodeagent/draplugin"
	"github.com/migflex/migflex/internal/nodeagent/draserver"
	"github.com/migflex/migflex/internal/nodeagent/health"
	"github.com/migflex/migflex/internal/nodeagent/podresources"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend"
	"github.com/migflex/migflex/internal/nvml/nvmlcall"
	"github.com/migflex/migflex/internal/platform/cli"
	"github.com/migflex/migflex/internal/platform/kubeclient"
	"github.com/migflex/migflex/internal/platform/metricsserver"
)

// The agent's servers of the devices, one per node: the device plugin, or
// the DRA kubelet plugin (see Serving).
var (
	_ agent.Server       = (*deviceplugin.Manager)(nil)
	_ agent.Server       = (*draserver.Server)(nil)
	_ agent.Withholder   = (*deviceplugin.Manager)(nil)
	_ agent.PodResources = (*draserver.Holders)(nil)
	_ draserver.Driver   = (*draplugin.Driver)(nil)
)

// Serving is the kubelet API a node's GPUs are served through, the value
// of --serving and of the Node's migflex.io/serving label.
type Serving string

// The values of Serving.
const (
	ServingDevicePlugin Serving = nodeinfo.ServingDevicePlugin
	ServingDRA          Serving = nodeinfo.ServingDRA
)

// Servings are the values of --serving.
var Servings = cli.NewEnum("serving", ServingDevicePlugin, ServingDRA)

// DRAModes are the values of --dra-mode.
var DRAModes = cli.NewEnum("DRA mode", draplugin.ModeStatic, draplugin.ModeDynamic)

// The agent's client-side rate limit. client-go's default (5 QPS, burst
// 10) throttled back-to-back reconfigurations; an agent makes a handful of
// requests per reconcile on one Node, so this costs the API server nothing
// in steady state (docs/BENCHMARKS.md has the measurements).
const (
	DefaultKubeAPIQPS   = 20
	DefaultKubeAPIBurst = 40
)

// Config is everything the agent process is told on its command line.
type Config struct {
	NodeName string
	NVML     nvmlbackend.Options
	// Kubeconfig is the --kubeconfig file (see kubeclient.Options).
	Kubeconfig   string
	KubeAPIQPS   float64
	KubeAPIBurst int

	// Serving chooses the device plugin or DRA. A node never serves
	// through both: under DRA the device plugin does not register.
	Serving            Serving
	PluginDir          string
	PodResourcesSocket string
	// CDIDir is where the DRA driver writes its CDI specs (read by the
	// container runtime).
	CDIDir string
	// DRAMode is what the DRA driver publishes: the instances that
	// exist, or every placement, created at Prepare.
	DRAMode            draplugin.Mode
	MigStrategy        deviceplugin.MigStrategy
	DeviceListStrategy deviceplugin.DeviceListStrategy
	AllocationPolicy   deviceplugin.AllocationPolicy
	HostRoot           string
	DriverRoot         string

	// DisableHealthChecks is the NVIDIA device plugin's switch ("all",
	// "xids", or Xids to ignore besides HealthIgnoredXids).
	DisableHealthChecks string
	// HealthIgnoredXids replaces the default ignore list; "" ignores none.
	HealthIgnoredXids string
	HealthQuietPeriod time.Duration

	ConfigFile string
	// SharingConfig is NVIDIA's device plugin config (file or directory
	// of named configs) whose sharing section the device plugin serves;
	// SharingConfigDefault picks a directory's config for a node without
	// the label; MPSRoot is where the MPS daemons' directories are.
	SharingConfig        string
	SharingConfigDefault string
	MPSRoot              string
	BusyPolicy           agent.BusyPolicy
	MetricsAddr          string
	MetricsCertDir       string
	RetryInterval        time.Duration
	ResyncInterval       time.Duration
	AllocatableTimeout   time.Duration
	InUseInterval        time.Duration
	NVMLCallTimeout      time.Duration
	// PublishAllocatable has the device-plugin path write the served
	// resources' counts into the Node's status as soon as the kubelet's
	// device manager holds them (deviceplugin.StatusPublisher), not at the
	// kubelet's next status update. Never under DRA.
	PublishAllocatable bool
}

// Validate checks what can be checked before anything starts; flag names a
// flag in an error ("--node-name (env ...)").
func (c *Config) Validate(flag func(name string) string) error {
	var errs []error
	if c.NodeName == "" {
		errs = append(errs, fmt.Errorf("%s is required", flag("node-name")))
	}
	if c.KubeAPIQPS <= 0 || c.KubeAPIBurst < 1 {
		errs = append(errs, fmt.Errorf("%s must be above 0 and %s at least 1, got %g and %d", flag("kube-api-qps"), flag("kube-api-burst"), c.KubeAPIQPS, c.KubeAPIBurst))
	}
	if c.NVMLCallTimeout <= 0 {
		errs = append(errs, fmt.Errorf("%s must be above 0, got %v", flag("nvml-call-timeout"), c.NVMLCallTimeout))
	}
	if c.AllocatableTimeout < 0 {
		errs = append(errs, fmt.Errorf("%s must be 0 (no wait) or more, got %v", flag("allocatable-timeout"), c.AllocatableTimeout))
	}
	// Both are dialled or listened on as unix sockets: a relative path would
	// depend on the working directory, and gRPC rejects it with an error
	// ("invalid (non-empty) authority") that does not name the flag.
	for _, p := range []struct{ flag, value string }{
		{"device-plugin-dir", c.PluginDir},
		{"pod-resources-socket", c.PodResourcesSocket},
		{"cdi-dir", c.CDIDir},
	} {
		if !filepath.IsAbs(p.value) {
			errs = append(errs, fmt.Errorf("%s must be an absolute path, got %q", flag(p.flag), p.value))
		}
	}
	// Empty is the device plugin's default.
	if c.MPSRoot != "" && !filepath.IsAbs(c.MPSRoot) {
		errs = append(errs, fmt.Errorf("%s must be an absolute path, got %q", flag("mps-root"), c.MPSRoot))
	}
	// Sharing is served as replicas of device-plugin devices; a DRA node
	// would silently serve whole devices.
	if c.SharingConfig != "" && c.Serving == ServingDRA {
		errs = append(errs, fmt.Errorf("%s is served through the device plugin only; --serving=dra does not share devices yet", flag("sharing-config")))
	}
	return errors.Join(errs...)
}

// healthOptions builds the health checks' options from HealthIgnoredXids,
// which replaces the default ignore list, and DisableHealthChecks, which
// turns the checks off (off is true) or adds Xids to that list, as the
// NVIDIA device plugin's switch does.
func (c *Config) healthOptions() (opts health.Options, off bool, err error) {
	ignored, err := health.ParseXids(c.HealthIgnoredXids)
	if err != nil {
		return health.Options{}, false, fmt.Errorf("--health-ignored-xids: %w", err)
	}
	off, extra, err := health.ParseDisable(c.DisableHealthChecks)
	if err != nil {
		return health.Options{}, false, fmt.Errorf("--disable-health-checks: %w", err)
	}
	return health.Options{IgnoredXids: append(ignored, extra...), QuietPeriod: c.HealthQuietPeriod}, off, nil
}

// Run runs the agent until ctx ends. getenv (os.Getenv outside tests)
// gives $KUBECONFIG.
func Run(ctx context.Context, c Config, getenv func(string) string) error {
	healthOpts, healthOff, err := c.healthOptions()
	if err != nil {
		return err
	}
	client, err := kubeclient.New(kubeclient.Options{
		Kubeconfig: c.Kubeconfig, UserAgent: "migflex-agent/" + c.NodeName,
		QPS: float32(c.KubeAPIQPS), Burst: c.KubeAPIBurst,
	}, getenv)
	if err != nil {
		return err
	}
	c.NVML.NodeName = c.NodeName
	lib, err := nvmlbackend.Open(c.NVML)
	if err != nil {
		return err
	}
	defer func() {
		if err := lib.Close(); err != nil {
			klog.FromContext(ctx).Error(err, "Closing NVML")
		}
	}()
	// The publisher, the health watcher and DRA's Prepare start before
	// the agent, and count on the agent's metrics once it exists.
	var counter atomic.Pointer[agent.Agent]
	countTimeout := func(call string) {
		if a := counter.Load(); a != nil {
			a.CountNVMLCallTimeout(call)
		}
	}
	var watcher *health.Watcher
	if !healthOff {
		healthOpts.CallTimeout, healthOpts.OnTimeout = c.NVMLCallTimeout, countTimeout
		// A hung health call is a Warning Event on the Node, as the
		// agent's own are (its state failed, MigConfigFailed).
		healthOpts.OnHang = func(h health.Hang) {
			if a := counter.Load(); a != nil {
				a.ReportNVMLHang("health "+h.Key, "health checks: "+h.Message)
			}
		}
		if watcher, err = health.New(lib, healthOpts); err != nil {
			return fmt.Errorf("health checks: %w", err)
		}
	}
	opts := agent.Options{
		NodeName:           c.NodeName,
		Client:             client,
		NVML:               lib,
		ConfigFile:         c.ConfigFile,
		SharingConfig:      c.SharingConfig,
		SharingDefault:     c.SharingConfigDefault,
		BusyPolicy:         c.BusyPolicy,
		RetryInterval:      c.RetryInterval,
		ResyncInterval:     c.ResyncInterval,
		AllocatableTimeout: c.AllocatableTimeout,
		InUseInterval:      c.InUseInterval,
		NVMLCallTimeout:    c.NVMLCallTimeout,
		Serving:            string(c.Serving),
	}
	// The publisher subscribes to the device plugin's changes at once; it
	// writes only for a layout the agent has served.
	if c.Serving == ServingDRA {
		stopDRA, err := c.wireDRA(ctx, &opts, client, lib, watcher, countTimeout)
		if err != nil {
			return err
		}
		defer stopDRA()
	} else {
		dpOpts := deviceplugin.Options{
			MigStrategy: c.MigStrategy, PluginDir: c.PluginDir, DeviceListStrategy: c.DeviceListStrategy, AllocationPolicy: c.AllocationPolicy,
			HostRoot: c.HostRoot, DriverRoot: c.DriverRoot, MPSRoot: c.MPSRoot,
		}
		if env, ok := lib.(deviceplugin.DeviceEnv); ok {
			dpOpts.PostAllocator = deviceplugin.EnvPostAllocator(env)
		}
		if watcher != nil {
			dpOpts.Health = watcher
		}
		dp, err := deviceplugin.New(dpOpts)
		if err != nil {
			return err
		}
		opts.Server, opts.PodResources = dp, podresources.New(c.PodResourcesSocket)
		stopWithdraw := withdrawDRA(ctx, client, c.NodeName)
		defer stopWithdraw()
		if c.PublishAllocatable {
			stopPub := runStatusPublisher(ctx, deviceplugin.NewStatusPublisher(dp, deviceplugin.StatusPublisherOptions{
				NodeName: c.NodeName, Nodes: client.CoreV1().Nodes(), Kubelet: podresources.New(c.PodResourcesSocket),
				Observe: func(result string) {
					if a := counter.Load(); a != nil {
						a.CountAllocatableWrite(result)
					}
				},
			}))
			defer stopPub()
		}
	}
	a, err := agent.New(opts)
	if err != nil {
		return err
	}
	counter.Store(a)
	stop := runHealth(ctx, watcher)
	defer stop()
	if c.MetricsAddr == "" {
		return a.Run(ctx)
	}
	srv, err := metricsserver.New(metricsserver.Options{
		Addr: c.MetricsAddr, Name: "migflex-agent", CertDir: c.MetricsCertDir,
		Handler: a.Handler(), Reviewer: metricsserver.NewReviewer(client),
	})
	if err != nil {
		return err
	}
	return srv.RunAlongside(ctx, a.Run)
}

// wireDRA starts the DRA kubelet plugin and an informer on ResourceClaims,
// and gives the agent the plugin as its server and a busy check that sees
// claims. The device plugin is not started at all: one node never offers
// a resource both ways (KEP-5004). The returned stop ends the informer;
// the plugin stops with the agent's Server.Run.
func (c *Config) wireDRA(ctx context.Context, opts *agent.Options, client kubernetes.Interface, lib nvml.Interface, watcher *health.Watcher, onTimeout func(call string)) (stop func(), err error) {
	var editor cdi.Editor = cdi.DeviceNodes{HostRoot: c.HostRoot, DriverRoot: c.DriverRoot}
	if env, ok := lib.(cdi.DeviceEnv); ok {
		editor = cdi.EnvEditor(env)
	}
	// The plugin's own directory (socket and checkpoint) under the
	// kubelet's plugins directory; the kubelet creates only the latter.
	if err := os.MkdirAll(filepath.Join(kubeletplugin.KubeletPluginsDir, dra.DriverName), 0o750); err != nil {
		return nil, fmt.Errorf("DRA plugin directory: %w", err)
	}
	dopts := draplugin.Options{NodeName: c.NodeName, KubeClient: client, CDIDir: c.CDIDir, Editor: editor, Mode: c.DRAMode}
	if c.DRAMode == draplugin.ModeDynamic {
		// Prepare holds the driver's lock while it calls NVML: each call
		// is bounded as the agent's are (agent.Instances).
		dopts.Instances = agent.NewInstances(lib, nvmlcall.Options[int]{Timeout: c.NVMLCallTimeout, OnTimeout: onTimeout})
	}
	drv, err := draplugin.Start(ctx, dopts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactory(client, 0)
	claims := factory.Resource().V1().ResourceClaims()
	lister := claims.Lister()
	// The same claims steer dynamic mode's order: a claim allocated in
	// this pool is use before its Prepare.
	if _, err := claims.Informer().AddEventHandler(drv.ClaimEvents()); err != nil {
		cancel()
		drv.Stop()
		return nil, fmt.Errorf("watching ResourceClaims: %w", err)
	}
	factory.Start(ctx.Done())
	// The busy check must not call a GPU free before it has seen every
	// claim: wait for the first list. Without RBAC on resourceclaims this
	// never syncs; the agent says so rather than serving blind.
	synced := factory.WaitForCacheSync(ctx.Done())
	for _, ok := range synced {
		if !ok {
			cancel()
			drv.Stop()
			return nil, fmt.Errorf("ResourceClaims informer did not sync: %w", context.Cause(ctx))
		}
	}
	hopts := draserver.Options{Driver: drv, DriverName: dra.DriverName, NodeName: c.NodeName,
		Labels: func(gpus []mig.GPU) map[string]string {
			return deviceplugin.GFDLabels(gpus, deviceplugin.MigStrategyMixed)
		}}
	if watcher != nil {
		hopts.Health = watcher
	}
	srv := draserver.New(hopts)
	opts.Server = srv
	opts.PodResources = &draserver.Holders{
		Kubelet: podresources.New(c.PodResourcesSocket),
		Claims: func() ([]resourceapi.ResourceClaim, error) {
			list, err := lister.List(labels.Everything())
			if err != nil {
				return nil, err
			}
			out := make([]resourceapi.ResourceClaim, len(list))
			for i, c := range list {
				out[i] = *c
			}
			return out, nil
		},
		State:  srv,
		Driver: dra.DriverName, Pool: c.NodeName,
	}
	return func() { cancel(); factory.Shutdown() }, nil
}

// withdrawBackoff paces withdrawDRA's tries: about 30 s in all, as long as
// the kubelet waits before it deletes a gone plugin's slices itself.
var withdrawBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Steps: 5}

// withdrawDRA deletes, in the background, the ResourceSlices a DRA agent
// of this node left (draplugin.Withdraw): a node served through the
// device plugin must offer none, and the kubelet would delete them only
// some time after the DRA plugin went, while the scheduler could still
// allocate their devices to claims nothing here prepares. It does not
// hold the device plugin up: a restarted agent serves at once, API server
// or not. An agent whose RBAC has no DRA role (the cluster serves no node
// through DRA, and its DeviceClasses went with that role) cannot and need
// not. The returned stop waits for it.
func withdrawDRA(ctx context.Context, client kubernetes.Interface, node string) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		log := klog.FromContext(ctx)
		var last error
		err := wait.ExponentialBackoffWithContext(ctx, withdrawBackoff, func(ctx context.Context) (bool, error) {
			n, err := draplugin.Withdraw(ctx, client, dra.DriverName, node)
			switch {
			case apierrors.IsForbidden(err) || apierrors.IsNotFound(err):
				log.V(2).Info("Not withdrawing ResourceSlices of the DRA driver: no permission, or no resource.k8s.io API", "driver", dra.DriverName, "err", err)
				return true, nil
			case err != nil:
				last = err
				return false, nil
			}
			if n > 0 {
				log.Info("Withdrew the ResourceSlices a DRA agent of this node left: the node serves through the device plugin", "driver", dra.DriverName, "slices", n)
			}
			return true, nil
		})
		if err != nil && ctx.Err() == nil {
			log.Error(last, "Withdrawing the ResourceSlices a DRA agent of this node left; the kubelet deletes them itself", "driver", dra.DriverName)
		}
	}()
	return func() { cancel(); <-done }
}

// runStatusPublisher runs p until the returned stop is called.
func runStatusPublisher(ctx context.Context, p *deviceplugin.StatusPublisher) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := p.Run(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "Publishing the Node's allocatable stopped; the kubelet's status update publishes it")
		}
	}()
	return func() { cancel(); <-done }
}

// runHealth runs the node's health checks, the one source of device health
// whatever serves the devices, until the returned stop is called.
func runHealth(ctx context.Context, w *health.Watcher) (stop func()) {
	log := klog.FromContext(ctx)
	if w == nil {
		log.Info("Health checks are off")
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := w.Run(ctx); err != nil {
			log.Error(err, "Health checks stopped; devices keep their last health")
		}
	}()
	return func() { cancel(); <-done }
}
