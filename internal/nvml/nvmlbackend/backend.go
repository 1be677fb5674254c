// Package nvmlbackend opens the NVML backend the node agent runs on: the
// real library (go-nvml, which dlopens libnvidia-ml.so.1) or the simulator
// in ./sim. Everything above it sees only go-nvml's nvml.Interface. (It is
// not called nvml so that it never shadows go-nvml's package of that name.)
package nvmlbackend

import (
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
	"github.com/migflex/migflex/internal/platform/cli"
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

// Backends are the values of --nvml-backend.
var Backends = cli.NewEnum("NVML backend", BackendAuto, BackendReal, BackendSimulated)

// Flag names, for messages that point at them.
const (
	FlagBackend   = "nvml-backend"
	FlagSimConfig = "sim-config"
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

// AddFlags declares --nvml-backend and --sim-config, for the agent and the
// subcommands that open its backend (their older environment names,
// NVML_BACKEND and SIM_CONFIG, still count).
func (o *Options) AddFlags(f *cli.Flags) {
	cli.EnumVar(f, &o.Backend, FlagBackend, BackendAuto, Backends,
		fmt.Sprintf("NVML backend: %s uses the real library and fails without it", BackendAuto), cli.Alias("NVML_BACKEND"))
	f.String(&o.SimConfig, FlagSimConfig, "", fmt.Sprintf("simulator config file for --%s=%s; empty simulates one %s in memory", FlagBackend, BackendSimulated, sim.DefaultModel), cli.Alias("SIM_CONFIG"))
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
	_, err := Backends.Parse(string(o.Backend))
	return nil, fmt.Errorf("--%s: %w", FlagBackend, err)
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
// visible to type assertions, and adds SimulatedDevices: what a container
// needs to use its devices.
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
