//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/test/e2e/framework"
)

// TestKubeletRestart: the kubelet restarts (as `systemctl restart kubelet`
// does), deleting every device-plugin socket and creating a new
// kubelet.sock. The agent must notice, serve and register every resource
// again, and the resources come back: the new kubelet lists the devices,
// the Node's allocatable is right, and a new pod gets a device through the
// re-registered plugin.
func TestKubeletRestart(t *testing.T) {
	migflex(t)
	ctx := t.Context()
	_, layout := applyLayout(t, "3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb")
	want := framework.LayoutDevices(layout)
	before, err := framework.PluginSockets()
	if err != nil {
		t.Fatal(err)
	}
	if len(before) == 0 {
		t.Fatalf("no device-plugin sockets in %s before the restart", framework.DevicePluginDir)
	}

	restarted := time.Now()
	out, err := cluster.RestartKubelet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(strings.TrimSpace(out))

	// The new kubelet deleted every plugin socket: the agent serves each
	// resource again, on sockets created after the restart began.
	var sockets map[string]time.Time
	err = framework.WaitFor(ctx, "the agent to serve every resource again", timeout, func(context.Context) (bool, error) {
		s, err := framework.PluginSockets()
		if err != nil {
			return false, err
		}
		sockets = s
		for _, mt := range s {
			if mt.Before(restarted) {
				return false, nil
			}
		}
		return cmp.Equal(socketResources(before), socketResources(s)), nil
	})
	if err != nil {
		t.Fatalf("%v; sockets before %v, now %v (restart at %v)", err, before, sockets, restarted)
	}

	// The new kubelet's own view: registrations, not the checkpoint.
	var got map[string][]string
	err = framework.WaitFor(ctx, "the new kubelet to list the layout's devices", timeout, func(ctx context.Context) (bool, error) {
		d, err := framework.KubeletDevices(ctx)
		if err != nil {
			return false, err
		}
		got = d
		return cmp.Equal(want, d), nil
	})
	if err != nil {
		t.Fatalf("%v; kubelet devices (-want +got):\n%s", err, cmp.Diff(want, got))
	}
	node, err := cluster.WaitForNode(ctx, "the node Ready with the layout's allocatable", timeout, func(n *corev1.Node) error {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
				return fmt.Errorf("node not Ready: %s", c.Message)
			}
		}
		return checkAllocatable(n, counts(want))
	})
	if err != nil {
		t.Fatal(err)
	}
	if s := node.Labels[labelState]; s != "success" {
		t.Errorf("state %q after the kubelet restart, want success (%s)", s, summary(node))
	}

	// Allocate goes through the plugin's new registration.
	ns := cluster.Namespace(t)
	env := runEnvPod(t, gpuPod(ns, "after-restart", "nvidia.com/mig-2g.20gb", 1, "env"))
	checkAllocateEnv(t, env, layout, "2g.20gb", 1)
}

// socketResources maps the agent's socket names (<prefix>-<resource>-<token>-<generation>.sock)
// to the resources they serve, as a sorted list.
func socketResources(sockets map[string]time.Time) []string {
	var out []string
	for name := range sockets {
		name = strings.TrimSuffix(name, ".sock")
		for range 2 {
			if i := strings.LastIndex(name, "-"); i > 0 {
				name = name[:i]
			}
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// TestKubeletRestartOnAnotherNode: the same restart on node 3, whose
// kubelet runs in the node's own namespaces (hack/cluster/restart-kubelet.sh
// NODE): its device-plugin sockets, under the node's kubelet directory,
// are served again by its agent, and its kubelet lists the same devices.
func TestKubeletRestartOnAnotherNode(t *testing.T) {
	migflex(t)
	n := b200Node(t)
	ctx := t.Context()
	local := n.Local()
	want, err := local.KubeletDevices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before, err := local.PluginSockets()
	if err != nil {
		t.Fatal(err)
	}
	if len(before) == 0 || len(want) == 0 {
		t.Fatalf("node %s before the restart: sockets %v, kubelet devices %v; want the agent's", n.NodeName, before, want)
	}
	oldPID, err := local.PID("kubelet")
	if err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	out, err := n.RestartKubelet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(strings.TrimSpace(out))
	if pid, err := local.PID("kubelet"); err != nil || pid == oldPID {
		t.Errorf("kubelet PID %d (%v) after the restart, was %d", pid, err, oldPID)
	}
	var got map[string][]string
	err = framework.WaitFor(ctx, "node "+n.NodeName+"'s agent to serve every resource again", timeout, func(ctx context.Context) (bool, error) {
		s, err := local.PluginSockets()
		if err != nil {
			return false, err
		}
		for _, mt := range s {
			if mt.Before(restarted) {
				return false, nil
			}
		}
		if !cmp.Equal(socketResources(before), socketResources(s)) {
			return false, nil
		}
		got, err = local.KubeletDevices(ctx)
		return err == nil && cmp.Equal(want, got), err
	})
	if err != nil {
		t.Fatalf("%v; kubelet devices (-before +after):\n%s", err, cmp.Diff(want, got))
	}
}
