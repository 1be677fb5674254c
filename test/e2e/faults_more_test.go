//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/test/e2e/framework"
)

// More of the fault suite (docs/RELIABILITY.md): faults that need more
// than a signal or a restart to inject. They run as faults_test.go's do,
// with MIGFLEX_E2E_FAULTS=1 (make test-faults), and end on the same
// invariant checker.

// agentContainer is the agent's container in its DaemonSets' pods.
const agentContainer = "agent"

// TestFaultAgentOOMKilled (fault 5): node 1's agent runs out of memory in
// the middle of a change of both GPUs, under the memory limit its
// manifests give its container (256 MiB, a real cgroup limit that the
// kernel enforces): the simulator's oom fault makes the agent's process
// allocate and touch four times that at GPU 0's fourth GPU-instance
// create, after the change destroyed GPU 0's instances and created three.
// The kernel's OOM killer ends the agent (the container's last state
// says OOMKilled); the kubelet restarts the container, whose simulator
// starts without the fault (a fault armed by command lives in the
// process), and the new agent finishes the change. The pod on GPU 1's
// 3g.40gb is untouched; nothing leaked.
func TestFaultAgentOOMKilled(t *testing.T) {
	faultTest(t)
	n := dpNode()
	ctx := t.Context()
	n.applyLayouts(t, gpuLayouts{0: {"2g.20gb", "2g.20gb", "2g.20gb"}, 1: {"3g.40gb", "3g.40gb"}})
	ns := cluster.Namespace(t)
	device := n.holder(t, ns, "holder", "3g.40gb")
	inv := n.Invariants(t)
	before := n.instancesOf(t)[device]

	agent, err := n.AgentPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	status := func(p *corev1.Pod) corev1.ContainerStatus {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == agentContainer {
				return cs
			}
		}
		t.Fatalf("agent pod %s has no container %s: %+v", p.Name, agentContainer, p.Status.ContainerStatuses)
		return corev1.ContainerStatus{}
	}
	var limit int64
	for _, c := range agent.Spec.Containers {
		if c.Name == agentContainer {
			limit = c.Resources.Limits.Memory().Value()
		}
	}
	if limit <= 0 {
		t.Fatalf("agent pod %s has no memory limit: nothing for the fault to run into", agent.Name)
	}
	mib := 4 * limit >> 20
	restartsBefore := status(agent).RestartCount

	n.armFault(t, "oom", "--kind", "oom", "--call", "createGpuInstance", "--gpu", "0", "--nth", "4", "--mib", strconv.FormatInt(mib, 10))
	want := gpuLayouts{0: all1g, 1: {"3g.40gb", "2g.20gb", "1g.10gb"}}
	n.setMigConfig(t, annotationMigConfig, migConfigPerGPU(want))

	var killed corev1.ContainerStatus
	err = framework.WaitFor(ctx, "the agent's container to end and restart", timeout, func(ctx context.Context) (bool, error) {
		p, err := cluster.Client.CoreV1().Pods(agent.Namespace).Get(ctx, agent.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		killed = status(p)
		return killed.RestartCount > restartsBefore && killed.LastTerminationState.Terminated != nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	term := killed.LastTerminationState.Terminated
	t.Logf("agent %s (memory limit %d MiB) ended: reason %s, exit code %d, at %s", agent.Name, limit>>20, term.Reason, term.ExitCode, term.FinishedAt.UTC().Format(time.RFC3339))
	if term.Reason != "OOMKilled" {
		t.Fatalf("the agent's container ended with reason %q (exit code %d), want OOMKilled", term.Reason, term.ExitCode)
	}
	// Killed in the fault, not elsewhere: the killed agent logged the
	// fault firing and never that it held the memory.
	prev, err := cluster.Client.CoreV1().Pods(agent.Namespace).GetLogs(agent.Name, &corev1.PodLogOptions{Container: agentContainer, Previous: true}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fired, held := false, false
	for _, line := range strings.Split(string(prev), "\n") {
		if !strings.Contains(line, `fault="oom"`) && !strings.Contains(line, `"fault":"oom"`) {
			continue
		}
		fired = fired || strings.Contains(line, "Simulator fault fired")
		held = held || strings.Contains(line, "Simulator fault holds memory")
	}
	if !fired || held {
		t.Errorf("the killed agent's log: oom fault fired %v, held its memory %v; want fired, not held; its last lines:\n%s", fired, held, lastLines(string(prev), 10))
	}
	if now, ok := n.instancesOf(t)[device]; !ok || now != before {
		t.Fatalf("the pod's device %s after the OOM kill: %+v (there %v), was %+v", device, now, ok, before)
	}
	took := inv.Check(t, want.sorted())
	t.Logf("converged %s after the check began (%s after the OOM kill)", took.Round(time.Second), time.Since(term.FinishedAt.Time).Round(time.Second))
	after, err := n.AgentPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.UID != agent.UID || status(after).RestartCount != restartsBefore+1 {
		t.Errorf("agent pod %s (%d restarts before) is now %s with %d restarts: want the same pod, restarted once (the new agent ran within its limit)", agent.Name, restartsBefore, after.Name, status(after).RestartCount)
	}
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestFaultCDIDirReadOnly (fault 9): node mf-dra's CDI spec directory
// (its /var/run/cdi, where the DRA plugin writes a spec for each claim it
// prepares and containerd reads them) cannot be written (immutable: no
// file created, renamed or removed there, by root either, as on a
// read-only or full file system) when the kubelet prepares a new pod's
// claim, while another pod runs on a device of the node. Prepare is
// refused with an Event that names the CDI spec; the pod's container is
// not started, with a device or without; nothing is written to the
// directory and the claim is not checkpointed. Once the directory is
// writable the kubelet's retry prepares the claim, the pod runs with a
// device of the profile it asked for, and every invariant holds.
func TestFaultCDIDirReadOnly(t *testing.T) {
	faultTest(t)
	n := draNode(t)
	ctx := t.Context()
	_, layout := n.applyLayouts(t, draLayout)
	ns := cluster.Namespace(t)
	n.runHolder(t, ns, "holder", "3g.40gb")
	// The agent names a claim's pod in its layout a moment after the pod
	// runs: the snapshot must have it.
	var inv *framework.Invariants
	err := framework.WaitFor(ctx, "the agent of "+n.NodeName+" to report pod "+ns+"/holder", timeout, func(ctx context.Context) (bool, error) {
		got, err := n.TakeInvariants(ctx, timeout)
		if err != nil {
			return false, err
		}
		inv = got
		return len(got.Held()) == 1, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := n.Local().CDIDir
	files := func() []string {
		t.Helper()
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range entries {
			out = append(out, e.Name())
		}
		return out
	}
	was := files()
	writable := readOnlyDir(t, dir)
	const res = "nvidia.com/mig-1g.10gb"
	cluster.CreatePod(t, n.gpuPod(ns, "blocked", res, 1, "env"))
	msg := waitForPodEvent(t, ns, "blocked", "FailedPrepareDynamicResources")
	t.Logf("Prepare refused while %s is read-only: %s", dir, msg)
	if !strings.Contains(msg, "writing its CDI spec") {
		t.Errorf("the Event %q does not say that the CDI spec could not be written", msg)
	}
	p, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, "blocked", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != corev1.PodPending {
		t.Errorf("pod blocked is %s while its claim cannot be prepared, want Pending", p.Status.Phase)
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running != nil || cs.State.Terminated != nil || cs.LastTerminationState.Terminated != nil || cs.RestartCount > 0 {
			t.Errorf("container %s of pod blocked started while its claim cannot be prepared: %+v", cs.Name, cs)
		}
	}
	if diff := cmp.Diff(was, files()); diff != "" {
		t.Errorf("the read-only CDI directory changed (-before +now):\n%s", diff)
	}
	claim := extendedResourceClaim(t, p, res)
	c, err := cluster.Client.ResourceV1().ResourceClaims(ns).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := os.ReadFile(filepath.Join(n.Local().DRAPluginDir(), "checkpoint.json"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(cp), string(c.UID)) {
		t.Errorf("claim %s (UID %s) is checkpointed though its CDI spec could not be written", claim, c.UID)
	}

	writable()
	healed := time.Now()
	if _, err := cluster.WaitForPodSucceeded(ctx, ns, "blocked"); err != nil {
		t.Fatal(err)
	}
	t.Logf("pod blocked ran to completion %s after the directory was writable again", time.Since(healed).Round(time.Second))
	logs, err := cluster.PodLogs(ctx, ns, "blocked", "")
	if err != nil {
		t.Fatal(err)
	}
	checkAllocateEnv(t, envOf(logs), layout, "1g.10gb", 1)
	inv.Check(t, draLayout.sorted())
}

// TestFaultPlannerPartitioned (fault 7): the planner's leader (of two
// replicas) is cut off from the API server by a network partition while
// it batches a pending pod's arrival: iptables rules in its pod's network
// namespace drop every packet to and from the API server's address and
// port (only there: the kubelet, the other replica and everything else
// still reach it). Unlike a paused leader (TestFaultPlannerLeaderLosesLease)
// the cut-off one keeps running, its round due, and cannot renew its
// Lease. The other replica takes the Lease and writes the layout, and the
// pod runs; the cut-off leader steps down (its process exits, the
// container restarts, still cut off) and writes nothing:
// nvidia.com/mig.config changes exactly once. Once the partition heals,
// the old leader's pod is ready again as a follower, and node 1
// converges.
func TestFaultPlannerPartitioned(t *testing.T) {
	r := setUpPlannerRound(t)
	ctx, lead, leadPod := t.Context(), r.lead, r.leadPod
	pod := func() *corev1.Pod { return r.pod(t) }
	p := pod()
	if p.Spec.HostNetwork {
		t.Fatalf("planner pod %s runs on its node's network: a partition of it would cut off the node", leadPod)
	}
	host, port := containerEnv(p, "KUBERNETES_SERVICE_HOST"), containerEnv(p, "KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		t.Fatalf("planner pod %s sets no KUBERNETES_SERVICE_HOST and _PORT: where it reaches the API server is not known", leadPod)
	}
	before := restarts(p)

	pid, err := plannerPID(leadPod)
	if err != nil {
		t.Fatal(err)
	}
	heal := partition(t, pid, host, port)
	cut := time.Now()
	next := waitForNewPlannerLeader(t, lead)
	t.Logf("leader %s (on node %s) cut off from %s:%s while batching; %s took over after %s (lease duration %s)", lead, p.Spec.NodeName, host, port, next, time.Since(cut).Round(100*time.Millisecond), plannerLease)
	r.waitWritten(t)
	r.waitPending(t)
	r.waitSteppedDown(t, "the cut-off leader", before)
	t.Logf("the cut-off leader's process exited within %s of the cut", time.Since(cut).Round(time.Second))
	// Its new process cannot sync its caches while cut off, so it is not
	// ready: the partition holds across the restart.
	if podReady(pod()) {
		t.Errorf("pod %s is ready while cut off from the API server: the partition does not hold", leadPod)
	}

	heal()
	healed := time.Now()
	err = framework.WaitFor(ctx, "the old leader's pod "+leadPod+" ready again", timeout, func(context.Context) (bool, error) {
		return podReady(pod()), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the partition healed; pod %s ready again %s later (%d restarts in all)", leadPod, time.Since(healed).Round(time.Second), restarts(pod())-before)
	r.checkTakenOver(t, next)
}

// containerEnv is the value the pod's first container sets for the
// environment variable name, "" if none.
func containerEnv(p *corev1.Pod, name string) string {
	for _, e := range p.Spec.Containers[0].Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// partition cuts the network namespace of process pid (its pod's, which
// every container of the pod shares and keeps across restarts) off from
// host:port: iptables rules there drop every TCP packet to it and from
// it, as a partition between the pod and the API server would. Nothing
// outside that namespace sees them, and they only drop packets, so
// nothing goes anywhere it did not before (hack/cluster/README.md,
// Network safety). heal deletes them; the end of the test heals too,
// whatever failed.
func partition(t *testing.T, pid int, host, port string) (heal func()) {
	t.Helper()
	// The namespace through a descriptor held open: the process is gone
	// (its container restarted) by the time the rules are deleted.
	netns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Never this host's own namespace (a host-network pod's): the rules
	// would cut off every process here.
	path := fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), netns.Fd())
	theirs, err := os.Readlink(path)
	if err != nil {
		netns.Close()
		t.Fatal(err)
	}
	if ours, err := os.Readlink("/proc/self/ns/net"); err != nil || ours == theirs {
		netns.Close()
		t.Fatalf("process %d is in this host's network namespace %s (%v): refusing to partition the host", pid, theirs, err)
	}
	iptables := func(op string, rule []string) error {
		args := append([]string{"--net=" + path, "iptables", "-w", op}, rule...)
		out, err := exec.Command("nsenter", args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("nsenter %s: %w: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	var added [][]string
	healed := false
	heal = func() {
		t.Helper()
		if healed {
			return
		}
		healed = true
		for _, r := range added {
			if err := iptables("-D", r); err != nil {
				t.Error(err)
			}
		}
		netns.Close()
	}
	t.Cleanup(heal)
	for _, r := range [][]string{
		{"OUTPUT", "-d", host, "-p", "tcp", "--dport", port, "-j", "DROP"},
		{"INPUT", "-s", host, "-p", "tcp", "--sport", port, "-j", "DROP"},
	} {
		if err := iptables("-I", r); err != nil {
			t.Fatal(err)
		}
		added = append(added, r)
	}
	return heal
}

// TestFaultAgentKilledMidPrepare (fault 5): node mf-dra's agent, serving
// DRA in dynamic mode, is SIGKILLed in the middle of a Prepare, between
// the NVML creates and the checkpoint write: a pod holds a 3g.40gb made at
// its Prepare, and a second pod asks for two 1g.10gb; the simulator holds
// the second compute-instance create (a hang fault), so the claim's first
// instance is made whole, the second is a GPU instance without a compute
// instance, and the claim is not checkpointed. The killed agent's
// container restarts; the new agent destroys both leftovers (no prepared
// claim names them), the kubelet's retried Prepare makes the claim's
// instances again at the allocated placements, and the pod runs. The
// holder's instance is untouched, and no instance is left without a
// claim.
func TestFaultAgentKilledMidPrepare(t *testing.T) {
	faultTest(t)
	n := draNode(t)
	ctx := t.Context()
	n.serveDynamic(t)
	ns := cluster.Namespace(t)
	n.runHolder(t, ns, "holder", "3g.40gb")
	inv := n.InvariantsWith(t, ns+"/holder")
	before, err := n.Local().SimState()
	if err != nil {
		t.Fatal(err)
	}

	// The claim's first device is made whole (GPU instance, compute
	// instance); the second device's compute instance hangs.
	n.armFault(t, "hold", "--kind", "hang", "--call", "createComputeInstance", "--nth", "2", "--duration", "10m")
	const res = "nvidia.com/mig-1g.10gb"
	pod := n.gpuPod(ns, "preparing", res, 2, "sleep", "3600")
	pod.Labels = map[string]string{labelOptOut: "disabled"}
	cluster.CreatePod(t, pod)
	f, err := n.WaitForSimFault(ctx, "hold", true)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("node %s: the agent's Prepare hangs in fault hold (%d calls, %d hanging)", n.NodeName, f.Calls, f.Hanging)

	// The moment: one instance more than before, whole, and one GPU
	// instance more without a compute instance; the claim not checkpointed.
	mid, err := n.Local().SimState()
	if err != nil {
		t.Fatal(err)
	}
	leftovers := newDevices(before, mid)
	if len(leftovers) != 1 || gis(mid) != gis(before)+2 {
		t.Fatalf("mid-Prepare the simulator has new MIG devices %v and %d GPU instances (had %d): want one new device and two new GPU instances", leftovers, gis(mid), gis(before))
	}
	p, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claim, err := cluster.Client.ResourceV1().ResourceClaims(ns).Get(ctx, extendedResourceClaim(t, p, res), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := os.ReadFile(filepath.Join(n.Local().DRAPluginDir(), "checkpoint.json"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(cp), string(claim.UID)) {
		t.Fatalf("claim %s (UID %s) is checkpointed while its Prepare hangs: the kill would not be before the checkpoint", claim.Name, claim.UID)
	}

	who, err := n.KillAgent(ctx, syscall.SIGKILL)
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	t.Logf("SIGKILLed the agent (%s) in the Prepare of claim %s: made %v and a GPU instance without a compute instance, nothing checkpointed", who, claim.Name, leftovers)

	if _, err := cluster.WaitForPodPhase(ctx, ns, pod.Name, corev1.PodRunning); err != nil {
		t.Fatal(err)
	}
	t.Logf("pod %s runs %s after the kill", pod.Name, time.Since(killed).Round(time.Second))
	took := inv.Check(t, nil)
	t.Logf("converged %s after the check began (%s after the kill)", took.Round(time.Second), time.Since(killed).Round(time.Second))
	// The leftover was destroyed, not served without a checkpoint: the
	// claim's instance at its placement is a new one (a new UUID).
	now := n.instancesOf(t)
	for _, u := range leftovers {
		if _, ok := now[u]; ok {
			t.Errorf("the instance %s the killed Prepare made is still there: want it destroyed and the claim's made again", u)
		}
	}

	// Leave the node as the tests after this one expect a DRA node.
	n.leaveDynamic(t, ns)
}

// newDevices is the MIG devices of after that before did not have.
func newDevices(before, after []framework.SimGPU) []string {
	had := map[string]bool{}
	for _, g := range before {
		for u := range g.Devices {
			had[u] = true
		}
	}
	var out []string
	for _, g := range after {
		for u := range g.Devices {
			if !had[u] {
				out = append(out, u)
			}
		}
	}
	slices.Sort(out)
	return out
}

// gis counts the GPU instances of state, with a compute instance or not.
func gis(state []framework.SimGPU) int {
	n := 0
	for _, g := range state {
		n += g.GIs
	}
	return n
}

// TestFaultGPULostUnderDynamicClaim (fault 10, DRA dynamic mode): node
// mf-dra's agent serves dynamic mode and a pod holds a 3g.40gb its claim's
// Prepare made; then the GPU under it falls off the bus (the simulator's
// lost fault: Xid 79, then ERROR_GPU_IS_LOST on every call on it). While
// it is lost, every placement the GPU offers is tainted NoSchedule (the
// Xid, or the lost GPU: the scheduler allocates none of them to a new
// claim), the layout annotation calls the pod's instance Unhealthy, and
// nothing is destroyed under the pod: it runs on, its instance is still in
// the simulated GPU at its GPU and compute instance, and its claim stays
// checkpointed. Once the GPU is back (the fault cleared: the simulator
// brings it back as a reset does, without instances), the pod is
// deleted, its Unprepare finds its instance gone and succeeds, the taints
// go after the health watcher's quiet period, a new 3g.40gb pod runs on
// the node, and the invariant checker passes: every instance a
// checkpointed claim's at its allocated placement, nothing leaked.
func TestFaultGPULostUnderDynamicClaim(t *testing.T) {
	faultTest(t)
	n := draNode(t)
	ctx := t.Context()
	n.serveDynamic(t)
	ns := cluster.Namespace(t)
	const res = "nvidia.com/mig-3g.40gb"
	n.runHolder(t, ns, "victim", "3g.40gb")
	inv := n.InvariantsWith(t, ns+"/victim")
	pod, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, "victim", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claim, err := cluster.Client.ResourceV1().ResourceClaims(ns).Get(ctx, extendedResourceClaim(t, pod, res), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 {
		t.Fatalf("claim %s: allocation %+v, want one device", claim.Name, claim.Status.Allocation)
	}
	device := claim.Status.Allocation.Devices.Results[0].Device
	var gpu int
	if _, err := fmt.Sscanf(device, "gpu-%d-", &gpu); err != nil {
		t.Fatalf("device %q names no GPU: %v", device, err)
	}
	instances := n.instancesOf(t)
	if len(instances) != 1 {
		t.Fatalf("the node has MIG devices %v, want the victim's one", slices.Sorted(maps.Keys(instances)))
	}
	var victim framework.SimInstance
	for _, in := range instances {
		victim = in
	}
	if victim.GPU != gpu {
		t.Fatalf("the victim's instance %s is on GPU %d, its device %s on GPU %d", victim.UUID, victim.GPU, device, gpu)
	}
	t.Logf("pod %s holds %s (instance %s, GI %d CI %d) through claim %s", pod.Name, device, victim.UUID, victim.GI, victim.CI, claim.Name)

	n.armFault(t, "lost", "--kind", "lost", "--gpu", strconv.Itoa(gpu))
	lost := time.Now()
	prefix := fmt.Sprintf("gpu-%d-", gpu)
	var tainted []string
	err = framework.WaitFor(ctx, "every device of GPU "+strconv.Itoa(gpu)+" tainted NoSchedule", timeout, func(ctx context.Context) (bool, error) {
		list, err := cluster.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		var clean []string
		tainted = nil
		for _, s := range list.Items {
			if s.Spec.Driver != draDriver || s.Spec.Pool.Name != n.NodeName {
				continue
			}
			for _, d := range s.Spec.Devices {
				if !strings.HasPrefix(d.Name, prefix) {
					continue
				}
				ok := slices.ContainsFunc(d.Taints, func(tn resourceapi.DeviceTaint) bool {
					return tn.Effect == resourceapi.DeviceTaintEffectNoSchedule && (tn.Key == "gpu.migflex.io/xid" && tn.Value == "79" || tn.Key == "gpu.migflex.io/gpu-lost")
				})
				if ok {
					tainted = append(tainted, d.Name)
				} else {
					clean = append(clean, d.Name)
				}
			}
		}
		if len(clean) > 0 || len(tainted) == 0 {
			return false, fmt.Errorf("GPU %d: %d devices tainted, not %v", gpu, len(tainted), clean)
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("GPU %d lost: its %d devices tainted %s after the fault", gpu, len(tainted), time.Since(lost).Round(time.Millisecond))
	node, err := n.WaitForNode(ctx, "the victim's instance Unhealthy in the layout", timeout, func(node *corev1.Node) error {
		l, err := framework.NodeLayout(node)
		if err != nil {
			return err
		}
		for _, g := range l {
			for _, in := range g.Instances {
				if in.UUID == victim.UUID {
					if in.Health != "Unhealthy" {
						return fmt.Errorf("instance %s is %q", in.UUID, in.Health)
					}
					return nil
				}
			}
		}
		return fmt.Errorf("the layout does not list instance %s", victim.UUID)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("while GPU %d is lost: state %q, reason %q", gpu, node.Labels[labelState], node.Annotations[annotationReason])

	// Nothing destroyed under the pod while the GPU is lost: the pod runs
	// on, its instance is where it was, its claim checkpointed.
	if now, ok := n.instancesOf(t)[victim.UUID]; !ok || now != victim {
		t.Errorf("the victim's instance while GPU %d is lost: %+v (there %v), was %+v", gpu, now, ok, victim)
	}
	if p, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, "victim", metav1.GetOptions{}); err != nil || p.UID != pod.UID || p.Status.Phase != corev1.PodRunning {
		t.Errorf("the victim while GPU %d is lost: %v", gpu, podSummary(p, err))
	}
	cp, err := os.ReadFile(filepath.Join(n.Local().DRAPluginDir(), "checkpoint.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(cp), string(claim.UID)) {
		t.Errorf("claim %s (UID %s) left the checkpoint while its GPU is lost", claim.Name, claim.UID)
	}

	// The GPU comes back, as a reset brings it: without instances. The
	// victim's instance went with the reset, not by the agent; the pod is
	// deleted, and its Unprepare finds nothing to destroy.
	n.release(t, "lost")
	back := time.Now()
	if err := cluster.Client.CoreV1().Pods(ns).Delete(ctx, "victim", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	inv.Forget(ns + "/victim")
	err = framework.WaitFor(ctx, "claim "+claim.Name+" out of the checkpoint", timeout, func(context.Context) (bool, error) {
		cp, err := os.ReadFile(filepath.Join(n.Local().DRAPluginDir(), "checkpoint.json"))
		return err == nil && !strings.Contains(string(cp), string(claim.UID)), err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("GPU %d back; the victim's claim unprepared %s later", gpu, time.Since(back).Round(time.Second))
	n.runHolder(t, ns, "after", "3g.40gb")
	t.Logf("a new 3g.40gb pod runs %s after the GPU came back", time.Since(back).Round(time.Second))
	took := inv.Check(t, nil)
	t.Logf("converged %s after the check began", took.Round(time.Second))

	n.leaveDynamic(t, ns)
}

// podSummary says what a pod read returned, for a message.
func podSummary(p *corev1.Pod, err error) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("pod %s (UID %s) %s", p.Name, p.UID, p.Status.Phase)
}
