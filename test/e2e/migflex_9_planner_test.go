//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"

	"github.com/migflex/migflex/test/e2e/framework"
)

// The planner's tests install overlays/local-planner over the suite's
// installation (the planner Deployment, its RBAC and policy, and the
// webhook in reshape-first mode), with
// settings that keep the suite short: a GPU may change again a second
// after the planner changed it (--cooldown), a layout set by hand holds
// the node for a second (--manual-hold), and a replica that stops renewing
// the Lease is replaced after 6 s (--leader-elect-lease-duration); the
// webhook, which judges as the planner does, holds a node as briefly. The
// defaults (2 minutes, 10 minutes, 15 s) are the unit tests' business.
// Each test opts its nodes in (label migflex.io/planner=enabled; node 1
// unless it says otherwise) and out again when it ends, and its pods skip
// the fallback webhook (migflex.io/fallback=disabled on their namespace)
// unless it is what the test is about.

const (
	labelPlanner       = "migflex.io/planner"
	annotationProposed = "migflex.io/mig.config.proposed"
	plannerName        = "migflex-planner"
	plannerManager     = "migflex-planner"
	reasonPlanned      = "MigReshapePlanned"
	reasonImpossible   = "MigReshapeImpossible"
	plannerLease       = 6 * time.Second
)

// plannerArgs are the planner's flags in these tests, and those of
// MIGFLEX_E2E_PLANNER_ARGS (space-separated), with which a measurement
// tries other settings (--batch-leading) without changing the suite.
var plannerArgs = append([]string{
	"--metrics-addr=:9124", "--cooldown=1s", "--max-nodes-per-round=8", "--manual-hold=1s",
	"--leader-elect-lease-duration=6s", "--leader-elect-renew-deadline=4s", "--leader-elect-retry-period=1s", "--v=2",
}, strings.Fields(os.Getenv("MIGFLEX_E2E_PLANNER_ARGS"))...)

var plannerInstall struct {
	once sync.Once
	err  error
}

// planner installs the planner once, opts the nodes in for t (node 1
// when none is given) and its pods' namespace out of the webhook, and
// returns that namespace.
func planner(t *testing.T, nodes ...simNode) string {
	t.Helper()
	installPlanner(t)
	if len(nodes) == 0 {
		nodes = []simNode{dpNode()}
	}
	for _, n := range nodes {
		n.setPlannerLabel(t, "enabled")
		t.Cleanup(func() { n.setPlannerLabel(t, "") })
	}
	ns := cluster.Namespace(t)
	patch := []byte(`{"metadata":{"labels":{"` + labelOptOut + `":"disabled"}}}`)
	if _, err := cluster.Client.CoreV1().Namespaces().Patch(t.Context(), ns, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// installPlanner installs the planner once. It applies the whole
// local-planner overlay, the agent's DaemonSets included: a test that
// changes one installs the planner first.
func installPlanner(t *testing.T) {
	t.Helper()
	migflex(t)
	plannerInstall.once.Do(func() {
		root, err := framework.RepoRoot()
		if err != nil {
			plannerInstall.err = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*timeout)
		defer cancel()
		dir := filepath.Join(root, "deployments/kustomize/overlays/local-planner")
		if out, err := cluster.Kubectl(ctx, "apply", "-k", dir); err != nil {
			plannerInstall.err = fmt.Errorf("installing %s: %w\n%s", dir, err, out)
			return
		}
		if plannerInstall.err = setPlannerArgs(ctx, plannerArgs); plannerInstall.err != nil {
			return
		}
		// The overlay turns the webhook reshape-first (a rollout); it
		// judges as the planner does, so it gets the planner's hold too.
		plannerInstall.err = addWebhookArg(ctx, "--planner-manual-hold=1s")
	})
	if plannerInstall.err != nil {
		t.Fatalf("installing the planner: %v", plannerInstall.err)
	}
}

// setPlannerArgs gives the planner's container args and waits for the
// rollout.
func setPlannerArgs(ctx context.Context, args []string) error {
	err := updateDeployment(ctx, plannerName, func(d *appsv1.Deployment) bool {
		c := &d.Spec.Template.Spec.Containers[0]
		if slices.Equal(c.Args, args) {
			return false
		}
		c.Args = args
		return true
	})
	if err != nil {
		return err
	}
	return cluster.WaitForDeploymentRollout(ctx, framework.MigflexNamespace, plannerName)
}

// addWebhookArg adds a flag to the webhook's container args, unless there,
// and waits for the rollout and for the webhook to answer.
func addWebhookArg(ctx context.Context, arg string) error {
	err := updateDeployment(ctx, framework.WebhookName, func(d *appsv1.Deployment) bool {
		c := &d.Spec.Template.Spec.Containers[0]
		if slices.Contains(c.Args, arg) {
			return false
		}
		c.Args = append(c.Args, arg)
		return true
	})
	if err != nil {
		return err
	}
	if err := cluster.WaitForDeploymentRollout(ctx, framework.MigflexNamespace, framework.WebhookName); err != nil {
		return err
	}
	return cluster.WaitForWebhookAnswers(ctx)
}

// updateDeployment applies change to a fresh copy of a migflex Deployment
// and writes it if change says so, again on a conflict: the deployment
// controller writes the status of a Deployment that is rolling out (as the
// webhook's is after `kubectl apply -k`), which makes a read stale at once.
func updateDeployment(ctx context.Context, name string, change func(*appsv1.Deployment) bool) error {
	deployments := cluster.Client.AppsV1().Deployments(framework.MigflexNamespace)
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		d, err := deployments.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !change(d) {
			return nil
		}
		_, err = deployments.Update(ctx, d, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("updating deployment %s: %w", name, err)
	}
	return nil
}

// setPlannerLabel sets node 1's opt-in label to value, or removes it.
func setPlannerLabel(t *testing.T, value string) {
	t.Helper()
	dpNode().setPlannerLabel(t, value)
}

// setPlannerLabel is setPlannerLabel on the node.
func (n simNode) setPlannerLabel(t *testing.T, value string) {
	t.Helper()
	v := "null"
	if value != "" {
		v = strconv.Quote(value)
	}
	patch := []byte(`{"metadata":{"labels":{"` + labelPlanner + `":` + v + `}}}`)
	// Not t.Context(): this also runs in cleanup.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cluster.Client.CoreV1().Nodes().Patch(ctx, n.NodeName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("labelling node %s %s=%s: %v", n.NodeName, labelPlanner, value, err)
	}
}

var all1g = []string{"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"}

// resetTo1g puts every GPU of node 1 back to seven free 1g.10gb, as a
// human would, and waits for it; the planner's hold on a human change (a
// second here) has passed when it returns.
func resetTo1g(t *testing.T) {
	t.Helper()
	dpNode().resetTo1g(t)
}

// resetTo1g is resetTo1g on the node.
func (n simNode) resetTo1g(t *testing.T) {
	t.Helper()
	written := time.Now()
	n.applyLayout(t, all1g...)
	if d := time.Until(written.Add(2 * time.Second)); d > 0 {
		time.Sleep(d) // the planner's --manual-hold, on the managed field's whole seconds
	}
}

// deletePodAndWait deletes a pod and waits until it is gone and the agent
// of its node no longer reports it holding a device.
func deletePodAndWait(t *testing.T, ns, name string) {
	t.Helper()
	ctx := t.Context()
	node, err := podNode(ctx, ns, name)
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	err = cluster.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	waitGone(t, ns, name, node)
}

func ptr[T any](v T) *T { return &v }

// waitRunning waits for the pod to be Running, from a watch started before
// it was created, and returns when the watch saw it.
func waitRunning(ctx context.Context, w watch.Interface) (time.Time, error) {
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return time.Time{}, fmt.Errorf("the pod watch ended")
			}
			if p, ok := ev.Object.(*corev1.Pod); ok && p.Status.Phase == corev1.PodRunning {
				return time.Now(), nil
			}
		case <-deadline:
			return time.Time{}, fmt.Errorf("the pod was not Running within %s", timeout)
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}

// podEvent waits for an Event of reason about the pod whose message
// contains every substring, and returns its message.
func podEvent(t *testing.T, ns, pod, reason string, contains ...string) string {
	t.Helper()
	var seen []string
	var msg string
	err := framework.WaitFor(t.Context(), reason+" on "+ns+"/"+pod, timeout, func(ctx context.Context) (bool, error) {
		list, err := cluster.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
			FieldSelector: fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.name", pod), fields.OneTermEqualSelector("reason", reason)).String(),
		})
		if err != nil {
			return false, err
		}
		seen = seen[:0]
		for _, ev := range list.Items {
			seen = append(seen, ev.Message)
			ok := true
			for _, c := range contains {
				ok = ok && strings.Contains(ev.Message, c)
			}
			if ok {
				msg = ev.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%v; %s Events seen: %q", err, reason, seen)
	}
	return msg
}

// plannerPods are the planner's running pods.
func plannerPods(ctx context.Context) ([]corev1.Pod, error) {
	list, err := cluster.Client.CoreV1().Pods(framework.MigflexNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + plannerName})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// leader is the holder of the planner's Lease: a process, named by its pod
// and a suffix of its own.
func leader(ctx context.Context) (string, error) {
	l, err := cluster.Client.CoordinationV1().Leases(framework.MigflexNamespace).Get(ctx, plannerName, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if l.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *l.Spec.HolderIdentity, nil
}

// signalPlanner sends sig to the planner process of pod: SIGKILL as a
// crash or an OOM kill would (no chance to release its Lease), SIGSTOP and
// SIGCONT to pause it past its Lease and let it go on.
func signalPlanner(pod string, sig syscall.Signal) error {
	pid, err := plannerPID(pod)
	if err != nil {
		return err
	}
	return syscall.Kill(pid, sig)
}

// plannerPID is the process ID of the planner of pod (its container's
// current process). The cluster runs on this host, so the process is one
// of ours to find.
func plannerPID(pod string) (int, error) {
	want := []byte("MIGFLEX_PLANNER_LEADER_ELECT_IDENTITY=" + pod + "\x00")
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return 0, err
	}
	for _, d := range dirs {
		cmd, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || !bytes.HasPrefix(cmd, []byte("/planner\x00")) {
			continue
		}
		env, err := os.ReadFile(filepath.Join(d, "environ"))
		if err != nil || !bytes.Contains(env, want) {
			continue
		}
		return strconv.Atoi(filepath.Base(d))
	}
	return 0, fmt.Errorf("no planner process of pod %s on this host", pod)
}

// scrape sums a metric's samples (all label sets matching the prefix of
// labels given, e.g. `cause="in-use"`) at url, with a token that may read
// metrics (metricsReaderToken).
func scrape(ctx context.Context, url, name, labels string) (float64, error) {
	token, err := metricsReaderToken(ctx)
	if err != nil {
		return 0, err
	}
	code, body, err := framework.Get(ctx, url, token)
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %d %s", url, code, body)
	}
	sum := 0.0
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := strings.TrimPrefix(line, name)
		if !strings.HasPrefix(rest, " ") && !strings.HasPrefix(rest, "{") {
			continue
		}
		if labels != "" && !strings.Contains(rest, labels) {
			continue
		}
		f := strings.Fields(rest)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", line, err)
		}
		sum += v
	}
	return sum, sc.Err()
}

// writeCounts are the writes to the Node by the agent (by cause) and the
// planner (every replica) so far.
type writeCounts struct {
	agent   map[string]float64
	planner float64
}

func countWrites(t *testing.T) writeCounts {
	t.Helper()
	ctx := t.Context()
	w := writeCounts{agent: map[string]float64{}}
	for _, cause := range []string{"reconcile", "announce", "health", "in-use"} {
		v, err := scrape(ctx, framework.AgentMetricsURL+"/metrics", "migflex_agent_node_writes_total", `cause="`+cause+`"`)
		if err != nil {
			t.Fatalf("the agent's metrics: %v", err)
		}
		w.agent[cause] = v
	}
	pods, err := plannerPods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		v, err := scrape(ctx, "https://"+p.Status.PodIP+":"+framework.PlannerMetricsPort+"/metrics", "migflex_planner_node_writes_total", "")
		if err != nil {
			t.Fatalf("planner %s's metrics: %v", p.Name, err)
		}
		w.planner += v
	}
	return w
}

func (w writeCounts) minus(before writeCounts) writeCounts {
	d := writeCounts{agent: map[string]float64{}, planner: w.planner - before.planner}
	for k, v := range w.agent {
		d.agent[k] = v - before.agent[k]
	}
	return d
}

func (w writeCounts) agentTotal() float64 {
	s := 0.0
	for _, v := range w.agent {
		s += v
	}
	return s
}

// nodeWriteCounter counts the Node's updates (every writer: agent,
// planner, kubelet) from a watch.
type nodeWriteCounter struct {
	mu sync.Mutex
	n  int
	w  watch.Interface
}

func countNodeUpdates(t *testing.T) *nodeWriteCounter {
	t.Helper()
	w, err := cluster.Client.CoreV1().Nodes().Watch(t.Context(), metav1.ListOptions{FieldSelector: "metadata.name=" + cluster.NodeName})
	if err != nil {
		t.Fatal(err)
	}
	c := &nodeWriteCounter{w: w}
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type == watch.Modified {
				c.mu.Lock()
				c.n++
				c.mu.Unlock()
			}
		}
	}()
	return c
}

func (c *nodeWriteCounter) stop() int {
	c.w.Stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// TestPlannerReshapesForAPendingPod: on a node partitioned all 1g.10gb,
// nothing running, opted in, a pod asking for nvidia.com/mig-3g.40gb runs
// through a reshape, with a MigReshapePlanned Event naming the node and
// GPU. Ten runs, each from that state, measure creation to Running, and
// the API writes each reshape costs.
func TestPlannerReshapesForAPendingPod(t *testing.T) {
	ns := planner(t)
	ctx := t.Context()
	const runs = 10
	// A reset ends when the kubelet has published it, at one of its
	// status updates: the runs start spread over its period, as pods
	// arrive at any time, rather than all at the same phase of it.
	period := 10 * time.Second
	if d, err := time.ParseDuration(os.Getenv("KUBELET_NODE_STATUS_UPDATE_FREQUENCY")); err == nil && d > 0 {
		period = d
	}
	var took []time.Duration
	var perRun []string
	for i := range runs {
		resetTo1g(t)
		time.Sleep(period * time.Duration(i) / runs)
		name := fmt.Sprintf("reshape-%d", i)
		w, err := cluster.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
		if err != nil {
			t.Fatal(err)
		}
		before := countWrites(t)
		updates := countNodeUpdates(t)
		start := time.Now()
		cluster.CreatePod(t, gpuPod(ns, name, "nvidia.com/mig-3g.40gb", 1, "sleep", "3600"))
		running, err := waitRunning(ctx, w)
		w.Stop()
		if err != nil {
			p, _ := cluster.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			n, _ := cluster.Node(ctx)
			t.Fatalf("run %d: %v; pod %+v; node %s", i, err, p.Status, summary(n))
		}
		took = append(took, running.Sub(start))
		msg := podEvent(t, ns, name, reasonPlanned, "will run on node "+cluster.NodeName+": GPU ", "-> ")
		// The reshape is over once the agent reports the pod holding its
		// device: what follows is the next pod's business.
		if _, err := cluster.WaitForNode(ctx, "the agent reporting "+name+" on its device", timeout, func(n *corev1.Node) error {
			if !strings.Contains(n.Annotations[annotationLayout], ns+"/"+name) {
				return fmt.Errorf("layout %s", n.Annotations[annotationLayout])
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		nodeUpdates := updates.stop()
		d := countWrites(t).minus(before)
		perRun = append(perRun, fmt.Sprintf("run %d: %s; Node writes %d (agent %v: %v, planner %v, others %v); %s",
			i, running.Sub(start).Round(time.Millisecond), nodeUpdates, d.agentTotal(), d.agent, d.planner, float64(nodeUpdates)-d.agentTotal()-d.planner, msg))
		if d.planner != 1 {
			t.Errorf("run %d: the planner wrote the Node %v times, want once", i, d.planner)
		}
		deletePodAndWait(t, ns, name)
	}
	for _, l := range perRun {
		t.Log(l)
	}
	t.Logf("creation -> Running through a reshape over %d runs (kubelet status period %s, planner %q): p50 %s, p90 %s, min %s, max %s", runs, period, plannerArgs,
		percentile(took, 0.5).Round(time.Millisecond), percentile(took, 0.9).Round(time.Millisecond),
		slices.Min(took).Round(time.Millisecond), slices.Max(took).Round(time.Millisecond))
}

// TestPlannerAvoidsBusyGPU: a pod on an instance of GPU A makes the
// planner reshape the other GPU for a whole-GPU profile; a second such
// pod, which only the GPUs pods hold could take, stays Pending with a
// MigReshapeImpossible Event naming the pods.
func TestPlannerAvoidsBusyGPU(t *testing.T) {
	ns := planner(t)
	ctx := t.Context()
	resetTo1g(t)
	small := gpuPod(ns, "small", "nvidia.com/mig-1g.10gb", 1, "sleep", "3600")
	cluster.CreatePod(t, small)
	if _, err := cluster.WaitForPodPhase(ctx, ns, small.Name, corev1.PodRunning); err != nil {
		t.Fatal(err)
	}
	held, err := framework.KubeletPodDevices(ctx, ns, small.Name)
	if err != nil {
		t.Fatal(err)
	}
	_, layout := waitForLayout(t, all1g...)
	busy, ok := gpuHolding(layout, held["nvidia.com/mig-1g.10gb"][0])
	if !ok {
		t.Fatalf("the small pod's device %v is in no GPU of %+v", held, layout)
	}
	other := 1 - busy
	// The agent reports the pod in use before the planner may count on it.
	if _, err := cluster.WaitForNode(ctx, "the small pod in the layout", timeout, func(n *corev1.Node) error {
		if !strings.Contains(n.Annotations[annotationLayout], ns+"/small") {
			return fmt.Errorf("layout %s", n.Annotations[annotationLayout])
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	big := gpuPod(ns, "big", "nvidia.com/mig-7g.80gb", 1, "sleep", "3600")
	cluster.CreatePod(t, big)
	if _, err := cluster.WaitForPodPhase(ctx, ns, big.Name, corev1.PodRunning); err != nil {
		t.Fatal(err)
	}
	podEvent(t, ns, big.Name, reasonPlanned, fmt.Sprintf("GPU %d repartitioned", other))
	_, layout = waitForLayouts(t, gpuLayouts{busy: all1g, other: {"7g.80gb"}})
	if g, _ := gpuHolding(layout, held["nvidia.com/mig-1g.10gb"][0]); g != busy {
		t.Errorf("the small pod's device moved: %+v", layout)
	}

	second := gpuPod(ns, "second", "nvidia.com/mig-7g.80gb", 1, "sleep", "3600")
	cluster.CreatePod(t, second)
	msg := podEvent(t, ns, second.Name, reasonImpossible, ns+"/small", ns+"/big")
	t.Logf("MigReshapeImpossible: %s", msg)
	time.Sleep(3 * time.Second) // rounds keep coming (--resync, and the Node changes); none may change a busy GPU
	p, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, second.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != corev1.PodPending {
		t.Errorf("the second pod is %s, want Pending", p.Status.Phase)
	}
	waitForLayouts(t, gpuLayouts{busy: all1g, other: {"7g.80gb"}})
}

// TestPlannerLeavesNodesAlone: an opted-out node, one whose agent refused
// its layout (failed) and one whose agent waits for a pod (pending) are
// never changed; the pod's MigReshapeImpossible Event says why.
func TestPlannerLeavesNodesAlone(t *testing.T) {
	ns := planner(t)
	ctx := t.Context()
	resetTo1g(t)
	unchanged := func(what string, want string) {
		t.Helper()
		time.Sleep(3 * time.Second) // rounds come and go meanwhile
		n, err := cluster.Node(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := n.Annotations[annotationMigConfig]; got != want {
			t.Errorf("%s: mig.config changed to %q, want %q", what, got, want)
		}
		if _, ok := n.Annotations[annotationProposed]; ok {
			t.Errorf("%s: a proposal on the node", what)
		}
	}
	node, err := cluster.Node(ctx)
	if err != nil {
		t.Fatal(err)
	}
	doc := node.Annotations[annotationMigConfig]

	t.Run("opted out", func(t *testing.T) {
		setPlannerLabel(t, "")
		pod := gpuPod(ns, "opted-out", "nvidia.com/mig-3g.40gb", 1, "sleep", "3600")
		cluster.CreatePod(t, pod)
		podEvent(t, ns, pod.Name, reasonImpossible, "not opted in")
		unchanged("opted out", doc)
		deletePodAndWait(t, ns, pod.Name)
		setPlannerLabel(t, "enabled")
	})

	t.Run("failed", func(t *testing.T) {
		bad := migConfig("9g.99gb")
		setMigConfig(t, annotationMigConfig, bad)
		if _, err := cluster.WaitForNode(ctx, "state failed", timeout, func(n *corev1.Node) error {
			if n.Labels[labelState] != "failed" {
				return fmt.Errorf("state %q", n.Labels[labelState])
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		pod := gpuPod(ns, "failed", "nvidia.com/mig-3g.40gb", 1, "sleep", "3600")
		cluster.CreatePod(t, pod)
		podEvent(t, ns, pod.Name, reasonImpossible, "state failed")
		unchanged("failed", bad)
		deletePodAndWait(t, ns, pod.Name)
		resetTo1g(t)
	})

	t.Run("pending", func(t *testing.T) {
		holder := gpuPod(ns, "holder", "nvidia.com/mig-1g.10gb", 1, "sleep", "3600")
		cluster.CreatePod(t, holder)
		if _, err := cluster.WaitForPodPhase(ctx, ns, holder.Name, corev1.PodRunning); err != nil {
			t.Fatal(err)
		}
		// A whole-GPU layout everywhere: the GPU the pod holds waits.
		waiting := migConfig("7g.80gb")
		setMigConfig(t, annotationMigConfig, waiting)
		if _, err := cluster.WaitForNode(ctx, "state pending naming the pod", timeout, func(n *corev1.Node) error {
			if n.Labels[labelState] != "pending" || !strings.Contains(n.Annotations[annotationReason], ns+"/holder") {
				return fmt.Errorf("state %q, reason %q", n.Labels[labelState], n.Annotations[annotationReason])
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		pod := gpuPod(ns, "pending", "nvidia.com/mig-3g.40gb", 1, "sleep", "3600")
		cluster.CreatePod(t, pod)
		podEvent(t, ns, pod.Name, reasonImpossible, "state pending")
		unchanged("pending", waiting)
		deletePodAndWait(t, ns, pod.Name)
		deletePodAndWait(t, ns, holder.Name)
		waitForLayout(t, "7g.80gb")
	})
}

// TestPlannerLeaderKilled: two replicas; the leader's process is killed
// (SIGKILL: no release of the Lease) in the middle of a round: once while it batches
// the pending pod's arrival, once right after it wrote the layout. Each
// time the other replica takes over and the pod runs, with exactly one
// change of nvidia.com/mig.config: none lost, none doubled.
func TestPlannerLeaderKilled(t *testing.T) {
	ns := planner(t)
	ctx := t.Context()
	args := leaderFaultArgs(t)
	for i, when := range []string{"while batching", "after its write"} {
		t.Run(when, func(t *testing.T) {
			resetTo1g(t)
			if err := setPlannerArgs(ctx, args); err != nil { // two replicas up
				t.Fatal(err)
			}
			lead := waitForPlannerLeader(t)
			values := watchMigConfig(t)

			name := fmt.Sprintf("leader-%d", i)
			pod := gpuPod(ns, name, "nvidia.com/mig-3g.40gb", 1, "sleep", "3600")
			cluster.CreatePod(t, pod)
			if i == 0 {
				waitUnschedulable(t, ns, name)
			} else {
				select {
				case <-values.changed:
				case <-time.After(timeout):
					t.Fatal("the leader never wrote the layout")
				}
			}
			killed := time.Now()
			leadPod, _, _ := strings.Cut(lead, "_")
			if err := signalPlanner(leadPod, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			next := waitForNewPlannerLeader(t, lead)
			t.Logf("leader %s killed (SIGKILL) %s; %s took over after %s (lease duration %s)", lead, when, next, time.Since(killed).Round(100*time.Millisecond), plannerLease)
			if _, err := cluster.WaitForPodPhase(ctx, ns, name, corev1.PodRunning); err != nil {
				t.Fatal(err)
			}
			values.checkOneChange(t)
			deletePodAndWait(t, ns, name)
		})
	}
}

// leaderFaultArgs are the planner's flags for the tests that take its
// leader down in the middle of a round: a batch long enough that the fault
// lands inside it. The planner gets plannerArgs back when t ends.
func leaderFaultArgs(t *testing.T) []string {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*timeout)
		defer cancel()
		if err := setPlannerArgs(ctx, plannerArgs); err != nil {
			t.Errorf("restoring the planner's flags: %v", err)
		}
	})
	return append(slices.Clone(plannerArgs), "--batch-idle=3s", "--batch-max=5s")
}

// waitForPlannerLeader waits until both planner replicas run and one of
// them holds the Lease, and returns the holder's identity.
func waitForPlannerLeader(t *testing.T) string {
	t.Helper()
	var lead string
	if err := framework.WaitFor(t.Context(), "a planner leader", timeout, func(ctx context.Context) (bool, error) {
		id, err := leader(ctx)
		lead = id
		pods, _ := plannerPods(ctx)
		pod, _, _ := strings.Cut(id, "_")
		return err == nil && id != "" && len(pods) == 2 && slices.ContainsFunc(pods, func(p corev1.Pod) bool { return p.Name == pod }), err
	}); err != nil {
		t.Fatal(err)
	}
	return lead
}

// waitForNewPlannerLeader waits until a replica other than old holds the
// Lease, and returns it.
func waitForNewPlannerLeader(t *testing.T, old string) string {
	t.Helper()
	var next string
	if err := framework.WaitFor(t.Context(), "another leader than "+old, timeout, func(ctx context.Context) (bool, error) {
		id, err := leader(ctx)
		next = id
		return err == nil && id != "" && id != old, err
	}); err != nil {
		t.Fatal(err)
	}
	return next
}

// waitUnschedulable waits until the scheduler has marked the pod
// unschedulable: the planner's leader batches its arrival from then.
func waitUnschedulable(t *testing.T, ns, name string) {
	t.Helper()
	if err := framework.WaitFor(t.Context(), "the pod unschedulable", timeout, func(ctx context.Context) (bool, error) {
		p, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatal(err)
	}
}

// migConfigValues records every value node 1's nvidia.com/mig.config
// takes, from a watch, and signals changed (coalesced) on each.
type migConfigValues struct {
	mu      sync.Mutex
	values  []string
	changed chan struct{}
}

// watchMigConfig starts recording node 1's nvidia.com/mig.config from its
// value now until t ends. A watch the API server ends (an outage; a
// restarted API server's watch cache answers 410 Gone to the old
// resourceVersion) is started again from the Node as it is then: nothing
// is written while the API server is down, and the planner's leader needs
// its Lease and a batch window after it is back before it writes.
func watchMigConfig(t *testing.T) *migConfigValues {
	t.Helper()
	nodes := cluster.Client.CoreV1().Nodes()
	node, err := cluster.Node(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	v := &migConfigValues{values: []string{node.Annotations[annotationMigConfig]}, changed: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	t.Cleanup(cancel)
	go func() {
		rv := node.ResourceVersion
		for ctx.Err() == nil {
			if w, err := nodes.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + cluster.NodeName, ResourceVersion: rv}); err == nil {
				for ev := range w.ResultChan() {
					n, ok := ev.Object.(*corev1.Node)
					if !ok {
						break // an error: 410 Gone, or the API server going away
					}
					rv = n.ResourceVersion
					v.record(n)
				}
				w.Stop()
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
			if n, err := nodes.Get(ctx, cluster.NodeName, metav1.GetOptions{}); err == nil {
				rv = n.ResourceVersion
				v.record(n)
			}
		}
	}()
	return v
}

// record appends n's nvidia.com/mig.config if it is another value than
// the last one.
func (v *migConfigValues) record(n *corev1.Node) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if a := n.Annotations[annotationMigConfig]; a != v.values[len(v.values)-1] {
		v.values = append(v.values, a)
		select {
		case v.changed <- struct{}{}:
		default:
		}
	}
}

// checkOneChange fails t unless nvidia.com/mig.config changed exactly once
// since the watch began, a moment from now: any late second write (a
// stale leader's) would show by then.
func (v *migConfigValues) checkOneChange(t *testing.T) {
	t.Helper()
	time.Sleep(2 * time.Second)
	v.mu.Lock()
	got := slices.Clone(v.values)
	v.mu.Unlock()
	if len(got) != 2 {
		t.Errorf("nvidia.com/mig.config took %d values after the pod arrived, want exactly one change: %q", len(got)-1, got[1:])
	}
}

// TestPlannerDryRun: with --dry-run the planner explains (Events, the
// proposal annotation) and writes no nvidia.com/mig.config.
func TestPlannerDryRun(t *testing.T) {
	ns := planner(t)
	ctx := t.Context()
	resetTo1g(t)
	withPlannerArgs(t, "--dry-run")
	node, err := cluster.Node(ctx)
	if err != nil {
		t.Fatal(err)
	}
	doc := node.Annotations[annotationMigConfig]
	pod := gpuPod(ns, "dry", "nvidia.com/mig-3g.40gb", 1, "sleep", "3600")
	cluster.CreatePod(t, pod)
	podEvent(t, ns, pod.Name, reasonPlanned, "would run on node "+cluster.NodeName, "dry run")
	if _, err := cluster.WaitForNode(ctx, "a proposal", timeout, func(n *corev1.Node) error {
		if !strings.Contains(n.Annotations[annotationProposed], "3g.40gb") {
			return fmt.Errorf("proposal %q", n.Annotations[annotationProposed])
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // rounds come and go meanwhile
	n, err := cluster.Node(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Annotations[annotationMigConfig]; got != doc {
		t.Errorf("dry run changed mig.config to %q", got)
	}
	for _, mf := range n.ManagedFields {
		if mf.Manager == plannerManager && strings.Contains(mf.FieldsV1.GetRawString(), `"f:nvidia.com/mig.config"`) {
			t.Errorf("the planner owns nvidia.com/mig.config after a dry run: %s", mf.FieldsV1.GetRawString())
		}
	}
	p, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != corev1.PodPending {
		t.Errorf("the pod is %s in a dry run, want Pending", p.Status.Phase)
	}
	deletePodAndWait(t, ns, pod.Name)
	if _, err := cluster.WaitForNode(ctx, "the proposal removed", timeout, func(n *corev1.Node) error {
		if v, ok := n.Annotations[annotationProposed]; ok {
			return fmt.Errorf("proposal %q", v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestPlannerReshapeFirst: with the webhook reshape-first, a 3g.40gb pod
// on a node that can be reshaped for it is admitted as asked (annotated
// migflex.io/reshape: expected) and runs on a 3g.40gb; a 4g.40gb pod right
// after is admitted as asked too, the planner having changed only the
// other GPU, and runs on a 4g.40gb; with the node opted out, a 3g.40gb pod
// is rewritten down as without the planner and runs on a 1g.10gb.
func TestPlannerReshapeFirst(t *testing.T) {
	planner(t)
	ctx := t.Context()
	ns := cluster.Namespace(t) // not opted out of the webhook
	runAs := func(t *testing.T, name, res string) (*corev1.Pod, map[string][]string) {
		t.Helper()
		pod := gpuPod(ns, name, res, 1, "sleep", "3600")
		cluster.CreatePod(t, pod)
		p, err := cluster.WaitForPodPhase(ctx, ns, name, corev1.PodRunning)
		if err != nil {
			t.Fatal(err)
		}
		held, err := framework.KubeletPodDevices(ctx, ns, name)
		if err != nil {
			t.Fatal(err)
		}
		return p, held
	}
	run := func(name string) (*corev1.Pod, map[string][]string) {
		t.Helper()
		return runAs(t, name, "nvidia.com/mig-3g.40gb")
	}

	// A dry run shows the webhook's answer without a pod: its view of the
	// Node comes from an informer, so it follows a change the test has
	// just made a moment later, however busy the machine.
	probe := gpuPod(ns, "dry-run", "nvidia.com/mig-3g.40gb", 1, "sleep", "3600")

	t.Run("the planner can reshape", func(t *testing.T) {
		resetTo1g(t)
		waitForAnswer(t, probe, "leave the pod for the planner", func(p *corev1.Pod) bool { return p.Annotations["migflex.io/reshape"] == "expected" })
		p, held := run("as-asked")
		if p.Annotations["migflex.io/reshape"] != "expected" || p.Annotations[annotationFallback] != "" {
			t.Errorf("annotations %v, want migflex.io/reshape=expected and no fallback", p.Annotations)
		}
		if len(held["nvidia.com/mig-3g.40gb"]) != 1 {
			t.Errorf("the pod holds %v, want one nvidia.com/mig-3g.40gb", held)
		}
		podEvent(t, ns, p.Name, reasonPlanned, "will run on node "+cluster.NodeName)
		deletePodAndWait(t, ns, p.Name)
	})

	// The planner changes one GPU for a first pod; a second pod asks for
	// a 4g.40gb at once. The webhook saw the planner's write in flight, so
	// it holds only the GPU that write changed for the cooldown (its own
	// 2 minutes here: the suite shortens only the planner's), not the
	// idle other one: the pod is not cut to the 3g.40gb that exists.
	t.Run("an idle GPU of a node the planner just changed", func(t *testing.T) {
		resetTo1g(t)
		waitForAnswer(t, probe, "leave the pod for the planner", func(p *corev1.Pod) bool { return p.Annotations["migflex.io/reshape"] == "expected" })
		first, held := runAs(t, "first", "nvidia.com/mig-3g.40gb")
		if len(held["nvidia.com/mig-3g.40gb"]) != 1 {
			t.Fatalf("the first pod holds %v, want one nvidia.com/mig-3g.40gb", held)
		}
		second, held := runAs(t, "second", "nvidia.com/mig-4g.40gb")
		if second.Annotations["migflex.io/reshape"] != "expected" || second.Annotations[annotationFallback] != "" {
			t.Errorf("annotations %v, want migflex.io/reshape=expected and no fallback", second.Annotations)
		}
		if len(held["nvidia.com/mig-4g.40gb"]) != 1 {
			t.Errorf("the second pod holds %v, want one nvidia.com/mig-4g.40gb", held)
		}
		deletePodAndWait(t, ns, second.Name)
		deletePodAndWait(t, ns, first.Name)
	})

	t.Run("the planner cannot", func(t *testing.T) {
		resetTo1g(t)
		setPlannerLabel(t, "")
		defer setPlannerLabel(t, "enabled")
		waitForAnswer(t, probe, "rewrite the pod down", func(p *corev1.Pod) bool { return p.Annotations[annotationFallback] != "" })
		p, held := run("rewritten")
		if p.Annotations[annotationFallback] != "3g.40gb->1g.10gb" || p.Annotations["migflex.io/reshape"] != "" {
			t.Errorf("annotations %v, want the fallback 3g.40gb->1g.10gb", p.Annotations)
		}
		if len(held["nvidia.com/mig-1g.10gb"]) != 1 {
			t.Errorf("the pod holds %v, want one nvidia.com/mig-1g.10gb", held)
		}
		deletePodAndWait(t, ns, p.Name)
	})
}

// Each planner replica serves its metrics over HTTPS at its pod's IP, to a
// token the API server lets read them and to no other; its /healthz there
// answers the kubelet's probes without one.
func TestPlannerMetricsNeedAnAuthorizedToken(t *testing.T) {
	planner(t)
	pods, err := plannerPods(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) == 0 {
		t.Fatal("no planner pod runs")
	}
	for _, p := range pods {
		t.Run(p.Name, func(t *testing.T) {
			base := "https://" + p.Status.PodIP + ":" + framework.PlannerMetricsPort
			checkMetricsGuarded(t, base, "migflex_planner_leader ")
			if code, body, err := framework.Get(t.Context(), base+"/healthz", ""); err != nil || code != http.StatusOK {
				t.Errorf("/healthz without a token: %d %q %v, want 200", code, body, err)
			}
		})
	}
}

// TestPlannerChoosesBetweenNodes: with every node opted in, its GPUs cut
// into free small instances (node 1's H100s and node 2's A100s, through
// DRA, into 1g.10gb; node 3's B200 into 1g.23gb), a pending pod that no
// node serves yet, pinned to none, runs on the node the planner reshaped
// for it, which its MigReshapePlanned Event names, and no other node's
// layout changes:
//   - nvidia.com/mig-2g.45gb, a B200 profile: only node 3 can make it;
//   - nvidia.com/mig-3g.40gb: node 1 and node 2 can both make it (the
//     same profiles on H100 and A100), the planner picks one, and the
//     scheduler places the pod there, through its device plugin or DRA.
func TestPlannerChoosesBetweenNodes(t *testing.T) {
	nodes := []simNode{dpNode(), draNode(t), b200Node(t)}
	ns := planner(t, nodes...)
	ctx := t.Context()
	for _, tc := range []struct {
		profile string
		on      []simNode
	}{
		{"2g.45gb", nodes[2:]},
		{"3g.40gb", nodes[:2]},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			nodes[0].resetTo1g(t)
			nodes[1].resetTo1g(t)
			nodes[2].resetTo(t, "1g.23gb")
			before := map[string]string{}
			for _, n := range nodes {
				before[n.NodeName] = n.migConfigOf(t)
			}
			name := "wants-" + strings.ReplaceAll(tc.profile, ".", "-")
			cluster.CreatePod(t, anyNodeGPUPod(ns, name, "nvidia.com/mig-"+tc.profile, 1, "sleep", "3600"))
			if _, err := cluster.WaitForPodPhase(ctx, ns, name, corev1.PodRunning); err != nil {
				t.Fatal(err)
			}
			on, err := podNode(ctx, ns, name)
			if err != nil {
				t.Fatal(err)
			}
			msg := podEvent(t, ns, name, reasonPlanned, "will run on node "+on+": GPU ")
			t.Logf("%s on %s: %s", name, on, msg)
			if !slices.ContainsFunc(tc.on, func(n simNode) bool { return n.NodeName == on }) {
				t.Errorf("pod %s runs on node %s, which cannot make %s", name, on, tc.profile)
			}
			for _, n := range nodes {
				if after := n.migConfigOf(t); n.NodeName != on && after != before[n.NodeName] {
					t.Errorf("node %s, where the pod does not run, changed its mig.config to %q", n.NodeName, after)
				}
			}
			if on == nodes[1].NodeName {
				nodes[1].checkExtendedResourceClaim(t, ns, name, "nvidia.com/mig-"+tc.profile, tc.profile)
			}
			deletePodAndWait(t, ns, name)
		})
	}
}

// resetTo is resetTo1g with seven free instances of profile on every GPU.
func (n simNode) resetTo(t *testing.T, profile string) {
	t.Helper()
	written := time.Now()
	n.applyLayout(t, slices.Repeat([]string{profile}, 7)...)
	if d := time.Until(written.Add(2 * time.Second)); d > 0 {
		time.Sleep(d) // the planner's --manual-hold, as resetTo1g
	}
}

// withPlannerArgs runs the planner with its e2e flags plus extra until the
// test ends, then restores them.
func withPlannerArgs(t *testing.T, extra ...string) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*timeout)
		defer cancel()
		if err := setPlannerArgs(ctx, plannerArgs); err != nil {
			t.Errorf("restoring the planner's flags: %v", err)
		}
	})
	if err := setPlannerArgs(t.Context(), append(slices.Clone(plannerArgs), extra...)); err != nil {
		t.Fatal(err)
	}
}
