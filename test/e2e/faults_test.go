//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/test/e2e/framework"
)

// The fault suite (make test-faults, docs/RELIABILITY.md): each test
// breaks one thing at a stated moment, lets it heal, and then asserts the
// invariants every fault shares (framework.Invariants): no MIG instance
// under a running pod touched, nothing leaked, the node converged to the
// layout its mig.config asks for. They break the cluster's own processes,
// so they run only when asked for: MIGFLEX_E2E_FAULTS=1, which make
// test-faults sets.

// envFaults turns the fault tests on.
const envFaults = "MIGFLEX_E2E_FAULTS"

// faultTest skips t unless the fault tests were asked for, and installs
// migflex.
func faultTest(t *testing.T) {
	t.Helper()
	if os.Getenv(envFaults) != "1" {
		t.Skipf("a fault test: it stops and kills the cluster's processes; run it with %s=1 (make test-faults)", envFaults)
	}
	migflex(t)
}

// armFault arms a fault on the node's simulator (`device-plugin sim fault
// ARGS --name name`) and clears it when the test ends, whatever fails: the
// next test must find the node without it. A fault cleared already is no
// error then.
func (n simNode) armFault(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := n.Sim(t.Context(), append(append([]string{"fault"}, args...), "--name", name)...); err != nil {
		t.Fatal(err)
	} else {
		t.Log(out)
	}
	t.Cleanup(func() {
		if out, err := n.Sim(context.Background(), "clear-faults", "--name", name); err != nil {
			t.Logf("clearing fault %s at the end: %v", name, err)
		} else {
			t.Log(out)
		}
	})
}

// holdCreates arms a hang on the node's simulator's next GPU-instance
// create, named name, and returns a func that waits until a create hangs
// in it: the agent has then destroyed what the change destroys on that
// GPU and not yet created anything.
func (n simNode) holdCreates(t *testing.T, name string) func() {
	t.Helper()
	n.armFault(t, name, "--kind", "hang", "--call", "createGpuInstance", "--duration", "10m")
	return func() {
		t.Helper()
		f, err := n.WaitForSimFault(t.Context(), name, true)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("node %s: the agent's create hangs in fault %s (%d calls, %d hanging)", n.NodeName, name, f.Calls, f.Hanging)
	}
}

// release clears the node's simulator fault name, ending its hang.
func (n simNode) release(t *testing.T, name string) {
	t.Helper()
	if out, err := n.Sim(context.WithoutCancel(t.Context()), "clear-faults", "--name", name); err != nil {
		t.Fatal(err)
	} else {
		t.Log(out)
	}
}

// holder runs a pod on the node holding one device of profile until the
// test ends, and returns the device.
func (n simNode) holder(t *testing.T, ns, name, profile string) string {
	t.Helper()
	res := n.runHolder(t, ns, name, profile)
	held, err := n.Local().KubeletPodDevices(t.Context(), ns, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(held[res]) != 1 {
		t.Fatalf("the kubelet of %s says pod %s/%s holds %v, want one %s", n.NodeName, ns, name, held, res)
	}
	return held[res][0]
}

// runHolder runs a pod on the node asking for one device of profile (a
// claim, through the extended resource, on a DRA node) until the test
// ends, waits until it runs, and returns the resource it asked for. The
// pod opts out of the fallback webhook: while an earlier test's pod, its
// namespace being deleted, still holds the node's only device of the
// profile, the webhook would rightly rewrite the request to another
// profile, and the test needs the one it names.
func (n simNode) runHolder(t *testing.T, ns, name, profile string) string {
	t.Helper()
	res := "nvidia.com/mig-" + profile
	pod := n.gpuPod(ns, name, res, 1, "sleep", "3600")
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[labelOptOut] = "disabled"
	cluster.CreatePod(t, pod)
	if _, err := cluster.WaitForPodPhase(t.Context(), ns, name, corev1.PodRunning); err != nil {
		t.Fatal(err)
	}
	return res
}

// instancesOf is the UUIDs of every MIG device of the node's simulated
// GPUs now.
func (n simNode) instancesOf(t *testing.T) map[string]framework.SimInstance {
	t.Helper()
	state, err := n.Local().SimState()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]framework.SimInstance{}
	for _, g := range state {
		for u, in := range g.Devices {
			out[u] = in
		}
	}
	return out
}

// heldNode is a node set up for a fault (setUpHeld): its layout in place,
// a pod holding one of its devices, and the invariants taken then.
type heldNode struct {
	simNode
	// ns is the test's namespace, where the holder runs.
	ns string
	// device is the holder's MIG device on a device-plugin node; on a DRA
	// node, whose kubelet says nothing of claims, the invariants name it.
	device string
	// inv is the invariants' snapshot before the fault.
	inv *framework.Invariants
	// before is every MIG device of the node's GPUs at the snapshot.
	before map[string]framework.SimInstance
}

// setUpHeld is every fault test's start: it skips t unless the fault
// tests were asked for, installs migflex, applies layout on n, runs pod
// "holder" on a device of profile there (none with ""), and takes the
// invariants once the agent names the holder.
func setUpHeld(t *testing.T, n simNode, layout gpuLayouts, profile string) heldNode {
	t.Helper()
	faultTest(t)
	n.applyLayouts(t, layout)
	h := heldNode{simNode: n, ns: cluster.Namespace(t)}
	var holders []string
	switch {
	case profile == "":
	case n.dra:
		n.runHolder(t, h.ns, "holder", profile)
		holders = append(holders, h.ns+"/holder")
	default:
		h.device = n.holder(t, h.ns, "holder", profile)
		holders = append(holders, h.ns+"/holder")
	}
	h.inv = n.InvariantsWith(t, holders...)
	h.before = n.instancesOf(t)
	return h
}

// waitFailed waits up to within until the node's state is failed with a
// reason that contains says (any reason with ""), and returns the reason.
func (h heldNode) waitFailed(t *testing.T, says string, within time.Duration) string {
	t.Helper()
	node, err := h.WaitForNode(t.Context(), fmt.Sprintf("state failed, the reason saying %q", says), within, func(node *corev1.Node) error {
		if s, r := node.Labels[labelState], node.Annotations[annotationReason]; s != "failed" || r == "" || !strings.Contains(r, says) {
			return fmt.Errorf("state %q, reason %q", s, r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return node.Annotations[annotationReason]
}

// checkDeviceKept fails t unless the holder's device is the instance it
// was at the snapshot; while says when, for the message.
func (h heldNode) checkDeviceKept(t *testing.T, while string) {
	t.Helper()
	if now, ok := h.instancesOf(t)[h.device]; !ok || now != h.before[h.device] {
		t.Fatalf("the pod's device %s %s: %+v (there %v), was %+v", h.device, while, now, ok, h.before[h.device])
	}
}

// The change the mid-change fault tests break, on node mf-b200: from
// changeFrom, a pod on the 1g.23gb, to changeTo, whose 3g.90gb needs the
// slices of both 2g.45gb.
var (
	changeFrom = gpuLayouts{0: {"1g.23gb", "2g.45gb", "2g.45gb"}}
	changeTo   = gpuLayouts{0: {"1g.23gb", "3g.90gb"}}
)

// setUpMidChange sets node mf-b200 up with changeFrom and a pod on its
// 1g.23gb (setUpHeld), asks for changeTo with the first create held by a
// hang fault named hold (release ends it), and returns once a create
// hangs in it: the agent has destroyed the two 2g.45gb and created
// nothing.
func setUpMidChange(t *testing.T, hold string) heldNode {
	t.Helper()
	h := setUpHeld(t, b200Node(t), changeFrom, "1g.23gb")
	hung := h.holdCreates(t, hold)
	h.setMigConfig(t, annotationMigConfig, migConfigPerGPU(changeTo))
	hung()
	return h
}

// TestFaultXidStormUnderPods (fault 10): a storm of Xid 48 (a double-bit
// ECC error: a device fault, not an application's) on node mf-b200's GPU,
// 300 events 20 ms apart on the whole GPU, while a pod runs on one of its
// MIG devices. The agent's health watcher marks every MIG device of the
// GPU Unhealthy (the layout annotation says so, and the kubelet drops
// them from the Node's allocatable, so no new pod lands there) and changes
// nothing else: the layout stays, the pod runs on on its instance, the
// agent keeps running. A quiet period (the local overlay's 30 s) after the
// last Xid the devices are healthy again and the node converges.
func TestFaultXidStormUnderPods(t *testing.T) {
	n := setUpHeld(t, b200Node(t), changeFrom, "1g.23gb")
	ctx := t.Context()
	agent, err := n.AgentPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	layout := func(node *corev1.Node) map[string]string {
		out := map[string]string{}
		l, err := framework.NodeLayout(node)
		if err != nil {
			return out
		}
		for _, g := range l {
			for _, in := range g.Instances {
				out[in.UUID] = in.Profile
			}
		}
		return out
	}
	node, err := n.Node(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := layout(node)

	const events = 300
	n.armFault(t, "storm", "--kind", "xidStorm", "--gpu", "0", "--xid", "48", "--events", strconv.Itoa(events), "--interval", "20ms")
	node, err = n.WaitForNode(ctx, "every MIG device of the GPU unhealthy, none allocatable, the layout unchanged", timeout, func(node *corev1.Node) error {
		l, err := framework.NodeLayout(node)
		if err != nil {
			return err
		}
		for _, g := range l {
			for _, in := range g.Instances {
				if in.Health != "Unhealthy" {
					return fmt.Errorf("MIG device %s (%s) is %q", in.UUID, in.Profile, in.Health)
				}
			}
		}
		if diff := cmp.Diff(before, layout(node)); diff != "" {
			return fmt.Errorf("the layout changed under the storm (-before +now):\n%s", diff)
		}
		if s := node.Labels[labelState]; s != "success" {
			return fmt.Errorf("state %q, reason %q", s, node.Annotations[annotationReason])
		}
		for r, q := range gpuResources(node.Status.Allocatable) {
			if q != 0 {
				return fmt.Errorf("%s allocatable %d", r, q)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("under the storm: every MIG device unhealthy, allocatable %v, capacity %v", gpuResources(node.Status.Allocatable), gpuResources(node.Status.Capacity))
	err = framework.WaitFor(ctx, "the storm over", timeout, func(context.Context) (bool, error) {
		fs, err := n.Local().SimFaults()
		return err == nil && fs["storm"].XidsSent == events, err
	})
	if err != nil {
		t.Fatal(err)
	}
	n.inv.Check(t, changeFrom.sorted())
	after, err := n.AgentPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.UID != agent.UID || restarts(after) != restarts(agent) {
		t.Errorf("agent pod %s (%d restarts) is now %s (%d restarts): the storm took the agent down", agent.Name, restarts(agent), after.Name, restarts(after))
	}
}

// TestFaultGPULostDuringReshape (fault 10): node 1's GPU 0 falls off the
// bus (the simulator's lost fault: Xid 79, then ERROR_GPU_IS_LOST on every
// call on it) at the first GPU-instance create of a change of its layout,
// after the change destroyed what it had to, while a pod runs on GPU 1.
// The node says failed, with a reason; the pod's instance on GPU 1 is
// untouched. Once the GPU is back (the fault cleared, as the reset or
// reboot that brings a real one back) the agent applies the change again
// and the node converges.
func TestFaultGPULostDuringReshape(t *testing.T) {
	n := setUpHeld(t, dpNode(), gpuLayouts{0: {"2g.20gb", "2g.20gb", "2g.20gb"}, 1: {"3g.40gb", "3g.40gb"}}, "3g.40gb")
	n.armFault(t, "lost", "--kind", "lost", "--gpu", "0", "--call", "createGpuInstance")
	want := gpuLayouts{0: all1g, 1: {"3g.40gb", "3g.40gb"}}
	n.setMigConfig(t, annotationMigConfig, migConfigPerGPU(want))
	if _, err := n.WaitForSimFault(t.Context(), "lost", false); err != nil {
		t.Fatal(err)
	}
	reason := n.waitFailed(t, "", timeout)
	t.Logf("GPU 0 lost mid-change: state failed, reason %q", reason)
	if !strings.Contains(strings.ToLower(reason), "lost") {
		t.Errorf("the reason %q does not say the GPU is lost", reason)
	}
	n.checkDeviceKept(t, "on GPU 1 while GPU 0 is lost")
	n.release(t, "lost")
	n.inv.Check(t, want.sorted())
}

// TestFaultCheckpointCorrupted (fault 9): the DRA plugin's checkpoint on
// node mf-dra is truncated to half (as a failing disk or a careless tool
// leaves it; the agent's own writes are atomic) while a pod holds a
// claim, and the agent is restarted (SIGKILL; the kubelet starts it
// again). The new agent restores the checkpoint from its copy
// (checkpoint-copy.json, written before it on every save), keeps the
// unreadable file as checkpoint.json.corrupt, and serves on: the pod and
// its instance untouched, its claim's entry and CDI spec kept, the node
// converged.
func TestFaultCheckpointCorrupted(t *testing.T) {
	n := setUpHeld(t, draNode(t), draLayout, "3g.40gb")
	ctx := t.Context()
	dir := n.Local().DRAPluginDir()
	path := filepath.Join(dir, "checkpoint.json")
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if cp, err := os.ReadFile(filepath.Join(dir, "checkpoint-copy.json")); err != nil || string(cp) != string(good) {
		t.Fatalf("the checkpoint's copy (%v) is not the checkpoint:\n%s\nwant\n%s", err, cp, good)
	}
	bad := good[:len(good)/2]
	if err := os.WriteFile(path, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	who, err := n.KillAgent(ctx, syscall.SIGKILL)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("checkpoint %s truncated from %d to %d bytes; SIGKILLed the agent (%s)", path, len(good), len(bad), who)
	n.inv.Check(t, draLayout.sorted())
	if b, err := os.ReadFile(filepath.Join(dir, "checkpoint.json.corrupt")); err != nil || string(b) != string(bad) {
		t.Errorf("the unreadable checkpoint kept aside: %q (%v), want the truncated file", b, err)
	}
}

// TestFaultNodeReboot (fault 3): node mf-b200 reboots with a layout in
// place: its kubelet stops, every container (the agent's included) is
// SIGKILLed, containerd stops, the simulator's `sim reboot` drops every MIG
// instance (MIG mode kept, as real GPUs come back), and containerd and the
// kubelet start again. The agent comes back, recreates the layout the
// mig.config still asks for, on new instances, and serves it: a new pod
// gets one of them.
func TestFaultNodeReboot(t *testing.T) {
	want := gpuLayouts{0: {"3g.90gb", "2g.45gb", "1g.23gb"}}
	n := setUpHeld(t, b200Node(t), want, "")
	ctx := t.Context()

	reboot, err := n.SimCommand(ctx, "reboot")
	if err != nil {
		t.Fatal(err)
	}
	out, err := n.Reboot(ctx, reboot...)
	t.Log(strings.TrimSpace(out))
	if err != nil {
		t.Fatal(err)
	}
	n.inv.Check(t, want.sorted())

	// Recreated, not kept: a real driver mints new UUIDs.
	after := n.instancesOf(t)
	for u := range n.before {
		if _, ok := after[u]; ok {
			t.Errorf("MIG device %s survived the reboot: the simulator's reboot did not drop it", u)
		}
	}
	node, err := n.Node(ctx)
	if err != nil {
		t.Fatal(err)
	}
	layout, err := framework.NodeLayout(node)
	if err != nil {
		t.Fatal(err)
	}
	env := runEnvPod(t, n.gpuPod(n.ns, "after-reboot", "nvidia.com/mig-1g.23gb", 1, "env"))
	checkAllocateEnv(t, env, layout, "1g.23gb", 1)
}

// TestFaultAgentKilledMidChange (fault 5): the agent of node mf-b200 is
// SIGKILLed between a destroy and the next create of one GPU's change: a
// pod holds the GPU's 1g.23gb, the mig.config asks for 1g.23gb and
// 3g.90gb instead of 1g.23gb and two 2g.45gb, and the simulator holds the
// first create (a hang fault) until the agent has destroyed what the
// 3g.90gb needs. The killed agent's container restarts, finds the GPU
// half changed and finishes the change; the pod's instance is untouched.
func TestFaultAgentKilledMidChange(t *testing.T) {
	n := setUpMidChange(t, "hold")
	// The moment: something destroyed, nothing created, the pod's device
	// there.
	now := n.instancesOf(t)
	if len(now) >= len(n.before) {
		t.Fatalf("the create hangs but nothing was destroyed: the simulator has %v, had %v", now, n.before)
	}
	if _, ok := now[n.device]; !ok {
		t.Fatalf("the pod's device %s is gone before the kill", n.device)
	}
	who, err := n.KillAgent(t.Context(), syscall.SIGKILL)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGKILLed the agent (%s) with %d of %d MIG devices left", who, len(now), len(n.before))
	n.inv.Check(t, changeTo.sorted())
}

// TestFaultContainerdRestart (fault 2): node mf-b200's containerd restarts
// while a pod runs on one of its MIG devices. The pod keeps running on the
// same instance, and nothing else changes.
func TestFaultContainerdRestart(t *testing.T) {
	n := setUpHeld(t, b200Node(t), changeFrom, "1g.23gb")
	out, err := n.Restart(t.Context(), "containerd")
	t.Log(strings.TrimSpace(out))
	if err != nil {
		t.Fatal(err)
	}
	n.inv.Check(t, changeFrom.sorted())
}

// TestFaultKubeletRestartMidChange (fault 1): node mf-b200's kubelet
// restarts while the agent is in the middle of a change (a create held by
// a hang fault, the destroyed devices already withdrawn from its
// ListAndWatch streams) and a pod holds one of the GPU's devices. The
// agent registers again with the new kubelet, finishes the change once the
// create is released, and serves the new layout; the pod is untouched.
func TestFaultKubeletRestartMidChange(t *testing.T) {
	n := setUpMidChange(t, "hold")
	out, err := n.RestartKubelet(t.Context())
	t.Log(strings.TrimSpace(out))
	if err != nil {
		t.Fatal(err)
	}
	n.release(t, "hold")
	n.inv.Check(t, changeTo.sorted())
}

// outage is how long the API server or etcd stays down.
const outage = 60 * time.Second

// TestFaultAPIServerDownMidApply (fault 4): the API server stops for 60 s
// while node mf-b200's agent is in the middle of a change (a create held
// by a hang fault); 20 s into the outage the create is released, so the
// agent finishes the change and must report it while the API server is
// gone. Once it is back the node converges, the pod on the GPU untouched.
func TestFaultAPIServerDownMidApply(t *testing.T) {
	testControlPlaneDownMidApply(t, "kube-apiserver")
}

// TestFaultEtcdDownMidApply (fault 4): the same with etcd stopped for 60 s
// (the API server up, failing every read and write).
func TestFaultEtcdDownMidApply(t *testing.T) {
	testControlPlaneDownMidApply(t, "etcd")
}

func testControlPlaneDownMidApply(t *testing.T, component string) {
	n := setUpMidChange(t, "hold")
	start := stopControlPlane(t, component)
	down := time.Now()
	time.Sleep(outage / 3)
	n.release(t, "hold")
	time.Sleep(outage - time.Since(down))
	start()
	n.inv.Check(t, changeTo.sorted())
}

// stopControlPlane stops component (kube-apiserver or etcd) and returns a
// func that starts it again and returns once the API server is ready; the
// test's end starts it too, whatever failed.
func stopControlPlane(t *testing.T, component string) (start func()) {
	t.Helper()
	// Not t.Context() alone: whatever fails, the component starts again.
	ctx := context.WithoutCancel(t.Context())
	out, err := cluster.Stop(ctx, component)
	t.Log(strings.TrimSpace(out))
	if err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	started := false
	start = func() {
		t.Helper()
		if started {
			return
		}
		started = true
		out, err := cluster.Start(ctx, component)
		t.Log(strings.TrimSpace(out))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s down for %v", component, time.Since(down).Round(time.Second))
		// Healed once the API server is ready again (its readyz checks
		// etcd): reads from its cache answer before writes do.
		err = framework.WaitFor(ctx, "the API server ready", timeout, func(ctx context.Context) (bool, error) {
			_, err := cluster.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			return err == nil, err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(start)
	return start
}

// waitForPodEvent waits for an Event about the pod with reason, and
// returns its message.
func waitForPodEvent(t *testing.T, ns, name, reason string) string {
	t.Helper()
	var msg string
	err := framework.WaitFor(t.Context(), fmt.Sprintf("a %s Event on pod %s/%s", reason, ns, name), timeout, func(ctx context.Context) (bool, error) {
		list, err := cluster.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + name + ",reason=" + reason,
		})
		if err != nil || len(list.Items) == 0 {
			return false, err
		}
		msg = list.Items[0].Message
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// readOnlyDir makes dir immutable (chattr +i: no file is created, renamed
// or removed in it, by root either, as on a read-only or full file system)
// until the returned func, or the test's end, makes it writable again.
func readOnlyDir(t *testing.T, dir string) func() {
	t.Helper()
	chattr := func(flag string) error {
		out, err := exec.Command("chattr", flag, dir).CombinedOutput()
		if err != nil {
			return fmt.Errorf("chattr %s %s: %w: %s", flag, dir, err, out)
		}
		return nil
	}
	if err := chattr("+i"); err != nil {
		t.Fatal(err)
	}
	done := false
	writable := func() {
		if done {
			return
		}
		done = true
		if err := chattr("-i"); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(writable)
	return writable
}

// draLayout is the DRA node's layout for the DRA fault tests.
var draLayout = gpuLayouts{0: {"1g.10gb", "1g.10gb", "2g.20gb"}, 1: {"3g.40gb", "3g.40gb"}}

// setUpRefusedPrepare sets node mf-dra up with draLayout and a pod on a
// 3g.40gb (setUpHeld), makes its DRA plugin's directory read-only
// (readOnlyDir) and creates pod name, asking for a 1g.10gb; it returns
// once the kubelet says that Prepare failed (a
// FailedPrepareDynamicResources Event), with the func that makes the
// directory writable again.
func setUpRefusedPrepare(t *testing.T, name string) (heldNode, func()) {
	t.Helper()
	n := setUpHeld(t, draNode(t), draLayout, "3g.40gb")
	writable := readOnlyDir(t, n.Local().DRAPluginDir())
	cluster.CreatePod(t, n.gpuPod(n.ns, name, "nvidia.com/mig-1g.10gb", 1, "sleep", "3600"))
	msg := waitForPodEvent(t, n.ns, name, "FailedPrepareDynamicResources")
	t.Logf("Prepare refused while %s is read-only: %s", n.Local().DRAPluginDir(), msg)
	return n, writable
}

// waitRunning waits until the test's pod name runs.
func (h heldNode) waitRunning(t *testing.T, name string) {
	t.Helper()
	if _, err := cluster.WaitForPodPhase(t.Context(), h.ns, name, corev1.PodRunning); err != nil {
		t.Fatal(err)
	}
}

// TestFaultDRACheckpointReadOnly (fault 9): the DRA plugin's checkpoint
// directory on node mf-dra cannot be written (immutable) when the kubelet
// prepares a new pod's claim, while another pod runs on a device of the
// node. Prepare is refused (the kubelet's FailedPrepareDynamicResources
// Event) and leaves nothing behind; once the directory is writable the
// kubelet's retry prepares it and the pod runs, and every invariant holds:
// the checkpoint lists only claims the API server has, each with its CDI
// spec.
func TestFaultDRACheckpointReadOnly(t *testing.T) {
	n, writable := setUpRefusedPrepare(t, "blocked")
	writable()
	n.waitRunning(t, "blocked")
	n.inv.Check(t, draLayout.sorted())
}

// TestFaultKubeletRestartDuringDRAPrepare (fault 1): node mf-dra's kubelet
// restarts while it is preparing a new pod's claim: Prepare is held
// failing (the plugin's checkpoint directory immutable, as in
// TestFaultDRACheckpointReadOnly) until the kubelet has been restarted,
// then let through. The new kubelet prepares the claim once, the pod runs,
// the pod that held a device before is untouched, and the checkpoint and
// CDI specs have exactly the claims of the API server.
func TestFaultKubeletRestartDuringDRAPrepare(t *testing.T) {
	n, writable := setUpRefusedPrepare(t, "preparing")
	out, err := n.RestartKubelet(t.Context())
	t.Log(strings.TrimSpace(out))
	if err != nil {
		t.Fatal(err)
	}
	writable()
	n.waitRunning(t, "preparing")
	n.inv.Check(t, draLayout.sorted())
}

// TestFaultWebhookDown (fault 8): every pod of the fallback webhook is
// gone (its Deployment scaled to 0) while pods are admitted. With the
// webhook's failurePolicy Ignore (docs/INSTALL.md) the API server admits a
// pod unchanged: one asking for a profile node 1 lacks is stored as
// written, not rewritten, and waits. When the webhook is back, that stored
// pod is left alone (admission happens at create only), a new one is
// rewritten as before, and node 1, with a pod on a device throughout, is
// untouched.
func TestFaultWebhookDown(t *testing.T) {
	want := everyGPU("1g.10gb", "1g.10gb")
	n := setUpHeld(t, dpNode(), want, "1g.10gb")
	ctx, ns := t.Context(), n.ns
	waitForAnswer(t, gpuPod(ns, "probe", "nvidia.com/mig-2g.20gb", 1, "env"), "see only 1g.10gb on the node", func(p *corev1.Pod) bool {
		return p.Annotations[annotationFallback] == "2g.20gb->1g.10gb"
	})

	deployments := cluster.Client.AppsV1().Deployments(framework.MigflexNamespace)
	d, err := deployments.Get(ctx, framework.WebhookName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	replicas := *d.Spec.Replicas
	scale := func(ctx context.Context, n int32) error {
		s, err := deployments.GetScale(ctx, framework.WebhookName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Spec.Replicas = n
		_, err = deployments.UpdateScale(ctx, framework.WebhookName, s, metav1.UpdateOptions{})
		return err
	}
	restored := false
	restore := func() {
		if restored {
			return
		}
		restored = true
		ctx := context.WithoutCancel(t.Context())
		if err := scale(ctx, replicas); err != nil {
			t.Error(err)
			return
		}
		if err := cluster.WaitForDeploymentRollout(ctx, framework.MigflexNamespace, framework.WebhookName); err != nil {
			t.Error(err)
		}
		if err := cluster.WaitForWebhookAnswers(ctx); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(restore)
	if err := scale(ctx, 0); err != nil {
		t.Fatal(err)
	}
	err = framework.WaitFor(ctx, "every webhook pod gone", timeout, func(ctx context.Context) (bool, error) {
		pods, err := cluster.Client.CoreV1().Pods(framework.MigflexNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + framework.WebhookName})
		return err == nil && len(pods.Items) == 0, err
	})
	if err != nil {
		t.Fatal(err)
	}

	stored := cluster.CreatePod(t, gpuPod(ns, "while-down", "nvidia.com/mig-2g.20gb", 1, "env"))
	if a, ok := stored.Annotations[annotationFallback]; ok {
		t.Errorf("admitted with no webhook running, pod has %s=%q: want it stored as written", annotationFallback, a)
	}
	checkResources(t, stored, map[corev1.ResourceName]string{"nvidia.com/mig-2g.20gb": "1"})

	restore()
	after := cluster.CreatePod(t, gpuPod(ns, "after", "nvidia.com/mig-2g.20gb", 1, "env"))
	if got := after.Annotations[annotationFallback]; got != "2g.20gb->1g.10gb" {
		t.Errorf("once the webhook is back, annotation %s=%q, want %q", annotationFallback, got, "2g.20gb->1g.10gb")
	}
	p, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, "while-down", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := p.Annotations[annotationFallback]; ok {
		t.Errorf("the pod admitted while the webhook was down was changed after: %s=%q", annotationFallback, a)
	}
	checkResources(t, p, map[corev1.ResourceName]string{"nvidia.com/mig-2g.20gb": "1"})
	n.inv.Check(t, want.sorted())
}

// TestFaultNVMLCreateFails (fault 6): the second GPU-instance create of a
// change on node mf-b200 fails (ERROR_UNKNOWN), halfway through the
// layout, once, while a pod holds one of the GPU's instances. The agent
// must not leave the GPU half done: it rolls back, tries again after its
// retry interval and converges, with the pod's instance untouched.
func TestFaultNVMLCreateFails(t *testing.T) {
	n := setUpHeld(t, b200Node(t), changeFrom, "1g.23gb")
	n.armFault(t, "fail", "--kind", "error", "--call", "createGpuInstance", "--nth", "2")
	want := gpuLayouts{0: {"1g.23gb", "1g.23gb", "1g.23gb", "3g.90gb"}}
	n.setMigConfig(t, annotationMigConfig, migConfigPerGPU(want))
	if _, err := n.WaitForSimFault(t.Context(), "fail", false); err != nil {
		t.Fatal(err)
	}
	n.inv.Check(t, want.sorted())
}

// TestFaultNVMLCreateHangs (fault 6): a GPU-instance create of a change on
// node mf-b200 hangs (10 minutes, the simulator's longest) while a pod
// holds one of the GPU's instances. Past the agent's --nvml-call-timeout
// (the local overlay's MIGFLEX_AGENT_NVML_CALL_TIMEOUT, 45 s, not the
// default 2 minutes) the node says failed, naming the call and that
// deadline (docs/INSTALL.md), and the pod's instance is untouched; once
// the call returns (the fault cleared) the node converges and nothing
// leaked.
func TestFaultNVMLCreateHangs(t *testing.T) {
	n := setUpMidChange(t, "hang")
	hung := time.Now()
	deadline := agentEnvDuration(t, "MIGFLEX_AGENT_NVML_CALL_TIMEOUT")
	reason := n.waitFailed(t, fmt.Sprintf("has not returned for %v", deadline), timeout+deadline)
	t.Logf("%s after the create hung (deadline %s): state failed, reason %q", time.Since(hung).Round(time.Second), deadline, reason)
	n.checkDeviceKept(t, "while the create hangs")
	n.release(t, "hang")
	n.inv.Check(t, changeTo.sorted())
}

// TestFaultPlannerLeaderLosesLease (fault 7): the planner runs two
// replicas; its leader is paused (SIGSTOP: it neither renews its Lease nor
// knows that it stopped) while it batches a pending pod's arrival, past
// its Lease (6 s here). The other replica takes the Lease, writes the
// layout, and the pod runs. Then the old leader goes on (SIGCONT) with
// its round due and its view of the Node from before the pause: a write
// it sends carries that view's resourceVersion as a precondition and
// fails, and it steps down (its process exits, the container restarts).
// nvidia.com/mig.config changes exactly once; node 1 converges.
//
// It runs last of the fault tests: it installs the planner (and turns the
// webhook reshape-first) for the rest of the run.
func TestFaultPlannerLeaderLosesLease(t *testing.T) {
	r := setUpPlannerRound(t)
	lead, leadPod := r.lead, r.leadPod
	before := restarts(r.pod(t))
	if err := signalPlanner(leadPod, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	resumed := false
	resume := func() {
		if resumed {
			return
		}
		resumed = true
		if err := signalPlanner(leadPod, syscall.SIGCONT); err != nil {
			t.Error(err)
		}
	}
	// Whatever fails, the process goes on: a stopped one fails its
	// liveness probe and would be restarted in another test.
	defer resume()
	next := waitForNewPlannerLeader(t, lead)
	t.Logf("leader %s paused (SIGSTOP) while batching; %s took over after %s (lease duration %s)", lead, next, time.Since(paused).Round(100*time.Millisecond), plannerLease)
	r.waitWritten(t)
	resume()
	t.Logf("the new leader wrote the layout; the old one resumed (SIGCONT) %s after the pause", time.Since(paused).Round(100*time.Millisecond))
	r.waitPending(t)
	r.waitSteppedDown(t, "the old leader", before)
	r.checkTakenOver(t, next)
}

// TestFaultAPIServerDownMidPlannerRound (fault 4): the API server stops
// for 60 s while the planner's leader (of two replicas) batches a pending
// pod's arrival. While it is down no replica can write, renew the Lease or
// take it: the leader's round cannot write and it steps down. Once the API
// server is back a leader plans again from what it shows and writes the
// layout, once; the pod runs and node 1 converges.
func TestFaultAPIServerDownMidPlannerRound(t *testing.T) {
	testControlPlaneDownMidPlannerRound(t, "kube-apiserver")
}

// TestFaultEtcdDownMidPlannerRound (fault 4): the same with etcd stopped
// for 60 s (the API server up, failing every read and write).
func TestFaultEtcdDownMidPlannerRound(t *testing.T) {
	testControlPlaneDownMidPlannerRound(t, "etcd")
}

func testControlPlaneDownMidPlannerRound(t *testing.T, component string) {
	r := setUpPlannerRound(t)
	start := stopControlPlane(t, component)
	time.Sleep(outage)
	start()
	healed := time.Now()
	r.waitPending(t)
	id, err := leader(t.Context())
	t.Logf("planner leader before the outage %s, after it %s (%v); the pod ran %s after %s was back", r.lead, id, err, time.Since(healed).Round(time.Second), component)
	r.values.checkOneChange(t)
	checkPlannedNode(t)
}

// plannerRound is the moment the planner fault tests break the planner
// at (setUpPlannerRound): its leader batching a pending pod's arrival.
type plannerRound struct {
	// ns is the test's namespace, where pod "pending" waits.
	ns string
	// lead is the leader's identity (pod_uid) then, leadPod its pod's
	// name.
	lead, leadPod string
	// values records node 1's nvidia.com/mig.config from then on.
	values *migConfigValues
}

// setUpPlannerRound is every planner fault test's start: it skips t
// unless the fault tests were asked for, installs migflex and the planner
// with two replicas and a batch long enough to break it inside
// (leaderFaultArgs), node 1 opted in with every GPU all 1g.10gb, and
// creates pod "pending", asking for a 3g.40gb; it returns once the
// scheduler has found no room for it, when the leader starts batching.
func setUpPlannerRound(t *testing.T) plannerRound {
	t.Helper()
	faultTest(t)
	r := plannerRound{ns: planner(t)}
	if err := setPlannerArgs(t.Context(), leaderFaultArgs(t)); err != nil { // two replicas up
		t.Fatal(err)
	}
	resetTo1g(t)
	r.lead = waitForPlannerLeader(t)
	r.leadPod, _, _ = strings.Cut(r.lead, "_")
	r.values = watchMigConfig(t)
	cluster.CreatePod(t, gpuPod(r.ns, "pending", "nvidia.com/mig-3g.40gb", 1, "sleep", "3600"))
	waitUnschedulable(t, r.ns, "pending")
	return r
}

// waitPending waits until pod "pending" runs.
func (r plannerRound) waitPending(t *testing.T) {
	t.Helper()
	if _, err := cluster.WaitForPodPhase(t.Context(), r.ns, "pending", corev1.PodRunning); err != nil {
		t.Fatal(err)
	}
}

// pod is the broken leader's pod as it is now (the same pod across its
// container's restarts).
func (r plannerRound) pod(t *testing.T) *corev1.Pod {
	t.Helper()
	p, err := cluster.Client.CoreV1().Pods(framework.MigflexNamespace).Get(t.Context(), r.leadPod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// waitWritten waits until the replica that took over wrote node 1's
// nvidia.com/mig.config.
func (r plannerRound) waitWritten(t *testing.T) {
	t.Helper()
	select {
	case <-r.values.changed:
	case <-time.After(timeout):
		t.Fatal("the new leader never wrote the layout")
	}
}

// waitSteppedDown waits until the broken leader (who, for the message)
// stepped down: its process exited and its container restarted, more
// than the before restarts.
func (r plannerRound) waitSteppedDown(t *testing.T, who string, before int32) {
	t.Helper()
	err := framework.WaitFor(t.Context(), who+" "+r.leadPod+" to step down (its process exits, the container restarts)", timeout, func(context.Context) (bool, error) {
		return restarts(r.pod(t)) > before, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkTakenOver checks the end of a leader fault: next still holds the
// Lease, nvidia.com/mig.config changed once, and node 1 passes every
// invariant with the layout the planner wrote.
func (r plannerRound) checkTakenOver(t *testing.T, next string) {
	t.Helper()
	if id, err := leader(t.Context()); err != nil || id != next {
		t.Errorf("the Lease is held by %q (%v), want %q still", id, err, next)
	}
	r.values.checkOneChange(t)
	checkPlannedNode(t)
}

// checkPlannedNode checks every invariant of node 1 after a planner
// fault, with the layout the agent applied from what the planner wrote:
// the state success, the pods the planner served running on their
// instances, the kubelet's devices and allocatable that layout's, nothing
// leaked.
func checkPlannedNode(t *testing.T) {
	t.Helper()
	n := dpNode()
	inv := n.Invariants(t)
	node, err := n.Node(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	layout, err := framework.NodeLayout(node)
	if err != nil {
		t.Fatal(err)
	}
	inv.Check(t, framework.LayoutProfiles(layout))
}
