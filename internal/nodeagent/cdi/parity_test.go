package cdi_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	oci "github.com/opencontainers/runtime-spec/specs-go"
	"k8s.io/klog/v2/ktesting"
	cdilib "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/nodeagent/cdi"
	"github.com/migflex/migflex/internal/nodeagent/deviceplugin"
	"github.com/migflex/migflex/internal/nodeagent/deviceplugin/kubeletstub"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim/simtest"
	"github.com/migflex/migflex/internal/nvml/nvmlmig"
	"github.com/migflex/migflex/internal/testsupport/testutil"
)

// A pod sees the same environment whether its simulated devices come from
// the device plugin (envvar strategy, the simulator's environment,
// answered over the device-plugin gRPC API to a kubelet stand-in) or from a
// DRA claim (this package's spec, applied by the CDI library as the
// runtime applies it). Both sides are the real code paths over one
// simulated node.
func TestSameEnvironmentAsDevicePlugin(t *testing.T) {
	lib := simtest.New(t, sim.Config{GPUs: []sim.GPUSpec{{Model: "H100-SXM5-80GB", Count: 2}}, UUIDSeed: t.Name()})
	part := nvmlmig.NewPartitioner(lib)
	if err := part.SetMigMode(0, true); err != nil {
		t.Fatal(err)
	}
	for _, start := range []int{0, 4} {
		if _, err := part.CreateInstance(0, "3g.40gb", start); err != nil {
			t.Fatal(err)
		}
	}
	gpus, err := nvmlmig.Discover(lib)
	if err != nil {
		t.Fatal(err)
	}
	devs, err := dra.Devices(gpus)
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 3 {
		t.Fatalf("devices %v, want GPU 0's two 3g.40gb and GPU 1 whole", devs)
	}

	// The device-plugin side.
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	k, err := kubeletstub.Start(testutil.SocketDir(t))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	m, err := deviceplugin.New(deviceplugin.Options{PluginDir: filepath.Dir(k.Socket()), PostAllocator: deviceplugin.EnvPostAllocator(nvmlbackend.SimulatedDevices{})})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Serve(ctx, gpus); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("device plugin Run: %v", err)
		}
	}()
	if _, err := k.Wait(ctx, func(st kubeletstub.State) bool {
		return len(st.Plugins["nvidia.com/mig-3g.40gb"].Devices) == 2 && len(st.Plugins["nvidia.com/gpu"].Devices) == 1
	}); err != nil {
		t.Fatalf("device plugin did not register: %v", err)
	}

	// The DRA side.
	dir := t.TempDir()
	w, err := cdi.NewWriter(dir, cdi.DefaultKind, cdi.EnvEditor(nvmlbackend.SimulatedDevices{}))
	if err != nil {
		t.Fatal(err)
	}

	for _, tt := range []struct {
		name     string
		resource string
		devs     []dra.Device
	}{
		{"two MIG devices", "nvidia.com/mig-3g.40gb", devs[:2]},
		{"one MIG device", "nvidia.com/mig-3g.40gb", devs[1:2]},
		{"whole GPU", "nvidia.com/gpu", devs[2:]},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ids := make([]string, len(tt.devs))
			for i, d := range tt.devs {
				ids[i] = d.UUID
			}
			resp, err := k.Allocate(ctx, tt.resource, ids...)
			if err != nil {
				t.Fatal(err)
			}
			uid := strings.ReplaceAll(strings.ToLower(tt.name), " ", "-")
			cdiIDs, err := w.WriteClaim(uid, []cdi.Request{{Name: "r", Devices: tt.devs}})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(resp.Envs, environment(t, dir, cdiIDs...)); diff != "" {
				t.Errorf("environment (-device plugin,+DRA):\n%s", diff)
			}
		})
	}
}

// environment applies CDI devices from the specs in dir to an empty
// container with the CDI library and returns the container's environment.
func environment(t *testing.T, dir string, ids ...string) map[string]string {
	t.Helper()
	cache, err := cdilib.NewCache(cdilib.WithSpecDirs(dir), cdilib.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	spec := &oci.Spec{Process: &oci.Process{}}
	if _, err := cache.InjectDevices(spec, ids...); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, kv := range spec.Process.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	if len(env) == 0 {
		t.Fatalf("no environment from %v", ids)
	}
	return env
}
