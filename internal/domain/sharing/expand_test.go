package sharing_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/sharing"
)

const (
	gpu0 = "GPU-11111111-2222-3333-4444-555555555555"
	gpu1 = "GPU-66666666-7777-8888-9999-000000000000"
	migA = "MIG-aaaaaaaa-0000-0000-0000-000000000001"
	migB = "MIG-aaaaaaaa-0000-0000-0000-000000000002"
	migC = "MIG-aaaaaaaa-0000-0000-0000-000000000003"
)

// node is a mixed-strategy node: GPU 0 whole, GPU 1 with two 1g.10gb and
// one 2g.20gb.
func node() map[corev1.ResourceName][]sharing.Device {
	return map[corev1.ResourceName][]sharing.Device{
		"nvidia.com/gpu":         {{ID: gpu0, Index: "0", MemoryBytes: 80 << 30}},
		"nvidia.com/mig-1g.10gb": {{ID: migA, Index: "1:0", MIG: true}, {ID: migB, Index: "1:1", MIG: true}},
		"nvidia.com/mig-2g.20gb": {{ID: migC, Index: "1:2", MIG: true}},
	}
}

func plain(ids ...string) []sharing.ServedDevice {
	var out []sharing.ServedDevice
	for _, id := range ids {
		out = append(out, sharing.ServedDevice{ID: id, Device: id})
	}
	return out
}

func replicas(id string, n int) []sharing.ServedDevice {
	var out []sharing.ServedDevice
	for i := range n {
		out = append(out, sharing.ServedDevice{ID: sharing.ReplicaID(id, i), Device: id, Shared: true, Replica: i})
	}
	return out
}

func cat(lists ...[]sharing.ServedDevice) []sharing.ServedDevice {
	var out []sharing.ServedDevice
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

func parse(t *testing.T, doc string) *sharing.Config {
	t.Helper()
	cfg, err := sharing.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return cfg
}

func labels(kv ...string) map[string]string {
	out := map[string]string{}
	for i := 0; i < len(kv); i += 3 {
		out[kv[i]+".replicas"] = kv[i+1]
		out[kv[i]+".sharing-strategy"] = kv[i+2]
	}
	return out
}

func TestExpand(t *testing.T) {
	tests := map[string]struct {
		doc        string
		devices    map[corev1.ResourceName][]sharing.ServedDevice
		labels     map[string]string
		mpsServed  []corev1.ResourceName
		wantDevice map[string]string // served ID -> device, spot checks
	}{
		"no sharing": {
			doc: "version: v1\n",
			devices: map[corev1.ResourceName][]sharing.ServedDevice{
				"nvidia.com/gpu": plain(gpu0), "nvidia.com/mig-1g.10gb": plain(migA, migB), "nvidia.com/mig-2g.20gb": plain(migC),
			},
			labels: labels("nvidia.com/gpu", "1", "none", "nvidia.com/mig-1g.10gb", "1", "none", "nvidia.com/mig-2g.20gb", "1", "none"),
		},
		"one MIG profile time-sliced": {
			doc: "sharing: {timeSlicing: {resources: [{name: nvidia.com/mig-1g.10gb, replicas: 2}]}}",
			devices: map[corev1.ResourceName][]sharing.ServedDevice{
				"nvidia.com/gpu": plain(gpu0), "nvidia.com/mig-1g.10gb": cat(replicas(migA, 2), replicas(migB, 2)), "nvidia.com/mig-2g.20gb": plain(migC),
			},
			labels:     labels("nvidia.com/gpu", "1", "none", "nvidia.com/mig-1g.10gb", "2", "time-slicing", "nvidia.com/mig-2g.20gb", "1", "none"),
			wantDevice: map[string]string{migA + "::1": migA, migB + "::0": migB, migC: migC},
		},
		"renamed by default": {
			doc: "sharing: {timeSlicing: {renameByDefault: true, resources: [{name: mig-1g.10gb, replicas: 3}, {name: gpu, replicas: 2}]}}",
			devices: map[corev1.ResourceName][]sharing.ServedDevice{
				"nvidia.com/gpu.shared": replicas(gpu0, 2), "nvidia.com/mig-1g.10gb.shared": cat(replicas(migA, 3), replicas(migB, 3)),
				"nvidia.com/mig-2g.20gb": plain(migC),
			},
			labels: labels("nvidia.com/gpu", "2", "time-slicing", "nvidia.com/mig-1g.10gb", "3", "time-slicing", "nvidia.com/mig-2g.20gb", "1", "none"),
		},
		"some devices, by index and UUID; the rest stay whole": {
			doc: "sharing: {timeSlicing: {resources: [{name: mig-1g.10gb, devices: [\"1:1\"], rename: small, replicas: 2}, {name: mig-2g.20gb, devices: [" + migC + "], replicas: 4}]}}",
			devices: map[corev1.ResourceName][]sharing.ServedDevice{
				"nvidia.com/gpu": plain(gpu0), "nvidia.com/mig-1g.10gb": plain(migA), "nvidia.com/small": replicas(migB, 2),
				"nvidia.com/mig-2g.20gb": replicas(migC, 4),
			},
			labels: labels("nvidia.com/gpu", "1", "none", "nvidia.com/mig-1g.10gb", "2", "time-slicing", "nvidia.com/mig-2g.20gb", "4", "time-slicing"),
		},
		"a count of devices": {
			doc: "sharing: {timeSlicing: {resources: [{name: mig-1g.10gb, devices: 1, replicas: 2}]}}",
			devices: map[corev1.ResourceName][]sharing.ServedDevice{
				"nvidia.com/gpu": plain(gpu0), "nvidia.com/mig-1g.10gb": cat(replicas(migA, 2), plain(migB)), "nvidia.com/mig-2g.20gb": plain(migC),
			},
			labels: labels("nvidia.com/gpu", "1", "none", "nvidia.com/mig-1g.10gb", "2", "time-slicing", "nvidia.com/mig-2g.20gb", "1", "none"),
		},
		"a resource this node lacks is skipped": {
			doc: "sharing: {timeSlicing: {resources: [{name: mig-3g.40gb, replicas: 2}]}}",
			devices: map[corev1.ResourceName][]sharing.ServedDevice{
				"nvidia.com/gpu": plain(gpu0), "nvidia.com/mig-1g.10gb": plain(migA, migB), "nvidia.com/mig-2g.20gb": plain(migC),
			},
			labels: labels("nvidia.com/gpu", "1", "none", "nvidia.com/mig-1g.10gb", "1", "none", "nvidia.com/mig-2g.20gb", "1", "none"),
		},
		"MPS on the whole GPU": {
			doc: "sharing: {mps: {resources: [{name: gpu, replicas: 4}]}}",
			devices: map[corev1.ResourceName][]sharing.ServedDevice{
				"nvidia.com/gpu": replicas(gpu0, 4), "nvidia.com/mig-1g.10gb": plain(migA, migB), "nvidia.com/mig-2g.20gb": plain(migC),
			},
			labels:    labels("nvidia.com/gpu", "4", "mps", "nvidia.com/mig-1g.10gb", "1", "none", "nvidia.com/mig-2g.20gb", "1", "none"),
			mpsServed: []corev1.ResourceName{"nvidia.com/gpu"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s, err := sharing.Expand(node(), parse(t, tc.doc), sharing.Options{MPSHostRoot: "/run/nvidia/mps"})
			if err != nil {
				t.Fatalf("Expand: %v", err)
			}
			if diff := cmp.Diff(tc.devices, s.Devices); diff != "" {
				t.Errorf("devices (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.labels, s.Labels); diff != "" {
				t.Errorf("labels (-want,+got):\n%s", diff)
			}
			var mps []corev1.ResourceName
			for r := range s.MPS {
				mps = append(mps, r)
			}
			if diff := cmp.Diff(tc.mpsServed, mps, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("MPS resources (-want,+got):\n%s", diff)
			}
			// Every served ID maps back to its device.
			for _, devs := range s.Devices {
				for _, d := range devs {
					if got, ok := s.DeviceOf(d.ID); !ok || got != d.Device {
						t.Errorf("DeviceOf(%q) = %q, %v, want %q", d.ID, got, ok, d.Device)
					}
				}
			}
			for id, want := range tc.wantDevice {
				if got, ok := s.DeviceOf(id); !ok || got != want {
					t.Errorf("DeviceOf(%q) = %q, %v, want %q", id, got, ok, want)
				}
			}
		})
	}
}

func TestExpandFails(t *testing.T) {
	tests := map[string]struct {
		node map[corev1.ResourceName][]sharing.Device
		doc  string
		want string
	}{
		"count above the devices": {node(), "sharing: {timeSlicing: {resources: [{name: mig-1g.10gb, devices: 3, replicas: 2}]}}",
			"sharing nvidia.com/mig-1g.10gb: devices: 3 asked for, this node has 2"},
		"listed device missing": {node(), "sharing: {timeSlicing: {resources: [{name: mig-1g.10gb, devices: [\"1:2\"], replicas: 2}]}}",
			`sharing nvidia.com/mig-1g.10gb: devices: "1:2" is not a device of this node's nvidia.com/mig-1g.10gb`},
		"renamed onto a served resource": {node(), "sharing: {timeSlicing: {resources: [{name: mig-1g.10gb, rename: mig-2g.20gb, replicas: 2}]}}",
			"sharing nvidia.com/mig-1g.10gb: renamed to nvidia.com/mig-2g.20gb, which this node already serves"},
		"MPS on a MIG device under the single strategy": {
			map[corev1.ResourceName][]sharing.Device{"nvidia.com/gpu": {{ID: migA, Index: "0:0", MIG: true}}},
			"sharing: {mps: {resources: [{name: gpu, replicas: 2}]}}",
			"is a MIG device, which MPS cannot share"},
		"replica ID too long": {
			map[corev1.ResourceName][]sharing.Device{"nvidia.com/gpu": {{ID: strings.Repeat("x", 61), Index: "0"}}},
			"sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2}]}}",
			"longer than the kubelet's 63 characters"},
		"device served twice": {
			map[corev1.ResourceName][]sharing.Device{"nvidia.com/gpu": {{ID: gpu0}}, "nvidia.com/mig-1g.10gb": {{ID: gpu0}}},
			"version: v1", "is served twice"},
		"device without ID": {map[corev1.ResourceName][]sharing.Device{"nvidia.com/gpu": {{Index: "0"}}}, "version: v1", "a device has no ID"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s, err := sharing.Expand(tc.node, parse(t, tc.doc), sharing.Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Expand = %v, %v; want an error containing %q", s, err, tc.want)
			}
			if s != nil {
				t.Errorf("Expand returned %+v with its error", s)
			}
		})
	}
}

// An instance is busy when any one of its replicas is in use, including
// replicas a pod holds from before the config changed; an ID the node
// does not serve counts as busy, never as idle.
func TestBusy(t *testing.T) {
	s, err := sharing.Expand(node(), parse(t, "sharing: {timeSlicing: {resources: [{name: mig-1g.10gb, replicas: 4}]}}"), sharing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := s.Busy([]string{
		migB + "::3",
		migC,
		migA + "::9",  // replicas were more than 4 when the pod got it
		gpu0 + "::0",  // the GPU was shared then, and is not now
		"MIG-unknown", // not served now, nor a replica
	})
	want := map[string]bool{migA: true, migB: true, migC: true, gpu0: true, "MIG-unknown": true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Busy (-want,+got):\n%s", diff)
	}
	if got := s.Busy(nil); len(got) != 0 {
		t.Errorf("Busy(nil) = %v, want empty", got)
	}
}

func TestReplicaID(t *testing.T) {
	if got := sharing.ReplicaID(migA, 7); got != migA+"::7" {
		t.Errorf("ReplicaID = %q", got)
	}
	tests := []struct {
		id      string
		device  string
		replica int
		ok      bool
	}{
		{migA + "::0", migA, 0, true},
		{gpu0 + "::12", gpu0, 12, true},
		{migA, "", 0, false},
		{"::1", "", 0, false},
		{migA + "::", "", 0, false},
		{migA + "::-1", "", 0, false},
		{migA + "::01", "", 0, false},
		{migA + "::1::2", "", 0, false},
	}
	for _, tc := range tests {
		d, r, ok := sharing.SplitReplicaID(tc.id)
		if d != tc.device || r != tc.replica || ok != tc.ok {
			t.Errorf("SplitReplicaID(%q) = %q, %d, %v, want %q, %d, %v", tc.id, d, r, ok, tc.device, tc.replica, tc.ok)
		}
	}
}

// The MPS settings are NVIDIA's: the pipe directory per served resource
// under /mps, /dev/shm from the host root, 100/replicas percent of the
// threads and the memory over the replicas in MiB.
func TestMPS(t *testing.T) {
	n := map[corev1.ResourceName][]sharing.Device{
		"nvidia.com/gpu": {{ID: gpu0, Index: "0", MemoryBytes: 81559 << 20}, {ID: gpu1, Index: "1"}},
	}
	s, err := sharing.Expand(n, parse(t, "sharing: {mps: {renameByDefault: true, resources: [{name: gpu, replicas: 3}]}}"),
		sharing.Options{MPSHostRoot: "/run/nvidia/mps"})
	if err != nil {
		t.Fatal(err)
	}
	want := sharing.MPS{
		Resource:               "nvidia.com/gpu.shared",
		PipeDir:                "/mps/nvidia.com/gpu.shared/pipe",
		LogDir:                 "/mps/nvidia.com/gpu.shared/log",
		HostPipeDir:            "/run/nvidia/mps/nvidia.com/gpu.shared/pipe",
		HostShmDir:             "/run/nvidia/mps/shm",
		ContainerEnv:           map[string]string{"CUDA_MPS_PIPE_DIRECTORY": "/mps/nvidia.com/gpu.shared/pipe"},
		DaemonEnv:              map[string]string{"CUDA_MPS_PIPE_DIRECTORY": "/mps/nvidia.com/gpu.shared/pipe", "CUDA_MPS_LOG_DIRECTORY": "/mps/nvidia.com/gpu.shared/log"},
		ActiveThreadPercentage: 33,
		PinnedMemoryLimits:     map[string]string{"0": "27186M"}, // GPU 1's memory is unknown: no limit
	}
	if diff := cmp.Diff(map[corev1.ResourceName]sharing.MPS{"nvidia.com/gpu.shared": want}, s.MPS); diff != "" {
		t.Errorf("MPS (-want,+got):\n%s", diff)
	}
	wantCmds := []string{"set_default_device_pinned_mem_limit 0 27186M", "set_default_active_thread_percentage 33"}
	if diff := cmp.Diff(wantCmds, want.DaemonCommands()); diff != "" {
		t.Errorf("DaemonCommands (-want,+got):\n%s", diff)
	}
}
