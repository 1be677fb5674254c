// Package kubeletstub is a stand-in for the kubelet's device manager, for
// tests of device plugins over real unix sockets. It serves Registration on
// <dir>/kubelet.sock and then drives each registered plugin the way the
// kubelet does: it dials the plugin's endpoint, asks for its options, keeps
// a ListAndWatch stream open, and calls Allocate and GetPreferredAllocation
// on request. Restart mimics a kubelet restart: every socket in the
// directory is removed and kubelet.sock is created again.
package kubeletstub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/util/validation"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// connectTimeout is the kubelet's limit for reaching a registering plugin.
const connectTimeout = 10 * time.Second

// Registration is one accepted Register call.
type Registration struct {
	Resource string
	Endpoint string
	Options  *pluginapi.DevicePluginOptions
	At       time.Time
}

// Plugin is what the stand-in knows about the plugin currently registered
// for a resource.
type Plugin struct {
	Endpoint string
	// Options is what GetDevicePluginOptions returned at registration.
	Options *pluginapi.DevicePluginOptions
	// Devices is the device list of the latest ListAndWatch message.
	Devices []*pluginapi.Device
	// Messages counts ListAndWatch messages since registration.
	Messages int
	// LastMessage is when the latest message arrived.
	LastMessage time.Time
	// Connected is false once the stream ended; the kubelet then treats the
	// devices as unhealthy until the plugin registers again.
	Connected bool
	// StreamErr is why the stream ended.
	StreamErr error
}

// State is a snapshot of the stand-in.
type State struct {
	// ListeningSince is when kubelet.sock was last created.
	ListeningSince time.Time
	// Registrations lists every accepted registration, oldest first.
	Registrations []Registration
	// Rejected lists refused registrations with the reason.
	Rejected []error
	// Plugins is the current plugin of each registered resource.
	Plugins map[string]Plugin
}

// Kubelet is the stand-in. Create it with Start.
type Kubelet struct {
	pluginapi.UnimplementedRegistrationServer

	dir    string
	socket string

	mu       sync.Mutex
	grpc     *grpc.Server
	served   chan struct{}
	since    time.Time
	regs     []Registration
	rejected []error
	plugins  map[string]*plugin
	changed  chan struct{}
	hook     RegisterHook
	answer   RegisterHook
	// strict refuses a registration at an endpoint still connected, as
	// kubelets from 1.37 do.
	strict bool
}

// RegisterHook runs at the start of every Register call, before the
// stand-in looks at the request; an error rejects the registration. ctx
// ends when the caller gives up or the stand-in stops.
type RegisterHook func(ctx context.Context, r *pluginapi.RegisterRequest) error

type plugin struct {
	Plugin
	conn   *grpc.ClientConn
	client pluginapi.DevicePluginClient
	cancel context.CancelFunc
	done   chan struct{}
}

// Start serves Registration on dir/kubelet.sock.
func Start(dir string) (*Kubelet, error) {
	k := &Kubelet{
		dir:     dir,
		socket:  filepath.Join(dir, filepath.Base(pluginapi.KubeletSocket)),
		plugins: map[string]*plugin{},
		changed: make(chan struct{}),
	}
	if err := k.listen(); err != nil {
		return nil, err
	}
	return k, nil
}

// Socket is the path of kubelet.sock.
func (k *Kubelet) Socket() string { return k.socket }

func (k *Kubelet) listen() error {
	if err := os.Remove(k.socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing old kubelet socket: %w", err)
	}
	lis, err := net.Listen("unix", k.socket)
	if err != nil {
		return fmt.Errorf("kubelet stand-in: %w", err)
	}
	g := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(g, k)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = g.Serve(lis)
	}()
	k.mu.Lock()
	k.grpc, k.served, k.since = g, served, time.Now()
	k.broadcastLocked()
	k.mu.Unlock()
	return nil
}

// Stop stops serving kubelet.sock, removes it and disconnects every plugin,
// as a kubelet that goes down does.
func (k *Kubelet) Stop() {
	k.mu.Lock()
	g, served := k.grpc, k.served
	k.grpc = nil
	plugins := k.plugins
	k.plugins = map[string]*plugin{}
	k.broadcastLocked()
	k.mu.Unlock()
	if g != nil {
		g.Stop()
		<-served
	}
	for _, p := range plugins {
		p.disconnect()
	}
	_ = os.Remove(k.socket)
}

// Restart mimics a kubelet restart: stop, remove every socket in the
// directory (the kubelet keeps only its checkpoint), create kubelet.sock.
func (k *Kubelet) Restart() error {
	k.Stop()
	if err := k.RemoveSockets(); err != nil {
		return err
	}
	return k.listen()
}

// RemoveSockets removes every unix socket in the directory.
func (k *Kubelet) RemoveSockets() error {
	entries, err := os.ReadDir(k.dir)
	if err != nil {
		return fmt.Errorf("kubelet stand-in: %w", err)
	}
	for _, e := range entries {
		if e.Type()&fs.ModeSocket != 0 {
			if err := os.Remove(filepath.Join(k.dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("kubelet stand-in: %w", err)
			}
		}
	}
	return nil
}

func (k *Kubelet) broadcastLocked() {
	close(k.changed)
	k.changed = make(chan struct{})
}

// State returns a snapshot.
func (k *Kubelet) State() State {
	k.mu.Lock()
	defer k.mu.Unlock()
	st := State{
		ListeningSince: k.since,
		Registrations:  append([]Registration(nil), k.regs...),
		Rejected:       append([]error(nil), k.rejected...),
		Plugins:        make(map[string]Plugin, len(k.plugins)),
	}
	for r, p := range k.plugins {
		c := p.Plugin
		c.Devices = append([]*pluginapi.Device(nil), p.Devices...)
		st.Plugins[r] = c
	}
	return st
}

// Wait returns the first state for which cond holds, re-checking after
// every change, or the last state with ctx's error.
func (k *Kubelet) Wait(ctx context.Context, cond func(State) bool) (State, error) {
	for {
		k.mu.Lock()
		ch := k.changed
		k.mu.Unlock()
		st := k.State()
		if cond(st) {
			return st, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return st, ctx.Err()
		}
	}
}

// SetRegisterHook makes every later Register call run hook first, for
// example to hold it as a kubelet that accepts connections but hangs does;
// nil removes it.
func (k *Kubelet) SetRegisterHook(hook RegisterHook) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.hook = hook
}

// SetAnswerHook makes every later accepted registration run hook before
// the answer; an error goes back to the caller although the plugin stays
// registered, as when a plugin gives up on a slow kubelet that connects
// anyway. nil removes it.
func (k *Kubelet) SetAnswerHook(hook RegisterHook) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.answer = hook
}

// RefuseConnectedEndpoint makes the stand-in refuse a registration at an
// endpoint whose ListAndWatch stream is still open, with the error of
// kubelets from 1.37 ("device plugin already connected"); those keep one
// connection per socket path (kubernetes/kubernetes#139338). Off, a
// registration for a resource replaces the old one, as up to 1.36.
func (k *Kubelet) RefuseConnectedEndpoint(on bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.strict = on
}

// Register accepts a plugin the way the kubelet does: check the version and
// resource name, dial the endpoint, read the options, open ListAndWatch.
// A plugin registering again for the same resource replaces the old one
// (but see RefuseConnectedEndpoint).
func (k *Kubelet) Register(ctx context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.mu.Lock()
	hook, answer := k.hook, k.answer
	k.mu.Unlock()
	var err error
	if hook != nil {
		err = hook(ctx, r)
	}
	if err == nil {
		err = k.register(r)
		if err == nil && answer != nil {
			// Registered: the error only changes what the caller hears.
			if err := answer(ctx, r); err != nil {
				return nil, err
			}
		}
	}
	if err != nil {
		k.mu.Lock()
		k.rejected = append(k.rejected, err)
		k.broadcastLocked()
		k.mu.Unlock()
		return nil, err
	}
	return &pluginapi.Empty{}, nil
}

func (k *Kubelet) register(r *pluginapi.RegisterRequest) error {
	if r.Version != pluginapi.Version {
		return fmt.Errorf("unsupported device plugin API version %q", r.Version)
	}
	if err := validResourceName(r.ResourceName); err != nil {
		return err
	}
	if r.Endpoint == "" || strings.Contains(r.Endpoint, "/") {
		return fmt.Errorf("endpoint %q is not a socket name in %s", r.Endpoint, k.dir)
	}
	k.mu.Lock()
	cur := k.plugins[r.ResourceName]
	connected := k.strict && cur != nil && cur.Connected && cur.Endpoint == r.Endpoint
	k.mu.Unlock()
	if connected {
		return fmt.Errorf("device plugin already connected: %s", filepath.Join(k.dir, r.Endpoint))
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(k.dir, r.Endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dialing %s: %w", r.Endpoint, err)
	}
	client := pluginapi.NewDevicePluginClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	opts, err := client.GetDevicePluginOptions(ctx, &pluginapi.Empty{})
	cancel()
	if err != nil {
		conn.Close()
		return fmt.Errorf("getting options of %s: %w", r.ResourceName, err)
	}
	sctx, scancel := context.WithCancel(context.Background())
	p := &plugin{
		Plugin: Plugin{Endpoint: r.Endpoint, Options: opts, Connected: true},
		conn:   conn, client: client, cancel: scancel, done: make(chan struct{}),
	}

	k.mu.Lock()
	old := k.plugins[r.ResourceName]
	k.plugins[r.ResourceName] = p
	k.regs = append(k.regs, Registration{Resource: r.ResourceName, Endpoint: r.Endpoint, Options: r.Options, At: time.Now()})
	k.broadcastLocked()
	k.mu.Unlock()
	if old != nil {
		old.disconnect()
	}
	go k.watch(sctx, r.ResourceName, p)
	return nil
}

func validResourceName(name string) error {
	if !strings.Contains(name, "/") || strings.HasPrefix(name, "kubernetes.io/") || strings.HasPrefix(name, "requests.") {
		return fmt.Errorf("resource name %q is not an extended resource name", name)
	}
	if errs := validation.IsQualifiedName(name); len(errs) > 0 {
		return fmt.Errorf("resource name %q: %s", name, strings.Join(errs, "; "))
	}
	return nil
}

func (k *Kubelet) watch(ctx context.Context, resource string, p *plugin) {
	defer close(p.done)
	stream, err := p.client.ListAndWatch(ctx, &pluginapi.Empty{})
	for err == nil {
		var msg *pluginapi.ListAndWatchResponse
		if msg, err = stream.Recv(); err != nil {
			break
		}
		k.mu.Lock()
		p.Devices, p.LastMessage = msg.Devices, time.Now()
		p.Messages++
		k.broadcastLocked()
		k.mu.Unlock()
	}
	k.mu.Lock()
	p.Connected = false
	if !errors.Is(err, io.EOF) {
		p.StreamErr = err
	} else {
		p.StreamErr = errors.New("plugin ended ListAndWatch")
	}
	k.broadcastLocked()
	k.mu.Unlock()
}

func (p *plugin) disconnect() {
	p.cancel()
	<-p.done
	p.conn.Close()
}

func (k *Kubelet) client(resource string) (pluginapi.DevicePluginClient, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p, ok := k.plugins[resource]
	if !ok {
		return nil, fmt.Errorf("no plugin registered for %s", resource)
	}
	return p.client, nil
}

// Allocate asks the plugin of resource for one container with ids.
func (k *Kubelet) Allocate(ctx context.Context, resource string, ids ...string) (*pluginapi.ContainerAllocateResponse, error) {
	c, err := k.client(resource)
	if err != nil {
		return nil, err
	}
	resp, err := c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err != nil {
		return nil, err
	}
	// The kubelet uses the first container response and fails on none.
	if len(resp.ContainerResponses) == 0 {
		return nil, errors.New("allocate response has no container response")
	}
	return resp.ContainerResponses[0], nil
}

// GetPreferredAllocation asks the plugin of resource for advice, as the
// kubelet does only when the plugin's options say it is available.
func (k *Kubelet) GetPreferredAllocation(ctx context.Context, resource string, available, mustInclude []string, size int) ([]string, error) {
	k.mu.Lock()
	p, ok := k.plugins[resource]
	k.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("no plugin registered for %s", resource)
	}
	if !p.Options.GetGetPreferredAllocationAvailable() {
		return nil, fmt.Errorf("plugin of %s did not offer GetPreferredAllocation", resource)
	}
	resp, err := p.client.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs: available, MustIncludeDeviceIDs: mustInclude, AllocationSize: int32(size),
		}},
	})
	if err != nil {
		return nil, err
	}
	if len(resp.ContainerResponses) != 1 {
		return nil, fmt.Errorf("preferred allocation has %d container responses, want 1", len(resp.ContainerResponses))
	}
	return resp.ContainerResponses[0].DeviceIDs, nil
}
