package agent

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/nodeagent/podresources/podresourcestest"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
	"github.com/migflex/migflex/internal/nvml/nvmlcall/nvmlcalltest"
	"github.com/migflex/migflex/internal/testsupport/testutil"
)

// The agent under the simulator's faults (docs/MODELS.md, Faults): what
// it does when the driver fails, hangs or the node reboots.

const sevenOnGPU0 = "version: v1\nmig-configs:\n  selected:\n  - devices: [0]\n    mig-enabled: true\n    mig-devices: {\"1g.10gb\": 7}\n"

func intp(i int) *int { return &i }

// armFault arms f on the node's simulator.
func (n *node) armFault(f sim.Fault) {
	n.t.Helper()
	if _, err := n.lib.ArmFault(f); err != nil {
		n.t.Fatal(err)
	}
}

// fault is the node's armed fault named name.
func (n *node) fault(name string) sim.FaultStatus {
	n.t.Helper()
	for _, f := range n.lib.Faults() {
		if f.Fault.Name == name {
			return f
		}
	}
	n.t.Fatalf("no fault %s armed: %+v", name, n.lib.Faults())
	return sim.FaultStatus{}
}

// halfMade lists the GPU instances without a compute instance: made by a
// create that failed half way and left for nobody to serve or destroy.
func (n *node) halfMade() []string {
	var out []string
	for _, g := range n.lib.Snapshot() {
		for _, in := range g.Instances {
			if !in.HasCI {
				out = append(out, in.Profile)
			}
		}
	}
	return out
}

// testCreateFailsHalfway: the fourth of seven creates fails in the
// driver, after its GPU instance was made (the compute instance's create
// fails). The half-made instance is destroyed, the three made before it
// too, the old layout comes back and is served, and the state is failed
// with a reason that names the step, the driver's error and the rollback.
// (Once the driver answers again, the retry applies the layout: see
// testCreateFailsOnceThenRetried; here it is an hour away.)
func testCreateFailsHalfway(t *testing.T, api *apiServer) {
	n := newNode(t, api)
	n.partition(0, "3g.40gb", "3g.40gb")
	n.armFault(sim.Fault{Name: "fourth", Kind: sim.FaultError, Call: sim.CallCreateComputeInstance, GPU: intp(0), Nth: 4, Return: "ERROR_INSUFFICIENT_RESOURCES"})
	n.start(withResync(time.Hour), withRetry(time.Hour)) // no resync, no retry
	n.annotate(nodeinfo.AnnotationMigConfig, sevenOnGPU0)

	obj := n.waitState(nodeinfo.StateFailed)
	reason := obj.Annotations[nodeinfo.AnnotationReason]
	for _, want := range []string{"GPU 0", "create 1g.10gb", "ERROR_INSUFFICIENT_RESOURCES", "rolled back, the previous layout is back"} {
		if !strings.Contains(reason, want) {
			t.Errorf("reason %q lacks %q", reason, want)
		}
	}
	n.waitEvent(corev1.EventTypeWarning, ReasonFailed, "GPU 0", "ERROR_INSUFFICIENT_RESOURCES")
	waitLayout(t, n, []string{"GPU 0 mig=true 3g.40gb@0 3g.40gb@4", "GPU 1 mig=false"})
	if hm := n.halfMade(); len(hm) > 0 {
		t.Errorf("GPU instances left without a compute instance: %v", hm)
	}
	n.waitServed(map[string]int{resource3g: 2, string(resourcename.GPU): 1})
	if f := n.fault("fourth"); f.Fired != 1 {
		t.Errorf("the fault fired %d times, want 1", f.Fired)
	}
}

// testCreateFailsOnceThenRetried: a driver error that does not recur
// (the fault fires once) fails the apply and holds the GPU; once the
// hold's backoff is over the GPU is tried again, without a document change,
// a resync or a restart, and the layout is applied.
func testCreateFailsOnceThenRetried(t *testing.T, api *apiServer) {
	n := newNode(t, api)
	n.partition(0, "3g.40gb", "3g.40gb")
	n.armFault(sim.Fault{Name: "fifth", Kind: sim.FaultError, Call: sim.CallCreateGpuInstance, GPU: intp(0), Nth: 5, Return: "ERROR_UNKNOWN"})
	n.start(withResync(time.Hour)) // no resync: the retry is the hold's
	n.annotate(nodeinfo.AnnotationMigConfig, sevenOnGPU0)
	n.waitEvent(corev1.EventTypeWarning, ReasonFailed, "GPU 0", "create 1g.10gb", "ERROR_UNKNOWN", "rolled back")
	if f := n.fault("fifth"); f.Fired != 1 || f.Calls != 5 {
		t.Errorf("fault %+v, want fired once, at the 5th create", f)
	}
	n.waitState(nodeinfo.StateSuccess)
	waitLayout(t, n, []string{"GPU 0 mig=true 1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6", "GPU 1 mig=false"})
	n.waitServed(map[string]int{resource1g: 7, resource3g: 0, string(resourcename.GPU): 1})
	if hm := n.halfMade(); len(hm) > 0 {
		t.Errorf("GPU instances left without a compute instance: %v", hm)
	}
	n.waitEvent(corev1.EventTypeNormal, ReasonApplied, "GPU 0", "create 1g.10gb")
}

// testRetryWaitsForPods: the retry after a failure goes through the busy
// check like any change: a pod that took the GPU meanwhile makes it wait,
// and the GPU is changed once the pod is gone.
func testRetryWaitsForPods(t *testing.T, api *apiServer) {
	n := newNode(t, api)
	// The first create on GPU 1 fails; its rollback (MIG off again) hangs
	// until the test has a pod take the GPU.
	n.armFault(sim.Fault{Name: "once", Kind: sim.FaultError, Call: sim.CallCreateGpuInstance, GPU: intp(1), Return: "ERROR_UNKNOWN"})
	n.armFault(sim.Fault{Name: "rollback", Kind: sim.FaultHang, Call: sim.CallSetMigMode, GPU: intp(1), Nth: 2, Duration: sim.Duration(sim.MaxHang)})
	r := n.start(withResync(time.Hour))
	n.annotate(nodeinfo.AnnotationMigConfig, sevenOnGPU1)
	n.waitHanging("rollback")
	gpu1 := n.discover()[1].UUID
	n.podres.Set(podresourcestest.Device{Namespace: "ml", Pod: "whole", Container: "main", Resource: string(resourcename.GPU), IDs: []string{gpu1}})
	if _, err := n.lib.ClearFaults("rollback"); err != nil {
		t.Fatal(err)
	}
	n.waitEvent(corev1.EventTypeWarning, ReasonFailed, "GPU 1", "ERROR_UNKNOWN", "rolled back")
	n.waitNode("the retry waiting for the pod", func(o *corev1.Node) bool {
		return o.Labels[nodeinfo.LabelMigConfigState] == nodeinfo.StatePending && strings.Contains(o.Annotations[nodeinfo.AnnotationReason], "ml/whole")
	})
	pending := r.counter("migflex_agent_reconciles_total", "result", resultPending)
	waitCounter(t, r, "migflex_agent_reconciles_total", "result", resultPending, pending+3)
	waitLayout(t, n, []string{"GPU 0 mig=false", "GPU 1 mig=false"})

	n.podres.Set()
	n.waitState(nodeinfo.StateSuccess)
	waitLayout(t, n, []string{"GPU 0 mig=false", "GPU 1 mig=true 1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6"})
}

// testFailingGPUBacksOff: a driver error on every create. The GPU is
// tried again and again, each retry after a longer wait (reconciles in
// between find it held), and since each fails the same way and the
// rollback leaves the GPU as it was, the Node is not written and no Event
// is recorded after the first failure.
func testFailingGPUBacksOff(t *testing.T, api *apiServer) {
	n := newNode(t, api)
	n.armFault(sim.Fault{Name: "always", Kind: sim.FaultError, Call: sim.CallCreateGpuInstance, GPU: intp(1), Always: true, Return: "ERROR_UNKNOWN"})
	counts := &requestCounter{counts: map[string]int{}}
	r := n.start(withResync(time.Hour), withClient(counts.client(t, api)))
	n.annotate(nodeinfo.AnnotationMigConfig, sevenOnGPU1)
	n.waitEvent(corev1.EventTypeWarning, ReasonFailed, "GPU 1", "create 1g.10gb", "ERROR_UNKNOWN", "rolled back")
	obj := n.waitState(nodeinfo.StateFailed)
	reason := obj.Annotations[nodeinfo.AnnotationReason]

	// The first report of the failure is in once the next reconcile is
	// counted (reports follow their reconcile in one loop).
	waitCounter(t, r, "migflex_agent_reconciles_total", "result", resultFailed, 2)
	patches, events := counts.get("PATCH nodes"), counts.get("POST events")
	calls := n.fault("always").Calls
	// Retries: each one create, failing.
	testutil.Eventually(t, "three more retries", func() bool { return n.fault("always").Calls >= calls+3 })
	// Between them the GPU is held: a reconcile for another cause (a
	// user's label) does not try it again.
	held := r.counter("migflex_agent_reconciles_total", "result", resultHeld)
	deadline := time.Now().Add(hangTimeout)
	for i := 0; r.counter("migflex_agent_reconciles_total", "result", resultHeld) == held; i++ {
		if time.Now().After(deadline) {
			t.Fatal("no reconcile found the GPU held")
		}
		n.label("example.com/poke", fmt.Sprint(i))
		time.Sleep(pollInterval) // polling a counter nothing signals
	}
	waitCounter(t, r, "migflex_agent_reconciles_total", "result", resultFailed, r.counter("migflex_agent_reconciles_total", "result", resultFailed)+1)
	if got := counts.get("PATCH nodes") - patches; got != 0 {
		t.Errorf("%d Node writes while the same failure recurs, want 0", got)
	}
	if got := counts.get("POST events") - events; got != 0 {
		t.Errorf("%d Events while the same failure recurs, want 0: %s", got, describeEvents(n.events()))
	}
	if got := n.get().Annotations[nodeinfo.AnnotationReason]; got != reason {
		t.Errorf("reason changed to %q, was %q", got, reason)
	}
	waitLayout(t, n, []string{"GPU 0 mig=false", "GPU 1 mig=false"})

	// The driver recovers: the next retry applies the layout.
	if _, err := n.lib.ClearFaults("always"); err != nil {
		t.Fatal(err)
	}
	n.waitState(nodeinfo.StateSuccess)
	waitLayout(t, n, []string{"GPU 0 mig=false", "GPU 1 mig=true 1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6"})
}

const sevenOnGPU1 = "version: v1\nmig-configs:\n  selected:\n  - devices: [1]\n    mig-enabled: true\n    mig-devices: {\"1g.10gb\": 7}\n"

// testCreateHangs: a create that does not return. Past
// --nvml-call-timeout (the test says when it passes) the state is failed
// with a reason naming the call, with a Warning Event and the timeout
// counted; GPU 0 is not touched while the call runs (resyncs leave it
// alone and write nothing), and the rest of the agent goes on: what GPU 0
// has is served again, GPU 1 stays served and a pod taking it shows in the
// layout. When the call returns, the layout is completed.
func testCreateHangs(t *testing.T, api *apiServer) {
	n := newNode(t, api)
	n.partition(0, "3g.40gb", "3g.40gb")
	n.armFault(sim.Fault{Name: "stuck", Kind: sim.FaultHang, Call: sim.CallCreateGpuInstance, GPU: intp(0), Nth: 2, Duration: sim.Duration(sim.MaxHang)})
	counts := &requestCounter{counts: map[string]int{}}
	deadlines := &nvmlcalltest.Deadlines{}
	r := n.start(withResync(100*time.Millisecond), withCallDeadlines(deadlines), withInUseInterval(20*time.Millisecond), withClient(counts.client(t, api)))
	n.annotate(nodeinfo.AnnotationMigConfig, sevenOnGPU0)

	n.waitHanging("stuck")
	// The loop waits in the create, the only GPU call under way: the
	// deadlines passed are its own and those of calls that returned.
	obj := n.waitNode("state failed", func(o *corev1.Node) bool {
		deadlines.Pass()
		return o.Labels[nodeinfo.LabelMigConfigState] == nodeinfo.StateFailed
	})
	reason := obj.Annotations[nodeinfo.AnnotationReason]
	for _, want := range []string{"GPU 0: NVML CreateGpuInstance/CreateComputeInstance (create 1g.10gb at 1) has not returned for 2m0s", "not touched until it does"} {
		if !strings.Contains(reason, want) {
			t.Errorf("reason %q lacks %q", reason, want)
		}
	}
	n.waitEvent(corev1.EventTypeWarning, ReasonFailed, "GPU 0", "CreateGpuInstance", "has not returned for 2m0s")
	if got := r.counter("migflex_agent_nvml_call_timeouts_total", "call", callCreate); got != 1 {
		t.Errorf("migflex_agent_nvml_call_timeouts_total = %v, want 1", got)
	}
	// One create made, one hanging: served as it is, GPU 1 too.
	waitLayout(t, n, []string{"GPU 0 mig=true 1g.10gb@0", "GPU 1 mig=false"})
	n.waitServed(map[string]int{resource1g: 1, string(resourcename.GPU): 1})
	// The in-use poll goes on: a pod takes GPU 1.
	gpu1 := n.discover()[1].UUID
	n.podres.Set(podresourcestest.Device{Namespace: "ml", Pod: "whole", Container: "main", Resource: string(resourcename.GPU), IDs: []string{gpu1}})
	n.waitNode("GPU 1 in use in the layout", func(o *corev1.Node) bool {
		l, err := nodeinfo.ParseLayout(o.Annotations[nodeinfo.AnnotationLayout])
		return err == nil && len(l) == 2 && slices.Equal(l[1].UsedBy, []string{"ml/whole"})
	})

	// Resyncs leave GPU 0 alone while the call runs, and have nothing new
	// to report.
	quietWhileHanging(t, n, r, counts, resultHeld, 2)

	// The driver answers at last.
	if _, err := n.lib.ClearFaults("stuck"); err != nil {
		t.Fatal(err)
	}
	n.waitState(nodeinfo.StateSuccess)
	waitLayout(t, n, []string{"GPU 0 mig=true 1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6", "GPU 1 mig=false"})
	n.waitServed(map[string]int{resource1g: 7, resource3g: 0, string(resourcename.GPU): 1})
}

// quietWhileHanging waits for five more reconciles counted with result
// while fault "stuck" hangs, and checks that they made no call at its call
// site (calls in all, one hanging) and wrote neither the Node nor an
// Event. A reconcile is counted before its report is sent, so the reports
// of the first one counted are inside the period.
func quietWhileHanging(t *testing.T, n *node, r *agentRun, counts *requestCounter, result string, calls int) {
	t.Helper()
	before := r.counter("migflex_agent_reconciles_total", "result", result)
	patches, events := counts.get("PATCH nodes"), counts.get("POST events")
	waitCounter(t, r, "migflex_agent_reconciles_total", "result", result, before+5)
	if f := n.fault("stuck"); f.Calls != calls || f.Hanging != 1 {
		t.Errorf("the hanging call's site called again: %+v, want %d calls, one hanging", f, calls)
	}
	if got := counts.get("PATCH nodes") - patches; got != 0 {
		t.Errorf("%d Node writes while the call hangs, want 0", got)
	}
	if got := counts.get("POST events") - events; got != 0 {
		t.Errorf("%d Events while the call hangs, want 0", got)
	}
}

// testDiscoveryHangs: reading the GPUs hangs (a handle lookup in a
// resync). Past --nvml-call-timeout the state is failed saying so, the
// devices served before stay served, the in-use poll goes on, and the
// reconciles meanwhile neither read the GPUs again nor write the Node;
// once the reading returns, the state is success again.
func testDiscoveryHangs(t *testing.T, api *apiServer) {
	n := newNode(t, api, withAnnotation(nodeinfo.AnnotationMigConfig, mixedLayout))
	counts := &requestCounter{counts: map[string]int{}}
	deadlines := &nvmlcalltest.Deadlines{}
	r := n.start(withResync(100*time.Millisecond), withCallDeadlines(deadlines), withInUseInterval(20*time.Millisecond), withClient(counts.client(t, api)))
	n.waitState(nodeinfo.StateSuccess)
	served := map[string]int{resource2g: 2, resource3g: 1, resource7g: 1}
	n.waitServed(served)

	n.armFault(sim.Fault{Name: "stuck", Kind: sim.FaultHang, Call: sim.CallGetHandle, GPU: intp(1), Duration: sim.Duration(sim.MaxHang)})
	n.waitHanging("stuck")
	// The loop waits in the reading, the only NVML call under way.
	obj := n.waitNode("state failed", func(o *corev1.Node) bool {
		deadlines.Pass()
		return o.Labels[nodeinfo.LabelMigConfigState] == nodeinfo.StateFailed
	})
	if reason := obj.Annotations[nodeinfo.AnnotationReason]; !strings.Contains(reason, "NVML has not returned from reading the GPUs for 2m0s") {
		t.Errorf("reason %q does not say the reading hangs", reason)
	}
	if got := r.counter("migflex_agent_nvml_call_timeouts_total", "call", callDiscover); got != 1 {
		t.Errorf("migflex_agent_nvml_call_timeouts_total{call=discover} = %v, want 1", got)
	}
	n.waitServed(served)
	victim := n.discover()[0].Instances[0].UUID
	n.podres.Set(podresourcestest.Device{Namespace: "ml", Pod: "small", Container: "main", Resource: resource2g, IDs: []string{victim}})
	n.waitNode("the pod in the layout", func(o *corev1.Node) bool {
		l, err := nodeinfo.ParseLayout(o.Annotations[nodeinfo.AnnotationLayout])
		return err == nil && len(l) == 2 && len(l[0].Instances) == 3 && slices.Equal(l[0].Instances[0].UsedBy, []string{"ml/small"})
	})

	// The reconciles neither read the GPUs again nor report anything new.
	quietWhileHanging(t, n, r, counts, resultFailed, 1)

	if _, err := n.lib.ClearFaults("stuck"); err != nil {
		t.Fatal(err)
	}
	n.waitState(nodeinfo.StateSuccess)
	n.waitServed(served)
}

// testStopDuringHang: an agent stopped while a create hangs stops without
// waiting for the create (or for its deadline, which never passes here).
func testStopDuringHang(t *testing.T, api *apiServer) {
	n := newNode(t, api)
	n.partition(0, "3g.40gb", "3g.40gb")
	n.armFault(sim.Fault{Name: "stuck", Kind: sim.FaultHang, Call: sim.CallCreateGpuInstance, GPU: intp(0), Duration: sim.Duration(sim.MaxHang)})
	r := n.start(withCallDeadlines(&nvmlcalltest.Deadlines{}), withShutdownGrace(-1))
	n.annotate(nodeinfo.AnnotationMigConfig, sevenOnGPU0)
	n.waitHanging("stuck")
	if err := r.tryStop(); err != nil {
		t.Fatalf("stopping while a create hangs: %v", err)
	}
	if f := n.fault("stuck"); f.Hanging != 1 {
		t.Errorf("the create no longer hangs: %+v", f)
	}
}

// waitHanging waits until the fault name holds a call.
func (n *node) waitHanging(name string) {
	n.t.Helper()
	testutil.Eventually(n.t, "the call to hang", func() bool { return n.fault(name).Hanging == 1 })
}

// testRebootRecreatesLayout: the node reboots (every instance gone, MIG
// modes kept, as on real GPUs); the next reconcile (a resync: nothing
// else tells the agent) recreates the layout the annotation asks for and
// serves it, with new MIG UUIDs.
func testRebootRecreatesLayout(t *testing.T, api *apiServer) {
	n := newNode(t, api, withAnnotation(nodeinfo.AnnotationMigConfig, mixedLayout))
	n.start(withResync(200 * time.Millisecond))
	n.waitState(nodeinfo.StateSuccess)
	want := []string{"GPU 0 mig=true 2g.20gb@0 2g.20gb@2 3g.40gb@4", "GPU 1 mig=true 7g.80gb@0"}
	waitLayout(t, n, want)
	n.waitServed(map[string]int{resource2g: 2, resource3g: 1, resource7g: 1})
	old := map[string]bool{}
	for _, g := range n.discover() {
		for _, in := range g.Instances {
			old[in.UUID] = true
		}
	}

	n.armFault(sim.Fault{Name: "reboot", Kind: sim.FaultReboot})
	if f := n.fault("reboot"); f.Fired != 1 {
		t.Fatalf("the reboot did not fire: %+v", f)
	}
	waitLayout(t, n, want)
	n.waitServed(map[string]int{resource2g: 2, resource3g: 1, resource7g: 1})
	n.waitState(nodeinfo.StateSuccess)
	for _, g := range n.discover() {
		for _, in := range g.Instances {
			if old[in.UUID] {
				t.Errorf("GPU %d %s kept its UUID %s across the reboot", g.Index, in.Profile, in.UUID)
			}
		}
	}
	n.waitEvent(corev1.EventTypeNormal, ReasonApplied, "GPU 0", "GPU 1")
}

// testGPULostMidChange: GPU 0 falls off the bus at the first GPU-instance
// create of a change of its layout, after the change destroyed its
// instances; GPU 1 holds instances the change does not touch. The node
// says failed, naming the lost GPU, and GPU 1's instances are the same
// ones; once the GPU is back (the fault cleared, as a reset or reboot
// would bring it back) the retry applies the change.
func testGPULostMidChange(t *testing.T, api *apiServer) {
	n := newNode(t, api)
	n.partition(0, "3g.40gb", "3g.40gb")
	n.partition(1, "3g.40gb", "3g.40gb")
	gpu1 := func() []sim.InstanceSnapshot { return n.lib.Snapshot()[1].Instances }
	before := gpu1()
	n.armFault(sim.Fault{Name: "lost", Kind: sim.FaultLost, Call: sim.CallCreateGpuInstance, GPU: intp(0)})
	n.start(withResync(time.Hour), withRetry(200*time.Millisecond))
	n.annotate(nodeinfo.AnnotationMigConfig, sevenOnGPU0)

	obj := n.waitState(nodeinfo.StateFailed)
	if reason := obj.Annotations[nodeinfo.AnnotationReason]; !strings.Contains(reason, "ERROR_GPU_IS_LOST") {
		t.Errorf("reason %q does not say the GPU is lost", reason)
	}
	if f := n.fault("lost"); f.Fired != 1 {
		t.Fatalf("the GPU was not lost: %+v", f)
	}
	if diff := cmp.Diff(before, gpu1()); diff != "" {
		t.Errorf("GPU 1's instances changed while GPU 0 was lost (-before +after):\n%s", diff)
	}
	if _, err := n.lib.ClearFaults("lost"); err != nil {
		t.Fatal(err)
	}
	n.waitState(nodeinfo.StateSuccess)
	waitLayout(t, n, []string{"GPU 0 mig=true 1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6", "GPU 1 mig=true 3g.40gb@0 3g.40gb@4"})
	if diff := cmp.Diff(before, gpu1()); diff != "" {
		t.Errorf("GPU 1's instances changed (-before +after):\n%s", diff)
	}
}
