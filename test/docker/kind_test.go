//go:build docker

package docker

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// kindCluster is the kind cluster under test (hack/kind/run.sh sets it
// while the cluster runs); the kind tests skip without it.
func kindCluster(t *testing.T) string {
	t.Helper()
	name := os.Getenv("KIND_CLUSTER")
	if name == "" {
		t.Skip("KIND_CLUSTER unset: no kind cluster to check (hack/kind/run.sh runs these)")
	}
	return name
}

// kindNodes are the cluster's node containers, by kind's label.
func kindNodes(t *testing.T, cluster string) []string {
	t.Helper()
	nodes := strings.Fields(docker(t, "ps", "--filter", "label=io.x-k8s.kind.cluster="+cluster, "--format", "{{.Names}}"))
	if len(nodes) == 0 {
		t.Fatalf("no node containers of kind cluster %s", cluster)
	}
	return nodes
}

// refusedOffMachine reports whether a connection attempt's output says the
// network refused it at once, as the engine's namespace answers.
func refusedOffMachine(out string) bool {
	return strings.Contains(out, "unreachable") || strings.Contains(out, "No route to host")
}

// TestKindNetworkIsDocumentationRange: kind's network and every node's
// address on it come from the engine's pool, a documentation range.
func TestKindNetworkIsDocumentationRange(t *testing.T) {
	cluster := kindCluster(t)
	poolPrefix := netip.MustParsePrefix(pool)
	subnets := strings.Fields(docker(t, "network", "inspect", "-f", "{{range .IPAM.Config}}{{.Subnet}} {{end}}", "kind"))
	if len(subnets) == 0 {
		t.Fatal("network kind has no subnet")
	}
	for _, s := range subnets {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			t.Fatalf("network kind: subnet %q: %v", s, err)
		}
		if !p.Addr().Is4() || !poolPrefix.Contains(p.Addr()) || p.Bits() < poolPrefix.Bits() {
			t.Errorf("network kind has subnet %s, outside the pool %s", p, pool)
		}
	}
	for _, node := range kindNodes(t, cluster) {
		for _, a := range strings.Fields(docker(t, "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{.GlobalIPv6Address}} {{end}}", node)) {
			addr, err := netip.ParseAddr(a)
			if err != nil || !inDocumentation(addr) {
				t.Errorf("node %s has address %q, outside the documentation ranges", node, a)
			}
		}
	}
}

// TestKindCannotReachOffMachine: a node, and a pod on the pod network,
// trying an address no network here has are refused: their packets reach
// the engine's namespace, which has no route on and says so (a pod's
// leave its node masqueraded, so the answer finds it).
func TestKindCannotReachOffMachine(t *testing.T) {
	const elsewhere = "203.0.113.7"
	cluster := kindCluster(t)
	try := "exec 3<>/dev/tcp/" + elsewhere + "/80"
	for _, node := range kindNodes(t, cluster) {
		// The refusal comes at once, or with a SYN retry: a bound, so that
		// a connection that hangs fails the test instead of stalling it.
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		out, err := exec.CommandContext(ctx, "/usr/bin/docker", "exec", node, "bash", "-c", try).CombinedOutput()
		cancel()
		if err == nil || !refusedOffMachine(string(out)) {
			t.Errorf("node %s connecting to %s: %v %q; want it refused as unreachable", node, elsewhere, err, out)
		}
	}

	// A pod, through the control plane's kubectl: the node CNI's image has
	// bash and is on every node.
	cp := cluster + "-control-plane"
	kubectl := func(args ...string) (string, error) {
		out, err := exec.Command("/usr/bin/docker", append([]string{"exec", cp, "kubectl", "--kubeconfig=/etc/kubernetes/admin.conf"}, args...)...).CombinedOutput()
		return string(out), err
	}
	const pod = "migflex-nettest"
	_, _ = kubectl("delete", "pod", pod, "--ignore-not-found", "--wait")
	t.Cleanup(func() { _, _ = kubectl("delete", "pod", pod, "--ignore-not-found", "--wait=false") })
	if out, err := kubectl("run", pod, "--image=migflex.local/kind-cni:1", "--image-pull-policy=Never", "--restart=Never",
		"--command", "--", "bash", "-c", try); err != nil {
		t.Fatalf("kubectl run: %v: %s", err, out)
	}
	if out, err := kubectl("wait", "pod/"+pod, "--for=jsonpath={.status.phase}=Failed", "--timeout=120s"); err != nil {
		phase, _ := kubectl("get", "pod", pod, "-o", "jsonpath={.status.phase}")
		t.Fatalf("pod %s did not fail its connection to %s (phase %q): %v: %s", pod, elsewhere, phase, err, out)
	}
	out, err := kubectl("logs", pod)
	if err != nil || !refusedOffMachine(out) {
		t.Errorf("a pod connecting to %s: %v %q; want it refused as unreachable", elsewhere, err, out)
	}
}
