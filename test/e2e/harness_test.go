//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/migflex/migflex/test/e2e/framework"
)

// These tests check the harness itself: on every node a real kubelet runs
// pods from the imported images, logs come back through the API server,
// in-pod clients reach the API server, and nothing in the cluster has a
// route off the machine.

// eachNode runs test on every node of the cluster, with c addressing it.
func eachNode(t *testing.T, test func(t *testing.T, c *framework.Cluster)) {
	for _, n := range cluster.Nodes {
		t.Run(n.Name, func(t *testing.T) { test(t, cluster.OnNode(n.Name)) })
	}
}

// On every node, through its kubelet (which the API server reaches at the
// address the node publishes).
func TestHarnessPodRunsAndLogsAreReadable(t *testing.T) {
	eachNode(t, testPodRunsAndLogsAreReadable)
}

func testPodRunsAndLogsAreReadable(t *testing.T, c *framework.Cluster) {
	ns := c.Namespace(t)
	marker := rand.String(12)
	pod := c.TestboxPod(ns, "env", "env")
	pod.Spec.Containers[0].Env = append(pod.Spec.Containers[0].Env, corev1.EnvVar{Name: "E2E_MARKER", Value: marker})
	c.CreatePod(t, pod)

	if _, err := c.WaitForPodSucceeded(t.Context(), ns, pod.Name); err != nil {
		t.Fatal(err)
	}
	logs, err := c.PodLogs(t.Context(), ns, pod.Name, "")
	if err != nil {
		t.Fatal(err)
	}
	if !hasLine(logs, "E2E_MARKER="+marker) {
		t.Errorf("pod log lacks E2E_MARKER=%s:\n%s", marker, logs)
	}
	// The same log through the pinned kubectl, as a user would read it.
	out, err := c.Kubectl(t.Context(), "logs", "-n", ns, pod.Name)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(logs, out); diff != "" {
		t.Errorf("kubectl logs vs the API's pods/log (-api +kubectl):\n%s", diff)
	}
}

// On node 1 the API server is on the host's loopback; on the others an
// apiproxy answers there in the node's network namespace.
func TestHarnessHostNetworkPodReachesAPIServer(t *testing.T) {
	eachNode(t, testHostNetworkPodReachesAPIServer)
}

func testHostNetworkPodReachesAPIServer(t *testing.T, c *framework.Cluster) {
	ns := c.Namespace(t)
	pod := c.TestboxPod(ns, "whoami", "whoami")
	framework.UseHostNetworkAPIServer(pod)
	checkWhoami(t, c, pod)
}

// A pod on the pod network reaches the API server at the host's address on
// node 1's bridge (hack/cluster/up.sh), as a pod in a cluster with
// kube-proxy reaches the kubernetes Service: on node 1 directly, on the
// others through its node, which routes that one address to the host.
func TestHarnessPodNetworkPodReachesAPIServer(t *testing.T) {
	eachNode(t, testPodNetworkPodReachesAPIServer)
}

func testPodNetworkPodReachesAPIServer(t *testing.T, c *framework.Cluster) {
	ns := c.Namespace(t)
	pod := c.TestboxPod(ns, "whoami", "whoami")
	pod.Spec.Containers[0].Env = []corev1.EnvVar{
		{Name: "KUBERNETES_SERVICE_HOST", Value: framework.PodAPIServerHost()},
		{Name: "KUBERNETES_SERVICE_PORT", Value: framework.APIServerPort},
	}
	checkWhoami(t, c, pod)
}

// checkWhoami creates pod (a testbox whoami), and checks that it ended
// well, having reached the API server as its namespace's default service
// account.
func checkWhoami(t *testing.T, c *framework.Cluster, pod *corev1.Pod) {
	t.Helper()
	ns := pod.Namespace
	c.CreatePod(t, pod)
	if _, err := c.WaitForPodSucceeded(t.Context(), ns, pod.Name); err != nil {
		t.Fatal(err)
	}
	logs, err := c.PodLogs(t.Context(), ns, pod.Name, "")
	if err != nil {
		t.Fatal(err)
	}
	if want := "username=system:serviceaccount:" + ns + ":default"; !hasLine(logs, want) {
		t.Errorf("pod log = %q, want a line %q", logs, want)
	}
}

// TestHarnessNetworkSafety checks, without sending a packet, that nothing in
// the cluster can reach beyond this machine: the service range is
// blackholed on the host, the API server's port answers only loopback and
// the cluster's bridges, traffic from the pods' and the nodes' bridges may
// not be forwarded elsewhere, and on every node a pod has no default route
// and pod DNS points at loopback; on the nodes after the first, neither the
// node's network namespace (where its kubelet, containerd and host-network
// pods run) nor a host-network pod has a default route, and the kernel
// finds no route off the machine there.
func TestHarnessNetworkSafety(t *testing.T) {
	ctx := t.Context()
	// The ranges the API server allocates ClusterIPs from: its default
	// ServiceCIDR, "kubernetes", made from --service-cluster-ip-range.
	cidrs, err := cluster.Client.NetworkingV1().ServiceCIDRs().Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cidrs.Spec.CIDRs) == 0 {
		t.Fatalf("ServiceCIDR kubernetes has no ranges: %+v", cidrs.Spec)
	}
	for _, cidr := range cidrs.Spec.CIDRs {
		out, err := exec.CommandContext(ctx, "ip", "route", "show", "exact", cidr).CombinedOutput()
		if err != nil {
			t.Fatalf("ip route show exact %s: %v: %s", cidr, err, out)
		}
		if got, want := strings.Join(strings.Fields(string(out)), " "), "blackhole "+cidr; got != want {
			t.Errorf("the host's route for the service range: %q, want %q", got, want)
		}
	}
	// A more specific route would win over the blackhole, so ask the kernel
	// which route a ClusterIP takes: for a blackhole it refuses to say
	// ("RTNETLINK answers: Invalid argument") and ip exits non-zero.
	svc, err := cluster.Client.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, "ip", "route", "get", svc.Spec.ClusterIP).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !strings.Contains(string(out), "Invalid argument") {
		t.Errorf("ip route get %s: error %v, output %q; want it refused with \"Invalid argument\" (blackholed)", svc.Spec.ClusterIP, err, out)
	}

	// The API server listens on every address (for pods at the bridge's
	// gateway, and the other nodes at the nodes' bridge): an INPUT rule
	// ahead of any that accepts leads to a chain dropping its port on
	// anything but loopback and those bridges. (The kubelet puts its
	// KUBE-FIREWALL jump first; that chain only drops.)
	input, err := exec.CommandContext(ctx, "iptables", "-S", "INPUT").CombinedOutput()
	if err != nil {
		t.Fatalf("iptables -S INPUT: %v: %s", err, input)
	}
	jumped := false
	for _, rule := range strings.Split(strings.TrimSpace(string(input)), "\n") {
		if rule == "-A INPUT -j MIGFLEX-HARNESS-IN" {
			jumped = true
			break
		}
		if strings.HasSuffix(rule, "-j ACCEPT") {
			t.Errorf("INPUT accepts before the harness's guard: %s", rule)
		}
	}
	if !jumped {
		t.Errorf("INPUT rules:\n%s\nwant a jump to MIGFLEX-HARNESS-IN", input)
	}
	several := len(cluster.Nodes) > 1
	want := []string{
		"-N MIGFLEX-HARNESS-IN",
		"-A MIGFLEX-HARNESS-IN -i lo -j RETURN",
		"-A MIGFLEX-HARNESS-IN -i " + podBridge + " -j RETURN",
	}
	if several {
		want = append(want, "-A MIGFLEX-HARNESS-IN -i "+nodesBridge+" -j RETURN")
	}
	want = append(want, "-A MIGFLEX-HARNESS-IN -p tcp -m tcp --dport "+framework.APIServerPort+" -j DROP")
	checkChain(t, "MIGFLEX-HARNESS-IN", want)
	// FORWARD: what comes from a bridge of the cluster goes back to it, or
	// nowhere.
	want = []string{
		"-N MIGFLEX-HARNESS",
		"-A MIGFLEX-HARNESS -i " + podBridge + " ! -o " + podBridge + " -j DROP",
		"-A MIGFLEX-HARNESS -s " + podCIDR + " ! -o " + podBridge + " -j DROP",
	}
	if several {
		want = append(want, "-A MIGFLEX-HARNESS -i "+nodesBridge+" ! -o "+nodesBridge+" -j DROP")
	}
	checkChain(t, "MIGFLEX-HARNESS", want)

	for _, n := range cluster.Nodes {
		t.Run(n.Name, func(t *testing.T) { testNodeNetworkSafety(t, n) })
	}
}

// The harness's names (hack/cluster/lib.sh's defaults).
const (
	podBridge   = "mfcni0"
	podCIDR     = "10.88.0.0/24"
	nodesBridge = "mfnodes"
)

// checkChain checks that the host's iptables chain has exactly the rules
// want.
func checkChain(t *testing.T, chain string, want []string) {
	t.Helper()
	got, err := exec.CommandContext(t.Context(), "iptables", "-S", chain).CombinedOutput()
	if err != nil {
		t.Fatalf("iptables -S %s: %v: %s", chain, err, got)
	}
	if diff := cmp.Diff(want, strings.Split(strings.TrimSpace(string(got)), "\n")); diff != "" {
		t.Errorf("chain %s (-want +got):\n%s", chain, diff)
	}
}

// testNodeNetworkSafety: on the node, a pod on the pod network and (on
// the nodes after the first) one on the node's host network have no
// default route, pod DNS points at loopback, and the kernel of the node's
// network namespace has no route to an address off the machine, IPv4 or
// IPv6 (a route lookup: no packet is sent).
func testNodeNetworkSafety(t *testing.T, n framework.LocalNode) {
	ctx := t.Context()
	c := cluster.OnNode(n.Name)
	ns := c.Namespace(t)
	routes := c.TestboxPod(ns, "routes", "cat", "/proc/net/route")
	resolv := c.TestboxPod(ns, "resolv", "cat", "/etc/resolv.conf")
	pods := []*corev1.Pod{routes, resolv}
	if n.NetNS != "" {
		hostRoutes := c.TestboxPod(ns, "host-routes", "cat", "/proc/net/route")
		hostRoutes.Spec.HostNetwork = true
		pods = append(pods, hostRoutes)
	}
	for _, p := range pods {
		c.CreatePod(t, p)
	}
	for _, p := range pods {
		if p == resolv {
			continue
		}
		if _, err := c.WaitForPodSucceeded(ctx, ns, p.Name); err != nil {
			t.Fatal(err)
		}
		table, err := c.PodLogs(ctx, ns, p.Name, "")
		if err != nil {
			t.Fatal(err)
		}
		// /proc/net/route: Iface Destination Gateway ... with hex addresses;
		// a default route has destination 00000000.
		var dests []string
		for _, line := range strings.Split(strings.TrimSpace(table), "\n")[1:] {
			if f := strings.Fields(line); len(f) > 2 {
				dests = append(dests, f[1])
				if f[1] == "00000000" {
					t.Errorf("pod %s (host network %v) has a default route: %s", p.Name, p.Spec.HostNetwork, line)
				}
			}
		}
		if len(dests) == 0 {
			t.Errorf("pod %s has no routes at all (expected its bridge subnet):\n%s", p.Name, table)
		}
	}

	if _, err := c.WaitForPodSucceeded(ctx, ns, resolv.Name); err != nil {
		t.Fatal(err)
	}
	conf, err := c.PodLogs(ctx, ns, resolv.Name, "")
	if err != nil {
		t.Fatal(err)
	}
	var servers []string
	for _, line := range strings.Split(conf, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "nameserver" {
			servers = append(servers, f[1])
		}
	}
	if diff := cmp.Diff([]string{"127.0.0.1"}, servers); diff != "" {
		t.Errorf("pod nameservers (-want +got):\n%s\nresolv.conf:\n%s", diff, conf)
	}

	if n.NetNS == "" {
		return
	}
	// TEST-NET addresses: off this machine, and nothing is sent to them.
	for _, addr := range []string{"198.51.100.1", "2001:db8::1"} {
		args := append(n.Enter(), "ip", "route", "get", addr)
		out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || !strings.Contains(string(out), "unreachable") {
			t.Errorf("in node %s, ip route get %s: error %v, output %q; want no route (\"Network is unreachable\")", n.Name, addr, err, out)
		}
	}
}

// TestHarnessImagePullStaysLocal checks that an image that was not imported
// is pulled through containerd's dead proxy (127.0.0.1:9), and fails there.
// The registry it names is the API server's ClusterIP, in the blackholed
// service range, so even a pull that got past the proxy would die on this
// machine: the test cannot send a packet off it either way.
func TestHarnessImagePullStaysLocal(t *testing.T) {
	ctx := t.Context()
	svc, err := cluster.Client.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns := cluster.Namespace(t)
	pod := cluster.TestboxPod(ns, "pull", "env")
	pod.Spec.Containers[0].Image = svc.Spec.ClusterIP + "/migflex-e2e/not-imported:1"
	pod.Spec.Containers[0].ImagePullPolicy = corev1.PullAlways
	cluster.CreatePod(t, pod)

	// The kubelet's Event says why the pull failed: "Failed to pull image
	// ...: <containerd's error>".
	var msg string
	err = framework.WaitFor(ctx, "the kubelet to report the failed pull", framework.Timeout, func(ctx context.Context) (bool, error) {
		list, err := cluster.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + pod.Name + ",reason=Failed",
		})
		if err != nil {
			return false, err
		}
		for _, e := range list.Items {
			if strings.HasPrefix(e.Message, "Failed to pull image") {
				msg = e.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := "proxyconnect tcp: dial tcp 127.0.0.1:9"; !strings.Contains(msg, want) {
		t.Errorf("the pull did not go to containerd's dead proxy (want %q in the error):\n%s", want, msg)
	}
}

// TestHarnessAgentImageLinks checks, inside a container of the node agent's
// image, that the dynamic loader resolves every library the cgo-linked agent
// needs: mkimage must have copied them in, as there is no base image.
// Every node has the image (each containerd imported it).
func TestHarnessAgentImageLinks(t *testing.T) {
	ctx := t.Context()
	for _, n := range cluster.Nodes {
		node, err := cluster.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !nodeHasImage(node, framework.MigflexImage) {
			t.Fatalf("node %s lacks image %s: run make build, then hack/cluster/images.sh before up.sh", node.Name, framework.MigflexImage)
		}
	}
	ns := cluster.Namespace(t)
	pod := cluster.TestboxPod(ns, "ldd")
	pod.Spec.Containers[0].Image = framework.MigflexImage
	// The amd64 glibc loader, asked to resolve the agent's libraries (ldd).
	pod.Spec.Containers[0].Command = []string{"/lib64/ld-linux-x86-64.so.2", "--list", "/device-plugin"}
	cluster.CreatePod(t, pod)

	if _, err := cluster.WaitForPodSucceeded(ctx, ns, pod.Name); err != nil {
		t.Fatal(err)
	}
	out, err := cluster.PodLogs(ctx, ns, pod.Name, "")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "not found") || !strings.Contains(out, "libc.so.6 => ") {
		t.Errorf("the agent's libraries do not all resolve in its image:\n%s", out)
	}
}

func nodeHasImage(node *corev1.Node, ref string) bool {
	for _, img := range node.Status.Images {
		for _, n := range img.Names {
			if n == ref {
				return true
			}
		}
	}
	return false
}

func hasLine(text, line string) bool {
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		if sc.Text() == line {
			return true
		}
	}
	return false
}
