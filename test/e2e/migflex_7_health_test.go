//go:build e2e

package e2e

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/migflex/migflex/test/e2e/framework"
)

// quietPeriod is the agent's health quiet period in this test. The local
// overlay keeps the default (5m), too long to wait for, so the test sets
// HEALTH_QUIET_PERIOD on the DaemonSet.
const quietPeriod = "20s"

// reinject is how often the test raises the Xid again until it has seen
// the device unhealthy on the Node: well within the quiet period, so the
// device stays unhealthy however long the kubelet takes to update the
// Node's status.
const reinject = 5 * time.Second

// TestXidHealth: an Xid error injected into the simulated GPU (through the
// `device-plugin sim` CLI in the agent's container, via kubectl exec) makes
// that MIG device Unhealthy: the real kubelet drops it from the Node's
// allocatable (capacity unchanged) and the layout annotation says so. After
// the quiet period without new errors it is healthy and allocatable again.
// The other devices stay healthy.
func TestXidHealth(t *testing.T) {
	migflex(t)
	ctx := t.Context()
	_, layout := applyLayout(t, "1g.10gb", "1g.10gb", "1g.10gb")
	setQuietPeriod(t)
	// The agent's restart by the rollout changed nothing (it plans from
	// what NVML reports), so the devices are the same.
	_, after := waitForLayout(t, "1g.10gb", "1g.10gb", "1g.10gb")
	if diff := cmp.Diff(layout, after); diff != "" {
		t.Errorf("layout changed by an agent restart with the same mig.config (-before +after):\n%s", diff)
	}

	victim := layout[0].Instances[0]
	var injected time.Time
	inject := func() error {
		out, err := cluster.ExecInAgent(ctx, "/device-plugin", "sim", "inject-xid", "--gpu", "0",
			"--gi", strconv.FormatUint(uint64(victim.GI), 10), "--ci", strconv.FormatUint(uint64(victim.CI), 10), "--xid", "79")
		if err != nil {
			return fmt.Errorf("sim inject-xid: %w: %s", err, out)
		}
		injected = time.Now()
		return nil
	}
	if err := inject(); err != nil {
		t.Fatal(err)
	}

	health := func(want map[string]string, allocatable int64) func(*corev1.Node) error {
		return func(n *corev1.Node) error {
			l, err := nodeLayout(n)
			if err != nil {
				return err
			}
			got := map[string]string{}
			for _, in := range l[0].Instances {
				got[in.UUID] = in.Health
			}
			if diff := cmp.Diff(want, got); diff != "" {
				return fmt.Errorf("device health in the layout annotation (-want +got):\n%s", diff)
			}
			const r = "nvidia.com/mig-1g.10gb"
			a, c := n.Status.Allocatable[r], n.Status.Capacity[r]
			if a.Value() != allocatable || c.Value() != 3 {
				return fmt.Errorf("%s allocatable %s capacity %s, want %d and 3", r, a.String(), c.String(), allocatable)
			}
			return nil
		}
	}
	want := map[string]string{}
	for _, in := range layout[0].Instances {
		want[in.UUID] = "Healthy"
	}
	want[victim.UUID] = "Unhealthy"
	unhealthy := health(want, 2)
	_, err := cluster.WaitForNode(ctx, "MIG device "+victim.UUID+" unhealthy", timeout, func(n *corev1.Node) error {
		err := unhealthy(n)
		if err != nil && time.Since(injected) > reinject {
			// Keep the fault alive until the Node shows it.
			if ierr := inject(); ierr != nil {
				return ierr
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	want[victim.UUID] = "Healthy"
	if _, err := cluster.WaitForNode(ctx, "MIG device "+victim.UUID+" to recover after "+quietPeriod, timeout, health(want, 3)); err != nil {
		t.Fatal(err)
	}
}

// setQuietPeriod sets HEALTH_QUIET_PERIOD on the agent DaemonSet, unless it
// is already set, and waits for the rollout (the agent restarts). The
// setting stays for later tests: it only shortens recoveries.
func setQuietPeriod(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	dss := cluster.Client.AppsV1().DaemonSets(framework.MigflexNamespace)
	ds, err := dss.Get(ctx, framework.AgentDaemonSet, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if envValue(ds, framework.AgentContainer, "HEALTH_QUIET_PERIOD") == quietPeriod {
		return
	}
	// A strategic merge patch merges env entries by name.
	patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":%q,"env":[{"name":"HEALTH_QUIET_PERIOD","value":%q}]}]}}}}`,
		framework.AgentContainer, quietPeriod)
	if _, err := dss.Patch(ctx, ds.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitForDaemonSetRollout(ctx, framework.MigflexNamespace, framework.AgentDaemonSet); err != nil {
		t.Fatal(err)
	}
}

func envValue(ds *appsv1.DaemonSet, container, name string) string {
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name != container {
			continue
		}
		for _, e := range c.Env {
			if e.Name == name {
				return e.Value
			}
		}
	}
	return ""
}
