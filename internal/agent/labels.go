package agent

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/migflex/migflex/internal/deviceplugin"
	"github.com/migflex/migflex/internal/mig"
	"github.com/migflex/migflex/internal/nodeinfo"
	"github.com/migflex/migflex/internal/resourcename"
	"github.com/migflex/migflex/internal/textcut"
)

// The keys the agent reads and writes on its Node, their values and the
// annotations' JSON are the Node contract's: internal/nodeinfo.

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
		nodeinfo.LabelGPUCount:    strconv.Itoa(len(gpus)),
		nodeinfo.LabelMigCapable:  "false",
		nodeinfo.LabelMigStrategy: string(strategy),
	}
	if len(gpus) > 0 {
		labels[nodeinfo.LabelGPUProduct] = labelValue(gpus[0].Model)
	}
	counts := map[string]int{}
	devices, allMig := 0, len(gpus) > 0
	for _, g := range gpus {
		if g.MigCapable {
			labels[nodeinfo.LabelMigCapable] = "true"
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
		labels[nodeinfo.ProfileCountLabel(string(resourcename.MIG(p)))] = strconv.Itoa(n)
	}
	if strategy == deviceplugin.MigStrategySingle && allMig && len(counts) == 1 {
		for p := range counts {
			labels[nodeinfo.LabelGPUProduct] = labelValue(gpus[0].Model + "-MIG-" + p)
		}
		labels[nodeinfo.LabelGPUCount] = strconv.Itoa(devices)
	}
	return labels
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
