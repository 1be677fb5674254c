package agent

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/migconfig"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/nodeagent/deviceplugin"
	"github.com/migflex/migflex/internal/nodeagent/deviceplugin/kubeletstub"
	"github.com/migflex/migflex/internal/nodeagent/podresources"
	"github.com/migflex/migflex/internal/nodeagent/podresources/podresourcestest"
)

// TestDrainIDs: the devices drained before a change are exactly those a
// pod on which would make busyGPUs hold the GPU back.
func TestDrainIDs(t *testing.T) {
	a1, a2 := inst("3g.40gb", 0, 4, 1), inst("3g.40gb", 4, 4, 2)
	noCI := mig.Instance{Profile: "1g.10gb", Start: 7, Size: 1, GIID: 9} // no compute instance: no device
	gpus := []mig.GPU{h100(0, true, a1, a2, noCI), h100(1, false), h100(2, true, inst("7g.80gb", 0, 8, 3))}
	gpus[2].Instances[0].UUID = "MIG-gpu2"

	destroyA2 := migconfig.GPUPlan{GPU: 0, Keep: []mig.Instance{a1}, Destroy: []mig.Instance{a2}, Create: []migconfig.Placement{{Profile: "1g.10gb", Start: 4, Size: 1}}}
	createOnly := migconfig.GPUPlan{GPU: 0, Keep: []mig.Instance{a1, a2}, Create: []migconfig.Placement{{Profile: "1g.10gb", Start: 6, Size: 1}}}
	disable0 := migconfig.GPUPlan{GPU: 0, Mode: migconfig.ModeDisable, Destroy: []mig.Instance{a1, a2, noCI}}
	enable1 := migconfig.GPUPlan{GPU: 1, Mode: migconfig.ModeEnable, Create: []migconfig.Placement{{Profile: "7g.80gb", Start: 0, Size: 8}}}
	unchanged2 := migconfig.GPUPlan{GPU: 2, Keep: gpus[2].Instances}

	tests := []struct {
		name string
		plan []migconfig.GPUPlan
		want map[int][]string
	}{
		{"nothing changes", []migconfig.GPUPlan{unchanged2}, map[int][]string{}},
		{"a destroyed instance, not the kept one", []migconfig.GPUPlan{destroyA2, unchanged2}, map[int][]string{0: {gpuUUID(0), migUUID(2)}}},
		{"only creations: the GPU itself", []migconfig.GPUPlan{createOnly}, map[int][]string{0: {gpuUUID(0)}}},
		{"MIG off: every device", []migconfig.GPUPlan{disable0}, map[int][]string{0: {gpuUUID(0), migUUID(1), migUUID(2)}}},
		{"MIG on: the whole GPU", []migconfig.GPUPlan{enable1}, map[int][]string{1: {gpuUUID(1)}}},
		{"several GPUs", []migconfig.GPUPlan{destroyA2, enable1, unchanged2}, map[int][]string{0: {gpuUUID(0), migUUID(2)}, 1: {gpuUUID(1)}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			plan := migconfig.Plan{GPUs: tc.plan}
			got := drainIDs(plan, gpus)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("drainIDs() (-want +got):\n%s", diff)
			}
			// The same devices busyGPUs counts: a pod on a drained one
			// holds its GPU back, a pod on any other does not.
			for id, ref := range deviceIndex(gpus) {
				drained := slices.Contains(got[ref.GPU], id)
				busy := len(busyGPUs(plan, gpus, []podresources.Assignment{assigned("p", id)})) > 0
				if drained != busy {
					t.Errorf("device %s: drained %v, but a pod on it makes its GPU busy: %v", id, drained, busy)
				}
			}
		})
	}
}

// racingPodResources answers like inner, and runs between once after its
// first answer: what the kubelet does between the agent's busy check and
// the apply.
type racingPodResources struct {
	inner   PodResources
	between func()
	once    sync.Once
	mu      sync.Mutex
	calls   int
}

func (r *racingPodResources) List(ctx context.Context) ([]podresources.Assignment, error) {
	as, err := r.inner.List(ctx)
	r.mu.Lock()
	r.calls++
	r.mu.Unlock()
	r.once.Do(r.between)
	return as, err
}

func (r *racingPodResources) Calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls
}

func withPodResources(p PodResources) agentOption {
	return func(o *Options, _ *deviceplugin.Options) { o.PodResources = p }
}

// kubeletDevices is the health of each device of resource the kubelet
// stand-in was last sent, "ID" or "ID!" for unhealthy.
func kubeletDevices(st kubeletstub.State, resource string) []string {
	var out []string
	for _, d := range st.Plugins[resource].Devices {
		s := d.ID
		if d.Health != pluginapi.Healthy {
			s += "!"
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

func (n *node) waitKubelet(what string, cond func(kubeletstub.State) bool) {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangTimeout)
	defer cancel()
	if st, err := n.kubelet.Wait(ctx, cond); err != nil {
		n.t.Fatalf("kubelet stand-in: waiting for %s: %v; it has %v", what, err, st.Plugins)
	}
}

// noneDraining fails the test if the device plugin still drains a device.
func noneDraining(t *testing.T, dp *deviceplugin.Manager) {
	t.Helper()
	for _, r := range dp.Resources() {
		for _, d := range r.Devices {
			if d.Draining {
				t.Errorf("device %s of %s still drains", d.ID, r.Name)
			}
		}
	}
}

// TestDrainBeforeRepartition: the devices of a GPU about to be
// repartitioned are drained and the kubelet asked again, so a pod the
// kubelet gave one of them after the busy check holds the GPU back; what
// is not repartitioned is served again.
func TestDrainBeforeRepartition(t *testing.T) {
	api := startAPIServer(t)

	t.Run("a pod assigned between the busy check and the apply", func(t *testing.T) {
		n := newNode(t, api)
		n.partition(0, "3g.40gb", "3g.40gb")
		n.partition(1, "3g.40gb", "3g.40gb")
		gpus := n.discover()
		lateID, otherID := gpus[0].Instances[0].UUID, gpus[0].Instances[1].UUID
		// After the agent's first List, the kubelet admits a pod: it
		// Allocates a device of GPU 0, which still looks free, through
		// the device plugin, and records the assignment.
		pr := &racingPodResources{inner: podresources.New(n.podres.Socket), between: func() {
			if _, err := n.kubelet.Allocate(context.Background(), resource3g, lateID); err != nil {
				t.Errorf("Allocate before the drain: %v", err)
			}
			n.podres.Set(podresourcestest.Device{Namespace: "ml", Pod: "late-0", Container: "main", Resource: resource3g, IDs: []string{lateID}})
		}}
		run := n.start(withPodResources(pr))
		n.waitServed(map[string]int{resource3g: 4})
		n.annotate(nodeinfo.AnnotationMigConfig, allSeven)

		obj := n.waitNode("a pending or final state", func(o *corev1.Node) bool {
			if isAnnouncement(o) {
				return false // the start of the change, not its outcome
			}
			return o.Labels[nodeinfo.LabelMigConfigState] == nodeinfo.StatePending || o.Labels[nodeinfo.LabelMigConfigState] == nodeinfo.StateSuccess || o.Labels[nodeinfo.LabelMigConfigState] == nodeinfo.StateFailed
		})
		if s := obj.Labels[nodeinfo.LabelMigConfigState]; s != nodeinfo.StatePending {
			t.Fatalf("state %q (%s), want pending on the late pod; layout %v", s, obj.Annotations[nodeinfo.AnnotationReason], n.layoutOf())
		}
		if r := obj.Annotations[nodeinfo.AnnotationReason]; !strings.Contains(r, "ml/late-0") || !strings.Contains(r, "GPU 0") {
			t.Errorf("pending reason %q does not name the late pod and its GPU", r)
		}
		// GPU 0 is untouched, GPU 1 is configured.
		waitLayout(t, n, []string{"GPU 0 mig=true 3g.40gb@0 3g.40gb@4", "GPU 1 mig=true 1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6"})
		if c := pr.Calls(); c < 2 {
			t.Errorf("%d pod-resources Lists, want the busy check and the one after the drain", c)
		}
		// GPU 0's devices are served again, healthy; the kubelet can
		// hand out the one the late pod does not hold.
		want := []string{lateID, otherID}
		slices.Sort(want)
		n.waitKubelet("GPU 0's devices healthy", func(st kubeletstub.State) bool {
			return cmp.Equal(want, kubeletDevices(st, resource3g))
		})
		if _, err := n.kubelet.Allocate(context.Background(), resource3g, otherID); err != nil {
			t.Errorf("Allocate of GPU 0's other device after the GPU turned out busy: %v", err)
		}
		noneDraining(t, run.dp)

		// The pod is gone: GPU 0 follows.
		n.podres.Set()
		n.waitState(nodeinfo.StateSuccess)
		n.waitServed(map[string]int{resource3g: 0, resource1g: 14})
		n.waitKubelet("every device healthy", func(st kubeletstub.State) bool {
			return !slices.ContainsFunc(kubeletDevices(st, resource1g), func(s string) bool { return strings.HasSuffix(s, "!") })
		})
		noneDraining(t, run.dp)
	})

	t.Run("a failed apply serves the drained devices again", func(t *testing.T) {
		n := newNode(t, api)
		n.partition(0, "3g.40gb", "3g.40gb")
		gpus := n.discover()
		kept := gpus[0].Instances[1]
		// Something outside Kubernetes runs on the second instance: its
		// destruction fails, and the apply rolls back.
		if err := n.lib.SetBusy(0, kept.GIID, true); err != nil {
			t.Fatal(err)
		}
		run := n.start()
		n.waitServed(map[string]int{resource3g: 2, string(resourcename.GPU): 1})
		n.annotate(nodeinfo.AnnotationMigConfig, "version: v1\nmig-configs:\n  selected:\n  - devices: [0]\n    mig-enabled: true\n    mig-devices: {\"1g.10gb\": 7}\n")
		n.waitState(nodeinfo.StateFailed)
		waitLayout(t, n, []string{"GPU 0 mig=true 3g.40gb@0 3g.40gb@4", "GPU 1 mig=false"})
		// The busy instance kept its UUID through the failed apply: it is
		// served healthy and can be handed out again.
		n.waitKubelet("GPU 0's devices healthy", func(st kubeletstub.State) bool {
			devs := kubeletDevices(st, resource3g)
			return len(devs) == 2 && slices.Contains(devs, kept.UUID) && !slices.ContainsFunc(devs, func(s string) bool { return strings.HasSuffix(s, "!") })
		})
		if _, err := n.kubelet.Allocate(context.Background(), resource3g, kept.UUID); err != nil {
			t.Errorf("Allocate of the device the failed apply kept: %v", err)
		}
		noneDraining(t, run.dp)
	})
}
