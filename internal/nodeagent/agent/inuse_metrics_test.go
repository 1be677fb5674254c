package agent

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/migflex/migflex/internal/nodeagent/podresources"
)

// threeServer serves two healthy 1g.10gb devices and an unhealthy one, and
// a healthy whole GPU.
type threeServer struct{ nopServer }

func (threeServer) Served() map[string]map[string]bool {
	return map[string]map[string]bool{
		resource1g:       {"MIG-0": true, "MIG-1": true, "MIG-2": false},
		"nvidia.com/gpu": {"GPU-1": true},
	}
}

// migflex_agent_devices_in_use counts the served devices the pods the
// kubelet reports hold, by health, from what noteAssignments last saw; a
// device of no served resource counts nowhere.
func TestDevicesInUseMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, threeServer{}, "node-a", "device-plugin")
	if err != nil {
		t.Fatal(err)
	}
	a := &Agent{metrics: m}
	check := func(want map[string]float64) {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, mf := range mfs {
			if mf.GetName() != "migflex_agent_devices_in_use" {
				continue
			}
			for _, s := range mf.GetMetric() {
				key := ""
				for _, l := range s.GetLabel() {
					key += l.GetName() + "=" + l.GetValue() + " "
				}
				got[key] = s.GetGauge().GetValue()
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("migflex_agent_devices_in_use (-want +got):\n%s", diff)
		}
	}
	counts := func(gpuHealthy, gpuUnhealthy, migHealthy, migUnhealthy float64) map[string]float64 {
		return map[string]float64{
			"health=healthy resource=nvidia.com/gpu ":           gpuHealthy,
			"health=unhealthy resource=nvidia.com/gpu ":         gpuUnhealthy,
			"health=healthy resource=nvidia.com/mig-1g.10gb ":   migHealthy,
			"health=unhealthy resource=nvidia.com/mig-1g.10gb ": migUnhealthy,
		}
	}
	check(counts(0, 0, 0, 0))
	a.noteAssignments([]podresources.Assignment{
		{Namespace: "ns", Pod: "a", Container: "c", Resource: resource1g, DeviceID: "MIG-0"},
		{Namespace: "ns", Pod: "b", Container: "c", Resource: resource1g, DeviceID: "MIG-2"},
		{Namespace: "ns", Pod: "b", Container: "d", Resource: resource1g, DeviceID: "MIG-2"},
		{Namespace: "ns", Pod: "c", Container: "c", Resource: "example.com/other", DeviceID: "OTHER-0"},
	})
	check(counts(0, 0, 1, 1))
	a.noteAssignments(nil)
	check(counts(0, 0, 0, 0))
}
