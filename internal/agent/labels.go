package agent

import (
	"cmp"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/migflex/migflex/internal/deviceplugin"
	"github.com/migflex/migflex/internal/mig"
	"github.com/migflex/migflex/internal/nodeinfo"
	"github.com/migflex/migflex/internal/resourcename"
	"github.com/migflex/migflex/internal/textcut"
)

// Keys the agent reads on its Node: the sources of the desired layout, in
// precedence order. The agent never writes them.
const (
	// AnnotationMigConfig holds a whole mig.config document.
	AnnotationMigConfig = "nvidia.com/mig.config"
	// AnnotationRunAIConfig is the same document under the key Run:ai's
	// fake-gpu-operator uses.
	AnnotationRunAIConfig = "run.ai/mig.config"
	// LabelMigConfig names a configuration in the --config-file, as the
	// GPU operator's mig-manager label does.
	LabelMigConfig = "nvidia.com/mig.config"
)

// Keys the agent writes on its Node. They are applied with server-side
// apply under one field manager, so nothing else on the Node is touched.
const (
	// LabelMigConfigState is pending, success or failed, as the GPU
	// operator's mig-manager reports it.
	LabelMigConfigState = "nvidia.com/mig.config.state"
	// AnnotationReason says why the state is not success, or with success
	// what else there is to know (sources ignored, no source left, what of
	// the configuration was left out on this node).
	AnnotationReason = "migflex.io/mig.config.reason"
	// AnnotationLayout is the node's GPU layout as JSON ([]LayoutGPU),
	// with the pods holding each device.
	AnnotationLayout = nodeinfo.AnnotationLayout
	// AnnotationProfiles is the MIG profile table of each GPU model on the
	// node, as JSON ([]nodeinfo.Model).
	AnnotationProfiles = nodeinfo.AnnotationProfiles

	// GPU feature discovery compatible labels.
	LabelGPUProduct  = "nvidia.com/gpu.product"
	LabelGPUCount    = "nvidia.com/gpu.count"
	LabelMigCapable  = "nvidia.com/mig.capable"
	LabelMigStrategy = "nvidia.com/mig.strategy"
)

// Values of LabelMigConfigState.
const (
	StatePending = "pending"
	StateSuccess = "success"
	StateFailed  = "failed"
)

const (
	maxLabelValueLength = 63
	// maxMessageLength bounds the reason annotation and Event messages: a
	// document with many mistakes yields a long error, and a Node is read
	// by every kubelet heartbeat watcher in the cluster.
	maxMessageLength = 4096
)

var invalidLabelValueChars = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// labelValue makes s a valid label value the way GPU feature discovery does
// for product names ("NVIDIA H100 80GB HBM3" -> "NVIDIA-H100-80GB-HBM3"):
// runs of other characters become "-", the value is cut to 63 characters
// and must start and end alphanumeric.
func labelValue(s string) string {
	v := invalidLabelValueChars.ReplaceAllString(s, "-")
	if len(v) > maxLabelValueLength {
		v = v[:maxLabelValueLength]
	}
	return strings.Trim(v, "-_.")
}

// truncate cuts s to maxMessageLength bytes on a rune boundary, saying so.
func truncate(s string) string { return textcut.Bytes(s, maxMessageLength, " ... (truncated)") }

// gfdLabels computes the GPU feature discovery compatible labels for the
// node's GPUs under a MIG strategy, as GFD does: under mixed (and none)
// gpu.count and gpu.product describe the physical GPUs; under single, where
// every MIG device is served as nvidia.com/gpu, they describe the MIG
// devices ("A100-SXM4-40GB-MIG-1g.5gb", one per device). The per-profile
// counts are set whenever MIG devices are served as MIG resources, that is
// under every strategy but none.
func gfdLabels(gpus []mig.GPU, strategy deviceplugin.MigStrategy) map[string]string {
	labels := map[string]string{
		LabelGPUCount:    strconv.Itoa(len(gpus)),
		LabelMigCapable:  "false",
		LabelMigStrategy: string(strategy),
	}
	if len(gpus) > 0 {
		labels[LabelGPUProduct] = labelValue(gpus[0].Model)
	}
	counts := map[string]int{}
	devices, allMig := 0, len(gpus) > 0
	for _, g := range gpus {
		if g.MigCapable {
			labels[LabelMigCapable] = "true"
		}
		if !g.MigEnabled {
			allMig = false
			continue
		}
		for _, in := range g.Instances {
			if in.HasCI {
				counts[in.Profile]++
				devices++
			}
		}
	}
	if strategy == deviceplugin.MigStrategyNone {
		return labels
	}
	for p, n := range counts {
		// GFD's count label: the profile's resource name and ".count".
		labels[string(resourcename.MIG(p))+".count"] = strconv.Itoa(n)
	}
	if strategy == deviceplugin.MigStrategySingle && allMig && len(counts) == 1 {
		for p := range counts {
			labels[LabelGPUProduct] = labelValue(gpus[0].Model + "-MIG-" + p)
		}
		labels[LabelGPUCount] = strconv.Itoa(devices)
	}
	return labels
}

// The layout annotation's types: internal/nodeinfo owns the contract.
type (
	LayoutGPU       = nodeinfo.GPU
	LayoutInstance  = nodeinfo.Instance
	LayoutPlacement = nodeinfo.Placement
)

// Health values in the layout annotation.
const (
	HealthHealthy   = nodeinfo.HealthHealthy
	HealthUnhealthy = nodeinfo.HealthUnhealthy
	HealthNotServed = nodeinfo.HealthNotServed
)

// migModeString renders the current and pending MIG mode the way
// nvidia-smi does.
func migModeString(g mig.GPU) string {
	mode := func(on bool) string {
		if on {
			return "Enabled"
		}
		return "Disabled"
	}
	if !g.MigCapable {
		return "N/A"
	}
	if g.MigEnabled != g.MigPending {
		return mode(g.MigEnabled) + " (pending " + mode(g.MigPending) + ")"
	}
	return mode(g.MigEnabled)
}

// healthOf maps a device ID to its health; served maps every served
// device ID to whether it is healthy.
func healthOf(served map[string]bool, id string) string {
	healthy, ok := served[id]
	switch {
	case id == "" || !ok:
		return HealthNotServed
	case healthy:
		return HealthHealthy
	default:
		return HealthUnhealthy
	}
}

// servedHealth collects the health of every device the device plugin
// serves, by device ID.
func servedHealth(resources []deviceplugin.ResourceStatus) map[string]bool {
	out := map[string]bool{}
	for _, r := range resources {
		for _, d := range r.Devices {
			out[d.ID] = d.Healthy
		}
	}
	return out
}

// layout builds the layout annotation's value for the node's GPUs; inUse
// maps a device ID to the pods holding it.
func layout(gpus []mig.GPU, served map[string]bool, inUse map[string][]string) []LayoutGPU {
	out := make([]LayoutGPU, 0, len(gpus))
	for _, g := range gpus {
		lg := LayoutGPU{Index: g.Index, UUID: g.UUID, Model: g.Model, MigMode: migModeString(g)}
		if !g.MigEnabled {
			lg.Health = healthOf(served, g.UUID)
			lg.UsedBy = inUse[g.UUID]
		}
		for _, in := range g.Instances {
			lg.Instances = append(lg.Instances, LayoutInstance{
				Profile:   in.Profile,
				Placement: LayoutPlacement{Start: in.Start, Size: in.Size},
				GI:        in.GIID,
				CI:        in.CIID,
				UUID:      in.UUID,
				Health:    healthOf(served, in.UUID),
				UsedBy:    usedBy(inUse, in.UUID),
			})
		}
		slices.SortFunc(lg.Instances, func(a, b LayoutInstance) int { return cmp.Compare(a.Placement.Start, b.Placement.Start) })
		out = append(out, lg)
	}
	slices.SortFunc(out, func(a, b LayoutGPU) int { return cmp.Compare(a.Index, b.Index) })
	return out
}

// usedBy is the pods holding device id; an instance without a device
// (no compute instance) has none.
func usedBy(inUse map[string][]string, id string) []string {
	if id == "" {
		return nil
	}
	return inUse[id]
}

// layoutAnnotation renders layout as the JSON value of AnnotationLayout.
func layoutAnnotation(gpus []mig.GPU, served map[string]bool, inUse map[string][]string) (string, error) {
	b, err := json.Marshal(layout(gpus, served, inUse))
	if err != nil {
		return "", fmt.Errorf("encoding the layout annotation: %w", err)
	}
	return string(b), nil
}

// profilesAnnotation renders the MIG profile table of each GPU model of
// the node as the JSON value of AnnotationProfiles, models by name; empty
// when no GPU is MIG capable.
func profilesAnnotation(gpus []mig.GPU) (string, error) {
	var models []nodeinfo.Model
	for _, g := range gpus {
		if !g.MigCapable || len(g.Profiles) == 0 || slices.ContainsFunc(models, func(m nodeinfo.Model) bool { return m.Name == g.Model }) {
			continue
		}
		models = append(models, nodeinfo.Model{Name: g.Model, Profiles: g.Profiles})
	}
	if len(models) == 0 {
		return "", nil
	}
	slices.SortFunc(models, func(a, b nodeinfo.Model) int { return cmp.Compare(a.Name, b.Name) })
	b, err := json.Marshal(models)
	if err != nil {
		return "", fmt.Errorf("encoding the profiles annotation: %w", err)
	}
	return string(b), nil
}
