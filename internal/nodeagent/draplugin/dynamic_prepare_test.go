package draplugin

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/nodeagent/agent"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim/simtest"
	"github.com/migflex/migflex/internal/nvml/nvmlcall"
	"github.com/migflex/migflex/internal/nvml/nvmlcall/nvmlcalltest"
	"github.com/migflex/migflex/internal/nvml/nvmlmig"
	"github.com/migflex/migflex/internal/testsupport/testutil"
)

// simInstances is dynamic mode's Instances on a simulated NVML.
type simInstances struct {
	*nvmlmig.Partitioner
	lib *sim.Lib
}

func (s simInstances) Discover() ([]mig.GPU, error) { return nvmlmig.Discover(s.lib) }

// dynamicNode is one simulated H100 with MIG on and no instance.
func dynamicNode(t *testing.T) simInstances {
	t.Helper()
	lib := simtest.New(t, sim.Config{GPUs: []sim.GPUSpec{{Model: "H100-SXM5-80GB", Count: 1, Initial: &sim.InitialState{MigEnabled: true}}}, UUIDSeed: t.Name()})
	return simInstances{Partitioner: nvmlmig.NewPartitioner(lib), lib: lib}
}

// instancesOn lists GPU 0's instances as "profile@start".
func instancesOn(t *testing.T, in simInstances) []string {
	t.Helper()
	gpus, err := in.Discover()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, i := range gpus[0].Instances {
		out = append(out, i.Profile+"@"+itoa(i.Start))
	}
	slices.Sort(out)
	return out
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// publishDynamic publishes the node's GPUs as the agent would.
func publishDynamic(t *testing.T, drv *Driver, in Instances) {
	t.Helper()
	gpus, err := in.Discover()
	if err != nil {
		t.Fatal(err)
	}
	if err := drv.Publish(gpus, nil); err != nil {
		t.Fatal(err)
	}
}

// hanging is how many calls wait in the simulator's fault name.
func hanging(lib *sim.Lib, name string) int {
	for _, f := range lib.Faults() {
		if f.Fault.Name == name {
			return f.Hanging
		}
	}
	return 0
}

// startDynamic starts a dynamic-mode driver over in and publishes the
// node's GPUs.
func startDynamic(t *testing.T, client kubernetes.Interface, d dirs, in Instances) *Driver {
	t.Helper()
	drv := startDriver(t, client, d, Options{Mode: ModeDynamic, Instances: in})
	publishDynamic(t, drv, in)
	return drv
}

// mustPrepare prepares c through the kubelet's gRPC, or fails the test.
func (k kubelet) mustPrepare(t *testing.T, c *resourceapi.ResourceClaim) {
	t.Helper()
	if resp := k.prepare(c)[string(c.UID)]; resp.Error != "" {
		t.Fatalf("Prepare of %s: %s", c.Name, resp.Error)
	}
}

// Placement device names on GPU 0 of an H100 (static mode's names).
const (
	dyn3gAt4 = "gpu-0-mig-3g40gb-9-4"
	dyn3gAt0 = "gpu-0-mig-3g40gb-9-0"
	dyn1gAt6 = "gpu-0-mig-1g10gb-19-6"
	dyn1gAt3 = "gpu-0-mig-1g10gb-19-3"
)

// Prepare in dynamic mode creates the instance at the allocated placement,
// checkpoints it, and writes it into the claim's status.devices.
func TestDynamicPrepareCreatesAtThePlacement(t *testing.T) {
	in := dynamicNode(t)
	claim := allocated("team-a", "c1", "p1", [2]string{"gpu", dyn3gAt4}, [2]string{"small", dyn1gAt3})
	client := fakeClient(claim)
	d := newDirs(t)
	drv := startDynamic(t, client, d, in)

	resp := dialKubelet(t, d).prepare(claim)[string(claim.UID)]
	if resp.Error != "" {
		t.Fatalf("Prepare: %s", resp.Error)
	}
	if diff := slices.Compare(instancesOn(t, in), []string{"1g.10gb@3", "3g.40gb@4"}); diff != 0 {
		t.Fatalf("instances %v, want 1g.10gb@3 and 3g.40gb@4", instancesOn(t, in))
	}
	gpus, _ := in.Discover()
	uuidAt := map[int]string{}
	for _, i := range gpus[0].Instances {
		uuidAt[i.Start] = i.UUID
	}

	// Checkpointed with the instances' UUIDs, before the answer.
	reloaded, _, err := newCheckpoint(d.state, drv.opts.DriverName, node).load()
	if err != nil {
		t.Fatal(err)
	}
	pc := reloaded[string(claim.UID)]
	if len(pc.Devices) != 2 || !pc.Devices[0].Created || pc.Devices[0].UUID != uuidAt[4] || pc.Devices[1].UUID != uuidAt[3] {
		t.Fatalf("checkpoint holds %+v; want both devices created, with UUIDs %v", pc.Devices, uuidAt)
	}

	got, err := client.ResourceV1().ResourceClaims("team-a").Get(context.Background(), "c1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]DeviceStatusData{
		dyn3gAt4: {UUID: uuidAt[4], Profile: "3g.40gb", ParentUUID: gpus[0].UUID, Start: 4, Size: 4},
		dyn1gAt3: {UUID: uuidAt[3], Profile: "1g.10gb", ParentUUID: gpus[0].UUID, Start: 3, Size: 1},
	}
	if len(got.Status.Devices) != len(want) {
		t.Fatalf("status.devices %+v, want %d entries", got.Status.Devices, len(want))
	}
	for _, s := range got.Status.Devices {
		var data DeviceStatusData
		if s.Data != nil {
			if err := json.Unmarshal(s.Data.Raw, &data); err != nil {
				t.Fatal(err)
			}
		}
		if s.Driver != drv.opts.DriverName || s.Pool != node || data != want[s.Device] {
			t.Errorf("status.devices entry %s/%s/%s: %+v, want %+v", s.Driver, s.Pool, s.Device, data, want[s.Device])
		}
	}
	if got.Status.Allocation == nil || len(got.Status.Allocation.Devices.Results) != 2 {
		t.Errorf("the status write touched the allocation: %+v", got.Status.Allocation)
	}
}

// A placement that cannot be created (an instance the scheduler does not
// know of overlaps it) fails Prepare with the reason, and what the claim's
// other devices created is destroyed again: no instance, no CDI spec, no
// checkpoint entry.
func TestDynamicPrepareOfAnOverlapLeavesNothing(t *testing.T) {
	in := dynamicNode(t)
	claim := allocated("team-a", "c1", "p1", [2]string{"a", dyn1gAt6}, [2]string{"b", dyn3gAt0})
	client := fakeClient(claim)
	d := newDirs(t)
	drv := startDynamic(t, client, d, in)
	// Made behind the scheduler's back, after the start-up repair.
	if _, err := in.CreateInstance(0, "1g.10gb", 2); err != nil {
		t.Fatal(err)
	}

	resp := dialKubelet(t, d).prepare(claim)[string(claim.UID)]
	if !strings.Contains(resp.Error, "creating 3g.40gb at memory slice 0 on GPU 0") || !strings.Contains(resp.Error, "overlaps") {
		t.Fatalf("Prepare answered %q; want the overlap named", resp.Error)
	}
	if got := instancesOn(t, in); !slices.Equal(got, []string{"1g.10gb@2"}) {
		t.Errorf("instances after the failed Prepare: %v; want only the one made by hand", got)
	}
	if len(drv.Prepared()) != 0 {
		t.Errorf("prepared after a failed Prepare: %+v", drv.Prepared())
	}
	if entries, err := os.ReadDir(d.cdi); err != nil || len(entries) != 0 {
		t.Errorf("CDI specs left: %v (%v)", entries, err)
	}
}

// Unprepare destroys the instances Prepare created.
func TestDynamicUnprepareDestroys(t *testing.T) {
	in := dynamicNode(t)
	claim := allocated("team-a", "c1", "p1", [2]string{"gpu", dyn3gAt4})
	client := fakeClient(claim)
	d := newDirs(t)
	drv := startDynamic(t, client, d, in)
	k := dialKubelet(t, d)
	k.mustPrepare(t, claim)
	if got := instancesOn(t, in); len(got) != 1 {
		t.Fatalf("instances after Prepare: %v", got)
	}
	if resp := k.unprepare(claim)[string(claim.UID)]; resp.Error != "" {
		t.Fatalf("Unprepare: %s", resp.Error)
	}
	if got := instancesOn(t, in); len(got) != 0 {
		t.Errorf("instances after Unprepare: %v; want none", got)
	}
	if len(drv.Prepared()) != 0 {
		t.Errorf("still prepared: %+v", drv.Prepared())
	}
}

// An agent killed between an instance's create and its checkpoint leaves
// an instance no claim names. At the next start it is destroyed if idle,
// kept if a process uses it (and the placements it overlaps are not
// offered), and an instance a checkpointed claim holds is kept.
func TestDynamicRestartRepairsACreateWithoutCheckpoint(t *testing.T) {
	in := dynamicNode(t)
	held := allocated("team-a", "held", "p1", [2]string{"gpu", dyn3gAt4})
	client := fakeClient(held)
	d := newDirs(t)
	drv := startDynamic(t, client, d, in)
	dialKubelet(t, d).mustPrepare(t, held)
	drv.Stop()

	// What a Prepare killed after its create leaves: one idle, one whose
	// pod started anyway.
	if _, err := in.CreateInstance(0, "1g.10gb", 0); err != nil {
		t.Fatal(err)
	}
	busy, err := in.CreateInstance(0, "1g.10gb", 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.lib.SetBusy(0, busy.GIID, true); err != nil {
		t.Fatal(err)
	}

	drv = startDynamic(t, client, d, in)
	if got, want := instancesOn(t, in), []string{"1g.10gb@2", "3g.40gb@4"}; !slices.Equal(got, want) {
		t.Errorf("instances after the restart: %v; want %v (the idle leftover destroyed, the busy one and the claim's kept)", got, want)
	}
	_, res := drv.Published()
	offered := map[string]bool{}
	for _, s := range res.Pools[node].Slices {
		for _, dev := range s.Devices {
			offered[dev.Name] = true
		}
	}
	if offered["gpu-0-mig-1g10gb-19-2"] || offered["gpu-0-mig-2g20gb-14-2"] || offered["gpu-0"] {
		t.Errorf("placements the kept instance overlaps are offered: %v", slices.Sorted(mapsKeys(offered)))
	}
	if !offered["gpu-0-mig-1g10gb-19-0"] || !offered[dyn3gAt4] {
		t.Errorf("free placements are not offered: %v", slices.Sorted(mapsKeys(offered)))
	}

	// Once idle, the next publication destroys it.
	if err := in.lib.SetBusy(0, busy.GIID, false); err != nil {
		t.Fatal(err)
	}
	publishDynamic(t, drv, in)
	if got := instancesOn(t, in); !slices.Equal(got, []string{"3g.40gb@4"}) {
		t.Errorf("instances once the kept one is idle: %v; want only the claim's", got)
	}
}

func mapsKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// The whole GPU is served only with MIG off: on a GPU with MIG on Prepare
// refuses it and changes nothing.
func TestDynamicWholeGPUWithMIGOnRefused(t *testing.T) {
	in := dynamicNode(t)
	claim := allocated("team-a", "c1", "p1", [2]string{"gpu", "gpu-0"})
	client := fakeClient(claim)
	d := newDirs(t)
	drv := startDynamic(t, client, d, in)
	resp := dialKubelet(t, d).prepare(claim)[string(claim.UID)]
	if !strings.Contains(resp.Error, "MIG on") {
		t.Fatalf("Prepare answered %q; want the refusal", resp.Error)
	}
	if len(drv.Prepared()) != 0 || len(instancesOn(t, in)) != 0 {
		t.Errorf("a refused whole GPU left %+v, %v", drv.Prepared(), instancesOn(t, in))
	}
}

// A GPU with MIG off beside one with MIG on is offered whole, without
// counters, and served whole: the node is not broken by it (NVIDIA's
// issue 1092), and the claim's status names the GPU.
func TestDynamicGPUWithMIGOffServedWhole(t *testing.T) {
	lib := simtest.New(t, sim.Config{GPUs: []sim.GPUSpec{
		{Model: "H100-SXM5-80GB", Count: 1},
		{Model: "H100-SXM5-80GB", Count: 1, Initial: &sim.InitialState{MigEnabled: true}},
	}, UUIDSeed: t.Name()})
	in := simInstances{Partitioner: nvmlmig.NewPartitioner(lib), lib: lib}
	claim := allocated("team-a", "c1", "p1", [2]string{"gpu", "gpu-0"})
	client := fakeClient(claim)
	d := newDirs(t)
	drv := startDynamic(t, client, d, in)
	_, res := drv.Published()
	sets, devs := 0, 0
	for _, s := range res.Pools[node].Slices {
		sets += len(s.SharedCounters)
		devs += len(s.Devices)
	}
	if sets != 1 || devs != 27 {
		t.Errorf("published %d counter sets and %d devices; want 1 set (GPU 1's) and 1 + 26 devices", sets, devs)
	}
	dialKubelet(t, d).mustPrepare(t, claim)
	gpus, _ := in.Discover()
	got, err := client.ResourceV1().ResourceClaims("team-a").Get(context.Background(), "c1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Status.Devices) != 1 || got.Status.Devices[0].Data == nil || !strings.Contains(string(got.Status.Devices[0].Data.Raw), gpus[0].UUID) {
		t.Errorf("status.devices %+v; want gpu-0 with UUID %s", got.Status.Devices, gpus[0].UUID)
	}
}

// An agent restarted in static mode unprepares a claim dynamic mode
// prepared, keeping its instance (static mode serves what exists) rather
// than failing the kubelet's Unprepare for good.
func TestDynamicClaimUnpreparedInStaticMode(t *testing.T) {
	in := dynamicNode(t)
	claim := allocated("team-a", "c1", "p1", [2]string{"gpu", dyn3gAt4})
	client := fakeClient(claim)
	d := newDirs(t)
	drv := startDynamic(t, client, d, in)
	dialKubelet(t, d).mustPrepare(t, claim)
	drv.Stop()

	drv = startDriver(t, client, d, Options{})
	publishDynamic(t, drv, in)
	if resp := dialKubelet(t, d).unprepare(claim)[string(claim.UID)]; resp.Error != "" {
		t.Fatalf("Unprepare in static mode: %s", resp.Error)
	}
	if got := instancesOn(t, in); !slices.Equal(got, []string{"3g.40gb@4"}) {
		t.Errorf("instances: %v; want the claim's kept", got)
	}
	if len(drv.Prepared()) != 0 {
		t.Errorf("still prepared: %+v", drv.Prepared())
	}
}

// A create that hangs in the driver (the simulator's hang fault) fails
// Prepare past the call deadline, naming the call, instead of holding
// the driver's lock, and with it every other Prepare and Unprepare, for
// good: the next Prepare on that GPU is answered at once. Once the call
// returns, the instance it made, no claim's, is destroyed, and Prepare
// creates again.
func TestDynamicPrepareOfAHungCreate(t *testing.T) {
	node := dynamicNode(t)
	// The deadlines pass when the test says so: a slow call that returns
	// is never taken for a hung one.
	deadlines := &nvmlcalltest.Deadlines{}
	var timeouts atomic.Int32
	in := agent.NewInstances(node.lib, nvmlcall.Options[int]{Timeout: 2 * time.Minute, After: deadlines.After, OnTimeout: func(string) { timeouts.Add(1) }})
	release := simtest.Hang(t, node.lib, "slow", sim.CallCreateGpuInstance, 0)
	c1 := allocated("team-a", "c1", "p1", [2]string{"gpu", dyn3gAt4})
	c2 := allocated("team-a", "c2", "p2", [2]string{"gpu", dyn1gAt3})
	client := fakeClient(c1, c2)
	d := newDirs(t)
	drv := startDynamic(t, client, d, in)
	k := dialKubelet(t, d)

	answer := make(chan *drapb.NodePrepareResourceResponse, 1)
	go func() { answer <- k.prepare(c1)[string(c1.UID)] }()
	testutil.Eventually(t, "the create to hang", func() bool { return hanging(node.lib, "slow") == 1 })
	// The create is the one call under way: the deadlines passed are
	// its own and those of calls that returned.
	deadlines.Pass()
	resp := <-answer
	if !strings.Contains(resp.Error, "NVML CreateGpuInstance/CreateComputeInstance (create 3g.40gb at 4) has not returned for 2m0s") {
		t.Fatalf("Prepare of the hung create answered %q; want the call named", resp.Error)
	}
	if timeouts.Load() != 1 {
		t.Errorf("%d timeouts counted, want 1", timeouts.Load())
	}
	// The GPU's call has not returned: refused at once, not queued
	// behind it.
	resp = k.prepare(c2)[string(c2.UID)]
	if !strings.Contains(resp.Error, "has not returned") {
		t.Fatalf("Prepare while the create hangs answered %q; want it refused", resp.Error)
	}
	if len(drv.Prepared()) != 0 {
		t.Errorf("prepared: %+v", drv.Prepared())
	}

	// The create returns and makes its instance, which no claim holds:
	// Prepare creates again (the kubelet retries it), and the driver
	// destroys the late instance. The GPUs are read from the simulator
	// itself: Instances' callers make one call at a time.
	release()
	waitFor(t, "c2 prepared", func() bool { return k.prepare(c2)[string(c2.UID)].Error == "" })
	waitFor(t, "the late instance destroyed", func() bool { return slices.Equal(instancesOn(t, node), []string{"1g.10gb@3"}) })
}

// A claim prepared in static mode on an instance of its layout, kept at a
// switch to dynamic mode (a checkpointed claim holds it), is destroyed at
// its Unprepare: in dynamic mode every instance is a claim's, so once the
// claim is gone nothing else would, until the agent's next start.
func TestDynamicUnprepareDestroysAStaticClaimsInstance(t *testing.T) {
	in := dynamicNode(t)
	if _, err := in.CreateInstance(0, "3g.40gb", 4); err != nil {
		t.Fatal(err)
	}
	claim := allocated("team-a", "c1", "p1", [2]string{"gpu", dyn3gAt4})
	client := fakeClient(claim)
	d := newDirs(t)
	drv := startDriver(t, client, d, Options{})
	publishDynamic(t, drv, in)
	dialKubelet(t, d).mustPrepare(t, claim)
	drv.Stop()

	drv = startDynamic(t, client, d, in)
	if got := instancesOn(t, in); !slices.Equal(got, []string{"3g.40gb@4"}) {
		t.Fatalf("instances after the switch to dynamic mode: %v; want the claim's kept", got)
	}
	if resp := dialKubelet(t, d).unprepare(claim)[string(claim.UID)]; resp.Error != "" {
		t.Fatalf("Unprepare: %s", resp.Error)
	}
	if got := instancesOn(t, in); len(got) != 0 {
		t.Errorf("instances after Unprepare: %v; want none (no claim holds it)", got)
	}
	if len(drv.Prepared()) != 0 {
		t.Errorf("still prepared: %+v", drv.Prepared())
	}
}

// InstanceChanges signals each Prepare that made an instance and each
// Unprepare that destroyed one, and nothing else: the node agent reads
// the GPUs again on it, so a signal for nothing would be a reconcile for
// nothing. The steps run in order on one driver.
func TestDynamicSignalsInstanceChanges(t *testing.T) {
	in := dynamicNode(t)
	c1 := allocated("team-a", "c1", "p1", [2]string{"gpu", dyn3gAt4})
	// 1g.10gb at 6 overlaps c1's 3g.40gb at 4: NVML refuses it.
	c2 := allocated("team-a", "c2", "p2", [2]string{"gpu", dyn1gAt6})
	client := fakeClient(c1, c2)
	d := newDirs(t)
	drv := startDynamic(t, client, d, in)
	k := dialKubelet(t, d)
	signalled := func() bool {
		select {
		case <-drv.InstanceChanges():
			return true
		default:
			return false
		}
	}
	signalled() // whatever the start did
	for _, step := range []struct {
		name string
		do   func() string // the kubelet's error, "" for none
		want bool
	}{
		{"Prepare makes an instance", func() string { return k.prepare(c1)[string(c1.UID)].Error }, true},
		{"the kubelet repeats the Prepare", func() string { return k.prepare(c1)[string(c1.UID)].Error }, false},
		{"a Prepare NVML refuses makes nothing", func() string {
			if e := k.prepare(c2)[string(c2.UID)].Error; e == "" {
				return "the overlapping Prepare succeeded"
			}
			return ""
		}, false},
		{"Unprepare destroys the instance", func() string { return k.unprepare(c1)[string(c1.UID)].Error }, true},
		{"an Unprepare of a claim not prepared", func() string { return k.unprepare(c1)[string(c1.UID)].Error }, false},
	} {
		if e := step.do(); e != "" {
			t.Fatalf("%s: %s", step.name, e)
		}
		if got := signalled(); got != step.want {
			t.Errorf("%s: signalled %v, want %v (instances now %v)", step.name, got, step.want, instancesOn(t, in))
		}
	}
}
