package framework

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Host paths of node 1's kubelet (hack/cluster/up.sh runs it with
// --root-dir=/var/lib/kubelet). The suite runs as root on the node itself,
// so it can look at them directly, as a node agent does; the other nodes'
// are under their LocalNode's KubeletDir.
const (
	DevicePluginDir    = "/var/lib/kubelet/device-plugins"
	PodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"
)

// DevicePluginDir is the node's kubelet's device-plugin directory.
func (n LocalNode) DevicePluginDir() string { return filepath.Join(n.KubeletDir, "device-plugins") }

// PodResourcesSocket is the node's kubelet's pod-resources socket.
func (n LocalNode) PodResourcesSocket() string {
	return filepath.Join(n.KubeletDir, "pod-resources", "kubelet.sock")
}

// node1 is node 1's paths, for the package's functions about "the node".
var node1 = LocalNode{Name: "node 1", Number: 1, KubeletDir: "/var/lib/kubelet"}

// RestartKubelet stops the node's kubelet and starts it again with the same
// command line, returning once the new one is healthy. Pods keep running;
// the new kubelet deletes every socket in its device-plugin directory and
// creates a new kubelet.sock.
func (c *Cluster) RestartKubelet(ctx context.Context) (string, error) {
	return c.Restart(ctx, "kubelet")
}

// Restart stops one of the node's processes (kubelet, containerd; apiproxy
// on the nodes after the first) and starts it again with the same command
// line in the node's namespaces (hack/cluster/restart.sh COMPONENT NODE),
// returning once the new one answers, and its output.
func (c *Cluster) Restart(ctx context.Context, component string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "cluster", "restart.sh"), component, c.NodeName)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("restarting the %s of node %s: %w: %s", component, c.NodeName, err, out.String())
	}
	return out.String(), nil
}

// PluginSockets returns the modification time of every socket in node 1's
// kubelet's device-plugin directory but kubelet.sock, by file name.
func PluginSockets() (map[string]time.Time, error) { return node1.PluginSockets() }

// PluginSockets is the package's PluginSockets on the node.
func (n LocalNode) PluginSockets() (map[string]time.Time, error) {
	entries, err := os.ReadDir(n.DevicePluginDir())
	if err != nil {
		return nil, err
	}
	out := map[string]time.Time{}
	for _, e := range entries {
		if e.Type()&os.ModeSocket == 0 || e.Name() == "kubelet.sock" {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return nil, err
		}
		out[e.Name()] = info.ModTime()
	}
	return out, nil
}

// podResources calls the pod-resources API of the kubelet at socket.
func podResources[T any](ctx context.Context, socket string, call func(context.Context, podresourcesv1.PodResourcesListerClient) (T, error)) (T, error) {
	var zero T
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return zero, fmt.Errorf("pod-resources socket %s: %w", socket, err)
	}
	defer conn.Close()
	return call(ctx, podresourcesv1.NewPodResourcesListerClient(conn))
}

// KubeletDevices is node 1's kubelet's own view of the devices the device
// plugins registered (pod-resources GetAllocatableResources): sorted device
// IDs by resource name, healthy or not. Unlike the Node's status, which the
// kubelet updates every few seconds, it is current.
func KubeletDevices(ctx context.Context) (map[string][]string, error) {
	return node1.KubeletDevices(ctx)
}

// KubeletDevices is the package's KubeletDevices on the node.
func (n LocalNode) KubeletDevices(ctx context.Context) (map[string][]string, error) {
	resp, err := podResources(ctx, n.PodResourcesSocket(), func(ctx context.Context, c podresourcesv1.PodResourcesListerClient) (*podresourcesv1.AllocatableResourcesResponse, error) {
		return c.GetAllocatableResources(ctx, &podresourcesv1.AllocatableResourcesRequest{})
	})
	if err != nil {
		return nil, fmt.Errorf("kubelet of %s GetAllocatableResources: %w", n.Name, err)
	}
	out := map[string][]string{}
	for _, d := range resp.GetDevices() {
		out[d.GetResourceName()] = append(out[d.GetResourceName()], d.GetDeviceIds()...)
	}
	for _, ids := range out {
		slices.Sort(ids)
	}
	return out, nil
}

// KubeletPodDevices is what node 1's kubelet says a pod's containers hold
// (pod-resources List, the API the node agent's busy check reads): sorted
// device IDs by resource name.
func KubeletPodDevices(ctx context.Context, namespace, name string) (map[string][]string, error) {
	return node1.KubeletPodDevices(ctx, namespace, name)
}

// KubeletPodDevices is the package's KubeletPodDevices on the node.
func (n LocalNode) KubeletPodDevices(ctx context.Context, namespace, name string) (map[string][]string, error) {
	resp, err := podResources(ctx, n.PodResourcesSocket(), func(ctx context.Context, c podresourcesv1.PodResourcesListerClient) (*podresourcesv1.ListPodResourcesResponse, error) {
		return c.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	})
	if err != nil {
		return nil, fmt.Errorf("kubelet of %s pod-resources List: %w", n.Name, err)
	}
	out := map[string][]string{}
	for _, p := range resp.GetPodResources() {
		if p.GetNamespace() != namespace || p.GetName() != name {
			continue
		}
		for _, ctr := range p.GetContainers() {
			for _, d := range ctr.GetDevices() {
				out[d.GetResourceName()] = append(out[d.GetResourceName()], d.GetDeviceIds()...)
			}
		}
	}
	for _, ids := range out {
		slices.Sort(ids)
	}
	return out, nil
}

// ExecInAgent runs a command in the node's agent container through the API
// server and the kubelet (kubectl exec), returning its output.
func (c *Cluster) ExecInAgent(ctx context.Context, command ...string) (string, error) {
	pod, err := c.AgentPod(ctx)
	if err != nil {
		return "", err
	}
	args := append([]string{"exec", "-n", pod.Namespace, pod.Name, "-c", AgentContainer, "--"}, command...)
	out, err := c.Kubectl(ctx, args...)
	if err != nil {
		return out, fmt.Errorf("in agent pod %s: %w", pod.Name, err)
	}
	return strings.TrimSpace(out), nil
}

// KubeletAllPodDevices is what the node's kubelet says every pod's
// containers hold (pod-resources List): sorted device IDs by resource
// name, by "namespace/name"; pods holding no device are left out.
func (n LocalNode) KubeletAllPodDevices(ctx context.Context) (map[string]map[string][]string, error) {
	resp, err := podResources(ctx, n.PodResourcesSocket(), func(ctx context.Context, c podresourcesv1.PodResourcesListerClient) (*podresourcesv1.ListPodResourcesResponse, error) {
		return c.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	})
	if err != nil {
		return nil, fmt.Errorf("kubelet of %s pod-resources List: %w", n.Name, err)
	}
	out := map[string]map[string][]string{}
	for _, p := range resp.GetPodResources() {
		byRes := map[string][]string{}
		for _, ctr := range p.GetContainers() {
			for _, d := range ctr.GetDevices() {
				byRes[d.GetResourceName()] = append(byRes[d.GetResourceName()], d.GetDeviceIds()...)
			}
		}
		if len(byRes) == 0 {
			continue
		}
		for _, ids := range byRes {
			slices.Sort(ids)
		}
		out[p.GetNamespace()+"/"+p.GetName()] = byRes
	}
	return out, nil
}

// KubeletHasPod says whether the node's kubelet lists the pod (pod-resources
// List: the pods it has from its sources, devices or not). A kubelet that
// has just started lists none until it has read its pods from the API
// server; until then it cannot tell the devices of pods deleted meanwhile
// from those in use, and rejects a new pod asking for them (the soak's
// kubelet-restart, docs/RELIABILITY.md "Soak").
func (n LocalNode) KubeletHasPod(ctx context.Context, namespace, name string) (bool, error) {
	resp, err := podResources(ctx, n.PodResourcesSocket(), func(ctx context.Context, c podresourcesv1.PodResourcesListerClient) (*podresourcesv1.ListPodResourcesResponse, error) {
		return c.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	})
	if err != nil {
		return false, fmt.Errorf("kubelet of %s pod-resources List: %w", n.Name, err)
	}
	for _, p := range resp.GetPodResources() {
		if p.GetNamespace() == namespace && p.GetName() == name {
			return true, nil
		}
	}
	return false, nil
}

// ClaimDevice is one device of a DRA claim a pod's container holds, as the
// kubelet's pod-resources List names it (DynamicResources): the claim
// ("namespace/name"), and the device by driver, pool and name.
type ClaimDevice struct {
	Claim, Driver, Pool, Device string
}

// KubeletPodClaimDevices is what the node's kubelet says every pod's
// containers hold through DRA claims (pod-resources List, as an exporter
// reads it), by "namespace/name", without duplicates; pods holding none
// are left out.
func (n LocalNode) KubeletPodClaimDevices(ctx context.Context) (map[string][]ClaimDevice, error) {
	resp, err := podResources(ctx, n.PodResourcesSocket(), func(ctx context.Context, c podresourcesv1.PodResourcesListerClient) (*podresourcesv1.ListPodResourcesResponse, error) {
		return c.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	})
	if err != nil {
		return nil, fmt.Errorf("kubelet of %s pod-resources List: %w", n.Name, err)
	}
	out := map[string][]ClaimDevice{}
	for _, p := range resp.GetPodResources() {
		pod := p.GetNamespace() + "/" + p.GetName()
		for _, ctr := range p.GetContainers() {
			for _, dr := range ctr.GetDynamicResources() {
				for _, cr := range dr.GetClaimResources() {
					d := ClaimDevice{Claim: dr.GetClaimNamespace() + "/" + dr.GetClaimName(), Driver: cr.GetDriverName(), Pool: cr.GetPoolName(), Device: cr.GetDeviceName()}
					if !slices.Contains(out[pod], d) {
						out[pod] = append(out[pod], d)
					}
				}
			}
		}
	}
	return out, nil
}
