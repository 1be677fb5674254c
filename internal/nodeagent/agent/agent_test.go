package agent

import (
	"context"
	"encoding/json"
	"errors"
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

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/nodeagent/deviceplugin"
	"github.com/migflex/migflex/internal/nodeagent/deviceplugin/kubeletstub"
	"github.com/migflex/migflex/internal/nodeagent/health"
	"github.com/migflex/migflex/internal/nodeagent/podresources"
	"github.com/migflex/migflex/internal/nodeagent/podresources/podresourcestest"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
	"github.com/migflex/migflex/internal/nvml/nvmlcall/nvmlcalltest"
	"github.com/migflex/migflex/internal/nvml/nvmlmig"
	"github.com/migflex/migflex/internal/testsupport/testenv"
	"github.com/migflex/migflex/internal/testsupport/testutil"
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

// client is a client of api whose requests c counts.
func (c *requestCounter) client(t *testing.T, api *apiServer) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(api.cfg)
	cfg.WrapTransport = c.wrap
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
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
	dir := testutil.SocketDir(t)
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

func withRetry(d time.Duration) agentOption {
	return func(o *Options, _ *deviceplugin.Options) { o.RetryInterval = d }
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

// withCallDeadlines has the GPU calls' deadlines pass when d says so.
func withCallDeadlines(d *nvmlcalltest.Deadlines) agentOption {
	return func(o *Options, _ *deviceplugin.Options) { o.NVMLCallTimeout, o.callAfter = 2*time.Minute, d.After }
}

func withShutdownGrace(g time.Duration) agentOption {
	return func(o *Options, _ *deviceplugin.Options) { o.shutdownGrace = g }
}

func withHealth(h deviceplugin.HealthSource) agentOption {
	return func(_ *Options, d *deviceplugin.Options) { d.Health = h }
}

// start runs an agent for n until stop or the end of the test.
func (n *node) start(opts ...agentOption) *agentRun {
	n.t.Helper()
	dpOpts := deviceplugin.Options{PluginDir: filepath.Dir(n.kubelet.Socket()), PostAllocator: deviceplugin.EnvPostAllocator(nvmlbackend.SimulatedDevices{}), RetryInterval: 50 * time.Millisecond}
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
	if o.Server == nil {
		o.Server = dp
	}
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
	if err := r.tryStop(); err != nil {
		panic(err)
	}
}

// tryStop cancels the agent and waits for Run to return; an error says
// it did not, or returned one.
func (r *agentRun) tryStop() error {
	var err error
	r.once.Do(func() {
		r.cancel()
		select {
		case runErr := <-r.done:
			if runErr != nil {
				err = fmt.Errorf("agent Run: %w", runErr)
			}
		case <-time.After(hangTimeout):
			err = errors.New("agent did not stop")
		}
	})
	return err
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

// TestAgent runs the agent's scenarios on one API server, each a test of
// its own (agent_*_test.go) on a Node of its own.
func TestAgent(t *testing.T) {
	api := startAPIServer(t)
	for _, tc := range []struct {
		name string
		run  func(*testing.T, *apiServer)
	}{
		{"valid annotation", testValidAnnotation},
		{"run.ai annotation", testRunAIAnnotation},
		{"no source", testNoSource},
		{"malformed and impossible", testMalformedAndImpossible},
		{"busy GPU waits", testBusyGPUWaits},
		{"waiting node writes nothing", testWaitingNodeWritesNothing},
		{"evict", testEvict},
		{"claim holds GPU", testClaimHoldsGPU},
		{"publication signalled", testPublicationSignalled},
		{"DRA publication", testDRAPublication},
		{"DRA dynamic mode refuses a layout", testDRADynamicRefusesLayout},
		{"DRA dynamic mode reports instances at once", testDRADynamicReportsInstancesAtOnce},
		{"DRA reservation", testDRAReservation},
		{"no pod-resources socket", testNoPodResourcesSocket},
		{"label and config file", testLabelAndConfigFile},
		{"label without config file", testLabelWithoutConfigFile},
		{"ampere reset", testAmpereReset},
		{"ampere without reset", testAmpereWithoutReset},
		{"processes unknown to the kubelet", testProcessesUnknownToTheKubelet},
		{"health in the layout", testHealthInTheLayout},
		{"devices in use in the layout", testDevicesInUseInTheLayout},
		{"sharing config", testSharingConfig},
		{"serves before the API server answers", testServesBeforeTheAPIServerAnswers},
		{"restart touches nothing", testRestartTouchesNothing},
		{"metrics", testMetrics},
		{"deleted node is not recreated", testDeletedNodeIsNotRecreated},
		{"fault: create fails halfway", testCreateFailsHalfway},
		{"fault: create fails once, then retried", testCreateFailsOnceThenRetried},
		{"fault: a failing GPU backs off", testFailingGPUBacksOff},
		{"fault: a retry waits for pods", testRetryWaitsForPods},
		{"fault: create hangs", testCreateHangs},
		{"fault: stop while a create hangs", testStopDuringHang},
		{"fault: reading the GPUs hangs", testDiscoveryHangs},
		{"fault: reboot recreates the layout", testRebootRecreatesLayout},
		{"fault: a GPU lost mid-change", testGPULostMidChange},
		{"fault: a health call hangs", testHealthCallHangs},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, api) })
	}
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
