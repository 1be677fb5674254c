package deviceplugin

import (
	"maps"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/domain/sharing"
	"github.com/migflex/migflex/internal/nodeagent/deviceplugin/kubeletstub"
)

// parseSharing parses a sharing config in NVIDIA's format or fails the test.
func parseSharing(t *testing.T, doc string) *sharing.Config {
	t.Helper()
	cfg, err := sharing.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// with is mixedWant with some resources replaced.
func with(changes map[string][]string) map[string][]string {
	out := maps.Clone(mixedWant)
	for r, devs := range changes {
		if devs == nil {
			delete(out, r)
			continue
		}
		out[r] = devs
	}
	return out
}

func TestShareServesReplicas(t *testing.T) {
	for name, tc := range map[string]struct {
		doc        string
		want       map[string][]string
		wantLabels map[string]string
	}{
		"time-sliced MIG resource": {
			doc: `
version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/mig-1g.10gb
      replicas: 2
`,
			want: with(map[string][]string{"nvidia.com/mig-1g.10gb": {"MIG-0-13::0", "MIG-0-13::1", "MIG-1-8::0", "MIG-1-8::1"}}),
			wantLabels: map[string]string{
				"nvidia.com/mig-1g.10gb.replicas": "2", "nvidia.com/mig-1g.10gb.sharing-strategy": "time-slicing",
				"nvidia.com/gpu.replicas": "1", "nvidia.com/gpu.sharing-strategy": "none",
			},
		},
		"renamed by default": {
			doc: `
sharing:
  timeSlicing:
    renameByDefault: true
    resources:
    - name: mig-1g.10gb
      replicas: 2
      devices: ["1:1"]
`,
			want: with(map[string][]string{
				"nvidia.com/mig-1g.10gb":        {"MIG-0-13"},
				"nvidia.com/mig-1g.10gb.shared": {"MIG-1-8::0", "MIG-1-8::1"},
			}),
			wantLabels: map[string]string{"nvidia.com/mig-1g.10gb.replicas": "2", "nvidia.com/mig-1g.10gb.sharing-strategy": "time-slicing"},
		},
		"MPS on whole GPUs": {
			doc: `
sharing:
  mps:
    resources:
    - name: nvidia.com/gpu
      replicas: 3
`,
			want:       with(map[string][]string{"nvidia.com/gpu": {"GPU-2::0", "GPU-2::1", "GPU-2::2"}}),
			wantLabels: map[string]string{"nvidia.com/gpu.replicas": "3", "nvidia.com/gpu.sharing-strategy": "mps"},
		},
		"a config sharing nothing": {
			doc:        `version: v1`,
			want:       mixedWant,
			wantLabels: map[string]string{"nvidia.com/mig-1g.10gb.replicas": "1", "nvidia.com/mig-1g.10gb.sharing-strategy": "none"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			e := start(t, Options{}, mixedLayout())
			e.wait("layout", serving(mixedWant))
			if err := e.m.Share(e.ctx, parseSharing(t, tc.doc)); err != nil {
				t.Fatal(err)
			}
			// A resource whose devices all became replicas elsewhere
			// stays registered with none.
			want := maps.Clone(tc.want)
			for r := range mixedWant {
				if _, ok := want[r]; !ok {
					want[r] = []string{}
				}
			}
			e.wait("replicas", serving(want))
			labels := e.m.Labels(mixedLayout())
			for k, v := range tc.wantLabels {
				if labels[k] != v {
					t.Errorf("label %s = %q, want %q", k, labels[k], v)
				}
			}
			if labels[nodeinfo.LabelServing] != nodeinfo.ServingDevicePlugin {
				t.Errorf("serving label lost: %v", labels)
			}
			// The agent sees instances, not replicas.
			for r, devs := range e.m.Served() {
				for id := range devs {
					if strings.Contains(id, "::") {
						t.Errorf("Served()[%s] names replica %s", r, id)
					}
				}
			}
			// What the layout annotation reports of each shared device:
			// the resource its replicas are served as, and their count.
			var wantReplicas map[string]nodeinfo.Shared
			for r, ids := range tc.want {
				for _, id := range ids {
					if dev, _, ok := sharing.SplitReplicaID(id); ok {
						if wantReplicas == nil {
							wantReplicas = map[string]nodeinfo.Shared{}
						}
						rs := wantReplicas[dev]
						rs.Resource = r
						rs.Replicas++
						wantReplicas[dev] = rs
					}
				}
			}
			if diff := cmp.Diff(wantReplicas, e.m.Replicas()); diff != "" {
				t.Errorf("Replicas() (-want +got):\n%s", diff)
			}
			// Taking the config away serves the devices whole again.
			if err := e.m.Share(e.ctx, nil); err != nil {
				t.Fatal(err)
			}
			e.wait("devices whole again", func(st kubeletstub.State) bool {
				v := view(st)
				for r, devs := range mixedWant {
					if !cmp.Equal(devs, v[r]) {
						return false
					}
				}
				return true
			})
			if _, ok := e.m.Labels(mixedLayout())["nvidia.com/mig-1g.10gb.replicas"]; ok {
				t.Error("sharing labels stay without a sharing config")
			}
		})
	}
}

// TestShareInvalidKeepsServing: a config that cannot apply to the node's
// devices is refused with the reason, and what was served stays served.
func TestShareInvalidKeepsServing(t *testing.T) {
	e := start(t, Options{}, mixedLayout())
	e.wait("layout", serving(mixedWant))
	good := parseSharing(t, "sharing: {timeSlicing: {resources: [{name: mig-1g.10gb, replicas: 2}]}}")
	if err := e.m.Share(e.ctx, good); err != nil {
		t.Fatal(err)
	}
	shared := with(map[string][]string{"nvidia.com/mig-1g.10gb": {"MIG-0-13::0", "MIG-0-13::1", "MIG-1-8::0", "MIG-1-8::1"}})
	e.wait("replicas", serving(shared))

	for name, doc := range map[string]string{
		"devices the node lacks":        "sharing: {timeSlicing: {resources: [{name: mig-1g.10gb, replicas: 4, devices: 3}]}}",
		"rename onto a served resource": "sharing: {timeSlicing: {resources: [{name: mig-1g.10gb, replicas: 4, rename: mig-3g.40gb}]}}",
	} {
		t.Run(name, func(t *testing.T) {
			err := e.m.Share(e.ctx, parseSharing(t, doc))
			if err == nil || !strings.Contains(err.Error(), "serving what was served") {
				t.Fatalf("Share = %v, want an error saying the node keeps serving", err)
			}
			e.wait("unchanged", serving(shared))
			// The next layout is still served under the good config.
			if err := e.m.Serve(e.ctx, mixedLayout()); err != nil {
				t.Fatal(err)
			}
			e.wait("unchanged", serving(shared))
		})
	}
}

func TestAllocateReplicas(t *testing.T) {
	const r = "nvidia.com/mig-1g.10gb"
	for name, tc := range map[string]struct {
		doc      string
		resource string
		ids      []string
		want     *pluginapi.ContainerAllocateResponse
		code     codes.Code
	}{
		"one replica is its instance": {
			doc:      "sharing: {timeSlicing: {resources: [{name: mig-1g.10gb, replicas: 2}]}}",
			resource: r, ids: []string{"MIG-1-8::1"},
			want: &pluginapi.ContainerAllocateResponse{Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": "MIG-1-8", "POST": "MIG-1-8"}},
		},
		"two replicas of one instance are it once": {
			doc:      "sharing: {timeSlicing: {resources: [{name: mig-1g.10gb, replicas: 2}]}}",
			resource: r, ids: []string{"MIG-1-8::1", "MIG-1-8::0"},
			want: &pluginapi.ContainerAllocateResponse{Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": "MIG-1-8", "POST": "MIG-1-8"}},
		},
		"replicas of two instances": {
			doc:      "sharing: {timeSlicing: {resources: [{name: mig-1g.10gb, replicas: 2}]}}",
			resource: r, ids: []string{"MIG-1-8::0", "MIG-0-13::1"},
			want: &pluginapi.ContainerAllocateResponse{Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": "MIG-1-8,MIG-0-13", "POST": "MIG-1-8,MIG-0-13"}},
		},
		"failRequestsGreaterThanOne refuses two": {
			doc:      "sharing: {timeSlicing: {failRequestsGreaterThanOne: true, resources: [{name: mig-1g.10gb, replicas: 2}]}}",
			resource: r, ids: []string{"MIG-1-8::0", "MIG-0-13::1"}, code: codes.InvalidArgument,
		},
		"failRequestsGreaterThanOne allows one": {
			doc:      "sharing: {timeSlicing: {failRequestsGreaterThanOne: true, resources: [{name: mig-1g.10gb, replicas: 2}]}}",
			resource: r, ids: []string{"MIG-0-13::1"},
			want: &pluginapi.ContainerAllocateResponse{Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": "MIG-0-13", "POST": "MIG-0-13"}},
		},
		"a device served whole beside replicas": {
			doc:      "sharing: {timeSlicing: {failRequestsGreaterThanOne: true, resources: [{name: mig-1g.10gb, replicas: 2, devices: [\"0:2\"]}]}}",
			resource: r, ids: []string{"MIG-1-8"},
			want: &pluginapi.ContainerAllocateResponse{Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": "MIG-1-8", "POST": "MIG-1-8"}},
		},
		"the instance's own ID is not served": {
			doc:      "sharing: {timeSlicing: {resources: [{name: mig-1g.10gb, replicas: 2}]}}",
			resource: r, ids: []string{"MIG-1-8"}, code: codes.InvalidArgument,
		},
		"MPS client": {
			doc:      "sharing: {mps: {resources: [{name: gpu, replicas: 2}]}}",
			resource: resourceGPU, ids: []string{"GPU-2::1"},
			want: &pluginapi.ContainerAllocateResponse{
				Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-2", "POST": "GPU-2", "CUDA_MPS_PIPE_DIRECTORY": "/mps/nvidia.com/gpu/pipe"},
				Mounts: []*pluginapi.Mount{
					{ContainerPath: "/mps/nvidia.com/gpu/pipe", HostPath: "/run/nvidia/mps/nvidia.com/gpu/pipe"},
					{ContainerPath: "/dev/shm", HostPath: "/run/nvidia/mps/shm"},
				},
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			e := start(t, Options{PostAllocator: envPost{}}, mixedLayout())
			e.wait("layout", serving(mixedWant))
			if err := e.m.Share(e.ctx, parseSharing(t, tc.doc)); err != nil {
				t.Fatal(err)
			}
			e.wait("replicas", func(st kubeletstub.State) bool {
				return strings.Contains(strings.Join(deviceList(st.Plugins[tc.resource].Devices), ","), "::")
			})
			got, err := e.kubelet.Allocate(e.ctx, tc.resource, tc.ids...)
			if tc.code != codes.OK {
				if s, _ := status.FromError(err); err == nil || s.Code() != tc.code {
					t.Fatalf("Allocate = %v, want %s", err, tc.code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("Allocate (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReplicasShareHealthAndDrain: a replica is as healthy as its
// instance, and drains with it.
func TestReplicasShareHealthAndDrain(t *testing.T) {
	const r = "nvidia.com/mig-1g.10gb"
	h := newFakeHealth()
	e := start(t, Options{PostAllocator: envPost{}, Health: h}, mixedLayout())
	e.wait("layout", serving(mixedWant))
	if err := e.m.Share(e.ctx, parseSharing(t, "sharing: {timeSlicing: {resources: [{name: mig-1g.10gb, replicas: 2}]}}")); err != nil {
		t.Fatal(err)
	}
	list := func(want ...string) func(kubeletstub.State) bool {
		return func(st kubeletstub.State) bool { return cmp.Equal(want, deviceList(st.Plugins[r].Devices)) }
	}
	e.wait("replicas", list("MIG-0-13::0", "MIG-0-13::1", "MIG-1-8::0", "MIG-1-8::1"))

	h.set("MIG-0-13", 79)
	e.wait("MIG-0-13's replicas unhealthy", list("MIG-0-13::0!", "MIG-0-13::1!", "MIG-1-8::0", "MIG-1-8::1"))
	if _, err := e.kubelet.Allocate(e.ctx, r, "MIG-0-13::0"); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("Allocate of an unhealthy instance's replica = %v, want FailedPrecondition", err)
	}
	if got := e.m.Served()[r]; !cmp.Equal(got, map[string]bool{"MIG-0-13": false, "MIG-1-8": true}) {
		t.Errorf("Served()[%s] = %v, want each instance once with its health", r, got)
	}
	h.set("MIG-0-13", 0)
	e.wait("healthy again", list("MIG-0-13::0", "MIG-0-13::1", "MIG-1-8::0", "MIG-1-8::1"))

	if err := e.m.Drain(e.ctx, []string{"MIG-1-8"}); err != nil {
		t.Fatal(err)
	}
	e.wait("MIG-1-8's replicas draining", list("MIG-0-13::0", "MIG-0-13::1", "MIG-1-8::0!", "MIG-1-8::1!"))
	if _, err := e.kubelet.Allocate(e.ctx, r, "MIG-1-8::1"); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("Allocate of a draining instance's replica = %v, want FailedPrecondition", err)
	}
	e.m.Undrain([]string{"MIG-1-8"})
	e.wait("undrained", list("MIG-0-13::0", "MIG-0-13::1", "MIG-1-8::0", "MIG-1-8::1"))
}

func TestPreferredAllocationReplicas(t *testing.T) {
	const r = "nvidia.com/mig-1g.10gb"
	rep := func(gpu int, gi uint32, n int) Device {
		d := migDev(r, "1g.10gb", gpu, gi)
		d.Shares, d.Replica = d.ID, n
		d.ID = sharing.ReplicaID(d.ID, n)
		return d
	}
	// Three replicas each of MIG-0-1 and MIG-0-2 on GPU 0 and of MIG-1-1
	// on GPU 1. MIG-0-1 has two in use, MIG-0-2 one, MIG-1-1 none.
	devices := []Device{
		rep(0, 1, 0), rep(0, 1, 1), rep(0, 1, 2),
		rep(0, 2, 0), rep(0, 2, 1), rep(0, 2, 2),
		rep(1, 1, 0), rep(1, 1, 1), rep(1, 1, 2),
	}
	available := []string{"MIG-0-1::2", "MIG-0-2::1", "MIG-0-2::2", "MIG-1-1::0", "MIG-1-1::1", "MIG-1-1::2"}
	for name, tc := range map[string]struct {
		policy AllocationPolicy
		size   int
		want   []string
	}{
		"packed fills the busiest instance":                       {AllocationPacked, 1, []string{"MIG-0-1::2"}},
		"packed takes distinct instances before a second":         {AllocationPacked, 3, []string{"MIG-0-1::2", "MIG-0-2::1", "MIG-1-1::0"}},
		"packed takes a second replica only when it must":         {AllocationPacked, 4, []string{"MIG-0-1::2", "MIG-0-2::1", "MIG-1-1::0", "MIG-0-2::2"}},
		"distributed takes the idlest instance of the freest GPU": {AllocationDistributed, 1, []string{"MIG-0-2::1"}},
		"distributed spreads over GPUs, then instances":           {AllocationDistributed, 2, []string{"MIG-0-2::1", "MIG-1-1::0"}},
		"distributed takes every instance before a second":        {AllocationDistributed, 3, []string{"MIG-0-2::1", "MIG-1-1::0", "MIG-0-1::2"}},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := preferredAllocation(tc.policy, devices, available, nil, tc.size)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestServableWithSharing: a layout the sharing config cannot serve (its
// devices count more than the layout has) is not servable, so the agent
// does not make it; one it can is.
func TestServableWithSharing(t *testing.T) {
	m, err := New(Options{PluginDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := m.Share(ctx, parseSharing(t, "sharing: {timeSlicing: {resources: [{name: mig-1g.10gb, replicas: 2, devices: 2}]}}")); err != nil {
		t.Fatal(err)
	}
	if err := m.Serve(ctx, mixedLayout()); err != nil {
		t.Fatal(err)
	}
	one1g := []mig.GPU{migGPU(0, inst("1g.10gb", 0, 1, 9)), plainGPU(1)}
	for name, tc := range map[string]struct {
		gpus    []mig.GPU
		wantErr string
	}{
		"two 1g.10gb":       {gpus: mixedLayout()},
		"one 1g.10gb":       {gpus: one1g, wantErr: "the layout cannot be served under --mig-strategy=mixed and the sharing config: sharing config: sharing nvidia.com/mig-1g.10gb: devices: 2 asked for, this node has 1"},
		"no 1g.10gb at all": {gpus: []mig.GPU{plainGPU(0)}},
	} {
		t.Run(name, func(t *testing.T) {
			err := m.Servable(tc.gpus)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr) {
				t.Errorf("Servable = %v, want %q", err, tc.wantErr)
			}
		})
	}
}
