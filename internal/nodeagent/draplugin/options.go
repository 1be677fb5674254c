package draplugin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/nodeagent/cdi"
)

// UnhealthyAuto taints unhealthy devices until the API server is seen to
// drop taints (DRADeviceTaints off, the default in 1.35), and from then on
// withdraws them. The two fixed policies are dra.UnhealthyTaint and
// dra.UnhealthyWithdraw.
const UnhealthyAuto dra.UnhealthyPolicy = "auto"

// healthTimeout is how long the kubelet trusts a device health report;
// reports are re-sent at a third of it.
const healthTimeout = 30 * time.Second

// Mode is what the driver publishes: the instances that exist (static),
// or every placement that could be made, created at Prepare (dynamic).
type Mode string

// The values of Mode.
const (
	ModeStatic  Mode = "static"
	ModeDynamic Mode = "dynamic"
)

// Instances makes and unmakes MIG instances for dynamic mode's Prepare and
// Unprepare: nvmlmig's Partitioner, the one static mode's layouts go
// through, with nvmlmig.Discover.
type Instances interface {
	Discover() ([]mig.GPU, error)
	CreateInstance(gpu int, profile string, start int) (mig.Instance, error)
	DestroyInstance(gpu int, gi uint32) error
}

// Options configure a Driver. Zero fields get the defaults noted.
type Options struct {
	// NodeName is the node the driver runs on, also its pool's name.
	// Required.
	NodeName string
	// NodeUID is the Node's UID, for the ResourceSlices' owner reference;
	// when empty the Node is read from the API once.
	NodeUID types.UID
	// KubeClient publishes ResourceSlices and reads claims. Required.
	KubeClient kubernetes.Interface
	// DriverName is the DRA driver name. Default dra.DriverName.
	DriverName string
	// RegistrarDir is where the kubelet looks for plugin registration
	// sockets. Default /var/lib/kubelet/plugins_registry.
	RegistrarDir string
	// PluginDir holds the DRA gRPC socket. It must be the same path
	// inside and outside the agent's container. Default
	// /var/lib/kubelet/plugins/<driver name>.
	PluginDir string
	// StateDir holds the checkpoint of prepared claims; it must outlive
	// the agent's container. Default PluginDir.
	StateDir string
	// CDIDir is where the claims' CDI specs are written; the container
	// runtime must read it. Default cdi.DefaultDir.
	CDIDir string
	// CDIKind is the vendor/class of the CDI devices. Default
	// cdi.DefaultKind.
	CDIKind string
	// Editor says how devices reach a container: cdi.EnvEditor of the
	// backend's environment for the simulated NVML, cdi.DeviceNodes{...}
	// for real GPUs. Required.
	Editor cdi.Editor
	// Unhealthy says how unhealthy devices are published. Default
	// UnhealthyAuto.
	Unhealthy dra.UnhealthyPolicy
	// Mode is static or dynamic. Default ModeStatic.
	Mode Mode
	// Instances creates and destroys instances; required in dynamic
	// mode.
	Instances Instances
	// StaleClaimCheck is how often prepared claims gone from the API
	// server are released (ReleaseStale), the first time at Start.
	// Default DefaultStaleClaimCheck; negative: never.
	StaleClaimCheck time.Duration
}

func (o *Options) setDefaults() {
	if o.StaleClaimCheck == 0 {
		o.StaleClaimCheck = DefaultStaleClaimCheck
	}
	if o.DriverName == "" {
		o.DriverName = dra.DriverName
	}
	if o.RegistrarDir == "" {
		o.RegistrarDir = kubeletplugin.KubeletRegistryDir
	}
	if o.PluginDir == "" {
		o.PluginDir = filepath.Join(kubeletplugin.KubeletPluginsDir, o.DriverName)
	}
	if o.StateDir == "" {
		o.StateDir = o.PluginDir
	}
	if o.CDIDir == "" {
		o.CDIDir = cdi.DefaultDir
	}
	if o.CDIKind == "" {
		o.CDIKind = cdi.DefaultKind
	}
	if o.Unhealthy == "" {
		o.Unhealthy = UnhealthyAuto
	}
	if o.Mode == "" {
		o.Mode = ModeStatic
	}
}

func (o *Options) validate() error {
	var errs []error
	if o.NodeName == "" {
		errs = append(errs, errors.New("no node name"))
	}
	if o.KubeClient == nil {
		errs = append(errs, errors.New("no Kubernetes client"))
	}
	if o.Editor == nil {
		errs = append(errs, errors.New("no CDI editor (simulated or device nodes)"))
	}
	switch o.Unhealthy {
	case UnhealthyAuto, dra.UnhealthyTaint, dra.UnhealthyWithdraw:
	default:
		errs = append(errs, fmt.Errorf("unknown unhealthy-device policy %q (want %s, %s or %s)", o.Unhealthy, UnhealthyAuto, dra.UnhealthyTaint, dra.UnhealthyWithdraw))
	}
	switch {
	case o.Mode != ModeStatic && o.Mode != ModeDynamic:
		errs = append(errs, fmt.Errorf("unknown mode %q (want %s or %s)", o.Mode, ModeStatic, ModeDynamic))
	case o.Mode == ModeDynamic && o.Instances == nil:
		errs = append(errs, errors.New("dynamic mode without a way to create instances"))
	}
	for name, dir := range map[string]string{"registrar directory": o.RegistrarDir, "plugin directory": o.PluginDir, "state directory": o.StateDir, "CDI directory": o.CDIDir} {
		if !filepath.IsAbs(dir) {
			errs = append(errs, fmt.Errorf("%s %q is not an absolute path", name, dir))
		} else if fi, err := os.Stat(dir); err != nil {
			errs = append(errs, fmt.Errorf("%s must exist: %w", name, err))
		} else if !fi.IsDir() {
			errs = append(errs, fmt.Errorf("%s %s is not a directory", name, dir))
		}
	}
	return errors.Join(errs...)
}
