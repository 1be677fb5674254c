package framework

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The nodes of the local cluster by role (hack/cluster/lib.sh): node 1 is
// this host and serves through the device plugin, node 2 serves through
// DRA (its kubelet registers it with DRANodeLabel, which the local overlay
// and the chart's agent.draNodeSelector select), node 3 through the device
// plugin with GPUs of another model (deployments/kustomize/overlays/local).
const (
	DevicePluginNode = 1
	DRANode          = 2
	ThirdNode        = 3

	// DRANodeLabel (= DRANodeLabelValue) is the label of the nodes the local
	// overlay's DRA pool serves, as the chart's agent.draNodeSelector
	// example has it.
	DRANodeLabel      = "migflex.io/serve"
	DRANodeLabelValue = "dra"
)

// LocalNode is a node of the local cluster as the harness runs it, with
// the paths of its kubelet and runtime as this host sees them.
type LocalNode struct {
	Name string
	// Number is 1 for node 1 (this host), 2, 3, ... for the others.
	Number int
	// KubeletDir is the kubelet's root directory (/var/lib/kubelet in the
	// node): its device-plugin and pod-resources sockets are there.
	KubeletDir string
	// CDIDir is where the node's containerd reads CDI specs.
	CDIDir string
	// NetNS and MountNS are the node's namespaces (bind-mounted nsfs files;
	// "" for node 1, which runs in this host's own).
	NetNS, MountNS string
	// runDir holds the PID files of the cluster's processes.
	runDir string
}

// localNodes describes the nodes named (node 1 first) against those the
// API server has. No names means the one node the API server has.
func localNodes(named, have []string, clusterDir, cdiDir string) ([]LocalNode, error) {
	if len(named) == 0 {
		if len(have) != 1 {
			return nil, fmt.Errorf("%s is unset and the cluster has %d nodes %v: run the suite with hack/cluster/e2e.sh, or source $CLUSTER_DIR/env from hack/cluster/up.sh", EnvNodes, len(have), have)
		}
		named = have
	}
	if !slices.Equal(slices.Sorted(slices.Values(named)), slices.Sorted(slices.Values(have))) {
		return nil, fmt.Errorf("%s=%q, but the API server has the nodes %v", EnvNodes, strings.Join(named, " "), have)
	}
	if len(named) > 1 && clusterDir == "" {
		return nil, fmt.Errorf("%s is unset: the nodes after the first keep their files there", EnvClusterDir)
	}
	var out []LocalNode
	for i, name := range named {
		n := LocalNode{Name: name, Number: i + 1, KubeletDir: "/var/lib/kubelet", CDIDir: cdiDir}
		if clusterDir != "" {
			n.runDir = filepath.Join(clusterDir, "run")
		}
		if i > 0 {
			dir := filepath.Join(clusterDir, "nodes", name)
			n.KubeletDir = filepath.Join(dir, "kubelet")
			n.CDIDir = filepath.Join(dir, "cdi")
			n.NetNS = filepath.Join(clusterDir, "nodes", "ns", name+".net")
			n.MountNS = filepath.Join(clusterDir, "nodes", "ns", name+".mnt")
		}
		out = append(out, n)
	}
	return out, nil
}

// OnNode returns a copy of c whose node-scoped helpers (Node, TestboxPod,
// AgentPod, ExecInAgent, SetNodeAnnotations, WaitForNode,
// WaitForNodeEvent, RestartKubelet, ...) address the node name.
func (c *Cluster) OnNode(name string) *Cluster {
	cp := *c
	cp.NodeName = name
	return &cp
}

// NodeNumber returns c on node number (DevicePluginNode, DRANode,
// ThirdNode, ...), skipping t when the cluster has fewer nodes (NODES=1
// keeps the single-node cluster).
func (c *Cluster) NodeNumber(t testing.TB, number int) *Cluster {
	t.Helper()
	c.RequireNodes(t, number)
	return c.OnNode(c.Nodes[number-1].Name)
}

// RequireNodes skips t unless the cluster has at least n nodes.
func (c *Cluster) RequireNodes(t testing.TB, n int) {
	t.Helper()
	if len(c.Nodes) < n {
		t.Skipf("needs %d nodes, the cluster has %d (hack/cluster/up.sh with NODES=%d or more)", n, len(c.Nodes), n)
	}
}

// Local is the LocalNode c addresses.
func (c *Cluster) Local() LocalNode {
	for _, n := range c.Nodes {
		if n.Name == c.NodeName {
			return n
		}
	}
	return LocalNode{Name: c.NodeName}
}

// PinToNode makes the scheduler place pod on the node name only, as a
// user pins a pod (the kubernetes.io/hostname label), so that it is still
// placed by what the node offers.
func PinToNode(pod *corev1.Pod, name string) {
	if pod.Spec.NodeSelector == nil {
		pod.Spec.NodeSelector = map[string]string{}
	}
	pod.Spec.NodeSelector[corev1.LabelHostname] = name
}

// Enter is the command prefix that runs a command in the node's network
// and mount namespaces (none for node 1).
func (n LocalNode) Enter() []string {
	if n.NetNS == "" {
		return nil
	}
	return []string{"nsenter", "--net=" + n.NetNS, "--mount=" + n.MountNS, "--"}
}

// PID is the process ID of one of the node's components (kubelet,
// containerd; apiproxy on the nodes after the first) as hack/cluster
// recorded it, for tests that stop or signal one.
func (n LocalNode) PID(component string) (int, error) {
	name := component
	if n.Number > 1 {
		name += "@" + n.Name
	}
	if n.runDir == "" {
		return 0, fmt.Errorf("%s is unset: no PID files to read", EnvClusterDir)
	}
	b, err := os.ReadFile(filepath.Join(n.runDir, name+".pid"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}
