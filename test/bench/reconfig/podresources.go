package reconfig

import (
	"context"
	"fmt"
	"net"
	"path/filepath"

	"google.golang.org/grpc"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// podResources is the kubelet's pod-resources API with no pods on the node,
// so that the agent's busy check passes and every change is applied at
// once.
type podResources struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	socket string
	srv    *grpc.Server
}

func startPodResources(dir string) (*podResources, error) {
	p := &podResources{socket: filepath.Join(dir, "pod-resources.sock"), srv: grpc.NewServer()}
	l, err := net.Listen("unix", p.socket)
	if err != nil {
		return nil, fmt.Errorf("pod-resources stand-in: %w", err)
	}
	podresourcesv1.RegisterPodResourcesListerServer(p.srv, p)
	go func() { _ = p.srv.Serve(l) }()
	return p, nil
}

func (p *podResources) stop() { p.srv.Stop() }

// List implements the kubelet's List: no pods.
func (p *podResources) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	return &podresourcesv1.ListPodResourcesResponse{}, nil
}
