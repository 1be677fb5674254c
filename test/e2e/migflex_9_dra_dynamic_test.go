//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/test/e2e/framework"
)

// TestDRADynamic: the DRA node's agent switched to --dra-mode=dynamic
// destroys the idle instances of the static layout, publishes every
// placement with the GPUs' counters; an unchanged
// nvidia.com/mig-3g.40gb pod runs on an instance Prepare created at the
// allocated placement, without any layout asked for, and the claim's
// status.devices names it; once the pod is gone the instance is
// destroyed. The webhook leaves the pod as asked (the node can make the
// instance), and `kubectl migflex status` shows the node dynamic, with
// what it can make before and what is allocated after. The agent goes
// back to static mode at the end. Below 1.36 it checks the refusal
// instead (testDRADynamicRefused).
func TestDRADynamic(t *testing.T) {
	migflex(t)
	n := draNode(t)
	if cluster.Minor < 36 {
		testDRADynamicRefused(t, n)
		return
	}
	ctx := t.Context()
	n.serveDynamic(t)

	// Before the pod: the node can make a 3g.40gb on each GPU.
	n.waitDynamicStatus(t, "nvidia.com/mig-3g.40gb", func(free, allocated int64) bool { return free >= 2 && allocated == 0 })

	ns := cluster.Namespace(t)
	pod := n.gpuPod(ns, "dyn-3g", "nvidia.com/mig-3g.40gb", 1, "sleep", "3600")
	cluster.CreatePod(t, pod)
	running, err := cluster.WaitForPodPhase(ctx, ns, pod.Name, corev1.PodRunning)
	if err != nil {
		t.Fatal(err)
	}
	// The webhook left it as asked: the node could make it.
	if a := running.Annotations[annotationFallback]; a != "" {
		t.Errorf("the webhook rewrote the pod (%s=%s), though the dynamic node could make a 3g.40gb", annotationFallback, a)
	}
	if q := running.Spec.Containers[0].Resources.Limits["nvidia.com/mig-3g.40gb"]; q.Value() != 1 {
		t.Errorf("the pod's limits are %v, want nvidia.com/mig-3g.40gb: 1 as asked", running.Spec.Containers[0].Resources.Limits)
	}
	n.waitDynamicStatus(t, "nvidia.com/mig-3g.40gb", func(_, allocated int64) bool { return allocated == 1 })
	claimName := extendedResourceClaim(t, running, "nvidia.com/mig-3g.40gb")
	claim, err := cluster.Client.ResourceV1().ResourceClaims(ns).Get(ctx, claimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var uuid string
	err = framework.WaitFor(ctx, "the claim's status.devices", timeout, func(ctx context.Context) (bool, error) {
		c, err := cluster.Client.ResourceV1().ResourceClaims(ns).Get(ctx, claimName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, d := range c.Status.Devices {
			var data struct{ UUID, Profile string }
			if d.Data != nil && json.Unmarshal(d.Data.Raw, &data) == nil && data.Profile == "3g.40gb" {
				uuid = data.UUID
				t.Logf("claim %s: device %s, instance %s", claimName, d.Device, uuid)
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The simulated GPU has it (sim show, in the node's agent).
	n.waitForSimInstance(t, uuid, true)

	if err := cluster.Client.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	n.waitForNoCDISpec(t, string(claim.UID))
	n.waitForSimInstance(t, uuid, false)

	n.leaveDynamic(t, ns)
}

// serveDynamic switches the DRA node to dynamic mode: MIG on (a GPU with
// MIG off is offered whole) with an idle instance on each GPU, which
// dynamic mode destroys at start; then no layout asked for (dynamic mode
// owns the instances) and --dra-mode=dynamic. It returns once the slices
// offer the placements and the idle instances are gone. The end of the
// test serves static mode again, whatever failed; leaveDynamic also
// leaves the layout the next tests expect.
func (n simNode) serveDynamic(t *testing.T) {
	t.Helper()
	layout := n.applyDRALayout(t, gpuLayouts{0: {"1g.10gb"}, 1: {"1g.10gb"}})
	if err := n.SetNodeAnnotations(t.Context(), map[string]*string{annotationMigConfig: nil, annotationRunAI: nil}); err != nil {
		t.Fatal(err)
	}
	setDRAMode(t, "dynamic")
	t.Cleanup(func() { setDRAMode(t, "") })
	n.waitDynamicOffers(t)
	for _, g := range layout {
		for _, in := range g.Instances {
			n.waitForSimInstance(t, in.UUID, false)
		}
	}
}

// leaveDynamic leaves the DRA node as the tests after a dynamic one
// expect: the pods of namespace ns deleted and their instances destroyed
// at Unprepare, then static mode serving a layout (dynamic mode destroyed
// the instances and no mig.config is left to recreate them).
func (n simNode) leaveDynamic(t *testing.T, ns string) {
	t.Helper()
	ctx := t.Context()
	if err := cluster.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	err := framework.WaitFor(ctx, "the pods of "+ns+" gone and node "+n.NodeName+" without MIG instances", timeout, func(ctx context.Context) (bool, error) {
		pods, err := cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		state, err := n.Local().SimState()
		if err != nil {
			return false, err
		}
		return len(pods.Items) == 0 && gis(state) == 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	setDRAMode(t, "")
	n.applyDRALayout(t, gpuLayouts{0: {"1g.10gb"}, 1: {"1g.10gb"}})
}

// testDRADynamicRefused: where partitionable devices are alpha and off
// (1.35), the agent asked for --dra-mode=dynamic serves static mode: a
// Warning Event on the Node names the gate, the Node stays labelled static,
// and the layout's idle instances stay (dynamic mode's start would have
// destroyed them). The agent goes back to the default at the end.
func testDRADynamicRefused(t *testing.T, n simNode) {
	ctx := t.Context()
	layout := n.applyDRALayout(t, gpuLayouts{0: {"1g.10gb"}, 1: {"1g.10gb"}})
	since := time.Now()
	setDRAMode(t, "dynamic")
	t.Cleanup(func() { setDRAMode(t, "") })
	if _, err := n.WaitForNodeEvent(ctx, corev1.EventTypeWarning, "DRADynamicModeUnavailable", since, "DRAPartitionableDevices"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.WaitForNode(ctx, "still labelled migflex.io/dra-mode=static", timeout, func(node *corev1.Node) error {
		if v := node.Labels["migflex.io/dra-mode"]; v != "static" {
			return fmt.Errorf("migflex.io/dra-mode=%q", v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, g := range layout {
		for _, in := range g.Instances {
			n.waitForSimInstance(t, in.UUID, true)
		}
	}
}

// waitDynamicOffers waits until the node's slices offer placements with
// the GPUs' counters: a 3g.40gb on GPU 0 and a 1g.10gb on GPU 1 among them,
// whatever instances the static layout before had.
func (n simNode) waitDynamicOffers(t *testing.T) {
	t.Helper()
	var offered []string
	err := framework.WaitFor(t.Context(), "the slices to offer placements with counters", timeout, func(ctx context.Context) (bool, error) {
		list, err := cluster.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		counters := false
		offered = nil
		for _, s := range list.Items {
			if s.Spec.Driver != draDriver || s.Spec.Pool.Name != n.NodeName {
				continue
			}
			counters = counters || len(s.Spec.SharedCounters) > 0
			for _, d := range s.Spec.Devices {
				offered = append(offered, d.Name)
			}
		}
		return counters && slices.Contains(offered, "gpu-0-mig-3g40gb-9-4") && slices.Contains(offered, "gpu-1-mig-1g10gb-19-6"), nil
	})
	if err != nil {
		t.Fatalf("%v; devices %v", err, offered)
	}
}

// waitDynamicStatus waits until `kubectl migflex status NODE -o json`
// shows the node dynamic, with ok true of what it can make of res (free)
// and what is allocated of it.
func (n simNode) waitDynamicStatus(t *testing.T, res string, ok func(free, allocated int64) bool) {
	t.Helper()
	var out string
	err := framework.WaitFor(t.Context(), "kubectl migflex status to show the dynamic node's "+res, timeout, func(context.Context) (bool, error) {
		code, stdout, errOut := migflexPlugin(t, "status", n.NodeName, "-o", "json")
		out = stdout + errOut
		if code != 0 && code != 1 {
			return false, fmt.Errorf("exit %d: %s", code, errOut)
		}
		var st struct {
			Nodes []struct {
				DRAMode string `json:"draMode"`
				Dynamic *struct {
					CanMake []struct {
						Resource        string
						Free, Allocated int64
					} `json:"canMake"`
				} `json:"dynamic"`
			} `json:"nodes"`
		}
		if err := json.Unmarshal([]byte(stdout), &st); err != nil || len(st.Nodes) != 1 {
			return false, fmt.Errorf("status -o json: %v: %s", err, stdout)
		}
		node := st.Nodes[0]
		if node.DRAMode != "dynamic" || node.Dynamic == nil {
			return false, nil
		}
		for _, c := range node.Dynamic.CanMake {
			if c.Resource == res {
				return ok(c.Free, c.Allocated), nil
			}
		}
		return ok(0, 0), nil
	})
	if err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
}

// waitForSimInstance waits until the node's simulated GPUs have (or no
// longer have) the MIG device uuid, as `sim show` in its agent lists them.
func (n simNode) waitForSimInstance(t *testing.T, uuid string, present bool) {
	t.Helper()
	var out string
	err := framework.WaitFor(t.Context(), fmt.Sprintf("sim show to list %s: %v", uuid, present), timeout, func(ctx context.Context) (bool, error) {
		var err error
		if out, err = n.ExecInAgent(ctx, "/device-plugin", "sim", "show"); err != nil {
			return false, err
		}
		return strings.Contains(out, uuid) == present, nil
	})
	if err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
}

// setDRAMode sets --dra-mode on the DRA DaemonSet ("" removes it) and
// waits for the rollout.
func setDRAMode(t *testing.T, mode string) {
	t.Helper()
	ctx := context.Background()
	dss := cluster.Client.AppsV1().DaemonSets(framework.MigflexNamespace)
	ds, err := dss.Get(ctx, framework.AgentDRADaemonSet, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := &ds.Spec.Template.Spec.Containers[0]
	c.Args = slices.DeleteFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--dra-mode=") })
	if mode != "" {
		c.Args = append(c.Args, "--dra-mode="+mode)
	}
	if _, err := dss.Update(ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitForDaemonSetRollout(ctx, framework.MigflexNamespace, framework.AgentDRADaemonSet); err != nil {
		t.Fatal(err)
	}
}
