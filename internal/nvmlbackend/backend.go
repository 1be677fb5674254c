// Package nvmlbackend opens the NVML backend the node agent runs on: the
// real library (go-nvml, which dlopens libnvidia-ml.so.1) or the simulator
// in ./sim. Everything above it sees only go-nvml's nvml.Interface. (It is
// not called nvml so that it never shadows go-nvml's package of that name.)
package nvmlbackend

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/migflex/migflex/internal/nvmlbackend/sim"
)

// Backend selects the NVML implementation.
type Backend string

const (
	// BackendAuto uses the real library when it loads and fails otherwise;
	// it never falls back to the simulator, so a broken driver on a GPU node
	// is not mistaken for a simulated node.
	BackendAuto      Backend = "auto"
	BackendReal      Backend = "real"
	BackendSimulated Backend = "simulated"
)

// Flag and environment variable names the mains use.
const (
	FlagBackend   = "nvml-backend"
	EnvBackend    = "NVML_BACKEND"
	FlagSimConfig = "sim-config"
	EnvSimConfig  = "SIM_CONFIG"
)

// libraryName is what go-nvml dlopens.
const libraryName = "libnvidia-ml.so.1"

// Options choose and configure the backend.
type Options struct {
	Backend Backend
	// SimConfig is the simulator's config file; empty means
	// sim.DefaultConfig() (one H100-SXM5-80GB, in memory).
	SimConfig string
	// NodeName selects per-node settings in the simulator config and seeds
	// its GPU UUIDs. The agent passes its node name.
	NodeName string
	// ReadOnly opens the simulator without taking its state directory's
	// lock, refusing every change (for inspection beside a running agent,
	// such as `device-plugin probe`). The real backend ignores it: NVML has
	// no read-only mode, so read-only callers make no changing calls.
	ReadOnly bool

	// libraryPath overrides libnvidia-ml.so.1, for tests.
	libraryPath string
}

// NewOptions returns the defaults, taken from NVML_BACKEND and SIM_CONFIG
// where set.
func NewOptions() Options {
	o := Options{Backend: BackendAuto, SimConfig: os.Getenv(EnvSimConfig)}
	if b := os.Getenv(EnvBackend); b != "" {
		o.Backend = Backend(b)
	}
	return o
}

// RegisterFlags adds --nvml-backend and --sim-config to fs, defaulting to
// the current values of o (see NewOptions).
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	fs.Var((*backendFlag)(&o.Backend), FlagBackend, fmt.Sprintf("NVML backend: %s (the real library; fail without it), %s or %s (env %s)", BackendAuto, BackendReal, BackendSimulated, EnvBackend))
	fs.StringVar(&o.SimConfig, FlagSimConfig, o.SimConfig, fmt.Sprintf("simulator config file for --%s=%s; empty simulates one %s in memory (env %s)", FlagBackend, BackendSimulated, sim.DefaultModel, EnvSimConfig))
}

type backendFlag Backend

func (b *backendFlag) String() string { return string(*b) }

func (b *backendFlag) Set(s string) error {
	switch Backend(s) {
	case BackendAuto, BackendReal, BackendSimulated:
		*b = backendFlag(s)
		return nil
	}
	return fmt.Errorf("want %s, %s or %s", BackendAuto, BackendReal, BackendSimulated)
}

// Library is an initialized NVML backend. Close shuts it down and releases
// what the backend holds (the simulator's state directory).
type Library interface {
	nvml.Interface
	Close() error
}

// Open returns the backend o selects, initialized.
func Open(o Options) (Library, error) {
	switch o.Backend {
	case BackendAuto, BackendReal, "":
		return openReal(o)
	case BackendSimulated:
		return openSim(o)
	}
	return nil, fmt.Errorf("--%s=%q: want %s, %s or %s", FlagBackend, o.Backend, BackendAuto, BackendReal, BackendSimulated)
}

func openReal(o Options) (Library, error) {
	path := libraryName
	var opts []nvml.LibraryOption
	if o.libraryPath != "" {
		path = o.libraryPath
		opts = append(opts, nvml.WithLibraryPath(path))
	}
	lib := nvml.New(opts...)
	switch ret := lib.Init(); ret {
	case nvml.SUCCESS:
		return realLibrary{lib}, nil
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return nil, fmt.Errorf("NVML library %s not found: run on a GPU node with the NVIDIA driver, or pass --%s=%s", path, FlagBackend, BackendSimulated)
	default:
		return nil, fmt.Errorf("initializing NVML (%s): %w: check the NVIDIA driver, or pass --%s=%s", path, ret, FlagBackend, BackendSimulated)
	}
}

type realLibrary struct{ nvml.Interface }

func (l realLibrary) Close() error {
	if ret := l.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("shutting down NVML: %w", ret)
	}
	return nil
}

func openSim(o Options) (Library, error) {
	cfg := sim.DefaultConfig()
	cfg.UUIDSeed = o.NodeName
	if o.SimConfig != "" {
		var err error
		if cfg, err = sim.LoadConfig(o.SimConfig, o.NodeName); err != nil {
			return nil, err
		}
	}
	cfg.ReadOnly = o.ReadOnly
	lib, err := sim.New(cfg)
	if err != nil {
		return nil, err
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, errors.Join(fmt.Errorf("initializing simulated NVML: %w", ret), lib.Close())
	}
	return simLibrary{Lib: lib}, nil
}

// simLibrary embeds *sim.Lib so its optional capabilities (ResetGPU) stay
// visible to type assertions, and adds the device plugin's PostAllocator.
type simLibrary struct {
	*sim.Lib
	SimulatedDevices
}

func (l simLibrary) Close() error {
	var errs []error
	if ret := l.Shutdown(); ret != nvml.SUCCESS {
		errs = append(errs, fmt.Errorf("shutting down simulated NVML: %w", ret))
	}
	return errors.Join(append(errs, l.Lib.Close())...)
}
