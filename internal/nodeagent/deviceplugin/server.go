package deviceplugin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/migflex/migflex/internal/nodeagent/health"
)

// pluginOptions are registered with the kubelet and returned by
// GetDevicePluginOptions; the kubelet uses the latter, so they must agree.
func pluginOptions() *pluginapi.DevicePluginOptions {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}
}

// socketName is the socket file name of one gRPC server of a resource:
// nvidia.com/mig-2g.20gb is served on migflex-mig-2g.20gb-<token>-<gen>.sock,
// where token is the Manager's and gen counts the server's starts. No
// name is ever registered twice: a kubelet from 1.37 keeps one connection
// per socket path and refuses a second registration there while the first
// is connected, and the refusal drops its client of the first, which it
// then never disconnects (kubernetes/kubernetes#139338); the resource
// stays allocatable after the plugin is gone and every later registration
// at that path is refused.
func socketName(prefix, resource, token string, gen uint64) string {
	_, name, ok := strings.Cut(resource, "/")
	if !ok {
		name = resource
	}
	name = strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' || r == '+' {
			return '-'
		}
		return r
	}, name)
	return fmt.Sprintf("%s-%s-%s-%d.sock", prefix, name, token, gen)
}

// socketGlob matches the socket names socketName gives under prefix, of
// this process or an earlier one.
func socketGlob(prefix string) string { return prefix + "-*.sock" }

// newToken returns a random token that tells this process's sockets from
// an earlier agent's: a restarted agent runs as PID 1 again.
func newToken() string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return hex.EncodeToString(b[:])
}

// server serves one resource to the kubelet on its own socket. Its device
// list outlives the gRPC server: after a kubelet restart the same list is
// served again on a fresh gRPC server.
type server struct {
	pluginapi.UnimplementedDevicePluginServer

	resource      string
	dir, prefix   string
	token         string
	kubeletSocket string
	alloc         allocator
	policy        AllocationPolicy
	timeout       time.Duration
	log           klog.Logger
	// gate is the Manager's: Allocate holds it shared from the drain check
	// to its answer, Drain takes it exclusively to wait for those in
	// flight.
	gate *sync.RWMutex

	mu      sync.Mutex
	devices []Device
	// share is how the resource's replicas are allocated (zero when the
	// resource shares nothing).
	share  shareInfo
	faults map[string]health.Fault
	// draining are the device IDs the Manager drains (see Manager.Drain):
	// sent unhealthy and refused by Allocate, whatever their health.
	draining map[string]bool
	// answered is when Allocate last handed out each device, for Drain's
	// settle.
	answered map[string]time.Time
	list     []*pluginapi.Device
	changed  chan struct{} // closed when list changes, then replaced
	grpc     *grpc.Server
	served   chan struct{} // closed when grpc.Serve has returned
	serving  bool
	// socket is the current gRPC server's, named by gen.
	socket string
	// downUntil keeps a server whose registration failed from serving
	// again before then (see failedSettle).
	downUntil time.Time
	// gen counts starts: a registration made for an earlier gRPC server
	// is not this one's.
	gen        uint64
	registered bool
	regAt      time.Time
	regErr     error
	// regWith identifies the kubelet.sock the server registered through.
	regWith os.FileInfo
}

var _ pluginapi.DevicePluginServer = (*server)(nil)

func newServer(log klog.Logger, resource, token string, o Options, alloc allocator, gate *sync.RWMutex) *server {
	return &server{
		gate:          gate,
		resource:      resource,
		dir:           o.PluginDir,
		prefix:        o.SocketPrefix,
		token:         token,
		kubeletSocket: filepath.Join(o.PluginDir, filepath.Base(pluginapi.KubeletSocket)),
		alloc:         alloc,
		policy:        o.AllocationPolicy,
		timeout:       o.RegisterTimeout,
		log:           log.WithValues("resource", resource),
		changed:       make(chan struct{}),
		list:          []*pluginapi.Device{},
	}
}

// set replaces the devices, the known faults and the draining IDs; it
// reports whether the list the kubelet sees changed.
func (s *server) set(devs []Device, faults map[string]health.Fault, draining map[string]bool, share shareInfo) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.devices = slices.Clone(devs)
	s.share = share
	s.faults = faults
	s.draining = draining
	maps.DeleteFunc(s.answered, func(id string, _ time.Time) bool {
		return !slices.ContainsFunc(s.devices, func(d Device) bool { return d.Underlying() == id })
	})
	return s.recomputeLocked()
}

// keepOnly drops the devices whose IDs (the device under a replica) are
// not in exists and returns theirs.
func (s *server) keepOnly(exists map[string]bool) (gone []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.devices = slices.DeleteFunc(slices.Clone(s.devices), func(d Device) bool {
		if !exists[d.Underlying()] {
			gone = append(gone, d.ID)
			return true
		}
		return false
	})
	if len(gone) > 0 {
		s.recomputeLocked()
	}
	return gone
}

// setDraining replaces the draining IDs; it reports whether the list the
// kubelet sees changed.
func (s *server) setDraining(draining map[string]bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.draining = draining
	return s.recomputeLocked()
}

// lastAnswered is the latest time Allocate handed out one of ids (a
// replica counts for its device); zero if none was.
func (s *server) lastAnswered(ids []string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	var last time.Time
	for _, id := range ids {
		if t := s.answered[id]; t.After(last) {
			last = t
		}
	}
	return last
}

// setHealth replaces the known faults; it reports whether the list the
// kubelet sees or a device's health in status changed (they differ for a
// draining device, which the kubelet sees unhealthy either way).
func (s *server) setHealth(faults map[string]health.Fault) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	healthChanged := slices.ContainsFunc(s.devices, func(d Device) bool {
		_, was := s.faults[d.Underlying()]
		_, is := faults[d.Underlying()]
		return was != is
	})
	s.faults = faults
	return s.recomputeLocked() || healthChanged
}

func (s *server) recomputeLocked() bool {
	list := make([]*pluginapi.Device, len(s.devices))
	for i, d := range s.devices {
		h := pluginapi.Healthy
		if _, bad := s.faults[d.Underlying()]; bad || s.draining[d.Underlying()] {
			h = pluginapi.Unhealthy
		}
		list[i] = &pluginapi.Device{ID: d.ID, Health: h}
	}
	if slices.EqualFunc(list, s.list, func(a, b *pluginapi.Device) bool { return a.ID == b.ID && a.Health == b.Health }) {
		return false
	}
	s.list = list
	close(s.changed)
	s.changed = make(chan struct{})
	return true
}

// snapshot returns a copy of the current list and a channel closed when it
// changes.
func (s *server) snapshot() ([]*pluginapi.Device, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*pluginapi.Device, len(s.list))
	for i, d := range s.list {
		out[i] = &pluginapi.Device{ID: d.ID, Health: d.Health}
	}
	return out, s.changed
}

func (s *server) status() ResourceStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	rs := ResourceStatus{Name: s.resource, Socket: s.socket, Registered: s.registered, RegisteredAt: s.regAt, Devices: []DeviceStatus{}}
	if s.regErr != nil {
		rs.RegisterError = s.regErr.Error()
	}
	for _, d := range s.devices {
		ds := DeviceStatus{Device: d, Healthy: true, Draining: s.draining[d.Underlying()]}
		if f, bad := s.faults[d.Underlying()]; bad {
			ds.Healthy = false
			ds.Fault = &f
		}
		rs.Devices = append(rs.Devices, ds)
	}
	return rs
}

// start serves the plugin API on a new socket, unless it serves already or
// is kept down after a failed registration.
func (s *server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.serving || time.Now().Before(s.downUntil) {
		return nil
	}
	socket := filepath.Join(s.dir, socketName(s.prefix, s.resource, s.token, s.gen+1))
	if len(socket) > unixPathMax {
		return fmt.Errorf("socket path %s is longer than %d bytes", socket, unixPathMax)
	}
	if err := os.Remove(socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing stale socket: %w", err)
	}
	lis, err := net.Listen("unix", socket)
	if err != nil {
		return fmt.Errorf("listening for the kubelet: %w", err)
	}
	g := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(g, s)
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := g.Serve(lis); err != nil {
			s.log.Error(err, "Device plugin server stopped", "socket", socket)
		}
	}()
	s.grpc, s.served, s.serving, s.socket = g, served, true, socket
	s.gen++
	s.log.V(2).Info("Serving device plugin", "socket", socket)
	return nil
}

// settling reports whether the server is kept down after a failed
// registration.
func (s *server) settling() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.serving && time.Now().Before(s.downUntil)
}

// stop closes the gRPC server, and with it the kubelet's ListAndWatch
// stream, and removes the socket.
func (s *server) stop() {
	s.mu.Lock()
	s.stopLocked()
}

// stopLocked is stop with s.mu held, which it releases.
func (s *server) stopLocked() {
	g, served, socket := s.grpc, s.served, s.socket
	s.grpc, s.served, s.serving, s.registered, s.regWith = nil, nil, false, false, nil
	s.mu.Unlock()
	if g == nil {
		return
	}
	g.Stop()
	<-served
	if err := os.Remove(socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Error(err, "Removing socket", "socket", socket)
	}
}

// servingOn returns the current socket and whether a gRPC server serves on
// it.
func (s *server) servingOn() (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.socket, s.serving
}

// needsRegistration reports whether the server serves but is not
// registered, and the generation of the gRPC server to register.
func (s *server) needsRegistration() (gen uint64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen, s.serving && !s.registered
}

// registeredElsewhere reports whether the server is registered, but not
// through the kubelet socket kubelet describes: with a kubelet that is gone.
func (s *server) registeredElsewhere(kubelet os.FileInfo) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.registered && !sameSocket(s.regWith, kubelet)
}

// sameSocket reports whether a and b describe the same socket file. A
// socket re-created at the same path can reuse the inode, so the
// modification time must match too.
func sameSocket(a, b os.FileInfo) bool {
	return a != nil && b != nil && os.SameFile(a, b) && a.ModTime().Equal(b.ModTime())
}

// failedSettle is how long a server whose registration failed stays down
// before it serves on a new socket. A kubelet up to 1.36 keys its plugin
// clients by resource name: if the stream to the old server ended after the
// new registration, it would disconnect the new client. It sees the end of
// a stream within milliseconds.
const failedSettle = time.Second

// errStale is register's answer when the gRPC server it was asked to
// register was stopped (and perhaps started again) meanwhile.
var errStale = errors.New("the server was restarted during its registration")

// register announces the gRPC server of generation gen to the kubelet
// listening on the socket kubelet describes. The kubelet dials back and asks
// for the options before it answers, which may take up to the register
// timeout: register holds no lock meanwhile.
func (s *server) register(ctx context.Context, kubelet os.FileInfo, gen uint64) error {
	s.mu.Lock()
	socket, ok := s.socket, s.serving && !s.registered && s.gen == gen
	s.mu.Unlock()
	if !ok {
		return errStale
	}
	err := s.callRegister(ctx, socket)
	if err == nil {
		// The kubelet that answered may be one that was replaced during
		// the call: the new one would not know this server.
		if now, serr := os.Stat(s.kubeletSocket); serr != nil || !sameSocket(now, kubelet) {
			err = fmt.Errorf("registering %s: the kubelet restarted during the call", s.resource)
		}
	}
	s.mu.Lock()
	if !s.serving || s.gen != gen {
		s.mu.Unlock()
		return errStale
	}
	s.regErr = err
	if err != nil {
		// The kubelet may have connected all the same: never register this
		// socket again (see socketName). Stopping the server ends any
		// stream the kubelet holds to it, and the next start serves on a
		// new socket once the kubelet has seen that stream end.
		s.downUntil = time.Now().Add(failedSettle)
		s.stopLocked()
		return err
	}
	s.registered, s.regAt, s.regWith = true, time.Now(), kubelet
	s.mu.Unlock()
	return nil
}

func (s *server) callRegister(ctx context.Context, socket string) error {
	conn, err := grpc.NewClient("unix://"+s.kubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dialing kubelet at %s: %w", s.kubeletSocket, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     filepath.Base(socket),
		ResourceName: s.resource,
		Options:      pluginOptions(),
	})
	if err != nil {
		return fmt.Errorf("registering %s with kubelet at %s: %w", s.resource, s.kubeletSocket, err)
	}
	return nil
}

// GetDevicePluginOptions returns the options the plugin registered with.
func (s *server) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return pluginOptions(), nil
}

// ListAndWatch sends the full device list now and after every change, until
// the kubelet goes away or the server stops.
func (s *server) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	for {
		list, changed := s.snapshot()
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: list}); err != nil {
			return fmt.Errorf("sending device list: %w", err)
		}
		s.log.V(4).Info("Sent device list", "devices", len(list))
		select {
		case <-changed:
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
}

// lookup returns the devices for ids, refusing unknown, duplicate,
// unhealthy and draining ones, and more than one replica when the sharing
// config says so; share is how they are shared.
func (s *server) lookup(ids []string) ([]Device, shareInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out, err := s.lookupLocked(ids)
	return out, s.share, err
}

func (s *server) lookupLocked(ids []string) ([]Device, error) {
	if len(ids) == 0 {
		return nil, status.Errorf(codes.InvalidArgument, "resource %s: container request names no device", s.resource)
	}
	out := make([]Device, 0, len(ids))
	for _, id := range ids {
		i := slices.IndexFunc(s.devices, func(d Device) bool { return d.ID == id })
		switch {
		case i < 0:
			return nil, status.Errorf(codes.InvalidArgument, "resource %s: unknown device %q", s.resource, id)
		case slices.ContainsFunc(out, func(d Device) bool { return d.ID == id }):
			return nil, status.Errorf(codes.InvalidArgument, "resource %s: device %q requested twice", s.resource, id)
		}
		under := s.devices[i].Underlying()
		if f, bad := s.faults[under]; bad {
			return nil, status.Errorf(codes.FailedPrecondition, "resource %s: device %q is unhealthy (Xid %d at %s)", s.resource, id, f.Xid, f.At.Format(time.RFC3339))
		}
		if s.draining[under] {
			return nil, status.Errorf(codes.FailedPrecondition, "resource %s: device %q is being repartitioned (its GPU's MIG layout is changing)", s.resource, id)
		}
		out = append(out, s.devices[i])
	}
	// As NVIDIA's device plugin: with failRequestsGreaterThanOne a
	// container gets at most one replica, since two replicas of one
	// device give it no more than one does, and two of different devices
	// are not what it would get without sharing either.
	if s.share.failMany && len(out) > 1 && slices.ContainsFunc(out, func(d Device) bool { return d.Shares != "" }) {
		return nil, status.Errorf(codes.InvalidArgument, "resource %s: request for %d devices too large: maximum request size for shared resources is 1 (failRequestsGreaterThanOne)", s.resource, len(out))
	}
	return out, nil
}

// Allocate tells the kubelet how to give each container its devices. It
// holds the drain gate shared from the lookup, which refuses draining
// devices, until it answers, so a Drain that returned has seen the answer
// of every Allocate that accepted one of its devices.
func (s *server) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	s.gate.RLock()
	defer s.gate.RUnlock()
	resp := &pluginapi.AllocateResponse{}
	var ids []string
	for _, creq := range req.GetContainerRequests() {
		devs, share, err := s.lookup(creq.GetDevicesIds())
		if err != nil {
			s.log.Info("Refusing allocation", "devices", creq.GetDevicesIds(), "err", err)
			return nil, err
		}
		// A replica is its device to the container runtime.
		under := underlying(devs)
		cresp, err := s.alloc.response(under)
		if err != nil {
			s.log.Error(err, "Building allocation", "devices", creq.GetDevicesIds())
			return nil, status.Errorf(codes.Internal, "resource %s: %v", s.resource, err)
		}
		if share.mps != nil {
			addMPS(cresp, share.mps)
		}
		resp.ContainerResponses = append(resp.ContainerResponses, cresp)
		for _, d := range under {
			ids = append(ids, d.ID)
		}
		s.log.V(2).Info("Allocated", "devices", creq.GetDevicesIds())
	}
	s.mu.Lock()
	if s.answered == nil {
		s.answered = map[string]time.Time{}
	}
	now := time.Now()
	for _, id := range ids {
		s.answered[id] = now
	}
	s.mu.Unlock()
	return resp, nil
}

// GetPreferredAllocation advises the kubelet which available devices to
// pick, following the allocation policy over parent GPUs.
func (s *server) GetPreferredAllocation(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	s.mu.Lock()
	devs := slices.Clone(s.devices)
	s.mu.Unlock()
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, creq := range req.GetContainerRequests() {
		ids, err := preferredAllocation(s.policy, devs, creq.GetAvailableDeviceIDs(), creq.GetMustIncludeDeviceIDs(), int(creq.GetAllocationSize()))
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "resource %s: %v", s.resource, err)
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

// PreStartContainer is not required (see pluginOptions) and does nothing.
func (s *server) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
