package agent

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/nodeagent/deviceplugin"
)

func withAllocatableTimeout(d time.Duration) agentOption {
	return func(o *Options, _ *deviceplugin.Options) { o.AllocatableTimeout = d }
}

// publishStatus makes the kubelet stand-in publish the Node's capacity and
// allocatable, as the kubelet does, until the returned stop is called or
// the test ends.
func (n *node) publishStatus() (stop func()) {
	n.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.kubelet.PublishNodeStatus(ctx, n.api.client, n.name, 0) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			n.t.Errorf("publishing the Node status: %v", err)
		}
	}
	n.t.Cleanup(stop)
	return stop
}

func (n *node) waitReason(state string, contains ...string) *corev1.Node {
	n.t.Helper()
	return n.waitNode("state "+state+" with reason "+strings.Join(contains, ", "), func(o *corev1.Node) bool {
		return o.Labels[nodeinfo.LabelMigConfigState] == state && containsAll(o.Annotations[nodeinfo.AnnotationReason], contains...)
	})
}

// TestNoSilentStates: whatever happens to the Node's config sources, and
// however late the kubelet publishes a layout, the Node says so.
func TestNoSilentStates(t *testing.T) {
	api := startAPIServer(t)

	t.Run("success waits for the kubelet to publish allocatable", func(t *testing.T) {
		n := newNode(t, api, withAnnotation(nodeinfo.AnnotationMigConfig, allThree))
		n.start(withAllocatableTimeout(hangTimeout))
		// Served, but the Node's allocatable does not show it yet: a pod
		// created now would not fit, so the state must not say success.
		n.waitServed(map[string]int{resource3g: 4})
		obj := n.waitReason(nodeinfo.StatePending, "annotation nvidia.com/mig.config: the layout is in place and served; waiting for the kubelet to publish it in the Node's allocatable", "nvidia.com/mig-3g.40gb 0 of 4")
		if got := obj.Status.Allocatable[resource3g]; !got.IsZero() {
			t.Fatalf("allocatable %s = %s before anything published it", resource3g, got.String())
		}
		n.waitEvent(corev1.EventTypeNormal, ReasonApplied, "create 3g.40gb")

		n.publishStatus()
		obj = n.waitState(nodeinfo.StateSuccess)
		if got := obj.Status.Allocatable[resource3g]; got.Value() != 4 {
			t.Errorf("state success with allocatable %s = %s, want 4", resource3g, got.String())
		}
		if r, ok := obj.Annotations[nodeinfo.AnnotationReason]; ok {
			t.Errorf("reason %q stayed on success", r)
		}
		// One change, one Event: the wait is routine, not news.
		evs := n.events()
		if len(evs) != 1 || evs[0].Reason != ReasonApplied {
			t.Errorf("Events: %s; want the one MigConfigApplied of the change", describeEvents(evs))
		}
	})

	t.Run("a kubelet that never publishes ends failed, and recovers", func(t *testing.T) {
		n := newNode(t, api, withAnnotation(nodeinfo.AnnotationMigConfig, allThree))
		// Short, so the test sees the timeout; nothing measures it.
		n.start(withAllocatableTimeout(300 * time.Millisecond))
		obj := n.waitReason(nodeinfo.StateFailed, "has not published it in the Node's allocatable within 300ms", "nvidia.com/mig-3g.40gb 0 of 4", "is the kubelet running")
		n.waitEvent(corev1.EventTypeWarning, ReasonNotPublished, "within 300ms")
		if _, ok := obj.Status.Allocatable[resource3g]; ok {
			t.Fatalf("allocatable %v: nothing should have published it", obj.Status.Allocatable)
		}

		n.publishStatus()
		n.waitState(nodeinfo.StateSuccess)
		n.waitEvent(corev1.EventTypeNormal, ReasonApplied, "the kubelet now publishes the layout")
		if c := countReason(n.events(), ReasonNotPublished); c != 1 {
			t.Errorf("%d %s Events, want 1 (retries are no news)", c, ReasonNotPublished)
		}
	})

	t.Run("a published layout is not waited for again", func(t *testing.T) {
		n := newNode(t, api, withAnnotation(nodeinfo.AnnotationMigConfig, allThree))
		r := n.start(withAllocatableTimeout(hangTimeout), withResync(50*time.Millisecond))
		stop := n.publishStatus()
		n.waitState(nodeinfo.StateSuccess)
		// The kubelet goes quiet and later reports less (a device
		// failed): a health matter, not the config's.
		stop()
		waitCounter(t, r, "migflex_agent_reconciles_total", "result", resultSuccess, 1)
		before := r.counter("migflex_agent_reconciles_total", "result", resultSuccess)
		n.patchAllocatable(resource3g, 3)
		waitCounter(t, r, "migflex_agent_reconciles_total", "result", resultSuccess, before+2)
		if s := n.get().Labels[nodeinfo.LabelMigConfigState]; s != nodeinfo.StateSuccess {
			t.Errorf("state %q after allocatable dropped, want success", s)
		}
	})

	t.Run("a change shows pending while the GPUs change", func(t *testing.T) {
		n := newNode(t, api)
		release := filepath.Join(t.TempDir(), "release")
		n.lib.Close()
		n.simCfg.HoldFile, n.simCfg.HoldAfter = release, 0 // every MIG change waits for the file
		n.openSim()
		n.start()
		n.annotate(nodeinfo.AnnotationMigConfig, allThree)
		// The first MIG change is held: the Node says a change is under
		// way, not the success (or nothing) it showed before.
		obj := n.waitReason(nodeinfo.StatePending, "annotation nvidia.com/mig.config: changing the GPUs: GPU 0", "create 3g.40gb")
		if !isAnnouncement(obj) {
			t.Errorf("reason %q", obj.Annotations[nodeinfo.AnnotationReason])
		}
		if diff := cmp.Diff([]string{"GPU 0 mig=false", "GPU 1 mig=false"}, n.layoutOf()); diff != "" {
			t.Errorf("the GPUs changed while held (-want +got):\n%s", diff)
		}
		if err := os.WriteFile(release, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		n.waitState(nodeinfo.StateSuccess)
		n.waitServed(map[string]int{resource3g: 4})
	})

	t.Run("differing sources: the ignored one is named", func(t *testing.T) {
		n := newNode(t, api, withAnnotation(nodeinfo.AnnotationMigConfig, allThree), withAnnotation(nodeinfo.AnnotationRunAIConfig, allSeven))
		r := n.start()
		note := "annotation nvidia.com/mig.config decides the layout; annotation run.ai/mig.config is set too and ignored"
		n.waitReason(nodeinfo.StateSuccess, note)
		n.waitServed(map[string]int{resource3g: 4})
		n.waitEvent(corev1.EventTypeNormal, ReasonSourceIgnored, note)
		checkConfigState(t, r, n.name, nodeinfo.StateSuccess)

		// The winner goes: the other's (older) layout is applied, and an
		// Event says why before the Applied one says what.
		n.annotate(nodeinfo.AnnotationMigConfig, "")
		n.waitServed(map[string]int{resource3g: 0, resource1g: 14})
		n.waitNode("no reason once one source is left", func(o *corev1.Node) bool {
			_, ok := o.Annotations[nodeinfo.AnnotationReason]
			return o.Labels[nodeinfo.LabelMigConfigState] == nodeinfo.StateSuccess && !ok
		})
		changed := n.waitEvent(corev1.EventTypeNormal, ReasonSourceChanged, "annotation nvidia.com/mig.config is no longer set: annotation run.ai/mig.config decides the layout now")
		applied := n.waitEvent(corev1.EventTypeNormal, ReasonApplied, "annotation run.ai/mig.config", "create 1g.10gb")
		if applied.CreationTimestamp.Before(&changed.CreationTimestamp) {
			t.Errorf("the Applied Event came before the one saying the source changed")
		}

		// The last source goes: the layout stays, served, and the state
		// says why nothing happens.
		layout := n.layoutOf()
		n.annotate(nodeinfo.AnnotationRunAIConfig, "")
		obj := n.waitReason(nodeinfo.StateSuccess, reasonNoConfig)
		n.waitEvent(corev1.EventTypeNormal, ReasonRemoved, "annotation run.ai/mig.config was removed and no other is set: the GPUs keep their layout as is")
		if diff := cmp.Diff(layout, n.layoutOf()); diff != "" {
			t.Errorf("the layout changed with the source gone (-before +after):\n%s", diff)
		}
		if obj.Labels["nvidia.com/mig-1g.10gb.count"] != "14" {
			t.Errorf("labels %v: want the layout still reported", obj.Labels)
		}
		if st := n.kubelet.State(); !servesExactly(st, map[string]int{resource3g: 0, resource1g: 14}) {
			t.Errorf("served %v, want the layout still served", served(st))
		}

		// A restarted agent finds it said so already.
		r.stop()
		second := n.start(withResync(50 * time.Millisecond))
		waitCounter(t, second, "migflex_agent_reconciles_total", "result", resultNone, 2)
		if c := countReason(n.events(), ReasonRemoved); c != 1 {
			t.Errorf("%d %s Events after a restart, want 1", c, ReasonRemoved)
		}
		checkConfigState(t, second, n.name, nodeinfo.StateSuccess)
	})

	t.Run("the same document under both keys is no conflict", func(t *testing.T) {
		n := newNode(t, api, withAnnotation(nodeinfo.AnnotationMigConfig, allThree), withAnnotation(nodeinfo.AnnotationRunAIConfig, "\n"+allThree))
		n.start()
		obj := n.waitState(nodeinfo.StateSuccess)
		if r, ok := obj.Annotations[nodeinfo.AnnotationReason]; ok {
			t.Errorf("reason %q for two equal documents", r)
		}
		if c := countReason(n.events(), ReasonSourceIgnored); c != 0 {
			t.Errorf("%d %s Events for two equal documents", c, ReasonSourceIgnored)
		}
	})

	t.Run("an ignored source beside a failure", func(t *testing.T) {
		n := newNode(t, api, withAnnotation(nodeinfo.AnnotationMigConfig, "version: v1\nmig-configs: ["), withLabel(nodeinfo.LabelMigConfig, "all-1g.10gb"))
		r := n.start()
		note := "annotation nvidia.com/mig.config decides the layout; label nvidia.com/mig.config=all-1g.10gb is set too and ignored"
		n.waitReason(nodeinfo.StateFailed, "invalid YAML", note)
		n.waitEvent(corev1.EventTypeNormal, ReasonSourceIgnored, note)
		checkConfigState(t, r, n.name, nodeinfo.StateFailed)
		// Retries repeat neither Event.
		r.stop()
		second := n.start(withResync(50 * time.Millisecond))
		waitCounter(t, second, "migflex_agent_reconciles_total", "result", resultInvalid, 2)
		for _, reason := range []string{ReasonSourceIgnored, ReasonInvalid} {
			if c := countReason(n.events(), reason); c != 1 {
				t.Errorf("%d %s Events, want 1: %s", c, reason, describeEvents(n.events()))
			}
		}
	})
}

// TestStopKeepsTheReportsEvents stops the agent as it sends the Events
// of a report the Node already shows: a restarted agent compares with the
// Node and would never send them, so the stopping one must.
func TestStopKeepsTheReportsEvents(t *testing.T) {
	api := startAPIServer(t)
	n := newNode(t, api, withAnnotation(nodeinfo.AnnotationMigConfig, "version: v1\nmig-configs: ["), withLabel(nodeinfo.LabelMigConfig, "all-1g.10gb"))
	var (
		run       atomic.Pointer[agentRun]
		started   = make(chan struct{})
		stopped   = make(chan struct{})
		stopFirst sync.Once
	)
	cfg := rest.CopyConfig(api.cfg)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/events") {
				stopFirst.Do(func() {
					<-started
					run.Load().cancel()
					close(stopped)
				})
			}
			return rt.RoundTrip(r)
		})
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	run.Store(n.start(withClient(client)))
	close(started)
	select {
	case <-stopped:
	case <-time.After(hangTimeout):
		t.Fatal("the agent sent no Event")
	}
	run.Load().stop()
	if s := n.get().Labels[nodeinfo.LabelMigConfigState]; s != nodeinfo.StateFailed {
		t.Fatalf("state %q, want the report on the Node before its Events", s)
	}
	for _, reason := range []string{ReasonSourceIgnored, ReasonInvalid} {
		if c := countReason(n.events(), reason); c != 1 {
			t.Errorf("%d %s Events, want 1: %s", c, reason, describeEvents(n.events()))
		}
	}
}

// patchAllocatable sets one resource of the Node's allocatable, as a
// kubelet would.
func (n *node) patchAllocatable(resource string, count int) {
	n.t.Helper()
	patch := []byte(`{"status":{"allocatable":{"` + resource + `":"` + strconv.Itoa(count) + `"}}}`)
	if _, err := n.api.client.CoreV1().Nodes().Patch(context.Background(), n.name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		n.t.Fatal(err)
	}
}

// checkConfigState waits until the config state gauge for node is 1 for
// state and 0 for the others: the agent sets it once the Node shows the
// state, a moment after a test can see it there.
func checkConfigState(t *testing.T, r *agentRun, node, state string) {
	t.Helper()
	want := map[string]float64{nodeinfo.StatePending: 0, nodeinfo.StateSuccess: 0, nodeinfo.StateFailed: 0}
	want[state] = 1
	deadline := time.Now().Add(hangTimeout)
	for {
		got := gatherConfigState(t, r, node)
		if cmp.Equal(want, got) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("migflex_agent_config_state{node=%q} (-want +got):\n%s", node, cmp.Diff(want, got))
		}
		time.Sleep(pollInterval) // polling a gauge nothing signals
	}
}

func gatherConfigState(t *testing.T, r *agentRun, node string) map[string]float64 {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "migflex_agent_config_state" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["node"] == node {
				got[labels["state"]] = m.GetGauge().GetValue()
			}
		}
	}
	return got
}

// isAnnouncement tells whether the Node shows the start of a change (see
// announce) rather than an outcome.
func isAnnouncement(o *corev1.Node) bool {
	return o.Labels[nodeinfo.LabelMigConfigState] == nodeinfo.StatePending && strings.Contains(o.Annotations[nodeinfo.AnnotationReason], ": changing the GPUs: ")
}
