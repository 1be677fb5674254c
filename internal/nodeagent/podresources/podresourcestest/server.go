// Package podresourcestest serves a stand-in for the kubelet's pod-resources
// API on a unix socket, with assignments the test controls.
package podresourcestest

import (
	"context"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"google.golang.org/grpc"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Device is one assignment the stand-in reports.
type Device struct {
	Namespace, Pod, Container, Resource string
	IDs                                 []string
}

// Claim is one device of a prepared ResourceClaim the stand-in reports for
// a container (the answer's DynamicResources).
type Claim struct {
	Namespace, Pod, Container string
	ClaimNamespace, ClaimName string
	Driver, Pool, Device      string
}

// Server is a pod-resources stand-in. Set what it reports with Set.
type Server struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	Socket string

	mu      sync.Mutex
	devices []Device
	claims  []Claim
	calls   int
	// allocatable is the GetAllocatableResources answer, by resource.
	allocatable      map[string][]string
	allocatableCalls int
}

// Start serves on a socket in a fresh temp dir and stops at test cleanup.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{Socket: filepath.Join(t.TempDir(), "kubelet.sock")}
	l, err := net.Listen("unix", s.Socket)
	if err != nil {
		t.Fatalf("listen %s: %v", s.Socket, err)
	}
	g := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(g, s)
	go func() { _ = g.Serve(l) }()
	t.Cleanup(g.Stop)
	return s
}

// Set replaces the reported assignments.
func (s *Server) Set(devices ...Device) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.devices = append([]Device(nil), devices...)
}

// SetClaims replaces the reported claims' devices.
func (s *Server) SetClaims(claims ...Claim) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claims = append([]Claim(nil), claims...)
}

// SetAllocatable replaces the devices GetAllocatableResources reports, by
// resource.
func (s *Server) SetAllocatable(byResource map[string][]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.allocatable = map[string][]string{}
	for r, ids := range byResource {
		s.allocatable[r] = append([]string(nil), ids...)
	}
}

// AllocatableCalls is how many GetAllocatableResources calls the stand-in
// answered.
func (s *Server) AllocatableCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.allocatableCalls
}

// GetAllocatableResources answers as the kubelet does: one entry per
// device.
func (s *Server) GetAllocatableResources(context.Context, *podresourcesv1.AllocatableResourcesRequest) (*podresourcesv1.AllocatableResourcesResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.allocatableCalls++
	resp := &podresourcesv1.AllocatableResourcesResponse{}
	for _, r := range slices.Sorted(maps.Keys(s.allocatable)) {
		for _, id := range s.allocatable[r] {
			resp.Devices = append(resp.Devices, &podresourcesv1.ContainerDevices{ResourceName: r, DeviceIds: []string{id}})
		}
	}
	return resp, nil
}

// Calls is how many List calls the stand-in answered.
func (s *Server) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// List implements the kubelet's List: pods grouped with their containers.
func (s *Server) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	pods := map[string]*podresourcesv1.PodResources{}
	var order []string
	for _, d := range s.devices {
		key := d.Namespace + "/" + d.Pod
		p, ok := pods[key]
		if !ok {
			p = &podresourcesv1.PodResources{Namespace: d.Namespace, Name: d.Pod}
			pods[key] = p
			order = append(order, key)
		}
		p.Containers = append(p.Containers, &podresourcesv1.ContainerResources{
			Name:    d.Container,
			Devices: []*podresourcesv1.ContainerDevices{{ResourceName: d.Resource, DeviceIds: d.IDs}},
		})
	}
	for _, c := range s.claims {
		key := c.Namespace + "/" + c.Pod
		p, ok := pods[key]
		if !ok {
			p = &podresourcesv1.PodResources{Namespace: c.Namespace, Name: c.Pod}
			pods[key] = p
			order = append(order, key)
		}
		p.Containers = append(p.Containers, &podresourcesv1.ContainerResources{
			Name: c.Container,
			DynamicResources: []*podresourcesv1.DynamicResource{{
				ClaimName: c.ClaimName, ClaimNamespace: c.ClaimNamespace,
				ClaimResources: []*podresourcesv1.ClaimResource{{DriverName: c.Driver, PoolName: c.Pool, DeviceName: c.Device}},
			}},
		})
	}
	resp := &podresourcesv1.ListPodResourcesResponse{}
	for _, k := range order {
		resp.PodResources = append(resp.PodResources, pods[k])
	}
	return resp, nil
}
