// Package nodeinfo is the contract between the node agent, which publishes
// on its Node what its GPUs are and which instances pods hold, and the
// readers of that publication (the planner, the webhook's reshape-first
// mode, users with kubectl): the keys, the JSON the values hold, and their
// decoding. It does no I/O.
package nodeinfo

import (
	"encoding/json"
	"fmt"

	"github.com/migflex/migflex/internal/mig"
)

// Keys the agent writes on its Node.
const (
	// AnnotationLayout is the node's GPU layout as JSON ([]GPU): every
	// GPU, its instances, their health and the pods holding them.
	AnnotationLayout = "migflex.io/mig.layout"
	// AnnotationProfiles is the MIG profile table of each GPU model on the
	// node as JSON ([]Model), as NVML reports it: what a reader needs to
	// know which layouts the node's GPUs can take.
	AnnotationProfiles = "migflex.io/mig.profiles"
)

// GPU is one GPU in the layout annotation.
type GPU struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	Model string `json:"model"`
	// MigMode is "Enabled", "Disabled", "N/A" (not MIG capable), or a
	// mode with the one pending a GPU reset: "Disabled (pending Enabled)".
	MigMode string `json:"migMode"`
	// Health is the whole GPU's when it is served as one device.
	Health string `json:"health,omitempty"`
	// UsedBy are the pods ("namespace/name", sorted) holding the whole GPU
	// as a device, as the kubelet's pod-resources API reports them.
	UsedBy    []string   `json:"usedBy,omitempty"`
	Instances []Instance `json:"instances,omitempty"`
}

// Instance is one GPU instance (and its compute instance) in the layout
// annotation.
type Instance struct {
	Profile   string    `json:"profile"`
	Placement Placement `json:"placement"`
	GI        uint32    `json:"gi"`
	CI        uint32    `json:"ci"`
	// UUID is the MIG device UUID; empty for a GPU instance without a
	// compute instance, which is no device.
	UUID   string `json:"uuid,omitempty"`
	Health string `json:"health"`
	// UsedBy are the pods ("namespace/name", sorted) holding the device.
	UsedBy []string `json:"usedBy,omitempty"`
}

// Placement is where an instance sits, in memory slices.
type Placement struct {
	Start int `json:"start"`
	Size  int `json:"size"`
}

// Values of GPU.MigMode.
const (
	MigModeEnabled  = "Enabled"
	MigModeDisabled = "Disabled"
	// MigModeNA: the GPU is not MIG capable.
	MigModeNA = "N/A"
)

// Health values in the layout annotation.
const (
	HealthHealthy   = "Healthy"
	HealthUnhealthy = "Unhealthy"
	// HealthNotServed: the device is not served to the kubelet (a GPU
	// instance without compute instance, a MIG device under the none
	// strategy, a whole GPU with MIG on), so it has no health.
	HealthNotServed = "N/A"
)

// Model is one GPU model's MIG profile table in the profiles annotation.
type Model struct {
	Name     string        `json:"model"`
	Profiles []mig.Profile `json:"profiles"`
}

// ParseLayout decodes the layout annotation's value.
func ParseLayout(s string) ([]GPU, error) {
	var out []GPU
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", AnnotationLayout, err)
	}
	return out, nil
}

// ParseProfiles decodes the profiles annotation's value.
func ParseProfiles(s string) ([]Model, error) {
	var out []Model
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", AnnotationProfiles, err)
	}
	for i, m := range out {
		if m.Name == "" {
			return nil, fmt.Errorf("annotation %s: model %d has no name", AnnotationProfiles, i)
		}
	}
	return out, nil
}
