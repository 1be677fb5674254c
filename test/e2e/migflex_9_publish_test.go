//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/nodeagent/deviceplugin"
	"github.com/migflex/migflex/test/e2e/framework"
)

const envPublishAllocatable = "MIGFLEX_AGENT_PUBLISH_ALLOCATABLE"

// TestPublishedAllocatableIsHeld: with --publish-allocatable (the
// default) the agent writes a new layout's counts into the Node's status
// before the kubelet's status update does, so the scheduler places pods on
// the new devices seconds earlier. What must never happen is the kubelet
// refusing such a pod (UnexpectedAdmissionError: a device it does not
// hold; OutOf<resource>: its own view of the Node lacks it). Each round
// changes GPU 0 to a profile it did not have and, right after, creates one
// pod more than the new layout has devices of it: as many pods as devices
// must run, each on a device of the new layout, the one left over must
// wait for the scheduler, and no pod may fail admission. The agent's
// status write must have happened (its field manager on the Node's
// status), or the test would prove nothing about it.
func TestPublishedAllocatableIsHeld(t *testing.T) {
	migflex(t)
	ctx := t.Context()
	if v := agentEnv(t, envPublishAllocatable); v == "false" {
		t.Fatalf("the agent runs with %s=%s", envPublishAllocatable, v)
	}
	ns := cluster.Namespace(t)
	rounds := []struct {
		gpu0    []string
		profile string
		n       int
	}{
		{[]string{"3g.40gb", "3g.40gb"}, "3g.40gb", 2},
		{[]string{"2g.20gb", "2g.20gb", "2g.20gb"}, "2g.20gb", 3},
		{[]string{"4g.40gb", "3g.40gb"}, "4g.40gb", 1},
		{[]string{"3g.40gb", "3g.40gb"}, "3g.40gb", 2},
	}
	applyLayouts(t, gpuLayouts{0: all1g, 1: all1g})
	published := 0
	for i, r := range rounds {
		res := "nvidia.com/mig-" + r.profile
		var hist *allocatableHistory
		if i == 0 {
			hist = watchAllocatable(t, res)
		}
		start := time.Now()
		setMigConfig(t, annotationMigConfig, migConfigPerGPU(gpuLayouts{0: r.gpu0, 1: all1g}))
		var names []string
		for j := range r.n + 1 {
			pod := gpuPod(ns, fmt.Sprintf("r%d-%s-%d", i, strings.ReplaceAll(r.profile, ".", "-"), j), res, 1, "sleep", "3600")
			pod.Labels = map[string]string{labelOptOut: "disabled"}
			cluster.CreatePod(t, pod)
			names = append(names, pod.Name)
		}
		running, pending := waitForPlaced(t, ns, names, r.n)
		took := time.Since(start)
		node, err := cluster.WaitForNode(ctx, "the running pods on devices of the new layout", timeout, func(n *corev1.Node) error {
			return heldOnProfile(n, ns, running, r.profile)
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := checkNotAdmitted(ctx, ns, pending); err != nil {
			t.Error(err)
		}
		if publishedByAgent(node) {
			published++
		}
		if hist != nil {
			// The kubelet's own status update comes within a period of the
			// agent's write; it computes the same counts, so the value must
			// stay.
			if err := hist.steadyAfter(int64(r.n), 12*time.Second); err != nil {
				t.Error(err)
			}
		}
		t.Logf("round %d: %d x %s Running %s after the change, %s pending; allocatable %v", i, r.n, res,
			took.Round(time.Millisecond), pending, gpuResources(node.Status.Allocatable))
		for _, name := range names {
			deletePodAndWait(t, ns, name)
		}
	}
	if published == 0 {
		t.Errorf("the agent's status write (field manager %s) never showed on the Node", deviceplugin.FieldManager)
	}
	// The writes show on the agent's metrics, as an operator would check.
	if v, err := scrape(t.Context(), framework.AgentMetricsURL+"/metrics", "migflex_agent_allocatable_writes_total", `result="`+deviceplugin.StatusWritten+`"`); err != nil || v < 1 {
		t.Errorf("migflex_agent_allocatable_writes_total{result=%q} = %v (%v), want at least 1", deviceplugin.StatusWritten, v, err)
	}
}

// allocatableHistory records the Node's allocatable of one resource, from
// a watch.
type allocatableHistory struct {
	res    corev1.ResourceName
	stop   func()
	done   chan struct{}
	mu     sync.Mutex
	values []allocatableValue
}

type allocatableValue struct {
	at    time.Time
	value int64
}

func watchAllocatable(t *testing.T, res string) *allocatableHistory {
	t.Helper()
	w, err := cluster.Client.CoreV1().Nodes().Watch(t.Context(), metav1.ListOptions{FieldSelector: "metadata.name=" + cluster.NodeName})
	if err != nil {
		t.Fatal(err)
	}
	h := &allocatableHistory{res: corev1.ResourceName(res), stop: w.Stop, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		for ev := range w.ResultChan() {
			if n, ok := ev.Object.(*corev1.Node); ok {
				q := n.Status.Allocatable[h.res]
				h.mu.Lock()
				if len(h.values) == 0 || h.values[len(h.values)-1].value != q.Value() {
					h.values = append(h.values, allocatableValue{time.Now(), q.Value()})
				}
				h.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { w.Stop(); <-h.done })
	return h
}

// steadyAfter waits until the history is span past the first time it
// showed want and checks that it never left want after: a kubelet status
// update that disagreed with the agent's write would show as a change.
func (h *allocatableHistory) steadyAfter(want int64, span time.Duration) error {
	h.mu.Lock()
	first := -1
	for i, v := range h.values {
		if v.value == want {
			first = i
			break
		}
	}
	if first < 0 {
		defer h.mu.Unlock()
		return fmt.Errorf("allocatable %s never showed %d: %v", h.res, want, h.values)
	}
	reached := h.values[first].at
	h.mu.Unlock()
	time.Sleep(time.Until(reached.Add(span)))
	h.stop()
	<-h.done
	h.mu.Lock()
	defer h.mu.Unlock()
	if after := h.values[first:]; len(after) != 1 {
		return fmt.Errorf("allocatable %s changed after it showed %d: %v", h.res, want, after)
	}
	return nil
}

// waitForPlaced waits until n of the pods run and the others are refused
// by the scheduler (never by the kubelet), and returns both.
func waitForPlaced(t *testing.T, ns string, names []string, n int) (running []string, pending string) {
	t.Helper()
	var last string
	err := framework.WaitFor(t.Context(), fmt.Sprintf("%d of %v Running, the other unschedulable", n, names), timeout, func(ctx context.Context) (bool, error) {
		running, pending = nil, ""
		var states []string
		for _, name := range names {
			p, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if p.Status.Phase == corev1.PodFailed {
				return false, fmt.Errorf("pod %s failed: %s: %s", name, p.Status.Reason, p.Status.Message)
			}
			switch {
			case p.Status.Phase == corev1.PodRunning:
				running = append(running, name)
			case unschedulable(p):
				pending = name
			}
			states = append(states, fmt.Sprintf("%s %s", name, p.Status.Phase))
		}
		last = strings.Join(states, ", ")
		return len(running) == n && pending != "", nil
	})
	if err != nil {
		t.Fatalf("%v (last: %s)", err, last)
	}
	return running, pending
}

func unschedulable(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

// heldOnProfile checks that the agent's layout shows each pod holding a
// device of profile.
func heldOnProfile(n *corev1.Node, ns string, pods []string, profile string) error {
	gpus, err := nodeinfo.ParseLayout(n.Annotations[annotationLayout])
	if err != nil {
		return err
	}
	on := map[string]string{}
	for _, g := range gpus {
		for _, in := range g.Instances {
			for _, p := range in.UsedBy {
				on[p] = in.Profile
			}
		}
		for _, p := range g.UsedBy {
			on[p] = "whole GPU"
		}
	}
	for _, p := range pods {
		if got := on[ns+"/"+p]; got != profile {
			return fmt.Errorf("pod %s holds %q, want a %s device", p, got, profile)
		}
	}
	return nil
}

// checkNotAdmitted checks that the pod the layout has no device for was
// never bound: the scheduler kept it, the kubelet never saw it.
func checkNotAdmitted(ctx context.Context, ns, name string) error {
	p, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if p.Spec.NodeName != "" || p.Status.Phase != corev1.PodPending {
		return fmt.Errorf("pod %s bound to %q in phase %s (%s), want pending unscheduled", name, p.Spec.NodeName, p.Status.Phase, p.Status.Reason)
	}
	return nil
}

// publishedByAgent says whether the agent's status writer manages fields
// of the Node's status.
func publishedByAgent(n *corev1.Node) bool {
	return slices.ContainsFunc(n.ManagedFields, func(f metav1.ManagedFieldsEntry) bool {
		return f.Manager == deviceplugin.FieldManager && f.Subresource == "status"
	})
}

// agentEnv is the value of the agent container's variable name, "" when
// unset.
func agentEnv(t *testing.T, name string) string {
	t.Helper()
	ds, err := cluster.Client.AppsV1().DaemonSets(framework.MigflexNamespace).Get(t.Context(), framework.AgentDaemonSet, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return envValue(ds, ds.Spec.Template.Spec.Containers[0].Name, name)
}

// setAgentPublish sets the agent's --publish-allocatable through its
// environment twin and waits for the new agent to report success; the
// original template is restored at cleanup.
func setAgentPublish(t *testing.T, on bool) {
	t.Helper()
	ctx := t.Context()
	dss := cluster.Client.AppsV1().DaemonSets(framework.MigflexNamespace)
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		ds, err := dss.Get(ctx, framework.AgentDaemonSet, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := &ds.Spec.Template.Spec.Containers[0]
		c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == envPublishAllocatable })
		c.Env = append(c.Env, corev1.EnvVar{Name: envPublishAllocatable, Value: strconv.FormatBool(on)})
		_, err = dss.Update(ctx, ds, metav1.UpdateOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("setting %s=%t on the agent: %v", envPublishAllocatable, on, err)
	}
	if err := cluster.WaitForDaemonSetRollout(ctx, framework.MigflexNamespace, framework.AgentDaemonSet); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.WaitForNode(ctx, "state success after the agent's restart", timeout, func(n *corev1.Node) error {
		if s := n.Labels[labelState]; s != "success" {
			return fmt.Errorf("state %q, reason %q", s, n.Annotations[annotationReason])
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestPublishAllocatableToRunning measures, with --publish-allocatable
// off and then on in the same run, a pod created at the moment its
// profile is made (the annotation changed by hand): from just before the
// change to the watch event that shows the pod Running, as
// TestDRAReshapeToRunning does for the device plugin and DRA. Off, the
// scheduler sees the profile at the kubelet's next node status update; on,
// when the agent writes what the kubelet's device manager holds. A
// measurement, not a check (no threshold): it runs only with
// MIGFLEX_E2E_PUBLISH_RUNS set (runs per setting, e.g. 10).
func TestPublishAllocatableToRunning(t *testing.T) {
	runs, _ := strconv.Atoi(os.Getenv("MIGFLEX_E2E_PUBLISH_RUNS"))
	if runs <= 0 {
		t.Skip("MIGFLEX_E2E_PUBLISH_RUNS is unset: a measurement, run on request")
	}
	migflex(t)
	ns := cluster.Namespace(t)
	period := 10 * time.Second
	if d, err := time.ParseDuration(os.Getenv("KUBELET_NODE_STATUS_UPDATE_FREQUENCY")); err == nil && d > 0 {
		period = d
	}
	ds, err := cluster.Client.AppsV1().DaemonSets(framework.MigflexNamespace).Get(t.Context(), framework.AgentDaemonSet, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	original := ds.Spec.Template.DeepCopy()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*timeout)
		defer cancel()
		dss := cluster.Client.AppsV1().DaemonSets(framework.MigflexNamespace)
		if err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
			ds, err := dss.Get(ctx, framework.AgentDaemonSet, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			ds.Spec.Template = *original
			_, err = dss.Update(ctx, ds, metav1.UpdateOptions{})
			return err == nil, nil
		}); err != nil {
			t.Errorf("restoring the agent's DaemonSet: %v", err)
		}
		if err := cluster.WaitForDaemonSetRollout(ctx, framework.MigflexNamespace, framework.AgentDaemonSet); err != nil {
			t.Error(err)
		}
	})
	from := gpuLayouts{0: all1g, 1: all1g}
	reset := func() { applyLayouts(t, from) }
	setAgentPublish(t, false)
	off := reshapeToRunningRuns(t, dpNode(), ns, "off", runs, period, reset)
	setAgentPublish(t, true)
	on := reshapeToRunningRuns(t, dpNode(), ns, "on", runs, period, reset)
	t.Logf("change + creation -> Running on the device plugin (kubelet status period %s)", period)
	t.Log(runsSummary("--publish-allocatable=false", off))
	t.Log(runsSummary("--publish-allocatable=true", on))
}
