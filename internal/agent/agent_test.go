package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/migflex/migflex/internal/deviceplugin"
	"github.com/migflex/migflex/internal/deviceplugin/kubeletstub"
	"github.com/migflex/migflex/internal/health"
	"github.com/migflex/migflex/internal/mig"
	"github.com/migflex/migflex/internal/mig/nvmlmig"
	"github.com/migflex/migflex/internal/nodeinfo"
	"github.com/migflex/migflex/internal/nvmlbackend"
	"github.com/migflex/migflex/internal/nvmlbackend/sim"
	"github.com/migflex/migflex/internal/podresources"
	"github.com/migflex/migflex/internal/podresources/podresourcestest"
	"github.com/migflex/migflex/internal/resourcename"
	"github.com/migflex/migflex/internal/testenv"
	"github.com/migflex/migflex/internal/testutil"
)

// hangTimeout only protects against hangs; every wait polls a condition.
const hangTimeout = 60 * time.Second

// pollInterval is how often a wait re-reads the API server.
const pollInterval = 20 * time.Millisecond

// apiServer is one real etcd + kube-apiserver shared by the subtests of a
// test; each subtest has its own Node.
type apiServer struct {
	cfg    *rest.Config
	client kubernetes.Interface
}

func startAPIServer(t *testing.T) *apiServer {
	cfg := testenv.Start(t)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &apiServer{cfg: cfg, client: client}
}

// requestCounter counts API requests by "METHOD resource" (PATCH nodes,
// POST events), as seen on the wire.
type requestCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

var resourcePath = regexp.MustCompile(`^/api/v1/(?:namespaces/[^/]+/)?([a-z]+)`)

func (c *requestCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if m := resourcePath.FindStringSubmatch(r.URL.Path); m != nil {
			c.mu.Lock()
			c.counts[r.Method+" "+m[1]]++
			c.mu.Unlock()
		}
		return rt.RoundTrip(r)
	})
}

func (c *requestCounter) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[key]
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// node is one simulated GPU node: a Node object, a simulator, a kubelet
// stand-in for the device plugin and one for pod-resources.
type node struct {
	t       *testing.T
	api     *apiServer
	name    string
	simCfg  sim.Config
	lib     *sim.Lib
	kubelet *kubeletstub.Kubelet
	podres  *podresourcestest.Server
}

type nodeOption func(*nodeSetup)

type nodeSetup struct {
	gpus        []sim.GPUSpec
	stateDir    string
	labels      map[string]string
	annotations map[string]string
}

func withGPUs(model string, count int) nodeOption {
	return func(s *nodeSetup) { s.gpus = []sim.GPUSpec{{Model: model, Count: count}} }
}

func withStateDir(dir string) nodeOption { return func(s *nodeSetup) { s.stateDir = dir } }

func withLabel(k, v string) nodeOption { return func(s *nodeSetup) { s.labels[k] = v } }

func withAnnotation(k, v string) nodeOption { return func(s *nodeSetup) { s.annotations[k] = v } }

var nodeNameChars = regexp.MustCompile(`[^a-z0-9]+`)

// newNode creates the Node and a simulator of two H100s unless told
// otherwise. The Node carries a user's label and annotation the agent
// must never touch.
func newNode(t *testing.T, api *apiServer, opts ...nodeOption) *node {
	t.Helper()
	s := nodeSetup{
		gpus:        []sim.GPUSpec{{Model: "H100-SXM5-80GB", Count: 2}},
		labels:      map[string]string{"team": "ml"},
		annotations: map[string]string{"example.com/owner": "alice"},
	}
	for _, o := range opts {
		o(&s)
	}
	name := strings.Trim(nodeNameChars.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	if len(name) > 63 {
		name = name[len(name)-63:]
	}
	n := &node{t: t, api: api, name: name}
	_, err := api.client.CoreV1().Nodes().Create(context.Background(), &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: s.labels, Annotations: s.annotations},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.simCfg = sim.Config{GPUs: s.gpus, UUIDSeed: name, StateDir: s.stateDir}
	n.openSim()
	dir, err := os.MkdirTemp("", "agent") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if n.kubelet, err = kubeletstub.Start(dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.kubelet.Stop)
	n.podres = podresourcestest.Start(t)
	return n
}

// openSim opens the simulator (again, for a restart on a state dir).
func (n *node) openSim() {
	n.t.Helper()
	lib, err := sim.New(n.simCfg)
	if err != nil {
		n.t.Fatal(err)
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		n.t.Fatal(ret)
	}
	n.lib = lib
	n.t.Cleanup(func() { lib.Close() })
}

// discover is what NVML reports on the node's simulated GPUs now.
func (n *node) discover() []mig.GPU {
	n.t.Helper()
	gpus, err := nvmlmig.Discover(n.lib)
	if err != nil {
		n.t.Fatal(err)
	}
	return gpus
}

// partition sets up a layout before the agent starts.
func (n *node) partition(gpu int, profiles ...string) {
	n.t.Helper()
	p := nvmlmig.NewPartitioner(n.lib)
	if err := p.SetMigMode(gpu, true); err != nil {
		n.t.Fatal(err)
	}
	gpus := n.discover()
	start := 0
	for _, name := range profiles {
		prof, ok := gpus[gpu].Profile(name)
		if !ok {
			n.t.Fatalf("no profile %s", name)
		}
		if _, err := p.CreateInstance(gpu, name, start); err != nil {
			n.t.Fatal(err)
		}
		start += prof.MemorySlices
	}
}

// agentRun is one running agent.
type agentRun struct {
	agent  *Agent
	reg    *prometheus.Registry
	dp     *deviceplugin.Manager
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

type agentOption func(*Options, *deviceplugin.Options)

func withPolicy(p BusyPolicy) agentOption {
	return func(o *Options, _ *deviceplugin.Options) { o.BusyPolicy = p }
}

func withConfigFile(path string) agentOption {
	return func(o *Options, _ *deviceplugin.Options) { o.ConfigFile = path }
}

func withNVML(lib nvml.Interface) agentOption {
	return func(o *Options, _ *deviceplugin.Options) { o.NVML = lib }
}

func withResync(d time.Duration) agentOption {
	return func(o *Options, _ *deviceplugin.Options) { o.ResyncInterval = d }
}

func withClient(c kubernetes.Interface) agentOption {
	return func(o *Options, _ *deviceplugin.Options) { o.Client = c }
}

func withPodResourcesSocket(path string) agentOption {
	return func(o *Options, _ *deviceplugin.Options) { o.PodResources = podresources.New(path) }
}

func withInUseInterval(d time.Duration) agentOption {
	return func(o *Options, _ *deviceplugin.Options) { o.InUseInterval = d }
}

func withHealth(h deviceplugin.HealthSource) agentOption {
	return func(_ *Options, d *deviceplugin.Options) { d.Health = h }
}

// start runs an agent for n until stop or the end of the test.
func (n *node) start(opts ...agentOption) *agentRun {
	n.t.Helper()
	dpOpts := deviceplugin.Options{PluginDir: filepath.Dir(n.kubelet.Socket()), PostAllocator: nvmlbackend.SimulatedDevices{}, RetryInterval: 50 * time.Millisecond}
	reg := prometheus.NewRegistry()
	o := Options{
		NodeName:      n.name,
		Client:        n.api.client,
		NVML:          n.lib,
		PodResources:  podresources.New(n.podres.Socket),
		RetryInterval: 50 * time.Millisecond,
		Registry:      reg,
	}
	for _, opt := range opts {
		opt(&o, &dpOpts)
	}
	dp, err := deviceplugin.New(dpOpts)
	if err != nil {
		n.t.Fatal(err)
	}
	o.Server = dp
	a, err := New(o)
	if err != nil {
		n.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &agentRun{agent: a, reg: reg, dp: dp, cancel: cancel, done: make(chan error, 1)}
	go func() {
		// The health checks are the node's, run beside the agent as the
		// process does (internal/nodeagent), and stopped with it.
		var wg sync.WaitGroup
		if w, ok := dpOpts.Health.(*health.Watcher); ok {
			wg.Go(func() { _ = w.Run(ctx) })
		}
		err := a.Run(ctx)
		<-ctx.Done()
		wg.Wait()
		r.done <- err
	}()
	n.t.Cleanup(r.stop)
	return r
}

// stop cancels the agent and waits for Run to return.
func (r *agentRun) stop() {
	r.once.Do(func() {
		r.cancel()
		select {
		case err := <-r.done:
			if err != nil {
				panic(fmt.Sprintf("agent Run: %v", err))
			}
		case <-time.After(hangTimeout):
			panic("agent did not stop")
		}
	})
}

// counter reads a counter of the agent's registry.
func (r *agentRun) counter(name, label, value string) float64 {
	v, err := testutil.MetricSum(r.reg, name, label, value)
	if err != nil {
		panic(err)
	}
	return v
}

func (n *node) get() *corev1.Node {
	n.t.Helper()
	obj, err := n.api.client.CoreV1().Nodes().Get(context.Background(), n.name, metav1.GetOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	return obj
}

// waitNode polls the Node until cond holds.
func (n *node) waitNode(what string, cond func(*corev1.Node) bool) *corev1.Node {
	n.t.Helper()
	deadline := time.Now().Add(hangTimeout)
	for {
		obj := n.get()
		if cond(obj) {
			return obj
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("timed out waiting for %s; Node labels %v, annotations %v", what, obj.Labels, obj.Annotations)
		}
		time.Sleep(pollInterval) // polling a condition the API server does not signal here
	}
}

func (n *node) waitState(state string) *corev1.Node {
	n.t.Helper()
	// The announcement of a change is not the state it ends in.
	return n.waitNode("state "+state, func(o *corev1.Node) bool {
		return o.Labels[nodeinfo.LabelMigConfigState] == state && !isAnnouncement(o)
	})
}

// annotate sets (or with "" removes) a Node annotation, as kubectl does.
func (n *node) annotate(key, value string) {
	n.t.Helper()
	n.patchMetadata("annotations", key, value)
}

func (n *node) label(key, value string) {
	n.t.Helper()
	n.patchMetadata("labels", key, value)
}

func (n *node) patchMetadata(field, key, value string) {
	var v any = value
	if value == "" {
		v = nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{field: map[string]any{key: v}}})
	if _, err := n.api.client.CoreV1().Nodes().Patch(context.Background(), n.name, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		n.t.Fatal(err)
	}
}

// events lists the Node's Events the way kubectl describe node finds them:
// in every namespace, by the Node's kind, name and UID.
func (n *node) events() []corev1.Event {
	n.t.Helper()
	obj := n.get()
	sel := fields.Set{
		"involvedObject.kind": "Node",
		"involvedObject.name": n.name,
		"involvedObject.uid":  string(obj.UID),
	}.AsSelector().String()
	list, err := n.api.client.CoreV1().Events(metav1.NamespaceAll).List(context.Background(), metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		n.t.Fatal(err)
	}
	slices.SortFunc(list.Items, func(a, b corev1.Event) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	return list.Items
}

// waitEvent polls until the Node has an Event with reason whose message
// contains every substring.
func (n *node) waitEvent(typ, reason string, contains ...string) corev1.Event {
	n.t.Helper()
	deadline := time.Now().Add(hangTimeout)
	for {
		evs := n.events()
		for _, e := range evs {
			if e.Type == typ && e.Reason == reason && containsAll(e.Message, contains...) {
				return e
			}
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("no %s Event %s containing %q; Events: %s", typ, reason, contains, describeEvents(evs))
		}
		time.Sleep(pollInterval) // polling a condition the API server does not signal here
	}
}

func describeEvents(evs []corev1.Event) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "\n  %s %s: %s", e.Type, e.Reason, e.Message)
	}
	return b.String()
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// layoutOf is the simulator's layout: per GPU, MIG mode and the profiles
// at their starts ("3g.40gb@0").
func (n *node) layoutOf() []string {
	var out []string
	for _, g := range n.lib.Snapshot() {
		s := fmt.Sprintf("GPU %d mig=%v", g.Index, g.MigEnabled)
		if g.MigPending != g.MigEnabled {
			s += fmt.Sprintf(" (pending %v)", g.MigPending)
		}
		for _, in := range g.Instances {
			s += fmt.Sprintf(" %s@%d", in.Profile, in.Start)
		}
		out = append(out, s)
	}
	return out
}

// served is what the kubelet stand-in was last told: device count per
// resource.
func served(st kubeletstub.State) map[string]int {
	out := map[string]int{}
	for name, p := range st.Plugins {
		out[name] = len(p.Devices)
	}
	return out
}

// waitServed waits until the kubelet stand-in has exactly want (resources
// not in want must be absent or zero).
func (n *node) waitServed(want map[string]int) {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangTimeout)
	defer cancel()
	st, err := n.kubelet.Wait(ctx, func(st kubeletstub.State) bool { return servesExactly(st, want) })
	if err != nil {
		n.t.Fatalf("kubelet stand-in: %v; it has %v, want %v", err, served(st), want)
	}
}

func servesExactly(st kubeletstub.State, want map[string]int) bool {
	got := served(st)
	for name, n := range got {
		if n != want[name] {
			return false
		}
	}
	for name, n := range want {
		if got[name] != n || !st.Plugins[name].Connected {
			return false
		}
	}
	return true
}

const (
	resource1g = "nvidia.com/mig-1g.10gb"
	resource2g = "nvidia.com/mig-2g.20gb"
	resource3g = "nvidia.com/mig-3g.40gb"
	resource7g = "nvidia.com/mig-7g.80gb"
)

// Documents the tests annotate.
const (
	allThree = `version: v1
mig-configs:
  selected:
  - devices: all
    mig-enabled: true
    mig-devices: {"3g.40gb": 2}
`
	allSeven = `version: v1
mig-configs:
  selected:
  - devices: all
    mig-enabled: true
    mig-devices: {"1g.10gb": 7}
`
	mixedLayout = `version: v1
mig-configs:
  selected:
  - devices: [0]
    mig-enabled: true
    mig-devices: [2g.20gb, 2g.20gb, 3g.40gb]
  - devices: [1]
    mig-enabled: true
    mig-devices: [{name: 7g.80gb, position: 0, size: 8}]
`
)

func TestAgent(t *testing.T) {
	api := startAPIServer(t)

	t.Run("valid annotation", func(t *testing.T) {
		n := newNode(t, api, withAnnotation(nodeinfo.AnnotationMigConfig, mixedLayout))
		n.start()
		obj := n.waitState(nodeinfo.StateSuccess)
		if diff := cmp.Diff([]string{"GPU 0 mig=true 2g.20gb@0 2g.20gb@2 3g.40gb@4", "GPU 1 mig=true 7g.80gb@0"}, n.layoutOf()); diff != "" {
			t.Errorf("layout (-want +got):\n%s", diff)
		}
		n.waitServed(map[string]int{resource2g: 2, resource3g: 1, resource7g: 1})

		wantLabels := map[string]string{
			"team":                         "ml",
			nodeinfo.LabelGPUCount:         "2",
			nodeinfo.LabelGPUProduct:       "H100-SXM5-80GB",
			nodeinfo.LabelMigCapable:       "true",
			nodeinfo.LabelMigStrategy:      "mixed",
			nodeinfo.LabelMigConfigState:   "success",
			"nvidia.com/mig-2g.20gb.count": "2",
			"nvidia.com/mig-3g.40gb.count": "1",
			"nvidia.com/mig-7g.80gb.count": "1",
		}
		if diff := cmp.Diff(wantLabels, obj.Labels); diff != "" {
			t.Errorf("labels (-want +got):\n%s", diff)
		}
		if obj.Annotations[nodeinfo.AnnotationMigConfig] != mixedLayout || obj.Annotations["example.com/owner"] != "alice" {
			t.Errorf("the agent touched keys it does not own: %v", obj.Annotations)
		}
		if _, ok := obj.Annotations[nodeinfo.AnnotationReason]; ok {
			t.Errorf("reason annotation on success: %q", obj.Annotations[nodeinfo.AnnotationReason])
		}
		checkLayoutAnnotation(t, n, obj)

		ev := n.waitEvent(corev1.EventTypeNormal, ReasonApplied, "annotation nvidia.com/mig.config", "GPU 0", "create 2g.20gb@0:2", "GPU 1")
		if ev.InvolvedObject.UID != obj.UID || ev.InvolvedObject.Kind != "Node" || ev.Namespace != metav1.NamespaceDefault {
			t.Errorf("Event is about %+v in %q, want the Node with UID %s in default", ev.InvolvedObject, ev.Namespace, obj.UID)
		}
		// Only the agent's field manager owns its keys.
		for _, mf := range obj.ManagedFields {
			if mf.Manager == DefaultFieldManager && mf.Operation != metav1.ManagedFieldsOperationApply {
				t.Errorf("the agent wrote with %s, want only server-side apply", mf.Operation)
			}
		}

		// A new layout: the 7g goes, its count label goes and the resource
		// is zeroed at the kubelet.
		n.annotate(nodeinfo.AnnotationMigConfig, allThree)
		n.waitServed(map[string]int{resource2g: 0, resource3g: 4, resource7g: 0})
		obj = n.waitNode("the 3g.40gb count", func(o *corev1.Node) bool { return o.Labels["nvidia.com/mig-3g.40gb.count"] == "4" })
		for _, k := range []string{"nvidia.com/mig-7g.80gb.count", "nvidia.com/mig-2g.20gb.count"} {
			if v, ok := obj.Labels[k]; ok {
				t.Errorf("label %s=%s stayed after its profile went", k, v)
			}
		}
		if obj.Labels[nodeinfo.LabelMigConfigState] != nodeinfo.StateSuccess {
			t.Errorf("state %q", obj.Labels[nodeinfo.LabelMigConfigState])
		}
	})

	t.Run("run.ai annotation", func(t *testing.T) {
		n := newNode(t, api, withAnnotation(nodeinfo.AnnotationRunAIConfig, allThree))
		n.start()
		n.waitState(nodeinfo.StateSuccess)
		n.waitServed(map[string]int{resource3g: 4})
		n.waitEvent(corev1.EventTypeNormal, ReasonApplied, "annotation run.ai/mig.config")
	})

	t.Run("no source", func(t *testing.T) {
		n := newNode(t, api)
		n.partition(0, "3g.40gb")
		before := n.layoutOf()
		r := n.start()
		n.waitServed(map[string]int{resource3g: 1, string(resourcename.GPU): 1})
		obj := n.waitNode("the GFD labels", func(o *corev1.Node) bool { return o.Labels[nodeinfo.LabelGPUCount] == "2" })
		waitCounter(t, r, "migflex_agent_reconciles_total", "result", resultNone)
		if _, ok := obj.Labels[nodeinfo.LabelMigConfigState]; ok {
			t.Errorf("state label without a source: %v", obj.Labels)
		}
		if obj.Labels["nvidia.com/mig-3g.40gb.count"] != "1" || obj.Annotations[nodeinfo.AnnotationLayout] == "" {
			t.Errorf("labels %v, annotations %v: want the existing layout reported", obj.Labels, obj.Annotations)
		}
		if diff := cmp.Diff(before, n.layoutOf()); diff != "" {
			t.Errorf("the GPUs changed without a source (-before +after):\n%s", diff)
		}
		if evs := n.events(); len(evs) != 0 {
			t.Errorf("Events without a source: %s", describeEvents(evs))
		}
	})

	t.Run("malformed and impossible", func(t *testing.T) {
		n := newNode(t, api)
		n.partition(0, "3g.40gb", "3g.40gb")
		before := n.layoutOf()
		n.start()
		want := map[string]int{resource3g: 2, string(resourcename.GPU): 1}
		n.waitServed(want)

		n.annotate(nodeinfo.AnnotationMigConfig, "version: v1\nmig-configs:\n  selected:\n  - devices: all\n    mig-enabled: yes please\n")
		obj := n.waitState(nodeinfo.StateFailed)
		if r := obj.Annotations[nodeinfo.AnnotationReason]; !strings.Contains(r, "annotation nvidia.com/mig.config") || !strings.Contains(r, "mig-enabled") {
			t.Errorf("reason %q does not say what is wrong", r)
		}
		n.waitEvent(corev1.EventTypeWarning, ReasonInvalid, "mig-enabled")
		if diff := cmp.Diff(before, n.layoutOf()); diff != "" {
			t.Errorf("a malformed document changed the GPUs (-before +after):\n%s", diff)
		}

		// Valid YAML asking for more than a GPU holds.
		n.annotate(nodeinfo.AnnotationMigConfig, "version: v1\nmig-configs:\n  selected:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {\"3g.40gb\": 3}\n")
		obj = n.waitNode("the impossible layout's reason", func(o *corev1.Node) bool {
			return o.Labels[nodeinfo.LabelMigConfigState] == nodeinfo.StateFailed && strings.Contains(o.Annotations[nodeinfo.AnnotationReason], "3g.40gb")
		})
		n.waitEvent(corev1.EventTypeWarning, ReasonInvalid, "3g.40gb", "GPU 0")
		if diff := cmp.Diff(before, n.layoutOf()); diff != "" {
			t.Errorf("an impossible layout changed the GPUs (-before +after):\n%s", diff)
		}
		if st := n.kubelet.State(); !servesExactly(st, want) {
			t.Errorf("served %v, want %v unchanged", served(st), want)
		}
		t.Logf("reason: %s", obj.Annotations[nodeinfo.AnnotationReason])

		// Fixing it recovers, and the reason goes.
		n.annotate(nodeinfo.AnnotationMigConfig, allThree)
		obj = n.waitState(nodeinfo.StateSuccess)
		if _, ok := obj.Annotations[nodeinfo.AnnotationReason]; ok {
			t.Errorf("reason annotation stayed on success: %q", obj.Annotations[nodeinfo.AnnotationReason])
		}
		n.waitServed(map[string]int{resource3g: 4, string(resourcename.GPU): 0})
	})

	t.Run("busy GPU waits", func(t *testing.T) {
		n := newNode(t, api)
		n.partition(0, "3g.40gb", "3g.40gb")
		gpus := n.discover()
		busyID := gpus[0].Instances[1].UUID
		n.podres.Set(podresourcestest.Device{Namespace: "ml", Pod: "train-0", Container: "main", Resource: resource3g, IDs: []string{busyID}})
		n.start()
		n.annotate(nodeinfo.AnnotationMigConfig, allSeven)

		obj := n.waitState(nodeinfo.StatePending)
		if r := obj.Annotations[nodeinfo.AnnotationReason]; !strings.Contains(r, "ml/train-0") || !strings.Contains(r, "GPU 0") {
			t.Errorf("pending reason %q does not name the pod and its GPU", r)
		}
		n.waitEvent(corev1.EventTypeNormal, ReasonPending, "ml/train-0", "GPU 0")
		// GPU 1 is configured meanwhile; GPU 0 is untouched.
		want := []string{"GPU 0 mig=true 3g.40gb@0 3g.40gb@4", "GPU 1 mig=true 1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6"}
		waitLayout(t, n, want)
		n.waitServed(map[string]int{resource3g: 2, resource1g: 7, string(resourcename.GPU): 0})
		n.waitEvent(corev1.EventTypeNormal, ReasonApplied, "GPU 1")

		// The pod is gone: GPU 0 follows.
		n.podres.Set()
		n.waitState(nodeinfo.StateSuccess)
		n.waitServed(map[string]int{resource3g: 0, resource1g: 14, string(resourcename.GPU): 0})
		if pending := countReason(n.events(), ReasonPending); pending != 1 {
			t.Errorf("%d MigConfigPending Events, want 1 (retries are no news)", pending)
		}
	})

	t.Run("evict", func(t *testing.T) {
		n := newNode(t, api)
		n.partition(0, "3g.40gb", "3g.40gb")
		gpus := n.discover()
		pod := runningPod(t, api, n.name, "train-0")
		n.podres.Set(podresourcestest.Device{Namespace: pod.Namespace, Pod: pod.Name, Container: "main", Resource: resource3g, IDs: []string{gpus[0].Instances[0].UUID}})
		// A budget that allows no disruption: the eviction gets a 429.
		pdb := blockingPDB(t, api, pod)
		n.start(withPolicy(BusyEvict))
		n.annotate(nodeinfo.AnnotationMigConfig, allSeven)

		obj := n.waitNode("the blocked eviction", func(o *corev1.Node) bool {
			return o.Labels[nodeinfo.LabelMigConfigState] == nodeinfo.StatePending && strings.Contains(o.Annotations[nodeinfo.AnnotationReason], "eviction refused")
		})
		if r := obj.Annotations[nodeinfo.AnnotationReason]; !strings.Contains(r, "default/train-0") {
			t.Errorf("reason %q does not name the pod", r)
		}
		if p, err := api.client.CoreV1().Pods("default").Get(context.Background(), pod.Name, metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
			t.Fatalf("the pod a budget protects was deleted: %v, %v", err, p.DeletionTimestamp)
		}
		waitLayout(t, n, []string{"GPU 0 mig=true 3g.40gb@0 3g.40gb@4", "GPU 1 mig=true 1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6"})

		// The budget goes: the eviction goes through and the pod
		// terminates (there is no kubelet to finish it, so it stays
		// with a deletion timestamp).
		if err := api.client.PolicyV1().PodDisruptionBudgets(pdb.Namespace).Delete(context.Background(), pdb.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitPodEvicted(t, api, pod)
		n.waitNode("the evicted pod", func(o *corev1.Node) bool {
			return o.Labels[nodeinfo.LabelMigConfigState] == nodeinfo.StatePending && strings.Contains(o.Annotations[nodeinfo.AnnotationReason], "evicted default/train-0")
		})
		if diff := cmp.Diff("GPU 0 mig=true 3g.40gb@0 3g.40gb@4", n.layoutOf()[0]); diff != "" {
			t.Errorf("GPU 0 changed while the kubelet still lists the pod (-want +got):\n%s", diff)
		}
		// The kubelet lets go of the device once the pod stopped.
		n.podres.Set()
		n.waitState(nodeinfo.StateSuccess)
		n.waitServed(map[string]int{resource3g: 0, resource1g: 14, string(resourcename.GPU): 0})
	})

	t.Run("no pod-resources socket", func(t *testing.T) {
		n := newNode(t, api)
		n.partition(0, "3g.40gb")
		before := n.layoutOf()
		n.start(withPodResourcesSocket(filepath.Join(t.TempDir(), "missing.sock")))
		n.annotate(nodeinfo.AnnotationMigConfig, allSeven)
		obj := n.waitState(nodeinfo.StateFailed)
		if r := obj.Annotations[nodeinfo.AnnotationReason]; !strings.Contains(r, "cannot tell which GPUs pods use") {
			t.Errorf("reason %q", r)
		}
		n.waitEvent(corev1.EventTypeWarning, ReasonFailed, "cannot tell which GPUs pods use")
		if diff := cmp.Diff(before, n.layoutOf()); diff != "" {
			t.Errorf("GPUs changed without a busy check (-before +after):\n%s", diff)
		}
	})

	t.Run("label and config file", func(t *testing.T) {
		dir := t.TempDir()
		cfgPath := configMapMount(t, dir, "v1", `version: v1
mig-configs:
  all-disabled:
  - devices: all
    mig-enabled: false
  all-3g.40gb:
  - devices: all
    mig-enabled: true
    mig-devices: {"3g.40gb": 2}
`)
		n := newNode(t, api, withLabel(nodeinfo.LabelMigConfig, "all-3g.40gb"))
		n.start(withConfigFile(cfgPath))
		obj := n.waitState(nodeinfo.StateSuccess)
		if obj.Labels[nodeinfo.LabelMigConfig] != "all-3g.40gb" {
			t.Errorf("the agent touched the label it reads: %v", obj.Labels)
		}
		n.waitServed(map[string]int{resource3g: 4})
		n.waitEvent(corev1.EventTypeNormal, ReasonApplied, "label nvidia.com/mig.config=all-3g.40gb")

		// The ConfigMap changes (a symlink swap): the agent re-reads it.
		configMapMount(t, dir, "v2", `version: v1
mig-configs:
  all-3g.40gb:
  - devices: all
    mig-enabled: true
    mig-devices: {"3g.40gb": 1, "2g.20gb": 2}
`)
		n.waitServed(map[string]int{resource3g: 2, resource2g: 4})
		n.waitState(nodeinfo.StateSuccess)

		// A name the file lacks.
		n.label(nodeinfo.LabelMigConfig, "all-7g.80gb")
		n.waitState(nodeinfo.StateFailed)
		n.waitEvent(corev1.EventTypeWarning, ReasonInvalid, "all-7g.80gb")
		n.waitServed(map[string]int{resource3g: 2, resource2g: 4})
	})

	t.Run("label without config file", func(t *testing.T) {
		n := newNode(t, api, withLabel(nodeinfo.LabelMigConfig, "all-3g.40gb"))
		n.start()
		obj := n.waitState(nodeinfo.StateFailed)
		if r := obj.Annotations[nodeinfo.AnnotationReason]; !strings.Contains(r, "--config-file") {
			t.Errorf("reason %q does not point at --config-file", r)
		}
		n.waitEvent(corev1.EventTypeWarning, ReasonFailed, "--config-file")
	})

	t.Run("ampere reset", func(t *testing.T) {
		n := newNode(t, api, withGPUs("A100-SXM4-40GB", 1), withAnnotation(nodeinfo.AnnotationMigConfig, "version: v1\nmig-configs:\n  selected:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {\"3g.20gb\": 2}\n"))
		n.start()
		n.waitState(nodeinfo.StateSuccess)
		waitLayout(t, n, []string{"GPU 0 mig=true 3g.20gb@0 3g.20gb@4"})
		n.waitServed(map[string]int{"nvidia.com/mig-3g.20gb": 2, string(resourcename.GPU): 0})
	})

	t.Run("ampere without reset", func(t *testing.T) {
		n := newNode(t, api, withGPUs("A100-SXM4-40GB", 1), withAnnotation(nodeinfo.AnnotationMigConfig, "version: v1\nmig-configs:\n  selected:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {\"3g.20gb\": 2}\n"))
		// A backend without the reset capability, as real NVML.
		n.start(withNVML(struct{ nvml.Interface }{n.lib}), withResync(100*time.Millisecond))
		obj := n.waitState(nodeinfo.StateFailed)
		if r := obj.Annotations[nodeinfo.AnnotationReason]; !strings.Contains(r, "nvidia-smi -r -i 0") {
			t.Errorf("reason %q does not tell the operator what to do", r)
		}
		n.waitEvent(corev1.EventTypeWarning, ReasonFailed, "reset")
		waitLayout(t, n, []string{"GPU 0 mig=false (pending true)"})
		n.waitServed(map[string]int{string(resourcename.GPU): 1})

		// The operator resets the GPU: the agent completes the layout.
		if err := n.lib.ResetGPU(0); err != nil {
			t.Fatal(err)
		}
		n.waitState(nodeinfo.StateSuccess)
		waitLayout(t, n, []string{"GPU 0 mig=true 3g.20gb@0 3g.20gb@4"})
		n.waitServed(map[string]int{"nvidia.com/mig-3g.20gb": 2, string(resourcename.GPU): 0})
	})

	t.Run("processes unknown to the kubelet", func(t *testing.T) {
		n := newNode(t, api)
		n.partition(0, "3g.40gb", "3g.40gb")
		gpus := n.discover()
		// Something outside Kubernetes runs on the second instance.
		if err := n.lib.SetBusy(0, gpus[0].Instances[1].GIID, true); err != nil {
			t.Fatal(err)
		}
		r := n.start(withResync(200 * time.Millisecond))
		n.annotate(nodeinfo.AnnotationMigConfig, "version: v1\nmig-configs:\n  selected:\n  - devices: [0]\n    mig-enabled: true\n    mig-devices: {\"1g.10gb\": 7}\n")
		obj := n.waitState(nodeinfo.StateFailed)
		if r := obj.Annotations[nodeinfo.AnnotationReason]; !strings.Contains(r, "rolled back") || !strings.Contains(r, "busy") {
			t.Errorf("reason %q does not say the GPU was busy and rolled back", r)
		}
		n.waitEvent(corev1.EventTypeWarning, ReasonFailed, "GPU 0")
		waitLayout(t, n, []string{"GPU 0 mig=true 3g.40gb@0 3g.40gb@4", "GPU 1 mig=false"})
		n.waitServed(map[string]int{resource3g: 2, string(resourcename.GPU): 1})
		// Held: a reconcile that is not a resync (the agent's own Node
		// update triggers one) does not try again ...
		waitCounter(t, r, "migflex_agent_reconciles_total", "result", resultHeld, 1)
		// ... a resync does, and the same failure is no news.
		waitCounter(t, r, "migflex_agent_reconciles_total", "result", resultFailed, 2)
		if failed := countReason(n.events(), ReasonFailed); failed != 1 {
			t.Errorf("%d MigConfigFailed Events, want 1: %s", failed, describeEvents(n.events()))
		}
		// The processes end: the next resync gets through.
		if err := n.lib.SetBusy(0, gpus[0].Instances[1].GIID, false); err != nil {
			t.Fatal(err)
		}
		n.waitState(nodeinfo.StateSuccess)
		n.waitServed(map[string]int{resource3g: 0, string(resourcename.GPU): 1, resource1g: 7})
	})

	t.Run("health in the layout", func(t *testing.T) {
		n := newNode(t, api, withAnnotation(nodeinfo.AnnotationMigConfig, allThree))
		w, err := health.New(n.lib, health.Options{QuietPeriod: -1, PollInterval: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		n.start(withHealth(w))
		n.waitState(nodeinfo.StateSuccess)
		n.waitServed(map[string]int{resource3g: 4})
		gpus := n.discover()
		victim := gpus[1].Instances[0]
		deadline := time.Now().Add(hangTimeout)
		for len(w.Watching()) < 2 { // an Xid before the watch is lost, as on real NVML
			if time.Now().After(deadline) {
				t.Fatal("the health watcher never watched both GPUs")
			}
			time.Sleep(pollInterval) // polling a condition nothing signals
		}
		if err := n.lib.InjectXid(1, victim.GIID, victim.CIID, 79); err != nil {
			t.Fatal(err)
		}
		n.waitNode("the unhealthy device in the layout", func(o *corev1.Node) bool {
			var l []nodeinfo.GPU
			if json.Unmarshal([]byte(o.Annotations[nodeinfo.AnnotationLayout]), &l) != nil || len(l) != 2 {
				return false
			}
			for _, in := range l[1].Instances {
				if in.UUID == victim.UUID {
					return in.Health == nodeinfo.HealthUnhealthy
				}
			}
			return false
		})
	})

	// The pods holding each device are in the layout annotation as they
	// come and go, with one write per change and none while nothing
	// changes; the profile table of the node's model is published beside.
	t.Run("devices in use in the layout", func(t *testing.T) {
		n := newNode(t, api, withAnnotation(nodeinfo.AnnotationMigConfig, allThree))
		r := n.start(withInUseInterval(20 * time.Millisecond))
		obj := n.waitState(nodeinfo.StateSuccess)
		models, err := nodeinfo.ParseProfiles(obj.Annotations[nodeinfo.AnnotationProfiles])
		if err != nil {
			t.Fatal(err)
		}
		if want := n.discover()[0].Profiles; len(models) != 1 || models[0].Name != "H100-SXM5-80GB" || !cmp.Equal(models[0].MIGProfiles(), want) {
			t.Errorf("profiles annotation %+v, want the H100's table %+v", models, want)
		}
		victim := n.discover()[1].Instances[1]
		usedBy := func(o *corev1.Node) []string {
			l, err := nodeinfo.ParseLayout(o.Annotations[nodeinfo.AnnotationLayout])
			if err != nil || len(l) != 2 {
				return []string{"unreadable"}
			}
			for _, in := range l[1].Instances {
				if in.UUID == victim.UUID {
					return in.UsedBy
				}
			}
			return []string{"missing"}
		}
		// Settled: no write happens while nothing changes. The agent counts
		// a write after the API server answers it, so the Node can show a
		// write before its count does; polls are one loop, so the count is
		// complete once the poll after the one that wrote has begun.
		settled := func() float64 {
			t.Helper()
			calls := n.podres.Calls()
			testutil.Eventually(t, "one more pod-resources poll", func() bool { return n.podres.Calls() > calls })
			before := r.counter("migflex_agent_node_writes_total", "cause", causeInUse)
			calls = n.podres.Calls()
			testutil.Eventually(t, "five more pod-resources polls", func() bool { return n.podres.Calls() >= calls+5 })
			after := r.counter("migflex_agent_node_writes_total", "cause", causeInUse)
			if after != before {
				t.Errorf("%v in-use writes while nothing changed", after-before)
			}
			return after
		}
		base := settled()
		n.podres.Set(podresourcestest.Device{Namespace: "ml", Pod: "train", Container: "c", Resource: resource3g, IDs: []string{victim.UUID}})
		n.waitNode("the pod in the layout", func(o *corev1.Node) bool { return slices.Equal(usedBy(o), []string{"ml/train"}) })
		if got := settled(); got != base+1 {
			t.Errorf("%v in-use writes for one pod starting, want 1", got-base)
		}
		n.podres.Set()
		n.waitNode("the pod gone from the layout", func(o *corev1.Node) bool { return usedBy(o) == nil })
		if got := settled(); got != base+2 {
			t.Errorf("%v in-use writes for one pod starting and ending, want 2", got-base)
		}
	})

	t.Run("serves before the API server answers", func(t *testing.T) {
		n := newNode(t, api)
		n.partition(0, "3g.40gb", "2g.20gb")
		// Nothing listens there: the Node never arrives, the devices are
		// served all the same.
		down, err := kubernetes.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1"})
		if err != nil {
			t.Fatal(err)
		}
		r := n.start(withClient(down))
		n.waitServed(map[string]int{resource2g: 1, resource3g: 1, string(resourcename.GPU): 1})
		if got := httptestGet(t, r.agent.Handler(), "/healthz"); got != "ok\n" {
			t.Errorf("/healthz = %q", got)
		}
		r.stop()
	})

	t.Run("restart touches nothing", func(t *testing.T) {
		n := newNode(t, api, withStateDir(t.TempDir()), withAnnotation(nodeinfo.AnnotationMigConfig, mixedLayout))
		first := n.start()
		n.waitState(nodeinfo.StateSuccess)
		n.waitServed(map[string]int{resource2g: 2, resource3g: 1, resource7g: 1})
		n.waitEvent(corev1.EventTypeNormal, ReasonApplied)
		first.stop()
		n.lib.Close()

		statePath := filepath.Join(n.simCfg.StateDir, "state.json")
		stateBefore := statFile(t, statePath)
		layoutBefore := n.layoutOf()
		nodeBefore := n.get()
		eventsBefore := len(n.events())

		// A new agent (a new process would see exactly this) on the same
		// state directory, through a client that counts requests.
		n.openSim()
		counts := &requestCounter{counts: map[string]int{}}
		cfg := rest.CopyConfig(api.cfg)
		cfg.WrapTransport = counts.wrap
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		// The counter counts a reconcile before its report and Events are
		// sent; the loop is sequential, so a second reconcile (a resync)
		// means the first one's requests, if any, were all made.
		second := n.start(withClient(client), withResync(50*time.Millisecond))
		waitCounter(t, second, "migflex_agent_reconciles_total", "result", resultSuccess, 2)
		n.waitServed(map[string]int{resource2g: 2, resource3g: 1, resource7g: 1})
		second.stop()

		if got := statFile(t, statePath); got != stateBefore {
			t.Errorf("the simulator state was written: %+v, before %+v", got, stateBefore)
		}
		if diff := cmp.Diff(layoutBefore, n.layoutOf()); diff != "" {
			t.Errorf("layout changed (-before +after):\n%s", diff)
		}
		if p := counts.get("PATCH nodes"); p != 0 {
			t.Errorf("%d Node patches, want none", p)
		}
		if e := counts.get("POST events"); e != 0 {
			t.Errorf("%d Events created, want none", e)
		}
		if rv := n.get().ResourceVersion; rv != nodeBefore.ResourceVersion {
			t.Errorf("Node resourceVersion %s, before %s", rv, nodeBefore.ResourceVersion)
		}
		if got := len(n.events()); got != eventsBefore {
			t.Errorf("%d Events, before %d", got, eventsBefore)
		}
	})

	t.Run("metrics", func(t *testing.T) {
		n := newNode(t, api, withAnnotation(nodeinfo.AnnotationMigConfig, allThree))
		r := n.start()
		n.waitState(nodeinfo.StateSuccess)
		waitCounter(t, r, "migflex_agent_reconciles_total", "result", resultSuccess)
		rec := httptestGet(t, r.agent.Handler(), "/metrics")
		for _, want := range []string{
			`migflex_agent_reconciles_total{result="success"}`,
			`migflex_agent_reconcile_duration_seconds_count{result="success"}`,
			`migflex_agent_devices{health="healthy",resource="nvidia.com/mig-3g.40gb"} 4`,
			`migflex_agent_devices{health="unhealthy",resource="nvidia.com/mig-3g.40gb"} 0`,
		} {
			if !strings.Contains(rec, want) {
				t.Errorf("/metrics lacks %s:\n%s", want, rec)
			}
		}
		if got := httptestGet(t, r.agent.Handler(), "/healthz"); got != "ok\n" {
			t.Errorf("/healthz = %q", got)
		}
	})

	t.Run("deleted node is not recreated", func(t *testing.T) {
		n := newNode(t, api)
		a, err := New(Options{NodeName: n.name, Client: api.client, NVML: n.lib, Server: nopServer{}, PodResources: podresources.New(n.podres.Socket), Registry: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		a.nodes = nopMutationCache{}
		stale := n.get()
		if err := api.client.CoreV1().Nodes().Delete(context.Background(), n.name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.applyMetadata(context.Background(), stale, map[string]string{nodeinfo.LabelGPUCount: "2"}, nil); err == nil {
			t.Error("applying to a deleted Node succeeded")
		}
		if _, err := api.client.CoreV1().Nodes().Get(context.Background(), n.name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the Node is back after the apply: %v", err)
		}
	})
}

func checkLayoutAnnotation(t *testing.T, n *node, obj *corev1.Node) {
	t.Helper()
	var got []nodeinfo.GPU
	if err := json.Unmarshal([]byte(obj.Annotations[nodeinfo.AnnotationLayout]), &got); err != nil {
		t.Fatalf("layout annotation: %v", err)
	}
	gpus := n.discover()
	var want []nodeinfo.GPU
	for _, g := range gpus {
		lg := nodeinfo.GPU{Index: g.Index, UUID: g.UUID, Model: "H100-SXM5-80GB", MigMode: "Enabled"}
		for _, in := range g.Instances {
			lg.Instances = append(lg.Instances, nodeinfo.Instance{
				Profile: in.Profile, Placement: nodeinfo.Placement{Start: in.Start, Size: in.Size}, GI: in.GIID, CI: in.CIID, UUID: in.UUID, Health: nodeinfo.HealthHealthy,
			})
		}
		want = append(want, lg)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("layout annotation (-want +got):\n%s", diff)
	}
	if len(got) != 2 || len(got[0].Instances) != 3 || got[0].Instances[0].UUID == "" {
		t.Errorf("layout annotation is not the applied layout: %+v", got)
	}
}

func waitLayout(t *testing.T, n *node, want []string) {
	t.Helper()
	deadline := time.Now().Add(hangTimeout)
	for !cmp.Equal(want, n.layoutOf()) {
		if time.Now().After(deadline) {
			t.Fatalf("layout (-want +got):\n%s", cmp.Diff(want, n.layoutOf()))
		}
		time.Sleep(pollInterval) // polling a condition the simulator does not signal
	}
}

// waitCounter waits until a counter reaches at least min (1 if omitted).
func waitCounter(t *testing.T, r *agentRun, name, label, value string, min ...float64) {
	t.Helper()
	want := 1.0
	if len(min) > 0 {
		want = min[0]
	}
	deadline := time.Now().Add(hangTimeout)
	for r.counter(name, label, value) < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s{%s=%q} = %v, want at least %v", name, label, value, r.counter(name, label, value), want)
		}
		time.Sleep(pollInterval) // polling a condition nothing signals
	}
}

func countReason(evs []corev1.Event, reason string) int {
	n := 0
	for _, e := range evs {
		if e.Reason == reason {
			n++
		}
	}
	return n
}

type fileStat struct {
	ino     uint64
	modTime time.Time
	size    int64
}

func statFile(t *testing.T, path string) fileStat {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fileStat{ino: inode(fi), modTime: fi.ModTime(), size: fi.Size()}
}

// configMapMount lays out dir as the kubelet mounts a ConfigMap: the file
// is a symlink through ..data, which is swapped atomically to a new
// timestamped directory on every update. It returns the file's path.
func configMapMount(t *testing.T, dir, version, content string) string {
	t.Helper()
	ts := filepath.Join(dir, "..ts-"+version)
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ts, "config.yaml"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.yaml")
	if _, err := os.Lstat(path); os.IsNotExist(err) {
		if err := os.Symlink(filepath.Join("..data", "config.yaml"), path); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// runningPod creates a pod bound to the node and marks it running and
// ready, as a kubelet would, so a disruption budget covers it.
func runningPod(t *testing.T, api *apiServer, nodeName, name string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	pod, err := api.client.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeName:   nodeName,
			Containers: []corev1.Container{{Name: "main", Image: "example.invalid/train"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	pod, err = api.client.CoreV1().Pods("default").UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

func waitPodEvicted(t *testing.T, api *apiServer, pod *corev1.Pod) {
	t.Helper()
	deadline := time.Now().Add(hangTimeout)
	for {
		p, err := api.client.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && p.DeletionTimestamp != nil) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s/%s was not evicted: %v", pod.Namespace, pod.Name, err)
		}
		time.Sleep(pollInterval) // polling a condition the API server does not signal here
	}
}
