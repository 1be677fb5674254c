package podresources

import (
	"context"
	"fmt"

	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Allocatable returns, by resource name, the IDs of the devices the
// kubelet's device manager holds as healthy: its GetAllocatableResources
// answer, which the kubelet builds from every device a plugin listed
// filtered by the healthy ones (devicemanager GetAllocatableDevices, 1.35
// to 1.37), the same set whose size it publishes as the Node's
// allocatable. A resource whose plugin serves no healthy device is absent.
func (c *Client) Allocatable(ctx context.Context) (map[string][]string, error) {
	resp, err := call(ctx, c, func(ctx context.Context, l podresourcesv1.PodResourcesListerClient) (*podresourcesv1.AllocatableResourcesResponse, error) {
		return l.GetAllocatableResources(ctx, &podresourcesv1.AllocatableResourcesRequest{})
	})
	if err != nil {
		return nil, fmt.Errorf("allocatable resources from %s: %w", c.socket, err)
	}
	return AllocatableDevices(resp), nil
}

// AllocatableDevices groups the device-plugin devices of a
// GetAllocatableResources answer by resource. The kubelet lists one entry
// per device (with its NUMA topology); entries of one resource are joined.
func AllocatableDevices(resp *podresourcesv1.AllocatableResourcesResponse) map[string][]string {
	out := map[string][]string{}
	for _, d := range resp.GetDevices() {
		out[d.GetResourceName()] = append(out[d.GetResourceName()], d.GetDeviceIds()...)
	}
	return out
}
