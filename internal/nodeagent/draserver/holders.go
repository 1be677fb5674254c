package draserver

import (
	"context"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/nodeagent/podresources"
)

// KubeletLister is the kubelet's pod-resources answer as it is;
// *podresources.Client is the real one.
type KubeletLister interface {
	Response(ctx context.Context) (*podresourcesv1.ListPodResourcesResponse, error)
}

// State is what the kubelet plugin knows: the devices of the layout it
// publishes (draining ones included) and the claims it prepared, from its
// checkpoint. *Server is the real one.
type State interface {
	Devices() []dra.Device
	Prepared() []dra.PreparedClaim
}

// Holders lists the devices pods hold on a node served through DRA, for
// the agent's busy check (agent.PodResources): the device-plugin devices
// the kubelet still assigns (pods that got theirs before the node
// switched to DRA keep them), plus every device of this driver's pool that
// a ResourceClaim holds, from whichever of three sources knows first
// (dra.Uses): the claim's allocation in the API (the scheduler wrote it,
// the pod may not be bound yet), the kubelet's prepared claims of running
// pods, and the plugin's checkpoint (pods the API no longer shows).
type Holders struct {
	Kubelet KubeletLister
	// Claims are the cluster's ResourceClaims (an informer's lister).
	Claims func() ([]resourceapi.ResourceClaim, error)
	State  State
	// Driver and Pool are the driver's name and this node's pool.
	Driver, Pool string
}

// List implements agent.PodResources. A source that cannot be asked
// fails the whole answer: a GPU is never called free because one of its
// holders could not be seen.
func (h *Holders) List(ctx context.Context) ([]podresources.Assignment, error) {
	claims, err := h.Claims()
	if err != nil {
		return nil, fmt.Errorf("listing ResourceClaims: %w", err)
	}
	resp, err := h.Kubelet.Response(ctx)
	if err != nil {
		return nil, err
	}
	out := podresources.Assignments(resp)
	uses := dra.Uses(h.State.Devices(), h.Driver, h.Pool, dra.Sources{Claims: claims, PodResources: resp, Prepared: h.State.Prepared()})
	for _, u := range uses {
		a := podresources.Assignment{Resource: h.Driver, DeviceID: u.DeviceUUID}
		a.Namespace, a.Claim, _ = strings.Cut(u.Claim, "/")
		// A claim no pod has reserved yet holds the device itself: Pod
		// stays empty and PodKey names the claim.
		if !strings.HasPrefix(u.Holder, podresources.ClaimHolder) {
			_, a.Pod, _ = strings.Cut(u.Holder, "/")
		}
		out = append(out, a)
	}
	podresources.Sort(out)
	return out, nil
}
