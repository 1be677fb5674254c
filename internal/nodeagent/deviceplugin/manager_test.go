package deviceplugin

import (
	"context"
	"errors"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/nodeagent/deviceplugin/kubeletstub"
	"github.com/migflex/migflex/internal/nodeagent/devnodes"
	"github.com/migflex/migflex/internal/nodeagent/health"
	"github.com/migflex/migflex/internal/testsupport/testutil"
)

// hangTimeout only protects against hangs; tests wait on conditions.
const hangTimeout = 20 * time.Second

// env is a Manager running against a kubelet stand-in in a temp directory.
type env struct {
	t       *testing.T
	ctx     context.Context
	dir     string
	kubelet *kubeletstub.Kubelet
	m       *Manager
}

// start runs a Manager with opts over gpus against a fresh kubelet
// stand-in; everything stops when the test ends.
func start(t *testing.T, opts Options, gpus []mig.GPU) *env {
	t.Helper()
	return startStrategy(t, opts, MigStrategyMixed, gpus)
}

// startStrategy is start serving gpus under a MIG strategy.
func startStrategy(t *testing.T, opts Options, strategy MigStrategy, gpus []mig.GPU) *env {
	t.Helper()
	return run(t, startKubelet(t, testutil.SocketDir(t)), opts, strategy, gpus)
}

// startKubelet starts a kubelet stand-in in dir until the end of the test.
func startKubelet(t *testing.T, dir string) *kubeletstub.Kubelet {
	t.Helper()
	k, err := kubeletstub.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	return k
}

// run runs a Manager with opts over gpus in k's directory until the end of
// the test, when it checks that Run returned without an error.
func run(t *testing.T, k *kubeletstub.Kubelet, opts Options, strategy MigStrategy, gpus []mig.GPU) *env {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	opts.PluginDir = filepath.Dir(k.Socket())
	opts.MigStrategy = strategy
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Serve(ctx, gpus); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	// Registered after the stand-in's Stop, so it runs before it.
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(hangTimeout):
			t.Error("Run did not return after cancel")
		}
	})
	return &env{t: t, ctx: ctx, dir: opts.PluginDir, kubelet: k, m: m}
}

// wait waits until cond holds for the stand-in's state.
func (e *env) wait(what string, cond func(kubeletstub.State) bool) kubeletstub.State {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, hangTimeout)
	defer cancel()
	st, err := e.kubelet.Wait(ctx, cond)
	if err != nil {
		e.t.Fatalf("waiting for %s: %v\nkubelet state: %s", what, err, describe(st))
	}
	return st
}

// waitRegistered waits until the Manager reports every resource registered
// and returns its resources. The kubelet can list a plugin's devices before
// the plugin's Register call has returned.
func (e *env) waitRegistered() []ResourceStatus {
	e.t.Helper()
	deadline := time.After(hangTimeout)
	for {
		res := e.m.Resources()
		if !slices.ContainsFunc(res, func(r ResourceStatus) bool { return !r.Registered }) {
			return res
		}
		select {
		case <-e.m.Changes(): // a registration signals a change
		case <-deadline:
			e.t.Fatalf("resources not all registered: %+v", res)
		}
	}
}

func describe(st kubeletstub.State) string {
	var b strings.Builder
	for _, r := range slices.Sorted(maps.Keys(st.Plugins)) {
		p := st.Plugins[r]
		b.WriteString("\n  " + r + ": " + strings.Join(deviceList(p.Devices), ","))
		if !p.Connected {
			b.WriteString(" (disconnected)")
		}
	}
	for _, err := range st.Rejected {
		b.WriteString("\n  rejected: " + err.Error())
	}
	return b.String()
}

// deviceList renders devices as "ID" or "ID!" for unhealthy ones.
func deviceList(devs []*pluginapi.Device) []string {
	out := []string{}
	for _, d := range devs {
		s := d.ID
		if d.Health != pluginapi.Healthy {
			s += "!"
		}
		out = append(out, s)
	}
	return out
}

// view maps each registered resource to its current device list.
func view(st kubeletstub.State) map[string][]string {
	out := map[string][]string{}
	for r, p := range st.Plugins {
		if p.Connected && p.Messages > 0 {
			out[r] = deviceList(p.Devices)
		}
	}
	return out
}

// serving returns a condition: the stand-in sees exactly want.
func serving(want map[string][]string) func(kubeletstub.State) bool {
	return func(st kubeletstub.State) bool { return cmp.Equal(want, view(st)) }
}

func registrations(st kubeletstub.State) map[string]int {
	out := map[string]int{}
	for _, r := range st.Registrations {
		out[r.Resource]++
	}
	return out
}

var mixedWant = map[string][]string{
	"nvidia.com/mig-3g.40gb":    {"MIG-0-2"},
	"nvidia.com/mig-2g.20gb":    {"MIG-0-3"},
	"nvidia.com/mig-1g.10gb":    {"MIG-0-13", "MIG-1-8"},
	"nvidia.com/mig-1g.10gb.me": {"MIG-1-7"},
	"nvidia.com/gpu":            {"GPU-2"},
}

func TestRegistersMixedLayout(t *testing.T) {
	e := start(t, Options{}, mixedLayout())
	st := e.wait("every resource served", serving(mixedWant))

	for _, reg := range st.Registrations {
		p := st.Plugins[reg.Resource]
		if want := socketName(DefaultSocketPrefix, reg.Resource, e.m.token, 1); reg.Endpoint != want {
			t.Errorf("%s registered endpoint %q, want %q", reg.Resource, reg.Endpoint, want)
		}
		if !reg.Options.GetGetPreferredAllocationAvailable() {
			t.Errorf("%s registered without GetPreferredAllocation", reg.Resource)
		}
		if diff := cmp.Diff(reg.Options, p.Options, protocmp.Transform()); diff != "" {
			t.Errorf("%s: GetDevicePluginOptions differs from the registered options (-registered +served):\n%s", reg.Resource, diff)
		}
	}
	if diff := cmp.Diff(map[string]int{
		"nvidia.com/mig-3g.40gb": 1, "nvidia.com/mig-2g.20gb": 1, "nvidia.com/mig-1g.10gb": 1, "nvidia.com/mig-1g.10gb.me": 1, "nvidia.com/gpu": 1,
	}, registrations(st)); diff != "" {
		t.Errorf("registrations (-want +got):\n%s", diff)
	}

	res := e.waitRegistered()
	var names []string
	for _, r := range res {
		names = append(names, r.Name)
		if !r.Registered || r.RegisteredAt.IsZero() || r.RegisterError != "" {
			t.Errorf("%s: status %+v, want registered", r.Name, r)
		}
	}
	if diff := cmp.Diff(slices.Sorted(maps.Keys(mixedWant)), names); diff != "" {
		t.Errorf("Resources() names (-want +got):\n%s", diff)
	}
}

func TestLiveLayoutChange(t *testing.T) {
	e := start(t, Options{}, mixedLayout())
	e.wait("first layout", serving(mixedWant))

	// GPU 0 and 1 become 4g+3g each; GPU 2 stays whole.
	second := []mig.GPU{
		migGPU(0, inst("4g.40gb", 0, 4, 1), inst("3g.40gb", 4, 4, 2)),
		migGPU(1, inst("4g.40gb", 0, 4, 1), inst("3g.40gb", 4, 4, 2)),
		plainGPU(2),
	}
	if err := e.m.Serve(e.ctx, second); err != nil {
		t.Fatal(err)
	}
	st := e.wait("second layout", serving(map[string][]string{
		"nvidia.com/mig-4g.40gb": {"MIG-0-1", "MIG-1-1"},
		"nvidia.com/mig-3g.40gb": {"MIG-0-2", "MIG-1-2"},
		// Gone from the layout, still registered, and empty: the kubelet
		// sets their capacity to 0 at once.
		"nvidia.com/mig-2g.20gb":    {},
		"nvidia.com/mig-1g.10gb":    {},
		"nvidia.com/mig-1g.10gb.me": {},
		"nvidia.com/gpu":            {"GPU-2"},
	}))
	// No restart: only the new resource registered, nothing disconnected.
	if diff := cmp.Diff(map[string]int{
		"nvidia.com/mig-3g.40gb": 1, "nvidia.com/mig-2g.20gb": 1, "nvidia.com/mig-1g.10gb": 1,
		"nvidia.com/mig-1g.10gb.me": 1, "nvidia.com/gpu": 1, "nvidia.com/mig-4g.40gb": 1,
	}, registrations(st)); diff != "" {
		t.Errorf("registrations (-want +got):\n%s", diff)
	}
	if n := st.Plugins["nvidia.com/gpu"].Messages; n != 1 {
		t.Errorf("nvidia.com/gpu got %d messages; its devices did not change, want 1", n)
	}
	res := e.waitRegistered()
	zeroed := res[slices.IndexFunc(res, func(r ResourceStatus) bool { return r.Name == "nvidia.com/mig-2g.20gb" })]
	if !zeroed.Registered || zeroed.Devices == nil || len(zeroed.Devices) != 0 {
		t.Errorf("zeroed resource status %+v, want registered with an empty device list", zeroed)
	}

	// The zeroed resource comes back on the same registration.
	if err := e.m.Serve(e.ctx, mixedLayout()); err != nil {
		t.Fatal(err)
	}
	want := maps.Clone(mixedWant)
	want["nvidia.com/mig-4g.40gb"] = []string{}
	st = e.wait("first layout again", serving(want))
	if n := registrations(st)["nvidia.com/mig-2g.20gb"]; n != 1 {
		t.Errorf("nvidia.com/mig-2g.20gb registered %d times, want once", n)
	}
}

func TestKubeletRestart(t *testing.T) {
	for name, restart := range map[string]func(e *env) error{
		"kubelet restarts": func(e *env) error { return e.kubelet.Restart() },
		"plugin socket removed": func(e *env) error {
			for _, r := range e.m.Resources() {
				if r.Name == "nvidia.com/mig-1g.10gb" {
					return os.Remove(r.Socket)
				}
			}
			return errors.New("nvidia.com/mig-1g.10gb is not served")
		},
	} {
		t.Run(name, func(t *testing.T) {
			e := start(t, Options{}, mixedLayout())
			e.wait("first layout", serving(mixedWant))
			// Zero two resources: they must come back too.
			if err := e.m.Serve(e.ctx, mixedLayout()[1:]); err != nil {
				t.Fatal(err)
			}
			want := map[string][]string{
				"nvidia.com/mig-3g.40gb": {}, "nvidia.com/mig-2g.20gb": {},
				"nvidia.com/mig-1g.10gb": {"MIG-1-8"}, "nvidia.com/mig-1g.10gb.me": {"MIG-1-7"}, "nvidia.com/gpu": {"GPU-2"},
			}
			e.wait("second layout", serving(want))

			for round := 1; round <= 3; round++ {
				if err := restart(e); err != nil {
					t.Fatal(err)
				}
				st := e.wait("every resource registered again", func(st kubeletstub.State) bool {
					regs := registrations(st)
					for r := range want {
						if regs[r] < 1+round {
							return false
						}
					}
					return serving(want)(st)
				})
				// The stand-in keeps its registration log across restarts.
				for r, n := range registrations(st) {
					if n != 1+round {
						t.Errorf("round %d: %s registered %d times, want %d", round, r, n, 1+round)
					}
				}
			}
		})
	}
}

// fakeHealth is a HealthSource whose faults the test sets directly.
type fakeHealth struct {
	mu      sync.Mutex
	targets []health.Target
	faults  map[string]health.Fault
	changes chan struct{}
}

func newFakeHealth() *fakeHealth {
	return &fakeHealth{faults: map[string]health.Fault{}, changes: make(chan struct{}, 1)}
}

func (f *fakeHealth) SetTargets(t []health.Target) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.targets = t
}

func (f *fakeHealth) Unhealthy() map[string]health.Fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.faults)
}

func (f *fakeHealth) Changes() <-chan struct{} { return f.changes }

func (f *fakeHealth) set(id string, xid uint64) {
	f.mu.Lock()
	if xid == 0 {
		delete(f.faults, id)
	} else {
		f.faults[id] = health.Fault{Xid: xid, At: time.Now()}
	}
	f.mu.Unlock()
	select {
	case f.changes <- struct{}{}:
	default:
	}
}

func TestAllocateOverSocket(t *testing.T) {
	host := fakeHostRoot(t, map[string]string{devnodes.MigMinorsPath: testMigMinors, "dev/nvidia-uvm": "", "dev/nvidia-uvm-tools": ""})
	gpus := []mig.GPU{migGPU(0, inst("3g.40gb", 0, 4, 2), inst("3g.40gb", 4, 4, 3)), plainGPU(1)}
	const r = "nvidia.com/mig-3g.40gb"

	for name, tc := range map[string]struct {
		opts     Options
		resource string
		ids      []string
		want     *pluginapi.ContainerAllocateResponse
	}{
		"envvar real": {
			opts: Options{HostRoot: host}, resource: r, ids: []string{"MIG-0-3", "MIG-0-2"},
			want: &pluginapi.ContainerAllocateResponse{
				Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": "MIG-0-3,MIG-0-2"},
				Devices: []*pluginapi.DeviceSpec{
					spec("/dev/nvidiactl"), spec("/dev/nvidia-uvm"), spec("/dev/nvidia-uvm-tools"), spec("/dev/nvidia0"),
					spec("/dev/nvidia-caps/nvidia-cap30"), spec("/dev/nvidia-caps/nvidia-cap31"),
					spec("/dev/nvidia-caps/nvidia-cap21"), spec("/dev/nvidia-caps/nvidia-cap22"),
				},
			},
		},
		"envvar real whole GPU": {
			opts: Options{HostRoot: host}, resource: resourceGPU, ids: []string{"GPU-1"},
			want: &pluginapi.ContainerAllocateResponse{
				Envs:    map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-1"},
				Devices: []*pluginapi.DeviceSpec{spec("/dev/nvidiactl"), spec("/dev/nvidia-uvm"), spec("/dev/nvidia-uvm-tools"), spec("/dev/nvidia1")},
			},
		},
		"envvar with a PostAllocator": {
			opts: Options{PostAllocator: envPost{}}, resource: r, ids: []string{"MIG-0-2"},
			want: &pluginapi.ContainerAllocateResponse{Envs: map[string]string{
				"NVIDIA_VISIBLE_DEVICES": "MIG-0-2", "POST": "MIG-0-2",
			}},
		},
		"cdi-cri": {
			opts: Options{DeviceListStrategy: DeviceListCDICRI, HostRoot: host}, resource: r, ids: []string{"MIG-0-2", "MIG-0-3"},
			want: &pluginapi.ContainerAllocateResponse{
				Envs:       map[string]string{"NVIDIA_VISIBLE_DEVICES": "void"},
				CdiDevices: []*pluginapi.CDIDevice{{Name: "nvidia.com/gpu=MIG-0-2"}, {Name: "nvidia.com/gpu=MIG-0-3"}},
			},
		},
		"cdi-annotations with a custom kind": {
			opts: Options{DeviceListStrategy: DeviceListCDIAnnotations, CDIKind: "example.com/mig", HostRoot: host}, resource: r, ids: []string{"MIG-0-3"},
			want: &pluginapi.ContainerAllocateResponse{
				Envs:        map[string]string{"NVIDIA_VISIBLE_DEVICES": "void"},
				Annotations: map[string]string{"cdi.k8s.io/migflex_MIG-0-3": "example.com/mig=MIG-0-3"},
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			e := start(t, tc.opts, gpus)
			e.wait("layout", serving(map[string][]string{r: {"MIG-0-2", "MIG-0-3"}, resourceGPU: {"GPU-1"}}))
			got, err := e.kubelet.Allocate(e.ctx, tc.resource, tc.ids...)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("Allocate (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAllocateRejects(t *testing.T) {
	h := newFakeHealth()
	e := start(t, Options{PostAllocator: envPost{}, Health: h}, mixedLayout())
	e.wait("layout", serving(mixedWant))
	h.set("MIG-0-13", 79)
	e.wait("MIG-0-13 unhealthy", func(st kubeletstub.State) bool {
		return cmp.Equal([]string{"MIG-0-13!", "MIG-1-8"}, deviceList(st.Plugins["nvidia.com/mig-1g.10gb"].Devices))
	})

	for name, tc := range map[string]struct {
		resource string
		ids      []string
		code     codes.Code
		msg      string
	}{
		"unknown ID": {resource: "nvidia.com/mig-1g.10gb", ids: []string{"MIG-1-8", "MIG-9-9"}, code: codes.InvalidArgument,
			msg: `resource nvidia.com/mig-1g.10gb: unknown device "MIG-9-9"`},
		"device of another resource": {resource: "nvidia.com/mig-1g.10gb", ids: []string{"MIG-0-2"}, code: codes.InvalidArgument,
			msg: `unknown device "MIG-0-2"`},
		"unhealthy": {resource: "nvidia.com/mig-1g.10gb", ids: []string{"MIG-0-13"}, code: codes.FailedPrecondition,
			msg: `resource nvidia.com/mig-1g.10gb: device "MIG-0-13" is unhealthy (Xid 79`},
		"duplicate": {resource: "nvidia.com/mig-1g.10gb", ids: []string{"MIG-1-8", "MIG-1-8"}, code: codes.InvalidArgument,
			msg: `device "MIG-1-8" requested twice`},
		"empty": {resource: "nvidia.com/mig-1g.10gb", code: codes.InvalidArgument, msg: "names no device"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := e.kubelet.Allocate(e.ctx, tc.resource, tc.ids...)
			if s, _ := status.FromError(err); err == nil || s.Code() != tc.code || !strings.Contains(s.Message(), tc.msg) {
				t.Errorf("Allocate error = %v, want %s containing %q", err, tc.code, tc.msg)
			}
		})
	}

	// Recovery makes the device allocatable again.
	h.set("MIG-0-13", 0)
	e.wait("MIG-0-13 healthy", func(st kubeletstub.State) bool {
		return cmp.Equal([]string{"MIG-0-13", "MIG-1-8"}, deviceList(st.Plugins["nvidia.com/mig-1g.10gb"].Devices))
	})
	if _, err := e.kubelet.Allocate(e.ctx, "nvidia.com/mig-1g.10gb", "MIG-0-13"); err != nil {
		t.Errorf("Allocate after recovery: %v", err)
	}
}

func TestPreferredAllocationOverSocket(t *testing.T) {
	// GPU 0 holds three 1g devices, GPU 1 two.
	gpus := []mig.GPU{
		migGPU(0, inst("1g.10gb", 0, 1, 9), inst("1g.10gb", 1, 1, 10), inst("1g.10gb", 2, 1, 11)),
		migGPU(1, inst("1g.10gb", 0, 1, 9), inst("1g.10gb", 1, 1, 10)),
	}
	const r = "nvidia.com/mig-1g.10gb"
	// MIG-0-9 is in use: GPU 0 has two free devices, GPU 1 two.
	available := []string{"MIG-0-10", "MIG-0-11", "MIG-1-9", "MIG-1-10"}
	for name, tc := range map[string]struct {
		policy AllocationPolicy
		must   []string
		size   int
		want   []string
	}{
		"packed":                   {policy: AllocationPacked, size: 2, want: []string{"MIG-0-10", "MIG-0-11"}},
		"packed with must-include": {policy: AllocationPacked, must: []string{"MIG-1-10"}, size: 2, want: []string{"MIG-1-10", "MIG-1-9"}},
		"distributed":              {policy: AllocationDistributed, size: 2, want: []string{"MIG-0-10", "MIG-1-9"}},
		"distributed with must":    {policy: AllocationDistributed, must: []string{"MIG-0-11"}, size: 3, want: []string{"MIG-0-11", "MIG-1-9", "MIG-0-10"}},
	} {
		t.Run(name, func(t *testing.T) {
			e := start(t, Options{AllocationPolicy: tc.policy}, gpus)
			e.wait("layout", serving(map[string][]string{r: {"MIG-0-9", "MIG-0-10", "MIG-0-11", "MIG-1-9", "MIG-1-10"}}))
			got, err := e.kubelet.GetPreferredAllocation(e.ctx, r, available, tc.must, tc.size)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("preferred (-want +got):\n%s", diff)
			}
		})
	}

	e := start(t, Options{}, gpus)
	e.wait("layout", serving(map[string][]string{r: {"MIG-0-9", "MIG-0-10", "MIG-0-11", "MIG-1-9", "MIG-1-10"}}))
	_, err := e.kubelet.GetPreferredAllocation(e.ctx, r, available, []string{"MIG-7-7"}, 1)
	if s, _ := status.FromError(err); s.Code() != codes.InvalidArgument || !strings.Contains(s.Message(), "MIG-7-7") {
		t.Errorf("unknown must-include: error %v, want InvalidArgument naming MIG-7-7", err)
	}
}

func TestSingleStrategyKeepsPreviousSet(t *testing.T) {
	one := []mig.GPU{migGPU(0, inst("3g.40gb", 0, 4, 2), inst("3g.40gb", 4, 4, 1))}
	e := startStrategy(t, Options{}, MigStrategySingle, one)
	e.wait("single layout", serving(map[string][]string{resourceGPU: {"MIG-0-2", "MIG-0-1"}}))
	before := e.waitRegistered()

	two := []mig.GPU{migGPU(0, inst("4g.40gb", 0, 4, 1), inst("3g.40gb", 4, 4, 2))}
	err := e.m.Serve(e.ctx, two)
	if err == nil || !strings.Contains(err.Error(), "2 profiles (3g.40gb, 4g.40gb)") || !strings.Contains(err.Error(), "keeping the previous devices that still exist") {
		t.Fatalf("Update error = %v, want the two profiles named and the previous devices kept", err)
	}
	if diff := cmp.Diff(before, e.m.Resources()); diff != "" {
		t.Errorf("Resources changed after a refused layout (-before +after):\n%s", diff)
	}
	// A refused layout in which a served instance is gone (changed behind
	// the agent's back): the others stay served, the gone one is not.
	gone := []mig.GPU{migGPU(0, inst("4g.40gb", 0, 4, 3), inst("3g.40gb", 4, 4, 2))}
	if err := e.m.Serve(e.ctx, gone); err == nil {
		t.Fatal("Update of a two-profile layout under single succeeded")
	}
	e.wait("the gone device no longer served", serving(map[string][]string{resourceGPU: {"MIG-0-2"}}))

	// Still served: a later valid layout goes through on the same server.
	if err := e.m.Serve(e.ctx, []mig.GPU{migGPU(0, inst("1g.10gb", 0, 1, 9))}); err != nil {
		t.Fatal(err)
	}
	st := e.wait("valid layout after the refused one", serving(map[string][]string{resourceGPU: {"MIG-0-9"}}))
	if n := registrations(st)[resourceGPU]; n != 1 {
		t.Errorf("nvidia.com/gpu registered %d times, want once", n)
	}
}

func TestUpdateBeforeRunAndShutdown(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := testutil.SocketDir(t)
	k, err := kubeletstub.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	m, err := New(Options{PluginDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Serve(ctx, mixedLayout()); err != nil {
		t.Fatal(err)
	}
	sockets := func() []string {
		entries, _ := os.ReadDir(dir)
		var out []string
		for _, e := range entries {
			if e.Name() != "kubelet.sock" {
				out = append(out, e.Name())
			}
		}
		return out
	}
	if s := sockets(); len(s) != 0 {
		t.Errorf("sockets before Run: %v", s)
	}
	if st := k.State(); len(st.Registrations) != 0 {
		t.Errorf("registrations before Run: %v", st.Registrations)
	}

	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	wctx, wcancel := context.WithTimeout(ctx, hangTimeout)
	defer wcancel()
	if _, err := k.Wait(wctx, serving(mixedWant)); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(ctx); err == nil {
		t.Error("second Run succeeded")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(hangTimeout):
		t.Fatal("Run did not return")
	}
	if s := sockets(); len(s) != 0 {
		t.Errorf("sockets left after Run: %v", s)
	}
	// ctx is cancelled by now; the hang guard needs a context of its own.
	actx, acancel := context.WithTimeout(context.Background(), hangTimeout)
	defer acancel()
	st, err := k.Wait(actx, func(st kubeletstub.State) bool {
		for _, p := range st.Plugins {
			if p.Connected {
				return false
			}
		}
		return true
	})
	if err != nil {
		t.Errorf("streams still open after Run returned: %s", describe(st))
	}
}

func TestRegistersWhenKubeletAppears(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := testutil.SocketDir(t)
	m, err := New(Options{PluginDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Serve(ctx, mixedLayout()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	// Wait until the plugin serves, then start the kubelet.
	wait := time.After(hangTimeout)
	for !slices.ContainsFunc(m.Resources(), func(r ResourceStatus) bool { return fileExists(r.Socket) }) {
		select {
		case <-m.Changes():
		case <-wait:
			t.Fatal("plugin never served")
		case <-time.After(10 * time.Millisecond): // sockets appear without a Changes signal
		}
	}
	k, err := kubeletstub.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	wctx, wcancel := context.WithTimeout(ctx, hangTimeout)
	defer wcancel()
	if st, err := k.Wait(wctx, serving(mixedWant)); err != nil {
		t.Fatalf("not registered after the kubelet appeared: %v%s", err, describe(st))
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func TestNewRejectsBadOptions(t *testing.T) {
	for name, tc := range map[string]struct {
		opts Options
		msg  string
	}{
		"MIG strategy":    {opts: Options{MigStrategy: "fancy"}, msg: `unknown MIG strategy "fancy"`},
		"device list":     {opts: Options{DeviceListStrategy: "volume-mounts"}, msg: `unknown device list strategy "volume-mounts"`},
		"policy":          {opts: Options{AllocationPolicy: "spread"}, msg: `unknown allocation policy "spread"`},
		"relative dir":    {opts: Options{PluginDir: "device-plugins"}, msg: `plugin directory "device-plugins" is not an absolute path`},
		"relative root":   {opts: Options{HostRoot: "host"}, msg: `host root "host" is not an absolute path`},
		"CDI kind":        {opts: Options{CDIKind: "nvidia.com"}, msg: `CDI kind "nvidia.com" is not of the form vendor/class`},
		"socket prefix":   {opts: Options{SocketPrefix: "a/b"}, msg: "socket prefix"},
		"negative":        {opts: Options{RetryInterval: -time.Second}, msg: "must not be negative"},
		"long plugin dir": {opts: Options{PluginDir: "/" + strings.Repeat("d", 90)}, msg: "too long for unix socket paths"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New(tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("New error = %v, want one containing %q", err, tc.msg)
			}
		})
	}
	if _, err := New(Options{}); err != nil {
		t.Errorf("New with defaults: %v", err)
	}
}

func TestParseOptions(t *testing.T) {
	if s, err := MigStrategies.Parse("single"); err != nil || s != MigStrategySingle {
		t.Errorf("MigStrategies.Parse(single) = %q, %v", s, err)
	}
	if _, err := MigStrategies.Parse("Mixed"); err == nil {
		t.Error("MigStrategies.Parse is case-insensitive; want exact values")
	}
	if s, err := DeviceListStrategies.Parse("cdi-cri"); err != nil || s != DeviceListCDICRI {
		t.Errorf("DeviceListStrategies.Parse(cdi-cri) = %q, %v", s, err)
	}
	if p, err := AllocationPolicies.Parse("distributed"); err != nil || p != AllocationDistributed {
		t.Errorf("AllocationPolicies.Parse(distributed) = %q, %v", p, err)
	}
}

// TestHungRegistrationBlocksNothing holds the kubelet's Register as a
// kubelet that accepts connections but hangs does: Update and Resources
// (and with them the agent's loop and /metrics) must answer meanwhile, and
// the registration completes once the kubelet answers.
func TestHungRegistrationBlocksNothing(t *testing.T) {
	k := startKubelet(t, testutil.SocketDir(t))
	entered := make(chan string, 16)
	release := make(chan struct{})
	k.SetRegisterHook(func(ctx context.Context, r *pluginapi.RegisterRequest) error {
		entered <- r.ResourceName
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	// A register timeout far beyond the hang guard: the held call cannot
	// end by itself while the test looks.
	const first = "nvidia.com/mig-3g.40gb"
	e := run(t, k, Options{RegisterTimeout: time.Hour}, MigStrategyMixed, []mig.GPU{migGPU(0, inst("3g.40gb", 0, 4, 2))})
	ctx, m := e.ctx, e.m

	select {
	case r := <-entered:
		if r != first {
			t.Fatalf("first registration for %s, want %s", r, first)
		}
	case <-time.After(hangTimeout):
		t.Fatal("the manager never registered")
	}
	// The kubelet holds Register now, until release is closed.
	returned := make(chan []ResourceStatus, 1)
	go func() {
		if err := m.Serve(ctx, []mig.GPU{migGPU(0, inst("3g.40gb", 0, 4, 2), inst("2g.20gb", 4, 2, 3))}); err != nil {
			t.Errorf("Update: %v", err)
		}
		returned <- m.Resources()
	}()
	select {
	case res := <-returned:
		for _, r := range res {
			if r.Registered {
				t.Errorf("%s registered while the kubelet holds Register", r.Name)
			}
		}
		if len(res) != 2 {
			t.Errorf("Resources() = %+v, want both resources", res)
		}
	case <-time.After(hangTimeout):
		t.Fatal("Update and Resources are blocked behind a Register the kubelet holds")
	}

	close(release)
	st := e.wait("both resources registered", serving(map[string][]string{
		first: {"MIG-0-2"}, "nvidia.com/mig-2g.20gb": {"MIG-0-3"},
	}))
	if diff := cmp.Diff(map[string]int{first: 1, "nvidia.com/mig-2g.20gb": 1}, registrations(st)); diff != "" {
		t.Errorf("registrations (-want +got):\n%s", diff)
	}
}

// TestKubeletReplacedDuringRegistration has the kubelet restart while it
// answers a Register: the old kubelet accepts the plugin, but the new one
// on the re-created kubelet.sock must get its own registration.
func TestKubeletReplacedDuringRegistration(t *testing.T) {
	dir := testutil.SocketDir(t)
	old := startKubelet(t, dir)
	var (
		once    sync.Once
		current *kubeletstub.Kubelet
		started = make(chan error, 1)
	)
	old.SetRegisterHook(func(context.Context, *pluginapi.RegisterRequest) error {
		// A new kubelet takes kubelet.sock over while the old one is
		// still answering the first call, which then succeeds.
		once.Do(func() {
			var err error
			current, err = kubeletstub.Start(dir)
			started <- err
		})
		return nil
	})
	e := run(t, old, Options{}, MigStrategyMixed, []mig.GPU{migGPU(0, inst("3g.40gb", 0, 4, 2))})
	select {
	case err := <-started:
		if err != nil {
			t.Fatal(err)
		}
		defer current.Stop()
	case <-time.After(hangTimeout):
		t.Fatal("the manager never registered")
	}
	(&env{t: t, ctx: e.ctx, kubelet: current}).wait("registered with the new kubelet", serving(map[string][]string{"nvidia.com/mig-3g.40gb": {"MIG-0-2"}}))
}

// TestRegistrationAnswerLost has the kubelet connect a plugin but the
// plugin hear an error, as when its Register call times out on a slow
// kubelet. The retry must not reuse the connected socket: kubelets from
// 1.37 refuse it ("device plugin already connected") and, having dropped
// their client of the first connection with the refusal, never disconnect
// it, so the devices stay allocatable after the plugin is gone and every
// later registration is refused (kubernetes/kubernetes#139338).
func TestRegistrationAnswerLost(t *testing.T) {
	const lost = "nvidia.com/mig-2g.20gb"
	for name, strict := range map[string]bool{"kubelet 1.35-1.36": false, "kubelet 1.37": true} {
		t.Run(name, func(t *testing.T) {
			k := startKubelet(t, testutil.SocketDir(t))
			k.RefuseConnectedEndpoint(strict)
			var once sync.Once
			k.SetAnswerHook(func(_ context.Context, r *pluginapi.RegisterRequest) error {
				err := error(nil)
				if r.ResourceName == lost {
					once.Do(func() { err = status.Error(codes.DeadlineExceeded, "the answer was lost") })
				}
				return err
			})
			e := run(t, k, Options{}, MigStrategyMixed, mixedLayout())
			res := e.waitRegistered()
			st := e.wait("every resource served", serving(mixedWant))

			var endpoints []string
			for _, reg := range st.Registrations {
				if reg.Resource == lost {
					endpoints = append(endpoints, reg.Endpoint)
				}
			}
			if len(endpoints) != 2 || endpoints[0] == endpoints[1] {
				t.Fatalf("%s registered at %v, want twice on two sockets\nkubelet state: %s", lost, endpoints, describe(st))
			}
			if got := st.Plugins[lost].Endpoint; got != endpoints[1] {
				t.Errorf("the kubelet serves %s from %s, want the second socket %s", lost, got, endpoints[1])
			}
			if _, err := os.Stat(filepath.Join(e.dir, endpoints[0])); err == nil {
				t.Errorf("the socket of the lost registration, %s, still exists", endpoints[0])
			}
			for _, r := range res {
				if r.Name == lost && filepath.Base(r.Socket) != endpoints[1] {
					t.Errorf("status names socket %s, want %s", r.Socket, endpoints[1])
				}
			}
			if len(st.Rejected) != 0 {
				t.Errorf("registrations refused: %v", st.Rejected)
			}
		})
	}
}

// TestRunRemovesEarlierSockets: an agent that died without stopping left
// its sockets (named before the generation suffix, or after); Run removes
// them and nothing else in the directory.
func TestRunRemovesEarlierSockets(t *testing.T) {
	dir := testutil.SocketDir(t)
	listen := func(name string) {
		l, err := net.Listen("unix", filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		// Closing would remove the file; keep it as a dead process does.
		l.(*net.UnixListener).SetUnlinkOnClose(false)
		l.Close()
	}
	for _, name := range []string{"migflex-mig-2g.20gb.sock", "migflex-gpu-0a1b2c3d-4.sock", "nvidia-gpu.sock"} {
		listen(name)
	}
	if err := os.WriteFile(filepath.Join(dir, "migflex-notes.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	e := run(t, startKubelet(t, dir), Options{}, MigStrategyMixed, mixedLayout())
	e.waitRegistered()

	var left []string
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		left = append(left, en.Name())
	}
	served := map[string]bool{}
	for _, r := range e.m.Resources() {
		served[filepath.Base(r.Socket)] = true
	}
	var others []string
	for _, name := range left {
		if !served[name] {
			others = append(others, name)
		}
	}
	if diff := cmp.Diff([]string{"kubelet.sock", "migflex-notes.sock", "nvidia-gpu.sock"}, others); diff != "" {
		t.Errorf("files besides the served sockets (-want +got):\n%s", diff)
	}
}
