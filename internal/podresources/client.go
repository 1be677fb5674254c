// Package podresources asks the kubelet which devices are assigned to which
// pods, through the pod-resources API the kubelet serves on a local socket.
// The node agent uses it to refuse repartitioning a GPU that a pod is using.
package podresources

import (
	"context"
	"fmt"
	"sort"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// DefaultSocket is where the kubelet serves the pod-resources API.
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// maxMessageSize bounds a List answer; the kubelet's own client uses 16 MiB.
const maxMessageSize = 16 << 20

// Assignment is one device assigned to one container.
type Assignment struct {
	Namespace string
	Pod       string
	Container string
	Resource  string
	DeviceID  string
}

// PodKey is "namespace/name", the form users see in kubectl output.
func (a Assignment) PodKey() string { return a.Namespace + "/" + a.Pod }

// Client lists device assignments. It dials lazily on every call, so a
// kubelet restart (which re-creates the socket) needs no reconnect logic.
type Client struct {
	socket  string
	timeout time.Duration
}

// New returns a client for the pod-resources socket at path.
func New(path string) *Client {
	return &Client{socket: path, timeout: 10 * time.Second}
}

// List returns every device the kubelet has assigned to a container, sorted
// by pod, container, resource and device. The kubelet reports devices only
// for active pods (it prunes finished pods' assignments before answering,
// since 1.16; from 1.34 it leaves those pods out too), which is exactly the
// set that makes a GPU busy; test/e2e checks it on the real kubelet.
func (c *Client) List(ctx context.Context) ([]Assignment, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+c.socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageSize)))
	if err != nil {
		return nil, fmt.Errorf("connect to pod-resources socket %s: %w", c.socket, err)
	}
	defer conn.Close()
	resp, err := podresourcesv1.NewPodResourcesListerClient(conn).List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("list pod resources from %s: %w", c.socket, err)
	}
	var out []Assignment
	for _, p := range resp.GetPodResources() {
		for _, ctr := range p.GetContainers() {
			for _, d := range ctr.GetDevices() {
				for _, id := range d.GetDeviceIds() {
					out = append(out, Assignment{
						Namespace: p.GetNamespace(), Pod: p.GetName(), Container: ctr.GetName(),
						Resource: d.GetResourceName(), DeviceID: id,
					})
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.PodKey() != b.PodKey() {
			return a.PodKey() < b.PodKey()
		}
		if a.Container != b.Container {
			return a.Container < b.Container
		}
		if a.Resource != b.Resource {
			return a.Resource < b.Resource
		}
		return a.DeviceID < b.DeviceID
	})
	return out, nil
}
