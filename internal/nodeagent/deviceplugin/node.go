package deviceplugin

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/domain/resourcename"
)

// What the device plugin shows of its devices on the Node, and how the
// node agent tells whether the scheduler sees them: the kubelet publishes
// device-plugin resources in the Node's allocatable at its next node
// status update.

// Served is every served device ID by resource, and whether the device is
// healthy (its own health: a draining device is healthy or not as before).
// A shared device is served as its replicas, and named here by its own ID
// under the resource its replicas are served as: the agent reports on
// GPUs and instances, not on replicas.
func (m *Manager) Served() map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, r := range m.Resources() {
		devs := make(map[string]bool, len(r.Devices))
		for _, d := range r.Devices {
			devs[d.Underlying()] = d.Healthy
		}
		out[r.Name] = devs
	}
	return out
}

// Replicas is, for each device served as replicas (a shared device, by
// its own ID), the resource they are served as and how many there are
// (InUse is left to the agent, which asks the kubelet): what the Node's
// allocatable counts for it.
func (m *Manager) Replicas() map[string]nodeinfo.Shared {
	var out map[string]nodeinfo.Shared
	for _, r := range m.Resources() {
		for _, d := range r.Devices {
			if d.Shares == "" {
				continue
			}
			if out == nil {
				out = map[string]nodeinfo.Shared{}
			}
			rs := out[d.Shares]
			rs.Resource = r.Name
			rs.Replicas++
			out[d.Shares] = rs
		}
	}
	return out
}

// Visible tells whether the scheduler sees what is served, from node's
// allocatable; it never fails: layout
// identifies the served devices, health aside, and changes when the layout
// does; missing lists, sorted by resource, where node's allocatable is not
// what the kubelet would publish for the served devices (each resource's
// healthy devices that are not draining), as "nvidia.com/mig-1g.10gb 0 of
// 4", with the kubelet's refusal of a registration. It is empty once the
// kubelet published the layout.
func (m *Manager) Visible(_ context.Context, node *corev1.Node) (layout string, missing []string, err error) {
	served := m.Resources()
	return servedLayout(served), unpublished(node.Status.Allocatable, served), nil
}

// Visibility is nil: the served devices become visible in the Node's
// allocatable, which the agent's watch of its Node sees change.
func (m *Manager) Visibility() <-chan struct{} { return nil }

// Publisher names, for the Node's reason and Events, who publishes what is
// served, where the scheduler reads it, and what to check when it does not
// show.
func (m *Manager) Publisher() (who, where, hint string) {
	return "the kubelet", "the Node's allocatable", "is the kubelet running, and did it accept the device plugin's registration?"
}

// servedLayout identifies the served devices, health aside: it changes when
// the layout does, whatever the order of served.
func servedLayout(served []ResourceStatus) string {
	var b strings.Builder
	for _, r := range byName(served) {
		b.WriteString(r.Name)
		for _, d := range r.Devices {
			b.WriteByte(' ')
			b.WriteString(d.ID)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// unpublished lists where allocatable differs from what the kubelet would
// publish for served, ordered by name (see Visible).
func unpublished(allocatable corev1.ResourceList, served []ResourceStatus) []string {
	var out []string
	for _, r := range byName(served) {
		want := int64(0)
		for _, d := range r.Devices {
			if d.Healthy && !d.Draining {
				want++
			}
		}
		q := allocatable[corev1.ResourceName(r.Name)]
		if got := q.Value(); got != want {
			s := fmt.Sprintf("%s %d of %d", r.Name, got, want)
			if r.RegisterError != "" {
				s += fmt.Sprintf(" (registration refused: %s)", r.RegisterError)
			}
			out = append(out, s)
		}
	}
	return out
}

func byName(rs []ResourceStatus) []ResourceStatus {
	return slices.SortedFunc(slices.Values(rs), func(a, b ResourceStatus) int { return strings.Compare(a.Name, b.Name) })
}

// Labels are GPU feature discovery's labels for gpus under the MIG
// strategy (see GFDLabels) and, with a sharing config (see Share), its
// <resource>.replicas and <resource>.sharing-strategy for each resource,
// and the serving label that tells the webhook and the planner to read
// this node's supply from its allocatable.
func (m *Manager) Labels(gpus []mig.GPU) map[string]string {
	labels := GFDLabels(gpus, m.opts.MigStrategy)
	maps.Copy(labels, m.sharedLabels(gpus))
	labels[nodeinfo.LabelServing] = nodeinfo.ServingDevicePlugin
	return labels
}

// GFDLabels computes the GPU feature discovery compatible labels for the
// node's GPUs under a MIG strategy, as GFD does: under mixed (and none)
// gpu.count and gpu.product describe the physical GPUs; under single, where
// every MIG device is served as nvidia.com/gpu, they describe the MIG
// devices ("A100-SXM4-40GB-MIG-1g.5gb", one per device). The per-profile
// counts are set whenever MIG devices are served as MIG resources, that is
// under every strategy but none.
func GFDLabels(gpus []mig.GPU, strategy MigStrategy) map[string]string {
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
	if strategy == MigStrategyNone {
		return labels
	}
	for p, n := range counts {
		labels[nodeinfo.ProfileCountLabel(string(resourcename.MIG(p)))] = strconv.Itoa(n)
	}
	if strategy == MigStrategySingle && allMig && len(counts) == 1 {
		for p := range counts {
			labels[nodeinfo.LabelGPUProduct] = labelValue(gpus[0].Model + "-MIG-" + p)
		}
		labels[nodeinfo.LabelGPUCount] = strconv.Itoa(devices)
	}
	return labels
}

const maxLabelValueLength = 63

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
