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
	path         string
	driver, node string
}

// load reads the checkpoint: none yet is an empty one; one that cannot be
// read, or is of another format, driver or node, is an error that says
// what to do.
func (c checkpoint) load() (map[string]dra.PreparedClaim, error) {
	b, err := os.ReadFile(c.path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]dra.PreparedClaim{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading checkpoint: %w", err)
	}
	var data checkpointData
	if err := json.Unmarshal(b, &data); err != nil {
		return nil, c.refuse(fmt.Sprintf("is not a checkpoint (%v)", err))
	}
	switch {
	case data.Version != checkpointVersion:
		return nil, c.refuse(fmt.Sprintf("has format version %d; this agent reads version %d", data.Version, checkpointVersion))
	case data.Driver != c.driver || data.Node != c.node:
		return nil, c.refuse(fmt.Sprintf("belongs to driver %q on node %q, not %q on %q", data.Driver, data.Node, c.driver, c.node))
	}
	out := make(map[string]dra.PreparedClaim, len(data.Claims))
	for _, cl := range data.Claims {
		if cl.UID == "" {
			return nil, c.refuse("lists a claim without a UID")
		}
		out[cl.UID] = cl
	}
	return out, nil
}

func (c checkpoint) refuse(why string) error {
	return fmt.Errorf("checkpoint %s %s; it lists the claims prepared on this node, so it is not overwritten: "+
		"move it away only once no pod on the node uses a claim of %s", c.path, why, c.driver)
}

// save writes the prepared claims, sorted by UID, atomically.
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
	if err := atomicfile.Write(c.path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("saving checkpoint: %w", err)
	}
	return nil
}

func newCheckpoint(dir, driver, node string) checkpoint {
	return checkpoint{path: filepath.Join(dir, CheckpointFile), driver: driver, node: node}
}
