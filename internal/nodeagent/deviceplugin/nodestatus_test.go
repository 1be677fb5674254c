package deviceplugin

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/migflex/migflex/internal/testsupport/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const (
	r1g = "nvidia.com/mig-1g.10gb"
	r3g = "nvidia.com/mig-3g.40gb"
)

// res is a registered resource with devices "id" (healthy), "id!"
// (unhealthy) and "id~" (draining).
func res(name string, ids ...string) ResourceStatus {
	r := ResourceStatus{Name: name, Registered: true, Devices: []DeviceStatus{}}
	for _, id := range ids {
		d := DeviceStatus{Healthy: true}
		switch id[len(id)-1] {
		case '!':
			d.Healthy, id = false, id[:len(id)-1]
		case '~':
			d.Draining, id = true, id[:len(id)-1]
		}
		d.ID = id
		r.Devices = append(r.Devices, d)
	}
	return r
}

func TestKubeletLags(t *testing.T) {
	unregistered := res(r3g, "c")
	unregistered.Registered = false
	tests := []struct {
		name   string
		served []ResourceStatus
		held   map[string][]string
		want   string
	}{
		{name: "holds exactly the served devices", served: []ResourceStatus{res(r1g, "a", "b"), res(r3g, "c")},
			held: map[string][]string{r1g: {"b", "a"}, r3g: {"c"}}},
		{name: "the new resource is not held yet", served: []ResourceStatus{res(r1g, "a"), res(r3g, "c")},
			held: map[string][]string{r1g: {"a"}}, want: "the kubelet holds 0 healthy nvidia.com/mig-3g.40gb devices, 1 served"},
		{name: "the old devices are still held", served: []ResourceStatus{res(r1g, "a")},
			held: map[string][]string{r1g: {"a", "old"}}, want: "the kubelet holds 2 healthy nvidia.com/mig-1g.10gb devices, 1 served"},
		{name: "same count, other devices", served: []ResourceStatus{res(r1g, "new")},
			held: map[string][]string{r1g: {"old"}}, want: "the kubelet holds 1 healthy nvidia.com/mig-1g.10gb devices, 1 served"},
		// Health travels with the list: the kubelet counting a device the
		// plugin now calls unhealthy or draining has not read that list.
		{name: "a device gone unhealthy still held healthy", served: []ResourceStatus{res(r1g, "a", "b!")},
			held: map[string][]string{r1g: {"a", "b"}}, want: "the kubelet holds 2 healthy nvidia.com/mig-1g.10gb devices, 1 served"},
		{name: "a draining device no longer held", served: []ResourceStatus{res(r1g, "a", "b~")},
			held: map[string][]string{r1g: {"a"}}},
		{name: "a removed profile held by none", served: []ResourceStatus{res(r1g)}, held: map[string][]string{}},
		{name: "a removed profile still held", served: []ResourceStatus{res(r1g)},
			held: map[string][]string{r1g: {"a"}}, want: "the kubelet holds 1 healthy nvidia.com/mig-1g.10gb devices, 0 served"},
		{name: "not registered", served: []ResourceStatus{unregistered}, held: map[string][]string{r3g: {"c"}},
			want: "nvidia.com/mig-3g.40gb is not registered with the kubelet"},
		// Another plugin's resources are not ours to wait for.
		{name: "resources we do not serve", served: []ResourceStatus{res(r1g, "a")},
			held: map[string][]string{r1g: {"a"}, "example.com/fpga": {"f"}, r3g: {"x"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := kubeletLags(tt.served, tt.held); got != tt.want {
				t.Errorf("kubeletLags = %q, want %q", got, tt.want)
			}
		})
	}
}

func quantities(kv map[string]int64) corev1.ResourceList {
	out := corev1.ResourceList{}
	for k, v := range kv {
		out[corev1.ResourceName(k)] = *resource.NewQuantity(v, resource.DecimalSI)
	}
	return out
}

func TestStatusUpdate(t *testing.T) {
	type counts = map[corev1.ResourceName]int64
	tests := []struct {
		name                  string
		served                []ResourceStatus
		capacity, allocatable map[string]int64
		want                  nodeStatusUpdate
	}{
		{
			name:        "a new profile, the old one gone to 0",
			served:      []ResourceStatus{res(r1g), res(r3g, "a", "b")},
			capacity:    map[string]int64{"cpu": 2, r1g: 7},
			allocatable: map[string]int64{"cpu": 2, r1g: 7},
			want:        nodeStatusUpdate{Capacity: counts{r1g: 0, r3g: 2}, Allocatable: counts{r1g: 0, r3g: 2}},
		},
		{
			name:        "already published: nothing",
			served:      []ResourceStatus{res(r1g, "a"), res(r3g, "b")},
			capacity:    map[string]int64{r1g: 1, r3g: 1},
			allocatable: map[string]int64{r1g: 1, r3g: 1},
			want:        nodeStatusUpdate{Capacity: counts{}, Allocatable: counts{}},
		},
		{
			// The kubelet's counts: capacity every device, allocatable the
			// healthy ones not draining.
			name:        "unhealthy and draining devices",
			served:      []ResourceStatus{res(r1g, "a", "b!", "c~")},
			capacity:    map[string]int64{r1g: 3},
			allocatable: map[string]int64{r1g: 3},
			want:        nodeStatusUpdate{Capacity: counts{}, Allocatable: counts{r1g: 1}},
		},
		{
			name:   "a removed profile the Node never showed stays absent",
			served: []ResourceStatus{res(r1g), res(r3g, "a")},
			want:   nodeStatusUpdate{Capacity: counts{r3g: 1}, Allocatable: counts{r3g: 1}},
		},
		{
			name:        "only unhealthy devices: allocatable 0 is written",
			served:      []ResourceStatus{res(r3g, "a!")},
			capacity:    map[string]int64{},
			allocatable: map[string]int64{},
			want:        nodeStatusUpdate{Capacity: counts{r3g: 1}, Allocatable: counts{r3g: 0}},
		},
		{
			name:        "resources we do not serve are left alone",
			served:      []ResourceStatus{res(r1g, "a")},
			capacity:    map[string]int64{"nvidia.com/gpu": 2, "example.com/fpga": 1},
			allocatable: map[string]int64{"nvidia.com/gpu": 2, "example.com/fpga": 1},
			want:        nodeStatusUpdate{Capacity: counts{r1g: 1}, Allocatable: counts{r1g: 1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := statusUpdate(tt.served, corev1.NodeStatus{Capacity: quantities(tt.capacity), Allocatable: quantities(tt.allocatable)})
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("statusUpdate (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStatusMergePatch(t *testing.T) {
	upd := nodeStatusUpdate{
		Capacity:    map[corev1.ResourceName]int64{r1g: 0, r3g: 2},
		Allocatable: map[corev1.ResourceName]int64{r3g: 1},
	}
	got, err := upd.mergePatch()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"status":{"capacity":{"nvidia.com/mig-1g.10gb":"0","nvidia.com/mig-3g.40gb":"2"},"allocatable":{"nvidia.com/mig-3g.40gb":"1"}}}`
	if string(got) != want {
		t.Errorf("patch\n got %s\nwant %s", got, want)
	}
	if s := upd.String(); s != "nvidia.com/mig-1g.10gb -/0, nvidia.com/mig-3g.40gb 1/2" {
		t.Errorf("String() = %q", s)
	}
}

// fakeSource is a Manager's served resources and change signal.
type fakeSource struct {
	mu      sync.Mutex
	served  []ResourceStatus
	changes chan struct{}
}

func (f *fakeSource) Resources() []ResourceStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.served
}
func (f *fakeSource) Subscribe() <-chan struct{} { return f.changes }
func (f *fakeSource) set(rs ...ResourceStatus) {
	f.mu.Lock()
	f.served = rs
	f.mu.Unlock()
	select {
	case f.changes <- struct{}{}:
	default:
	}
}

// fakeKubelet answers Allocatable with what held says.
type fakeKubelet struct {
	mu    sync.Mutex
	held  map[string][]string
	err   error
	calls int
}

func (f *fakeKubelet) Allocatable(context.Context) (map[string][]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return f.held, f.err
}
func (f *fakeKubelet) hold(h map[string][]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held = h
}
func (f *fakeKubelet) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// publisherFixture runs a publisher for node "gpu-1" against a fake
// clientset whose Node has cpu and a condition besides r1g x2.
func publisherFixture(t *testing.T, kubelet *fakeKubelet, setup func(*fake.Clientset), served ...ResourceStatus) (*fake.Clientset, *fakeSource, *outcomes, func()) {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1"}, Status: corev1.NodeStatus{
		Capacity:    quantities(map[string]int64{"cpu": 4, r1g: 2}),
		Allocatable: quantities(map[string]int64{"cpu": 4, r1g: 2}),
		Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
	}}
	cs := fake.NewClientset(node)
	if setup != nil {
		setup(cs)
	}
	src := &fakeSource{served: served, changes: make(chan struct{}, 1)}
	obs := &outcomes{}
	p := newStatusPublisher(src, StatusPublisherOptions{NodeName: "gpu-1", Nodes: cs.CoreV1().Nodes(), Kubelet: kubelet,
		Patience: 2 * time.Second, Confirm: 50 * time.Millisecond, Observe: obs.add})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(ctx) }()
	return cs, src, obs, func() { cancel(); <-done }
}

// outcomes records what the publisher tells StatusPublisherOptions.Observe.
type outcomes struct {
	mu  sync.Mutex
	got []string
}

func (o *outcomes) add(r string) { o.mu.Lock(); defer o.mu.Unlock(); o.got = append(o.got, r) }

func (o *outcomes) check(t *testing.T, want ...string) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if strings.Join(o.got, ",") != strings.Join(want, ",") {
		t.Errorf("observed %q, want %q", o.got, want)
	}
}

func statusPatches(cs *fake.Clientset) []string {
	var out []string
	for _, a := range cs.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && a.GetSubresource() == "status" {
			out = append(out, string(p.GetPatch()))
		}
	}
	return out
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestStatusPublisherWritesOnceTheKubeletHolds(t *testing.T) {
	kubelet := &fakeKubelet{held: map[string][]string{r1g: {"a", "b"}}}
	cs, src, obs, stop := publisherFixture(t, kubelet, nil, res(r1g, "a", "b"))
	defer stop()
	// The Node shows the served layout: nothing to write.
	waitFor(t, "the first look", func() bool { return kubelet.callCount() >= 1 })
	// A new layout: the kubelet holds it only after a few polls.
	src.set(res(r1g), res(r3g, "c", "d!"))
	time.Sleep(50 * time.Millisecond)
	if p := statusPatches(cs); len(p) != 0 {
		t.Fatalf("wrote %v before the kubelet held the layout", p)
	}
	kubelet.hold(map[string][]string{r3g: {"c"}})
	waitFor(t, "the status patch", func() bool { return len(statusPatches(cs)) > 0 })
	want := `{"status":{"capacity":{"nvidia.com/mig-1g.10gb":"0","nvidia.com/mig-3g.40gb":"2"},"allocatable":{"nvidia.com/mig-1g.10gb":"0","nvidia.com/mig-3g.40gb":"1"}}}`
	if got := statusPatches(cs)[0]; got != want {
		t.Errorf("patch\n got %s\nwant %s", got, want)
	}
	n, err := cs.CoreV1().Nodes().Get(t.Context(), "gpu-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if q := n.Status.Capacity["cpu"]; q.Value() != 4 || len(n.Status.Conditions) != 1 {
		t.Errorf("other status fields changed: %+v", n.Status)
	}
	// The confirmation finds it in place: one write in all.
	time.Sleep(200 * time.Millisecond)
	if p := statusPatches(cs); len(p) != 1 {
		t.Errorf("%d writes, want 1: %v", len(p), p)
	}
	obs.check(t, StatusWritten)
}

// A status update of the kubelet's computed before it held the devices
// can land after the publisher's write; the confirmation writes again, a
// bounded number of times.
func TestStatusPublisherRewritesAfterAStaleKubeletUpdate(t *testing.T) {
	kubelet := &fakeKubelet{held: map[string][]string{r3g: {"c"}}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1"}, Status: corev1.NodeStatus{
		Capacity: quantities(map[string]int64{r1g: 2}), Allocatable: quantities(map[string]int64{r1g: 2}),
	}}
	cs := fake.NewClientset(node)
	// Every read shows the stale status, as if the kubelet overwrote each
	// write.
	cs.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, node.DeepCopy(), nil
	})
	src := &fakeSource{served: []ResourceStatus{res(r1g), res(r3g, "c")}, changes: make(chan struct{}, 1)}
	obs := &outcomes{}
	p := newStatusPublisher(src, StatusPublisherOptions{NodeName: "gpu-1", Nodes: cs.CoreV1().Nodes(), Kubelet: kubelet,
		Patience: 5 * time.Second, Confirm: 20 * time.Millisecond, Observe: obs.add})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "the writes", func() bool { return len(statusPatches(cs)) >= statusMaxWrites })
	time.Sleep(200 * time.Millisecond)
	if n := len(statusPatches(cs)); n != statusMaxWrites {
		t.Errorf("%d writes, want %d", n, statusMaxWrites)
	}
	obs.check(t, StatusWritten, StatusWritten, StatusWritten, StatusLeft)
}

func TestStatusPublisherStopsWhenRefused(t *testing.T) {
	kubelet := &fakeKubelet{held: map[string][]string{r3g: {"c"}}}
	var tries int
	var mu sync.Mutex
	_, _, obs, stop := publisherFixture(t, kubelet, func(cs *fake.Clientset) {
		cs.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
			mu.Lock()
			defer mu.Unlock()
			tries++
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "gpu-1", errors.New("the migflex agent may not"))
		})
	}, res(r1g), res(r3g, "c"))
	defer stop()
	waitFor(t, "a write", func() bool { mu.Lock(); defer mu.Unlock(); return tries > 0 })
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if tries != 1 {
		t.Errorf("%d tries after a refusal, want 1", tries)
	}
	obs.check(t, StatusRefused)
}

// A kubelet that never holds the layout: the publisher polls until its
// patience ends and writes nothing.
func TestStatusPublisherGivesUp(t *testing.T) {
	kubelet := &fakeKubelet{held: map[string][]string{r1g: {"a", "b"}}}
	cs, _, obs, stop := publisherFixture(t, kubelet, nil, res(r1g), res(r3g, "c"))
	defer stop()
	time.Sleep(2500 * time.Millisecond)
	calls := kubelet.callCount()
	time.Sleep(1200 * time.Millisecond)
	if kubelet.callCount() != calls {
		t.Errorf("still asking the kubelet after the patience ended (%d then %d calls)", calls, kubelet.callCount())
	}
	if p := statusPatches(cs); len(p) != 0 {
		t.Errorf("wrote %v for a layout the kubelet never held", p)
	}
	obs.check(t, StatusLeft)
}

// The publisher's subscription and the agent's Changes are signalled
// alike: one does not take the other's signal.
func TestSubscribeBesideChanges(t *testing.T) {
	m, err := New(Options{PluginDir: testutil.SocketDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	sub := m.Subscribe()
	if err := m.Serve(t.Context(), mixedLayout()); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]<-chan struct{}{"Changes": m.Changes(), "Subscribe": sub} {
		select {
		case <-c:
		default:
			t.Errorf("%s not signalled by a new layout", name)
		}
	}
}
