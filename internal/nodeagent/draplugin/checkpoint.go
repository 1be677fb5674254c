package draplugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/platform/atomicfile"
)

// checkpointVersion is the version of the checkpoint's format. A file of
// another version is refused, never guessed at: what it lists are claims
// that pods may still use.
const checkpointVersion = 1

// CheckpointFile is the checkpoint's name in the state directory.
const CheckpointFile = "checkpoint.json"

// CheckpointCopyFile is the checkpoint's copy beside it, written with the
// same content before it on every save. A checkpoint that cannot be read
// (truncated or corrupted on disk: every write is atomic, so not by a
// crash) is then restored from its copy instead of stopping the driver
// until every pod on the node that uses one of its claims has ended.
const CheckpointCopyFile = "checkpoint-copy.json"

// checkpointCorruptFile is where an unreadable checkpoint is kept once it
// has been restored from its copy, for whoever wants to know what broke.
const checkpointCorruptFile = "checkpoint.json.corrupt"

// checkpointData is the checkpoint file's content.
type checkpointData struct {
	Version int    `json:"version"`
	Driver  string `json:"driver"`
	Node    string `json:"node"`
	// Claims are the prepared claims, by UID.
	Claims []dra.PreparedClaim `json:"claims"`
}

// checkpoint keeps the prepared claims in a file, so that a restarted
// agent still answers a repeated Prepare, unprepares what it prepared and
// counts those devices as busy. Every change is written before it is
// acknowledged to the kubelet. Not safe for concurrent use; the Driver
// serializes it.
type checkpoint struct {
	path, copyPath string
	driver, node   string
}

// unreadableError is a checkpoint file that cannot be read or parsed, as
// opposed to one that is well formed but not this driver's to use.
type unreadableError struct {
	error
	// why is what is wrong with it, in a few words.
	why string
}

func (e unreadableError) Unwrap() error { return e.error }

// load reads the checkpoint: none yet is an empty one. One that cannot be
// read or parsed is restored from its copy when the copy is good: the
// unreadable file is kept as checkpoint.json.corrupt, the checkpoint
// written again, and restored says why. Otherwise such a file, or one of
// another format, driver or node, is an error that says what to do.
func (c checkpoint) load() (claims map[string]dra.PreparedClaim, restored string, err error) {
	claims, err = c.read(c.path)
	if err == nil || !errors.As(err, new(unreadableError)) {
		return claims, "", err
	}
	// No copy is no empty checkpoint here: it would forget every claim.
	if _, serr := os.Stat(c.copyPath); serr != nil {
		return nil, "", fmt.Errorf("%w (and no copy to restore it from: %w)", err, serr)
	}
	claims, cerr := c.read(c.copyPath)
	if cerr != nil {
		var u unreadableError
		if errors.As(cerr, &u) {
			return nil, "", fmt.Errorf("%w (and its copy %s %s)", err, c.copyPath, u.why)
		}
		return nil, "", fmt.Errorf("%w (and its copy: %w)", err, cerr)
	}
	corrupt := filepath.Join(filepath.Dir(c.path), checkpointCorruptFile)
	if rerr := os.Rename(c.path, corrupt); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		return nil, "", fmt.Errorf("%w; keeping it aside before restoring it from its copy: %w", err, rerr)
	}
	if serr := c.save(claims); serr != nil {
		return nil, "", fmt.Errorf("%w; restoring it from its copy: %w", err, serr)
	}
	return claims, fmt.Sprintf("%v; restored from its copy %s (%d claims), the unreadable file kept as %s", err, c.copyPath, len(claims), corrupt), nil
}

// read reads one checkpoint file: a file that is not there is an empty
// checkpoint.
func (c checkpoint) read(path string) (map[string]dra.PreparedClaim, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]dra.PreparedClaim{}, nil
	}
	if err != nil {
		return nil, unreadableError{fmt.Errorf("reading checkpoint %s: %w", path, err), fmt.Sprintf("cannot be read (%v)", err)}
	}
	var data checkpointData
	if err := json.Unmarshal(b, &data); err != nil {
		why := fmt.Sprintf("is not a checkpoint (%v)", err)
		return nil, unreadableError{c.refuse(path, why), why}
	}
	switch {
	case data.Version != checkpointVersion:
		return nil, c.refuse(path, fmt.Sprintf("has format version %d; this agent reads version %d", data.Version, checkpointVersion))
	case data.Driver != c.driver || data.Node != c.node:
		return nil, c.refuse(path, fmt.Sprintf("belongs to driver %q on node %q, not %q on %q", data.Driver, data.Node, c.driver, c.node))
	}
	out := make(map[string]dra.PreparedClaim, len(data.Claims))
	for _, cl := range data.Claims {
		if cl.UID == "" {
			return nil, c.refuse(path, "lists a claim without a UID")
		}
		out[cl.UID] = cl
	}
	return out, nil
}

func (c checkpoint) refuse(path, why string) error {
	return fmt.Errorf("checkpoint %s %s; it lists the claims prepared on this node, so it is not overwritten: "+
		"move %s and %s away only once no pod on the node uses a claim of %s", path, why, CheckpointFile, CheckpointCopyFile, c.driver)
}

// save writes the prepared claims, sorted by UID, atomically: the copy
// first, so that whenever the checkpoint is written its copy says the
// same, then the checkpoint. A failure of either is an error: the caller
// does not acknowledge what it could not keep.
func (c checkpoint) save(claims map[string]dra.PreparedClaim) error {
	data := checkpointData{Version: checkpointVersion, Driver: c.driver, Node: c.node, Claims: []dra.PreparedClaim{}}
	for _, cl := range claims {
		data.Claims = append(data.Claims, cl)
	}
	slices.SortFunc(data.Claims, func(a, b dra.PreparedClaim) int { return strings.Compare(a.UID, b.UID) })
	b, err := json.MarshalIndent(data, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding checkpoint: %w", err)
	}
	b = append(b, '\n')
	for _, p := range []string{c.copyPath, c.path} {
		if err := atomicfile.Write(p, b, 0o600); err != nil {
			return fmt.Errorf("saving checkpoint: %w", err)
		}
	}
	return nil
}

func newCheckpoint(dir, driver, node string) checkpoint {
	return checkpoint{path: filepath.Join(dir, CheckpointFile), copyPath: filepath.Join(dir, CheckpointCopyFile), driver: driver, node: node}
}
