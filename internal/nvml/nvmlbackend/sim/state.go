package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/platform/atomicfile"
)

// stateVersion is the schema version of state.json.
const stateVersion = 1

// state is everything a simulated node remembers: what a real GPU keeps
// until a reboot (the MIG layout) and what it keeps across one (MIG mode).
type state struct {
	Version int        `json:"version"`
	GPUs    []gpuState `json:"gpus"`
}

type gpuState struct {
	Model      string `json:"model"`
	UUID       string `json:"uuid"`
	MigEnabled bool   `json:"migEnabled"`
	MigPending bool   `json:"migPending"`
	// Busy marks processes on the whole GPU (SetBusy with gi 0).
	Busy      bool      `json:"busy,omitempty"`
	Instances []giState `json:"instances,omitempty"`
	// Lost: the GPU fell off the bus (a FaultLost named LostBy); every
	// call on it answers ERROR_GPU_IS_LOST until a reboot, or with
	// LostPermanent until the fault is cleared. Its instances are
	// forgotten when it comes back.
	Lost          bool   `json:"lost,omitempty"`
	LostPermanent bool   `json:"lostPermanent,omitempty"`
	LostBy        string `json:"lostBy,omitempty"`
}

type giState struct {
	ID        uint32    `json:"id"`
	ProfileID uint32    `json:"profileID"`
	Start     int       `json:"start"`
	Busy      bool      `json:"busy,omitempty"`
	CIs       []ciState `json:"computeInstances,omitempty"`
	// serial tells a live handle from one whose instance was destroyed and
	// whose id was reused. Not persisted: handles do not outlive a process.
	serial uint64
}

type ciState struct {
	ID uint32 `json:"id"`
	// ProfileID is the COMPUTE_INSTANCE_PROFILE_* constant.
	ProfileID uint32 `json:"profileID"`
	// UUID is the MIG device's, minted when the compute instance is
	// created (newMIGUUID). State files written before it was stored lack
	// it; fillMIGUUIDs gives them their old derived one.
	UUID   string `json:"uuid,omitempty"`
	serial uint64
}

func (s *state) clone() state {
	out := state{Version: s.Version, GPUs: slices.Clone(s.GPUs)}
	for i := range out.GPUs {
		g := &out.GPUs[i]
		g.Instances = slices.Clone(g.Instances)
		for j := range g.Instances {
			g.Instances[j].CIs = slices.Clone(g.Instances[j].CIs)
		}
	}
	return out
}

func (g *gpuState) instance(id uint32) (*giState, bool) {
	for i := range g.Instances {
		if g.Instances[i].ID == id {
			return &g.Instances[i], true
		}
	}
	return nil, false
}

func (gi *giState) ci(id uint32) (*ciState, bool) {
	for i := range gi.CIs {
		if gi.CIs[i].ID == id {
			return &gi.CIs[i], true
		}
	}
	return nil, false
}

// fillMIGUUIDs gives every compute instance without a UUID the one mint
// returns, and reports whether there was any.
func (s *state) fillMIGUUIDs(mint func(gpuUUID string, gi *giState, ci uint32) string) bool {
	filled := false
	for i := range s.GPUs {
		g := &s.GPUs[i]
		for j := range g.Instances {
			gi := &g.Instances[j]
			for k := range gi.CIs {
				if gi.CIs[k].UUID == "" {
					gi.CIs[k].UUID = mint(g.UUID, gi, gi.CIs[k].ID)
					filled = true
				}
			}
		}
	}
	return filled
}

// check verifies that a loaded state matches the configured GPUs and is a
// layout the hardware could have.
func (s *state) check(models []*gpumodel.Model) error {
	if s.Version != stateVersion {
		return fmt.Errorf("state version %d, want %d", s.Version, stateVersion)
	}
	have := make([]string, len(s.GPUs))
	for i, g := range s.GPUs {
		have[i] = g.Model
	}
	want := make([]string, len(models))
	for i, m := range models {
		want[i] = m.Name
	}
	if !slices.Equal(have, want) {
		return fmt.Errorf("state has GPUs %v but the config asks for %v: remove the state file to start over with the new GPUs", have, want)
	}
	migUUIDs := map[string]bool{}
	for i := range s.GPUs {
		if err := s.GPUs[i].check(models[i]); err != nil {
			return fmt.Errorf("GPU %d: %w", i, err)
		}
		for _, gi := range s.GPUs[i].Instances {
			for _, ci := range gi.CIs {
				switch {
				case !strings.HasPrefix(ci.UUID, "MIG-"):
					return fmt.Errorf("GPU %d: GPU instance %d: compute instance %d has UUID %q, want MIG-<uuid>", i, gi.ID, ci.ID, ci.UUID)
				case migUUIDs[ci.UUID]:
					return fmt.Errorf("GPU %d: GPU instance %d: compute instance %d: MIG device UUID %s used twice", i, gi.ID, ci.ID, ci.UUID)
				}
				migUUIDs[ci.UUID] = true
			}
		}
	}
	return nil
}

func (g *gpuState) check(m *gpumodel.Model) error {
	if g.UUID == "" {
		return errors.New("no UUID")
	}
	if len(g.Instances) > 0 && !g.MigEnabled {
		return errors.New("GPU instances while MIG mode is disabled")
	}
	_, computeSlices := m.Geometry()
	u := newUsage(m)
	ids := map[uint32]bool{}
	for _, gi := range g.Instances {
		p, ok := m.ProfileByID(gi.ProfileID)
		if !ok {
			return fmt.Errorf("GPU instance %d: model %s has no profile id %d", gi.ID, m.Name, gi.ProfileID)
		}
		if !p.HasPlacement(gi.Start) {
			return fmt.Errorf("GPU instance %d: %s cannot start at %d", gi.ID, p.Name, gi.Start)
		}
		if ids[gi.ID] {
			return fmt.Errorf("GPU instance id %d used twice", gi.ID)
		}
		ids[gi.ID] = true
		if !u.free(p, gi.Start) {
			return fmt.Errorf("GPU instance %d (%s at %d) overlaps another", gi.ID, p.Name, gi.Start)
		}
		if u.count[p.ID] >= p.MaxCount {
			return fmt.Errorf("more %s instances than its max count %d", p.Name, p.MaxCount)
		}
		if u.compute+p.Slices > computeSlices {
			return fmt.Errorf("instances use more than the GPU's %d compute slices", computeSlices)
		}
		if !u.mediaFits(p) {
			return fmt.Errorf("GPU instance %d (%s at %d): not enough media engines left beside the other instances (%s)", gi.ID, p.Name, gi.Start, mediaRule(p))
		}
		u.add(p, gi.Start)
		for _, ci := range gi.CIs {
			if ci.ProfileID != uint32(mig.FullComputeProfile(p.Slices)) {
				return fmt.Errorf("GPU instance %d: compute instance %d has profile %d, only the full-size profile %d is simulated", gi.ID, ci.ID, ci.ProfileID, mig.FullComputeProfile(p.Slices))
			}
		}
		if len(gi.CIs) > 1 {
			return fmt.Errorf("GPU instance %d: %d compute instances, a full-size one leaves room for no other", gi.ID, len(gi.CIs))
		}
	}
	return nil
}

// mediaRule explains why a profile may lack media engines.
func mediaRule(p *gpumodel.Profile) string {
	switch mig.MediaOf(p.Query) {
	case mig.AllMedia:
		return "a profile with all media engines coexists only with -me profiles"
	case mig.SomeMedia:
		if p.Engines == (mig.Engines{}) {
			return "no instance but -me ones may coexist with a +me.all one"
		}
	}
	return "the GPU's decoders, encoders, JPEG decoders and OFAs are shared out among its instances"
}

// Files in Config.StateDir.
const (
	stateFileName = "state.json"
	lockFileName  = "lock"
	inboxFileName = "inbox.jsonl"
	// faultsFileName lists the running simulator's faults (ReadFaults).
	faultsFileName = "faults.json"
)

// ErrStateLocked is returned by New when another simulator holds the state
// directory.
var ErrStateLocked = errors.New("simulator state directory is in use by another process")

// store persists state in a directory. A writable store holds an exclusive
// flock on the lock file for its lifetime, so two simulators never write the
// same state and other processes can tell whether one is running.
type store struct {
	dir  string
	lock *os.File // nil for a read-only store
}

func openStore(dir string, readOnly bool) (*store, error) {
	if readOnly {
		return &store{dir: dir}, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating simulator state directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, lockFileName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening simulator lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w", dir, ErrStateLocked)
		}
		return nil, fmt.Errorf("locking simulator state directory %s: %w", dir, err)
	}
	return &store{dir: dir, lock: f}, nil
}

func (s *store) close() error {
	if s.lock == nil {
		return nil
	}
	err := s.lock.Close() // releases the flock
	s.lock = nil
	return err
}

func (s *store) path() string { return filepath.Join(s.dir, stateFileName) }

// load returns the stored state, or false when there is none yet.
func (s *store) load() (state, bool, error) {
	data, err := os.ReadFile(s.path())
	if errors.Is(err, fs.ErrNotExist) {
		return state{}, false, nil
	}
	if err != nil {
		return state{}, false, fmt.Errorf("reading simulator state: %w", err)
	}
	var st state
	if err := json.Unmarshal(data, &st); err != nil {
		return state{}, false, fmt.Errorf("simulator state %s is corrupt: %w", s.path(), err)
	}
	return st, true, nil
}

// save writes st atomically: a reader sees the old file or the new one, and
// after a crash the file is one of the two.
func (s *store) save(st *state) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(s.path(), append(data, '\n'), 0o644)
}
