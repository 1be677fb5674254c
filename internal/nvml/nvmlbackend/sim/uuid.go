package sim

import (
	"crypto/sha256"
	"fmt"
	"strconv"
	"strings"
)

// gpuUUID is the simulated GPU's UUID: stable for a seed and index, and
// different between seeds so simulated nodes do not share UUIDs.
func gpuUUID(seed string, index int) string {
	return "GPU-" + hashUUID("gpu", seed, strconv.Itoa(index))
}

// migUUID is the MIG device UUID of compute instance ci of GPU instance gi.
// The same instance has the same UUID in every process (a restart from the
// state file keeps it). The profile and placement are part of the identity,
// not only the ids: GPU instance ids are reused (lowest free), and a new
// instance that got a destroyed one's ids must not get its UUID too, or a
// kubelet checkpoint or a busy check would take a stale assignment of the old
// device for one of the new.
func migUUID(gpuUUID string, gi *giState, ci uint32) string {
	return "MIG-" + hashUUID("mig", gpuUUID,
		"gi", strconv.FormatUint(uint64(gi.ID), 10),
		"ci", strconv.FormatUint(uint64(ci), 10),
		"profile", strconv.FormatUint(uint64(gi.ProfileID), 10),
		"start", strconv.Itoa(gi.Start))
}

// hashUUID formats a SHA-256 of parts as a name-based (version 5 layout) UUID.
func hashUUID(parts ...string) string {
	sum := sha256.Sum256([]byte("migflex-sim\x00" + strings.Join(parts, "\x00")))
	b := sum[:16]
	b[6] = b[6]&0x0f | 0x50
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
