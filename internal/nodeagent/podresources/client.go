// Package podresources asks the kubelet which devices are assigned to which
// pods, through the pod-resources API the kubelet serves on a local socket.
// The node agent uses it to refuse repartitioning a GPU that a pod is using.
package podresources

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// DefaultSocket is where the kubelet serves the pod-resources API.
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// maxMessageSize bounds a List answer; the kubelet's own client uses 16 MiB.
const maxMessageSize = 16 << 20

// Assignment is one device assigned to one container, or held by a
// ResourceClaim.
type Assignment struct {
	Namespace string
	// Pod is empty for a device a ResourceClaim holds that no pod has
	// reserved yet (allocated by the scheduler, the pod not bound); Claim
	// names it then.
	Pod       string
	Container string
	Resource  string
	DeviceID  string
	// Claim is the ResourceClaim (in Namespace) the device was allocated
	// through; empty for a device plugin's device.
	Claim string
}

// ClaimHolder starts the PodKey of a claim no pod has reserved.
const ClaimHolder = "ResourceClaim "

// PodKey is "namespace/name", the form users see in kubectl output; for a
// claim no pod has reserved it is "ResourceClaim namespace/name", which
// no pod can be called.
func (a Assignment) PodKey() string {
	if a.Pod == "" && a.Claim != "" {
		return ClaimHolder + a.Namespace + "/" + a.Claim
	}
	return a.Namespace + "/" + a.Pod
}

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

// List returns every device the kubelet has assigned to a container
// through a device plugin (see Assignments). The kubelet reports devices
// only for active pods (it prunes finished pods' assignments before
// answering, since 1.16; from 1.34 it leaves those pods out too), which is
// exactly the set that makes a GPU busy; test/e2e checks it on the real
// kubelet.
func (c *Client) List(ctx context.Context) ([]Assignment, error) {
	resp, err := c.Response(ctx)
	if err != nil {
		return nil, err
	}
	return Assignments(resp), nil
}

// Response is the kubelet's List answer as it is: besides the device
// plugins' devices it holds, per container, the devices of the pod's
// prepared ResourceClaims (DynamicResources, KubeletPodResourcesDynamicResources:
// beta and on from 1.34), which a node served through DRA needs.
func (c *Client) Response(ctx context.Context) (*podresourcesv1.ListPodResourcesResponse, error) {
	resp, err := call(ctx, c, func(ctx context.Context, l podresourcesv1.PodResourcesListerClient) (*podresourcesv1.ListPodResourcesResponse, error) {
		return l.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	})
	if err != nil {
		return nil, fmt.Errorf("list pod resources from %s: %w", c.socket, err)
	}
	return resp, nil
}

// call makes one call to the kubelet on a connection of its own, within
// the client's timeout.
func call[T any](ctx context.Context, c *Client, f func(context.Context, podresourcesv1.PodResourcesListerClient) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+c.socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageSize)))
	if err != nil {
		var zero T
		return zero, fmt.Errorf("connect to pod-resources socket %s: %w", c.socket, err)
	}
	defer conn.Close()
	return f(ctx, podresourcesv1.NewPodResourcesListerClient(conn))
}

// Assignments flattens the device-plugin devices of a List answer, sorted
// by pod, container, resource and device.
func Assignments(resp *podresourcesv1.ListPodResourcesResponse) []Assignment {
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
	Sort(out)
	return out
}

// Sort orders assignments by pod, container, resource and device.
func Sort(out []Assignment) {
	slices.SortFunc(out, func(a, b Assignment) int {
		return cmp.Or(cmp.Compare(a.PodKey(), b.PodKey()), cmp.Compare(a.Container, b.Container),
			cmp.Compare(a.Resource, b.Resource), cmp.Compare(a.DeviceID, b.DeviceID))
	})
}
