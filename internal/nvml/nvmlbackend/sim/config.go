package sim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/internal/domain/mig"
)

// DefaultModel is what the simulator presents when no config is given: one
// Hopper GPU, so MIG mode changes apply at once and mig-parted's 80 GB
// configs (all-1g.10gb, all-balanced, ...) validate against it.
const DefaultModel = "H100-SXM5-80GB"

// Config says what a simulated node looks like.
type Config struct {
	// GPUs in index order: GPUSpec{Model: "A100-SXM4-40GB", Count: 2} is
	// GPUs 0 and 1.
	GPUs []GPUSpec
	// Models are custom models, usable in GPUs next to BuiltinModels().
	Models []gpumodel.Model
	// StateDir holds the persisted state (state.json), the lock a running
	// simulator holds and the inbox other processes write to. Empty means
	// in memory: nothing persists and no other process can reach it.
	StateDir string
	// UUIDSeed makes GPU UUIDs differ between simulated nodes; empty means
	// the hostname. It only seeds new state: UUIDs in a state file win.
	UUIDSeed string
	// ReadOnly loads the state without taking the lock or watching the
	// inbox; every change answers nvml.ERROR_NO_PERMISSION. For inspection
	// (`device-plugin sim show`) while a simulator runs.
	ReadOnly bool
	// OperationDelay is added to every NVML call that changes MIG state.
	// Real drivers take hundreds of milliseconds to create or destroy an
	// instance; the delay gives tests and demos the same window, for
	// example to kill the agent half way through a reconfiguration.
	OperationDelay time.Duration
	// HoldFile, when set, stops a reconfiguration at a known step: the
	// first HoldAfter NVML calls that change MIG state run, and each later
	// one waits until the file exists (or the simulator is closed). A test
	// can then kill the process in the middle of an apply whatever the
	// machine's speed, and release the next process by creating the file.
	HoldFile  string
	HoldAfter int
	// Faults are armed when the simulator starts (see Fault); a
	// read-only simulator arms none. Off unless listed.
	Faults []Fault
}

// GPUSpec is Count GPUs of one model.
type GPUSpec struct {
	Model string `json:"model"`
	Count int    `json:"count"`
	// Initial is the state these GPUs start in when there is no state file
	// yet: what `device-plugin probe` read off a real GPU. Nil means MIG
	// disabled and no instances.
	Initial *InitialState `json:"initial,omitempty"`
}

// InitialState is a GPU's state at first start.
type InitialState struct {
	// UUID replaces the one derived from the UUID seed; only for a count of 1.
	UUID       string `json:"uuid,omitempty"`
	MigEnabled bool   `json:"migEnabled"`
	// MigPending defaults to MigEnabled (no change pending).
	MigPending *bool `json:"migPending,omitempty"`
	// Instances are GPU instances, which need MIG enabled.
	Instances []InitialInstance `json:"instances,omitempty"`
}

// InitialInstance is a GPU instance at first start.
type InitialInstance struct {
	Profile string `json:"profile"`
	Start   int    `json:"start"`
	// ComputeInstances are the compute-instance profiles (by name, such as
	// "3_SLICE") of its compute instances; only the one spanning the GPU
	// instance can be simulated. Empty: none, a GPU instance without a MIG
	// device.
	ComputeInstances []string `json:"computeInstances,omitempty"`
}

// DefaultConfig is one DefaultModel GPU, in memory.
func DefaultConfig() Config {
	return Config{GPUs: []GPUSpec{{Model: DefaultModel, Count: 1}}}
}

// ParseGPUList parses "H100-SXM5-80GB:4,A100-SXM4-40GB:2"; a missing count
// means 1. Model names are checked when the simulator is built.
func ParseGPUList(s string) ([]GPUSpec, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("GPU list is empty, want MODEL[:COUNT][,MODEL[:COUNT]...]")
	}
	var out []GPUSpec
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		model, count, hasCount := strings.Cut(item, ":")
		spec := GPUSpec{Model: strings.TrimSpace(model), Count: 1}
		if spec.Model == "" {
			return nil, fmt.Errorf("GPU list %q: empty model name in %q", s, item)
		}
		if hasCount {
			n, err := strconv.Atoi(strings.TrimSpace(count))
			if err != nil || n < 1 {
				return nil, fmt.Errorf("GPU list %q: count %q for %s must be a whole number >= 1", s, count, spec.Model)
			}
			spec.Count = n
		}
		out = append(out, spec)
	}
	return out, nil
}

// Validate checks the config without touching the state directory.
func (c *Config) Validate() error {
	_, err := c.resolve()
	return err
}

// resolve checks the config and returns the model of each GPU index.
func (c *Config) resolve() ([]*gpumodel.Model, error) {
	models, _, err := c.resolveGPUs()
	return models, err
}

// resolveGPUs checks the config and returns the model and the state at first
// start of each GPU index (UUIDs left empty where the seed derives them).
func (c *Config) resolveGPUs() ([]*gpumodel.Model, []gpuState, error) {
	switch {
	case c.HoldAfter < 0:
		return nil, nil, fmt.Errorf("holdAfter %d: want the number of MIG changes to let through, >= 0", c.HoldAfter)
	case c.HoldAfter > 0 && c.HoldFile == "":
		return nil, nil, errors.New("holdAfter needs holdFile, the file that releases the held changes")
	}
	models, err := gpumodel.NewSet(c.Models)
	if err != nil {
		return nil, nil, err
	}
	var gpus []*gpumodel.Model
	var states []gpuState
	for i, g := range c.GPUs {
		if g.Count < 1 {
			return nil, nil, fmt.Errorf("gpus[%d]: count %d for %s must be >= 1", i, g.Count, g.Model)
		}
		m, err := models.Get(g.Model)
		if err != nil {
			return nil, nil, fmt.Errorf("gpus[%d]: %w", i, err)
		}
		st, err := g.Initial.state(m, g.Count)
		if err != nil {
			return nil, nil, fmt.Errorf("gpus[%d]: initial: %w", i, err)
		}
		for range g.Count {
			gpus = append(gpus, m)
			states = append(states, st.clone())
		}
	}
	if err := checkFaults(c.Faults, len(gpus), true); err != nil {
		return nil, nil, err
	}
	return gpus, states, nil
}

// state builds the GPU state in checks it. A nil s is a GPU with MIG
// disabled.
func (s *InitialState) state(m *gpumodel.Model, count int) (gpuState, error) {
	g := gpuState{Model: m.Name}
	if s == nil {
		return g, nil
	}
	if s.UUID != "" && count != 1 {
		return gpuState{}, fmt.Errorf("uuid %s given for %d GPUs: a UUID names one GPU", s.UUID, count)
	}
	g.UUID, g.MigEnabled, g.MigPending = s.UUID, s.MigEnabled, s.MigEnabled
	if s.MigPending != nil {
		g.MigPending = *s.MigPending
	}
	for i, in := range s.Instances {
		p, ok := m.ProfileByName(in.Profile)
		if !ok {
			return gpuState{}, fmt.Errorf("instances[%d]: model %s has no profile %q", i, m.Name, in.Profile)
		}
		gi := giState{ID: uint32(i + 1), ProfileID: p.ID, Start: in.Start}
		for _, ci := range in.ComputeInstances {
			q, err := mig.ParseComputeQuery(ci)
			if err != nil {
				return gpuState{}, fmt.Errorf("instances[%d]: computeInstances: %w", i, err)
			}
			if q != mig.FullComputeProfile(p.Slices) {
				return gpuState{}, fmt.Errorf("instances[%d]: compute instance profile %s: the simulator only has the one spanning the %s GPU instance (%s); remove the others", i, ci, p.Name, mig.ComputeQueryName(mig.FullComputeProfile(p.Slices)))
			}
			gi.CIs = append(gi.CIs, ciState{ID: uint32(len(gi.CIs)), ProfileID: uint32(q)})
		}
		g.Instances = append(g.Instances, gi)
	}
	// check wants a UUID; the seed supplies the real one later.
	probe := g
	if probe.UUID == "" {
		probe.UUID = "GPU-initial"
	}
	if err := probe.check(m); err != nil {
		return gpuState{}, err
	}
	return g, nil
}

func (g gpuState) clone() gpuState {
	s := state{GPUs: []gpuState{g}}
	return s.clone().GPUs[0]
}

// configFile is the YAML form of --sim-config.
type configFile struct {
	Version string `json:"version"`
	// GPUs every node has unless Nodes says otherwise.
	GPUs []GPUSpec `json:"gpus"`
	// Nodes overrides settings by node name (the agent's --node-name).
	Nodes map[string]nodeOverride `json:"nodes,omitempty"`
	// Models are custom models inline; ModelsFile names a models file,
	// relative to this file's directory.
	Models     []gpumodel.Spec `json:"models,omitempty"`
	ModelsFile string          `json:"modelsFile,omitempty"`
	StateDir   string          `json:"stateDir,omitempty"`
	UUIDSeed   string          `json:"uuidSeed,omitempty"`
	// OperationDelay is a Go duration ("250ms"); see Config.OperationDelay.
	OperationDelay string `json:"operationDelay,omitempty"`
	// HoldFile (relative to this file's directory) and HoldAfter: see
	// Config.HoldFile.
	HoldFile  string `json:"holdFile,omitempty"`
	HoldAfter int    `json:"holdAfter,omitempty"`
	// Faults are armed at every start: see Config.Faults.
	Faults []Fault `json:"faults,omitempty"`
}

type nodeOverride struct {
	// GPUs replaces the top-level list; an explicit empty list is a node
	// without GPUs.
	GPUs     *[]GPUSpec `json:"gpus,omitempty"`
	StateDir string     `json:"stateDir,omitempty"`
	UUIDSeed string     `json:"uuidSeed,omitempty"`
	// Faults replaces the top-level list; an explicit empty list is a
	// node without faults.
	Faults *[]Fault `json:"faults,omitempty"`
}

// LoadConfig reads a --sim-config file for the node nodeName (may be empty).
func LoadConfig(path, nodeName string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("reading simulator config: %w", err)
	}
	cfg, err := ParseConfig(data, filepath.Dir(path), nodeName)
	if err != nil {
		return Config{}, fmt.Errorf("simulator config %s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig parses a simulator config; dir resolves a relative modelsFile
// and stateDir. A node listed under nodes gets its overrides; the UUID seed
// defaults to the node name, so simulated nodes have different GPU UUIDs
// even when their pods' hostnames are not their node names.
//
//	version: v1
//	gpus:
//	- {model: H100-SXM5-80GB, count: 2}
//	nodes:
//	  worker-2:
//	    gpus: [{model: A100-SXM4-40GB, count: 1}]
//	stateDir: /var/lib/migflex/sim
//	operationDelay: 250ms
//	faults:
//	- {kind: error, call: createComputeInstance, gpu: 1, nth: 2}
func ParseConfig(data []byte, dir, nodeName string) (Config, error) {
	var f configFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return Config{}, err
	}
	if f.Version != gpumodel.FileVersion {
		return Config{}, fmt.Errorf("version: got %q, want %q", f.Version, gpumodel.FileVersion)
	}
	if len(f.GPUs) == 0 {
		return Config{}, errors.New("gpus: at least one GPU is required (a node override may set an empty list)")
	}
	cfg := Config{GPUs: f.GPUs, StateDir: f.StateDir, UUIDSeed: f.UUIDSeed, HoldFile: f.HoldFile, HoldAfter: f.HoldAfter, Faults: f.Faults}
	if f.OperationDelay != "" {
		d, err := time.ParseDuration(f.OperationDelay)
		if err != nil || d < 0 {
			return Config{}, fmt.Errorf("operationDelay: %q is not a non-negative duration such as 250ms", f.OperationDelay)
		}
		cfg.OperationDelay = d
	}
	if o, ok := f.Nodes[nodeName]; ok && nodeName != "" {
		if o.GPUs != nil {
			cfg.GPUs = *o.GPUs
		}
		if o.StateDir != "" {
			cfg.StateDir = o.StateDir
		}
		if o.UUIDSeed != "" {
			cfg.UUIDSeed = o.UUIDSeed
		}
		if o.Faults != nil {
			cfg.Faults = *o.Faults
		}
	}
	if cfg.UUIDSeed == "" {
		cfg.UUIDSeed = nodeName
	}
	if cfg.StateDir != "" && !filepath.IsAbs(cfg.StateDir) {
		cfg.StateDir = filepath.Join(dir, cfg.StateDir)
	}
	if cfg.HoldFile != "" && !filepath.IsAbs(cfg.HoldFile) {
		cfg.HoldFile = filepath.Join(dir, cfg.HoldFile)
	}
	models, err := gpumodel.FromSpecs(f.Models)
	if err != nil {
		return Config{}, err
	}
	if f.ModelsFile != "" {
		p := f.ModelsFile
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		more, err := gpumodel.LoadFile(p)
		if err != nil {
			return Config{}, fmt.Errorf("modelsFile: %w", err)
		}
		models = append(models, more...)
	}
	cfg.Models = models
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// MarshalConfig writes cfg's GPUs and custom models as a simulator config
// file (ParseConfig reads it back): the models inline, every field spelled
// out. Paths, seeds and test hooks are not written.
func MarshalConfig(cfg Config) ([]byte, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	f := configFile{Version: gpumodel.FileVersion, GPUs: cfg.GPUs}
	for i := range cfg.Models {
		f.Models = append(f.Models, cfg.Models[i].Spec())
	}
	return yaml.Marshal(f)
}
