package sim

import (
	"crypto/rand"
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

// newMIGUUID mints the UUID of a new MIG device. Real drivers give every
// created instance a new UUID, even one created again with the same
// profile at the same place, so the simulator draws one at random: a claim,
// a kubelet checkpoint or a CDI spec that still names a destroyed device
// then names nothing, in tests as on a real GPU. The state file keeps it for
// as long as the instance exists.
func newMIGUUID() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand since Go 1.24)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return "MIG-" + formatUUID(b[:])
}

// legacyMIGUUID is the UUID the simulator reported, before it stored MIG
// UUIDs in its state file, for compute instance ci of GPU instance gi: a
// hash of the instance's identity. A state file from then gets these, so an
// upgraded agent finds its instances under the UUIDs it knew.
func legacyMIGUUID(gpuUUID string, gi *giState, ci uint32) string {
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
	return formatUUID(b)
}

func formatUUID(b []byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
