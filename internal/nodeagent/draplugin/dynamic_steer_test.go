package draplugin

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// sliceWrites counts the ResourceSlice writes (create, update, delete; not
// dry runs) the API server is asked for that change what it holds. An
// update that stores the same spec again is counted apart (same): the
// ResourceSlice controller sends one when its informer has not yet seen
// its own previous update, which a real API server refuses as a conflict
// and the fake stores.
type sliceWrites struct {
	mu      sync.Mutex
	n, same int
}

func (w *sliceWrites) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// countSliceWrites counts them on client, which also names the slices it
// creates from their generateName, as the API server does (the fake does
// not).
func countSliceWrites(client *fake.Clientset) *sliceWrites {
	w := &sliceWrites{}
	gvr := resourceapi.SchemeGroupVersion.WithResource("resourceslices")
	for _, verb := range []string{"create", "update", "delete"} {
		client.PrependReactor(verb, "resourceslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
			w.mu.Lock()
			defer w.mu.Unlock()
			switch a := a.(type) {
			case k8stesting.CreateActionImpl:
				if slices.Contains(a.CreateOptions.DryRun, metav1.DryRunAll) {
					return false, nil, nil
				}
				w.n++
				s := a.GetObject().(*resourceapi.ResourceSlice).DeepCopy()
				if s.Name == "" {
					s.Name = fmt.Sprintf("%s%05d", s.GenerateName, w.n)
				}
				if err := client.Tracker().Create(gvr, s, ""); err != nil {
					return true, nil, err
				}
				return true, s, nil
			case k8stesting.UpdateActionImpl:
				s := a.GetObject().(*resourceapi.ResourceSlice)
				old, err := client.Tracker().Get(gvr, "", s.Name)
				if err == nil && equality.Semantic.DeepEqual(old.(*resourceapi.ResourceSlice).Spec, s.Spec) {
					w.same++
					return false, nil, nil
				}
			}
			w.n++
			return false, nil, nil
		})
	}
	return w
}

// deviceOrder is the order of the devices in the node's device slices as
// the API server has them (the slices by name, as the scheduler sorts
// them), or as the driver last published them.
func apiDeviceOrder(t *testing.T, client interface {
	ResourceV1Slices() ([]resourceapi.ResourceSlice, error)
}) []string {
	t.Helper()
	list, err := client.ResourceV1Slices()
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(list, func(a, b resourceapi.ResourceSlice) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	var out []string
	for _, s := range list {
		for _, d := range s.Spec.Devices {
			out = append(out, d.Name)
		}
	}
	return out
}

func publishedOrder(drv *Driver) []string {
	_, res := drv.Published()
	var out []string
	for _, s := range res.Pools[node].Slices {
		for _, d := range s.Devices {
			out = append(out, d.Name)
		}
	}
	return out
}

func firstOf(order []string, prefix string) string {
	for _, name := range order {
		if len(name) > len(prefix) && name[:len(prefix)] == prefix {
			return name
		}
	}
	return ""
}

// In dynamic mode the agent publishes its devices in dra.Steer's order and
// republishes when a Prepare or an Unprepare changes its GPUs' use, one
// write of the device slice each; at rest (the agent's reconcile
// republishing the same GPUs, the kubelet repeating a Prepare) the
// publication is the same and the API server gets no write.
func TestDynamicSteersOnUseAndWritesNothingAtRest(t *testing.T) {
	in := dynamicNode(t)
	const dyn1gAt0, dyn1gAt1 = "gpu-0-mig-1g10gb-19-0", "gpu-0-mig-1g10gb-19-1"
	claim := allocated("team-a", "c1", "p1", [2]string{"small", dyn1gAt0})
	client := fakeClient(claim)
	writes := countSliceWrites(client)
	d := newDirs(t)
	drv := startDynamic(t, client, d, in)
	api := slicesOf(client)
	waitFor(t, "the first publication in the API", func() bool {
		return slices.Equal(apiDeviceOrder(t, api), publishedOrder(drv)) && len(publishedOrder(drv)) > 0
	})
	atRest := publishedOrder(drv)
	if got := firstOf(atRest, "gpu-0-mig-1g10gb-19-"); got != "gpu-0-mig-1g10gb-19-6" {
		t.Errorf("first 1g.10gb offered on an empty GPU: %s, want the one at 6", got)
	}
	_, before := drv.Published()
	w0 := writes.count()

	// At rest: the agent's reconcile republishes the same GPUs.
	for range 3 {
		publishDynamic(t, drv, in)
		if _, res := drv.Published(); !reflect.DeepEqual(res, before) {
			t.Fatalf("republishing the same GPUs changed the publication")
		}
	}

	k := dialKubelet(t, d)
	k.mustPrepare(t, claim)
	steered := publishedOrder(drv)
	if got := firstOf(steered, "gpu-0-mig-1g10gb-19-"); got != dyn1gAt1 {
		t.Errorf("first 1g.10gb offered beside a 1g.10gb at 0: %s, want %s", got, dyn1gAt1)
	}
	waitFor(t, "the steered order in the API", func() bool { return slices.Equal(apiDeviceOrder(t, api), steered) })
	if n := writes.count() - w0; n != 1 {
		t.Errorf("%d slice writes from the rest and one Prepare, want 1 (the device slice)", n)
	}
	_, afterPrepare := drv.Published()

	// The kubelet repeats the Prepare: nothing changes.
	if resp := k.prepare(claim)[string(claim.UID)]; resp.Error != "" {
		t.Fatalf("Prepare again: %s", resp.Error)
	}
	if _, res := drv.Published(); !reflect.DeepEqual(res, afterPrepare) {
		t.Errorf("a repeated Prepare changed the publication")
	}

	if resp := k.unprepare(claim)[string(claim.UID)]; resp.Error != "" {
		t.Fatalf("Unprepare: %s", resp.Error)
	}
	if got := publishedOrder(drv); !slices.Equal(got, atRest) {
		t.Errorf("after the Unprepare the order is %v, want the empty GPU's %v", got, atRest)
	}
	waitFor(t, "the empty GPU's order in the API", func() bool { return slices.Equal(apiDeviceOrder(t, api), atRest) })
	if n := writes.count() - w0; n != 2 {
		t.Errorf("%d slice writes after a Prepare and an Unprepare, want 2", n)
	}
	t.Logf("%d updates storing the same spec again (the controller's, not counted)", writes.same)
}

type sliceFunc func() ([]resourceapi.ResourceSlice, error)

func (f sliceFunc) ResourceV1Slices() ([]resourceapi.ResourceSlice, error) { return f() }

// slicesOf lists client's ResourceSlices.
func slicesOf(client *fake.Clientset) sliceFunc {
	return func() ([]resourceapi.ResourceSlice, error) {
		l, err := client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		return l.Items, nil
	}
}

// A claim the scheduler has allocated in this pool is use before its
// Prepare: the agent hears of it from the API's claims (ClaimEvents) and
// steers the next claim around it at once, one write of the device slice.
// The claim's Prepare and Unprepare then change no use and write nothing,
// nor does any event of a claim that changes none (another pool's, one
// not allocated, admin access, a repeat); its release writes once more.
func TestDynamicSteersOnAllocationBeforePrepare(t *testing.T) {
	in := dynamicNode(t)
	const dyn1gAt0, dyn1gAt1 = "gpu-0-mig-1g10gb-19-0", "gpu-0-mig-1g10gb-19-1"
	claim := allocated("team-a", "c1", "p1", [2]string{"small", dyn1gAt0})
	client := fakeClient(claim)
	writes := countSliceWrites(client)
	api := slicesOf(client)
	d := newDirs(t)
	drv := startDynamic(t, client, d, in)
	events := drv.ClaimEvents()
	atRest := publishedOrder(drv)
	waitFor(t, "the first publication in the API", func() bool { return slices.Equal(apiDeviceOrder(t, api), atRest) })
	w0 := writes.count()

	events.OnAdd(claim, false)
	steered := publishedOrder(drv)
	if got := firstOf(steered, "gpu-0-mig-1g10gb-19-"); got != dyn1gAt1 {
		t.Errorf("first 1g.10gb offered beside a 1g.10gb allocated at 0, not prepared: %s, want %s", got, dyn1gAt1)
	}
	waitFor(t, "the steered order in the API", func() bool { return slices.Equal(apiDeviceOrder(t, api), steered) })
	if n := writes.count() - w0; n != 1 {
		t.Errorf("%d slice writes from one allocation, want 1 (the device slice)", n)
	}
	_, before := drv.Published()

	elsewhere := allocated("team-a", "c2", "p2", [2]string{"small", dyn1gAt0})
	elsewhere.Status.Allocation.Devices.Results[0].Pool = "node-b"
	pending := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "c3", UID: "uid-c3"}}
	admin := allocated("team-a", "c4", "", [2]string{"look", "gpu-0-mig-1g10gb-19-3"})
	admin.Status.Allocation.Devices.Results[0].AdminAccess = ptr.To(true)
	quiet := []struct {
		what string
		do   func()
	}{
		{"a claim allocated in another pool", func() { events.OnAdd(elsewhere, false) }},
		{"a claim not allocated", func() { events.OnAdd(pending, false) }},
		{"a claim with admin access", func() { events.OnAdd(admin, false) }},
		{"the same claim again (resync)", func() { events.OnUpdate(claim, claim) }},
		{"a claim elsewhere deleted", func() { events.OnDelete(cache.DeletedFinalStateUnknown{Key: "team-a/c2", Obj: elsewhere}) }},
		{"the claim's Prepare", func() {
			if resp := dialKubelet(t, d).prepare(claim)[string(claim.UID)]; resp.Error != "" {
				t.Fatalf("Prepare: %s", resp.Error)
			}
		}},
		{"the claim's Unprepare, still allocated", func() {
			if resp := dialKubelet(t, d).unprepare(claim)[string(claim.UID)]; resp.Error != "" {
				t.Fatalf("Unprepare: %s", resp.Error)
			}
		}},
	}
	for _, q := range quiet {
		q.do()
		if _, res := drv.Published(); !reflect.DeepEqual(res, before) {
			t.Errorf("%s changed the publication", q.what)
		}
	}

	released := claim.DeepCopy()
	released.Status.Allocation, released.Status.ReservedFor = nil, nil
	events.OnUpdate(claim, released)
	if got := publishedOrder(drv); !slices.Equal(got, atRest) {
		t.Errorf("after the claim's release the order is %v, want the empty GPU's %v", got, atRest)
	}
	waitFor(t, "the empty GPU's order in the API", func() bool { return slices.Equal(apiDeviceOrder(t, api), atRest) })
	if n := writes.count() - w0; n != 2 {
		t.Errorf("%d slice writes after an allocation, its Prepare, Unprepare and release, and events of other claims; want 2", n)
	}
}

// An instance found at start that no claim made and that cannot be
// destroyed (a process uses it) is steered around as a claim's would be:
// its GPU counts as used and the next 1g.10gb goes beside it, not to the
// far end of a GPU that only looks empty.
func TestDynamicSteersAroundAnAdoptedInstance(t *testing.T) {
	in := dynamicNode(t)
	busy, err := in.CreateInstance(0, "1g.10gb", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.lib.SetBusy(0, busy.GIID, true); err != nil {
		t.Fatal(err)
	}
	drv := startDynamic(t, fakeClient(), newDirs(t), in)
	order := publishedOrder(drv)
	if got, want := firstOf(order, "gpu-0-mig-1g10gb-19-"), "gpu-0-mig-1g10gb-19-1"; got != want {
		t.Errorf("first 1g.10gb offered beside an adopted 1g.10gb at 0: %s, want %s", got, want)
	}
	if slices.Contains(order, "gpu-0-mig-1g10gb-19-0") || slices.Contains(order, "gpu-0") {
		t.Errorf("the adopted instance's placement or the whole GPU is offered: %v", order)
	}
}

// What a dynamic node can still make is schedview's count on the pool as
// published, with the devices the API's claims allocated and those
// prepared taken: a claim's allocation counts before its Prepare, and its
// release gives the placements back. A static driver has nothing to say.
func TestDynamicMakeable(t *testing.T) {
	in := dynamicNode(t)
	claim := allocated("team-a", "c1", "p1", [2]string{"small", "gpu-0-mig-1g10gb-19-0"})
	client := fakeClient(claim)
	d := newDirs(t)
	drv := startDriver(t, client, d, Options{Mode: ModeDynamic, Instances: in})
	if _, ok := drv.Makeable(); ok {
		t.Error("Makeable before the first publication says something")
	}
	publishDynamic(t, drv, in)
	empty := map[string]int64{"1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1, "": 0}
	beside1gAt0 := map[string]int64{"1g.10gb": 6, "1g.10gb+me": 1, "1g.20gb": 3, "2g.20gb": 2, "3g.40gb": 1, "4g.40gb": 0, "7g.80gb": 0, "": 0}
	released := claim.DeepCopy()
	released.Status.Allocation = nil
	steps := []struct {
		name string
		do   func()
		want map[string]int64
	}{
		{"an empty H100 (its whole device: MIG on, no supply)", func() {}, empty},
		{"a 1g.10gb at 0 allocated, not prepared", func() { drv.ClaimEvents().OnAdd(claim, false) }, beside1gAt0},
		{"and prepared", func() {
			if resp := dialKubelet(t, d).prepare(claim)[string(claim.UID)]; resp.Error != "" {
				t.Fatalf("Prepare: %s", resp.Error)
			}
		}, beside1gAt0},
		{"released, still prepared", func() { drv.ClaimEvents().OnUpdate(claim, released) }, beside1gAt0},
		{"unprepared", func() {
			if resp := dialKubelet(t, d).unprepare(claim)[string(claim.UID)]; resp.Error != "" {
				t.Fatalf("Unprepare: %s", resp.Error)
			}
		}, empty},
	}
	for _, s := range steps {
		s.do()
		got, ok := drv.Makeable()
		if !ok {
			t.Fatalf("%s: Makeable says nothing in dynamic mode", s.name)
		}
		if !reflect.DeepEqual(got, s.want) {
			t.Errorf("%s: makeable %v, want %v", s.name, got, s.want)
		}
	}

	static := startDriver(t, fakeClient(), newDirs(t), Options{})
	gpus, err := in.Discover()
	if err != nil {
		t.Fatal(err)
	}
	if err := static.Publish(gpus, nil); err != nil {
		t.Fatal(err)
	}
	if got, ok := static.Makeable(); ok {
		t.Errorf("a static driver says it can make %v", got)
	}
}
