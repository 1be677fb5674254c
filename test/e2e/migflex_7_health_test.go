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

	"github.com/migflex/migflex/test/e2e/framework"
)

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
// The other devices, on both GPUs, stay healthy. The quiet period is the
// local overlay's (MIGFLEX_AGENT_HEALTH_QUIET_PERIOD on the agent).
func TestXidHealth(t *testing.T) {
	migflex(t)
	ctx := t.Context()
	quietPeriod := agentQuietPeriod(t)
	_, layout := applyLayout(t, "1g.10gb", "1g.10gb", "1g.10gb")
	total := int64(len(uuidsOf(layout, "1g.10gb")))

	victim := gpuOf(t, layout, 0).Instances[0]
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
			l, err := framework.NodeLayout(n)
			if err != nil {
				return err
			}
			got := map[string]string{}
			for _, g := range l {
				for _, in := range g.Instances {
					got[in.UUID] = in.Health
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				return fmt.Errorf("device health in the layout annotation (-want +got):\n%s", diff)
			}
			const r = "nvidia.com/mig-1g.10gb"
			a, c := n.Status.Allocatable[r], n.Status.Capacity[r]
			if a.Value() != allocatable || c.Value() != total {
				return fmt.Errorf("%s allocatable %s capacity %s, want %d and %d", r, a.String(), c.String(), allocatable, total)
			}
			return nil
		}
	}
	want := map[string]string{}
	for _, g := range layout {
		for _, in := range g.Instances {
			want[in.UUID] = "Healthy"
		}
	}
	want[victim.UUID] = "Unhealthy"
	unhealthy := health(want, total-1)
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
	if _, err := cluster.WaitForNode(ctx, "MIG device "+victim.UUID+" to recover after "+quietPeriod.String(), timeout, health(want, total)); err != nil {
		t.Fatal(err)
	}
}

// agentQuietPeriod is the health quiet period the installed agent runs
// with: MIGFLEX_AGENT_HEALTH_QUIET_PERIOD, which the local overlay sets well below the
// default (5m) so that a recovery can be waited for.
func agentQuietPeriod(t *testing.T) time.Duration {
	t.Helper()
	return agentEnvDuration(t, "MIGFLEX_AGENT_HEALTH_QUIET_PERIOD")
}

// agentEnvDuration is the duration the installed agent's environment
// variable name gives, one the local overlay sets well below the agent's
// default so that a test can wait for it. It fails the test unless that
// is so.
func agentEnvDuration(t *testing.T, name string) time.Duration {
	t.Helper()
	ds, err := cluster.Client.AppsV1().DaemonSets(framework.MigflexNamespace).Get(t.Context(), framework.AgentDaemonSet, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v := envValue(ds, framework.AgentContainer, name)
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 || d >= timeout/2 {
		t.Fatalf("agent %s=%q (%v): want a positive duration well within the %v wait, set in %s", name, v, err, timeout, framework.LocalOverlay)
	}
	return d
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
