// Package reconfig measures reconfiguration latency: the node agent
// (cmd/device-plugin, run as its own process on the simulated NVML backend)
// is given a new nvidia.com/mig.config annotation again and again, and each
// time the benchmark records when the kubelet stand-in receives the new
// device lists over ListAndWatch, when the Node's allocatable shows them
// (the stand-in publishes it, as the kubelet does) and when the Node shows
// nvidia.com/mig.config.state=success with the new layout.
package reconfig

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
)

// Layout is one mig.config the benchmark alternates between, on every GPU.
type Layout struct {
	Name string
	// PerGPU counts the MIG profiles on each GPU.
	PerGPU map[string]int
}

// Doc is the nvidia.com/mig.config annotation asking for l on every GPU.
func (l Layout) Doc() string {
	var parts []string
	for _, p := range slices.Sorted(maps.Keys(l.PerGPU)) {
		parts = append(parts, fmt.Sprintf("%q: %d", p, l.PerGPU[p]))
	}
	return "version: v1\nmig-configs:\n  selected:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {" + strings.Join(parts, ", ") + "}\n"
}

// Resources are the device-plugin resources (mixed strategy) and their
// device counts on a node of gpus GPUs.
func (l Layout) Resources(gpus int) map[string]int {
	out := map[string]int{}
	for p, n := range l.PerGPU {
		out["nvidia.com/mig-"+p] = n * gpus
	}
	return out
}

// Layouts are the two layouts of the benchmark. Going from one to the
// other changes every GPU: seven 1g.10gb become 4g.40gb + 2g.20gb + 1g.10gb
// (at most one 1g.10gb stays where it is) and back.
var Layouts = []Layout{
	{Name: "7x1g.10gb", PerGPU: map[string]int{"1g.10gb": 7}},
	{Name: "4g.40gb+2g.20gb+1g.10gb", PerGPU: map[string]int{"4g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}},
}

// layoutMatches reports whether the Node's migflex.io/mig.layout annotation
// shows l on gpus GPUs.
func layoutMatches(annotation string, l Layout, gpus int) bool {
	var got []nodeinfo.GPU
	if err := json.Unmarshal([]byte(annotation), &got); err != nil || len(got) != gpus {
		return false
	}
	for _, g := range got {
		counts := map[string]int{}
		for _, in := range g.Instances {
			counts[in.Profile]++
		}
		if !maps.Equal(counts, l.PerGPU) {
			return false
		}
	}
	return true
}
