package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/nodeagent/cdi"
	"github.com/migflex/migflex/internal/nodeagent/deviceplugin"
	"github.com/migflex/migflex/internal/nodeagent/draplugin"
	"github.com/migflex/migflex/internal/nodeagent/draserver"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
	"github.com/migflex/migflex/internal/nvml/nvmlmig"
	"github.com/migflex/migflex/internal/testsupport/testutil"
)

// writeGate holds a client's writes of ResourceSlices while it is shut,
// as a slow API server would: the kubelet plugin helper's controller
// then stores the slices only when the test opens it.
type writeGate struct {
	mu   sync.Mutex
	open chan struct{}
}

func newWriteGate() *writeGate {
	g := &writeGate{open: make(chan struct{})}
	close(g.open)
	return g
}

func (g *writeGate) shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = make(chan struct{})
}

func (g *writeGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

func (g *writeGate) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Method != http.MethodGet && strings.Contains(r.URL.Path, "/resourceslices") {
			g.mu.Lock()
			open := g.open
			g.mu.Unlock()
			select {
			case <-open:
			case <-r.Context().Done():
				return nil, r.Context().Err()
			}
		}
		return rt.RoundTrip(r)
	})
}

// startDRAServer starts the DRA kubelet plugin for n (no kubelet
// registers it; the API server gets its slices) with client, behind the
// agent's Server port, until the end of the test.
func startDRAServer(t *testing.T, n *node, client kubernetes.Interface, opts ...func(*draplugin.Options)) *draserver.Server {
	t.Helper()
	_, srv := startDRADriver(t, n, client, opts...)
	return srv
}

// startDRADriver is startDRAServer, and returns the driver too, for a
// test that plays the kubelet's Prepare and Unprepare on it.
func startDRADriver(t *testing.T, n *node, client kubernetes.Interface, opts ...func(*draplugin.Options)) (*draplugin.Driver, *draserver.Server) {
	t.Helper()
	root := testutil.SocketDir(t)
	var d [4]string
	for i, name := range []string{"registrar", "plugin", "state", "cdi"} {
		d[i] = filepath.Join(root, name)
		if err := os.Mkdir(d[i], 0o755); err != nil {
			t.Fatal(err)
		}
	}
	_, ctx := ktesting.NewTestContext(t)
	o := draplugin.Options{
		NodeName: n.name, KubeClient: client, Editor: cdi.EnvEditor(nvmlbackend.SimulatedDevices{}), StaleClaimCheck: -1,
		RegistrarDir: d[0], PluginDir: d[1], StateDir: d[2], CDIDir: d[3],
	}
	for _, opt := range opts {
		opt(&o)
	}
	drv, err := draplugin.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(drv.Stop)
	return drv, draserver.New(draserver.Options{Driver: drv, DriverName: dra.DriverName, NodeName: n.name})
}

// simInstances are a simulated node's GPUs as dynamic mode's Prepare
// makes instances on them: the partitioner static layouts go through.
type simInstances struct {
	*nvmlmig.Partitioner
	lib nvml.Interface
}

func (s simInstances) Discover() ([]mig.GPU, error) { return nvmlmig.Discover(s.lib) }

// dynamicMode starts the driver in dynamic mode on n's GPUs.
func dynamicMode(n *node) func(*draplugin.Options) {
	return func(o *draplugin.Options) {
		o.Mode, o.Instances = draplugin.ModeDynamic, simInstances{Partitioner: nvmlmig.NewPartitioner(n.lib), lib: n.lib}
	}
}

// testDRADynamicRefusesLayout: an agent whose DRA driver serves dynamic
// mode applies no nvidia.com/mig.config (the driver would destroy the
// layout's instances at its next start, and the scheduler allocates
// placements from the counters): the GPUs are left alone, the state is
// failed with a reason that names dynamic mode, a Warning Event says so
// once, and while the annotation stays the agent writes nothing more.
func testDRADynamicRefusesLayout(t *testing.T, api *apiServer) {
	n := newNode(t, api, withGPUs("H100-SXM5-80GB", 2))
	counts := &requestCounter{counts: map[string]int{}}
	cfg := rest.CopyConfig(api.cfg)
	cfg.WrapTransport = counts.wrap
	client := kubernetes.NewForConfigOrDie(cfg)
	srv := startDRAServer(t, n, client, dynamicMode(n))
	// Resyncs every 50 ms: the period below is counted in reconciles.
	r := n.start(withClient(client), func(o *Options, _ *deviceplugin.Options) { o.Server = srv }, withResync(50*time.Millisecond))
	n.waitNode("the dynamic mode label", func(o *corev1.Node) bool {
		return o.Labels[nodeinfo.LabelDRAMode] == nodeinfo.DRAModeDynamic
	})
	before := n.layoutOf()

	n.annotate(nodeinfo.AnnotationMigConfig, allSeven)
	obj := n.waitState(nodeinfo.StateFailed)
	if r := obj.Annotations[nodeinfo.AnnotationReason]; !strings.Contains(r, "annotation nvidia.com/mig.config") || !strings.Contains(r, "dynamic mode") {
		t.Errorf("reason %q does not say that dynamic mode takes no layout", r)
	}
	n.waitEvent(corev1.EventTypeWarning, ReasonInvalid, "dynamic mode")
	if diff := cmp.Diff(before, n.layoutOf()); diff != "" {
		t.Errorf("a layout changed the GPUs in dynamic mode (-before +after):\n%s", diff)
	}

	// At rest: each resync finds the same, and writes nothing.
	const period = 20
	start := r.counter("migflex_agent_reconciles_total", "result", resultInvalid)
	patches, events := counts.get("PATCH nodes"), counts.get("POST events")
	rv := n.get().ResourceVersion
	waitCounter(t, r, "migflex_agent_reconciles_total", "result", resultInvalid, start+period)
	if got := counts.get("PATCH nodes") - patches; got != 0 {
		t.Errorf("%d Node writes during %d reconciles of a refused layout, want 0", got, period)
	}
	if got := counts.get("POST events") - events; got != 0 {
		t.Errorf("%d Events during %d reconciles of a refused layout, want 0", got, period)
	}
	if got := n.get().ResourceVersion; got != rv {
		t.Errorf("the Node changed while its agent was at rest: resourceVersion %s, before %s", got, rv)
	}
	if diff := cmp.Diff(before, n.layoutOf()); diff != "" {
		t.Errorf("the GPUs changed at rest (-before +after):\n%s", diff)
	}
}

// listNodeSlices lists the driver's ResourceSlices of the node.
func listNodeSlices(t *testing.T, api *apiServer, nodeName string) *resourceapi.ResourceSliceList {
	t.Helper()
	list, err := api.client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{FieldSelector: fields.AndSelectors(
		fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorDriver, dra.DriverName),
		fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorNodeName, nodeName),
	).String()})
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// nodeSlices is the number of devices in each of the node's ResourceSlices
// of the driver, sorted.
func nodeSlices(t *testing.T, api *apiServer, nodeName string) []int {
	t.Helper()
	list := listNodeSlices(t, api, nodeName)
	var out []int
	for _, s := range list.Items {
		out = append(out, len(s.Spec.Devices))
	}
	slices.Sort(out)
	return out
}

// testDRAPublication: on a node served through DRA, success waits until
// the API server's ResourceSlices show the layout, and comes as soon as
// they do, not at the agent's next retry (an hour here): 10 GPUs of seven
// 1g.10gb are 70 devices, two slices the kubelet plugin helper stores one
// after the other after the agent served the layout, with nothing on the
// Node changing when the last one is in. The slices' writes are held
// until the agent shows it waits for them.
func testDRAPublication(t *testing.T, api *apiServer) {
	n := newNode(t, api, withGPUs("H100-SXM5-80GB", 10))
	gate := newWriteGate()
	cfg := rest.CopyConfig(api.cfg)
	cfg.WrapTransport = gate.wrap
	srv := startDRAServer(t, n, kubernetes.NewForConfigOrDie(cfg))
	run := n.start(func(o *Options, _ *deviceplugin.Options) {
		o.Server = srv
		o.RetryInterval, o.ResyncInterval, o.AllocatableTimeout = time.Hour, time.Hour, time.Hour
	})
	// The whole GPUs, published when the agent starts.
	waitSlices(t, api, n.name, []int{10})

	gate.shut()
	n.annotate(nodeinfo.AnnotationMigConfig, allSeven)
	obj := n.waitNode("pending on the slices", func(o *corev1.Node) bool {
		return o.Labels[nodeinfo.LabelMigConfigState] == nodeinfo.StatePending && strings.Contains(o.Annotations[nodeinfo.AnnotationReason], "not yet the 70 devices published")
	})
	t.Logf("waiting: %s", obj.Annotations[nodeinfo.AnnotationReason])
	released := time.Now()
	gate.release()

	obj = n.waitState(nodeinfo.StateSuccess)
	t.Logf("success %v after the slices' writes were let through; %v reconciles and %v Node writes in all",
		time.Since(released), run.counter("migflex_agent_reconciles_total", "", ""), run.counter("migflex_agent_node_writes_total", "", ""))
	if r := obj.Annotations[nodeinfo.AnnotationReason]; r != "" {
		t.Errorf("success with reason %q", r)
	}
	if got := nodeSlices(t, api, n.name); !slices.Equal(got, []int{6, dra.MaxDevicesPerSlice}) {
		t.Errorf("the node's slices hold %v devices, want 6 and %d", got, dra.MaxDevicesPerSlice)
	}
}

// waitSlices waits until the node's slices of the driver hold want
// devices (see nodeSlices).
func waitSlices(t *testing.T, api *apiServer, nodeName string, want []int) {
	t.Helper()
	deadline := time.Now().Add(hangTimeout)
	for got := nodeSlices(t, api, nodeName); !slices.Equal(got, want); got = nodeSlices(t, api, nodeName) {
		if time.Now().After(deadline) {
			t.Fatalf("the node's slices hold %v devices, want %v", got, want)
		}
		time.Sleep(pollInterval) // polling a condition the API server does not signal here
	}
}

// signalServer serves nothing, says its layout is visible once the test
// says so, and signals Visibility on an unbuffered channel: a send
// returns only once the agent has taken it.
type signalServer struct {
	nopServer
	signal  chan struct{}
	mu      sync.Mutex
	visible bool
}

func (s *signalServer) Visible(context.Context, *corev1.Node) (string, []string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.visible {
		return "the layout", nil, nil
	}
	return "the layout", []string{"its slices"}, nil
}

func (s *signalServer) Visibility() <-chan struct{} { return s.signal }

func (s *signalServer) Publisher() (string, string, string) {
	return "the test", "the API server", "check the test"
}

// testPublicationSignalled: an agent waiting for its layout to become
// visible takes the server's Visibility signal and reports success then,
// with an hour to its next retry.
func testPublicationSignalled(t *testing.T, api *apiServer) {
	n := newNode(t, api)
	srv := &signalServer{signal: make(chan struct{})}
	n.start(func(o *Options, _ *deviceplugin.Options) {
		o.Server = srv
		o.RetryInterval, o.ResyncInterval, o.AllocatableTimeout = time.Hour, time.Hour, time.Hour
	})
	n.annotate(nodeinfo.AnnotationMigConfig, allThree)
	n.waitNode("pending on the publication", func(o *corev1.Node) bool {
		return o.Labels[nodeinfo.LabelMigConfigState] == nodeinfo.StatePending && strings.Contains(o.Annotations[nodeinfo.AnnotationReason], "waiting for the test to publish it in the API server (its slices)")
	})
	srv.mu.Lock()
	srv.visible = true
	srv.mu.Unlock()
	select {
	case srv.signal <- struct{}{}:
	case <-time.After(hangTimeout):
		t.Fatal("the agent never took the Visibility signal")
	}
	n.waitState(nodeinfo.StateSuccess)
}

// testDRADynamicReportsInstancesAtOnce: on a DRA node in dynamic mode the
// instance a claim's Prepare makes is in the Node's layout annotation,
// and the one its Unprepare destroys is gone from it, as soon as the
// driver answers, with one Node write each (cause "instances"), not at
// the agent's next resync: nothing else here reads the GPUs again (no
// in-use poll, which would see a held device it does not know; retries
// and resyncs an hour away); the per-instance metrics with it. The
// kubelet's repeated Prepare makes
// nothing, so the agent neither reconciles nor writes for it.
func testDRADynamicReportsInstancesAtOnce(t *testing.T, api *apiServer) {
	n := newNode(t, api, func(s *nodeSetup) {
		s.gpus = []sim.GPUSpec{{Model: "H100-SXM5-80GB", Count: 1, Initial: &sim.InitialState{MigEnabled: true}}}
	})
	counts := &requestCounter{counts: map[string]int{}}
	cfg := rest.CopyConfig(api.cfg)
	cfg.WrapTransport = counts.wrap
	client := kubernetes.NewForConfigOrDie(cfg)
	drv, srv := startDRADriver(t, n, client, dynamicMode(n))
	r := n.start(withClient(client), func(o *Options, _ *deviceplugin.Options) { o.Server = srv },
		withResync(time.Hour), withRetry(time.Hour), withInUseInterval(-1))
	n.waitNode("the dynamic mode label and an empty layout", func(o *corev1.Node) bool {
		l, err := nodeinfo.ParseLayout(o.Annotations[nodeinfo.AnnotationLayout])
		return o.Labels[nodeinfo.LabelDRAMode] == nodeinfo.DRAModeDynamic && err == nil && len(l) == 1 && len(l[0].Instances) == 0
	})

	offers, err := dra.Offers(n.discover())
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(offers[0].Devices, func(d dra.OfferedDevice) bool { return d.Profile == "3g.40gb" && d.Start == 4 })
	if i < 0 {
		t.Fatal("no 3g.40gb at 4 offered")
	}
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "c1", UID: "uid-c1"},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: dra.DriverName, Pool: n.name, Device: offers[0].Devices[i].Name}},
		}}},
	}
	_, ctx := ktesting.NewTestContext(t)
	// instancesListed is the layout annotation's instances of GPU 0, as
	// "profile@start uuid".
	instancesListed := func(o *corev1.Node) []string {
		l, err := nodeinfo.ParseLayout(o.Annotations[nodeinfo.AnnotationLayout])
		if err != nil || len(l) != 1 {
			return []string{"unreadable"}
		}
		var out []string
		for _, in := range l[0].Instances {
			out = append(out, fmt.Sprintf("%s@%d %s", in.Profile, in.Placement.Start, in.UUID))
		}
		return out
	}
	for _, step := range []struct {
		name string
		do   func() error
		// writes and reconciles are how many the step causes.
		writes, reconciles float64
	}{
		{"Prepare", func() error {
			res, err := drv.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim})
			return errors.Join(err, res[claim.UID].Err)
		}, 1, 1},
		{"the kubelet repeats the Prepare", func() error {
			res, err := drv.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim})
			return errors.Join(err, res[claim.UID].Err)
		}, 0, 0},
		{"Unprepare", func() error {
			res, err := drv.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "c1"}, UID: claim.UID}})
			return errors.Join(err, res[claim.UID])
		}, 1, 1},
	} {
		writes := r.counter("migflex_agent_node_writes_total", "cause", causeInstances)
		reconciles := r.counter("migflex_agent_reconciles_total", "", "")
		patches := counts.get("PATCH nodes")
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		// NVML now, which the annotation must list.
		var want []string
		for _, in := range n.discover()[0].Instances {
			want = append(want, fmt.Sprintf("%s@%d %s", in.Profile, in.Start, in.UUID))
		}
		began := time.Now()
		obj := n.waitNode(step.name+": the layout annotation lists what NVML has", func(o *corev1.Node) bool {
			return slices.Equal(instancesListed(o), want)
		})
		waitCounter(t, r, "migflex_agent_reconciles_total", "", "", reconciles+step.reconciles)
		waitCounter(t, r, "migflex_agent_node_writes_total", "cause", causeInstances, writes+step.writes)
		t.Logf("%s: the annotation lists %v %v after the driver answered", step.name, instancesListed(obj), time.Since(began))
		// The per-instance metrics follow the same reading of the GPUs.
		if got := r.counter("migflex_agent_instance_info", "profile", "3g.40gb"); got != float64(len(want)) {
			t.Errorf("%s: %v migflex_agent_instance_info series of a 3g.40gb, want %d", step.name, got, len(want))
		}
		if got := r.counter("migflex_agent_node_writes_total", "cause", causeInstances) - writes; got != step.writes {
			t.Errorf("%s: %v Node writes for the instances, want %v", step.name, got, step.writes)
		}
		// A repeat that signalled would show here, or at the next step.
		if got := r.counter("migflex_agent_reconciles_total", "", "") - reconciles; got != step.reconciles {
			t.Errorf("%s: %v reconciles, want %v", step.name, got, step.reconciles)
		}
		if got := counts.get("PATCH nodes") - patches; float64(got) != step.writes {
			t.Errorf("%s: %d Node writes in all, want %v", step.name, got, step.writes)
		}
	}
}

// sliceWriteCounter counts a client's writes of ResourceSlices (anything
// but GET), as sent on the wire.
type sliceWriteCounter struct {
	mu sync.Mutex
	n  int
}

func (c *sliceWriteCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Method != http.MethodGet && strings.Contains(r.URL.Path, "/resourceslices") && !strings.Contains(r.URL.RawQuery, "dryRun") {
			c.mu.Lock()
			c.n++
			c.mu.Unlock()
		}
		return rt.RoundTrip(r)
	})
}

func (c *sliceWriteCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// publishedDevices are the node's devices in the API server's slices,
// "name" or, with the reserved taint, "name=value", sorted.
func publishedDevices(t *testing.T, api *apiServer, nodeName string) []string {
	t.Helper()
	list := listNodeSlices(t, api, nodeName)
	out := []string{}
	for _, s := range list.Items {
		for _, d := range s.Spec.Devices {
			key := d.Name
			for _, tn := range d.Taints {
				if tn.Key == dra.TaintReserved && tn.Effect == resourceapi.DeviceTaintEffectNoSchedule {
					key += "=" + tn.Value
				}
			}
			out = append(out, key)
		}
	}
	slices.Sort(out)
	return out
}

// keepsTaints tells whether the API server keeps device taints: from
// 1.36 on by default (DRADeviceTaints beta, GA in 1.37); 1.35 drops them.
func keepsTaints(t *testing.T, api *apiServer) bool {
	t.Helper()
	v, err := api.client.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	minor, err := strconv.Atoi(strings.TrimRight(v.Minor, "+"))
	if err != nil {
		t.Fatalf("server version %+v: %v", v, err)
	}
	return v.Major != "1" || minor >= 36
}

// testDRAReservation: on a node served through DRA (static mode), the
// Node's reservation (the planner's annotation) reaches the API server's
// ResourceSlice as a NoSchedule taint on the reserved GPUs' free devices
// while they are not all free and whole (here GPU 2 is MIG, with two
// instances), and is lifted when the reservation holds only whole free
// GPUs, and at its deadline on the agent's own timer; each change writes
// the slice once, and Node changes that leave the reservation as it is
// write nothing.
func testDRAReservation(t *testing.T, api *apiServer) {
	n := newNode(t, api, withGPUs("H100-SXM5-80GB", 3))
	part := nvmlmig.NewPartitioner(n.lib)
	if err := part.SetMigMode(2, true); err != nil {
		t.Fatal(err)
	}
	for _, start := range []int{0, 4} {
		if _, err := part.CreateInstance(2, "3g.40gb", start); err != nil {
			t.Fatal(err)
		}
	}
	writes := &sliceWriteCounter{}
	cfg := rest.CopyConfig(api.cfg)
	cfg.WrapTransport = writes.wrap
	srv := startDRAServer(t, n, kubernetes.NewForConfigOrDie(cfg))
	// The deadline's clock and timer are the test's.
	var mu sync.Mutex
	offset := time.Duration(0)
	lapse := make(chan time.Time)
	n.start(func(o *Options, _ *deviceplugin.Options) {
		o.Server = srv
		o.RetryInterval, o.ResyncInterval, o.AllocatableTimeout = time.Hour, time.Hour, time.Hour
		o.now = func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			return time.Now().Add(offset)
		}
		o.lapseAfter = func(time.Duration) <-chan time.Time { return lapse }
	})
	waitSlices(t, api, n.name, []int{4})
	// The first publication's writes settle (the node has no layout to
	// apply, so no state to wait for).
	time.Sleep(time.Second)
	if got, want := publishedDevices(t, api, n.name), []string{"gpu-0", "gpu-1", "gpu-2-mig-3g40gb-9-0", "gpu-2-mig-3g40gb-9-4"}; !slices.Equal(got, want) {
		t.Fatalf("the slices list %v before any reservation, want %v", got, want)
	}

	reserve := func(gpus ...int) {
		t.Helper()
		v, err := nodeinfo.Reservation{Pod: "ml/big", UID: "uid-big", GPUs: gpus, Since: time.Now(), Ready: time.Now(), Deadline: time.Now().Add(time.Hour)}.Encode()
		if err != nil {
			t.Fatal(err)
		}
		n.annotate(nodeinfo.AnnotationReservation, v)
	}
	const migA, migB = "gpu-2-mig-3g40gb-9-0", "gpu-2-mig-3g40gb-9-4"
	all := []string{"gpu-0", "gpu-1", migA, migB}
	// Where the server drops taints (1.35) the reserved devices are left
	// out instead, found at the first publication with taints: that one
	// is written, comes back without them, and is written again.
	held, firstWrites := []string{"gpu-0=uid-big", "gpu-1", migA + "=uid-big", migB + "=uid-big"}, 1
	if !keepsTaints(t, api) {
		held, firstWrites = []string{"gpu-1"}, 2
	}
	t.Logf("the API server keeps device taints: %v", keepsTaints(t, api))
	steps := []struct {
		what   string
		do     func()
		want   []string
		writes int
	}{
		{"GPUs 0 and 2 reserved: GPU 2 is MIG, so both GPUs' free devices are kept", func() { reserve(0, 2) }, held, firstWrites},
		{"the Node changes, the reservation does not: nothing written", func() { n.annotate("example.com/note", "touched") }, held, 0},
		{"GPUs 0 and 1 reserved: both free and whole, offered together", func() { reserve(0, 1) }, all, 1},
		{"GPUs 0 and 2 again", func() { reserve(0, 2) }, held, 1},
		{"the deadline passes on the agent's clock: lifted", func() {
			mu.Lock()
			offset = 2 * time.Hour
			mu.Unlock()
			select {
			case lapse <- time.Now():
			case <-time.After(hangTimeout):
				t.Fatal("the agent never took its deadline's timer")
			}
		}, all, 1},
	}
	for _, s := range steps {
		before := writes.count()
		s.do()
		deadline := time.Now().Add(hangTimeout)
		for got := publishedDevices(t, api, n.name); !slices.Equal(got, s.want); got = publishedDevices(t, api, n.name) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the slices list %v, want %v", s.what, got, s.want)
			}
			time.Sleep(pollInterval) // polling a condition the API server does not signal here
		}
		// A write that should not happen is given the time to.
		time.Sleep(time.Second)
		if got := writes.count() - before; got != s.writes {
			t.Errorf("%s: %d ResourceSlice writes, want %d", s.what, got, s.writes)
		}
	}
}
