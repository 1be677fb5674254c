package draplugin

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"

	"github.com/migflex/migflex/internal/domain/dra"
)

// sliceDevices returns "name[ taint]" for every device in the API's
// ResourceSlices of this node's pool.
func sliceDevices(t *testing.T, client kubernetes.Interface) []string {
	t.Helper()
	list, err := client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range list.Items {
		if s.Spec.Driver != dra.DriverName || s.Spec.Pool.Name != node {
			continue
		}
		for _, d := range s.Spec.Devices {
			out = append(out, deviceKey(d))
		}
	}
	slices.Sort(out)
	return out
}

func waitDevices(t *testing.T, client kubernetes.Interface, drv *Driver, want ...string) {
	t.Helper()
	slices.Sort(want)
	var got []string
	waitFor(t, "the ResourceSlice to list "+strings.Join(want, ", "), func() bool {
		got = sliceDevices(t, client)
		return slices.Equal(got, want)
	})
	// Visible agrees once the API shows the publication (its informer
	// may not have listed the slices yet: it cannot tell until then).
	var err error
	waitFor(t, "Visible", func() bool {
		var ok bool
		ok, err = drv.Visible(context.Background())
		return ok
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestPublishFollowsTheLayout(t *testing.T) {
	part, discover := simGPUs(t)
	client := fakeClient()
	drv := startDriver(t, client, newDirs(t), Options{})
	if ok, err := drv.Visible(context.Background()); ok || err != nil {
		t.Fatalf("Visible before any Publish = %v, %v", ok, err)
	}
	if err := drv.Publish(discover(), nil); err != nil {
		t.Fatal(err)
	}
	waitDevices(t, client, drv, mig0, mig4, whole)

	// A new layout, published in place: GPU 0's second 3g becomes 2g+1g.
	gpus := discover()
	if err := part.DestroyInstance(0, gpus[0].Instances[1].GIID); err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		profile string
		start   int
	}{{"2g.20gb", 4}, {"1g.10gb", 6}} {
		if _, err := part.CreateInstance(0, p.profile, p.start); err != nil {
			t.Fatal(err)
		}
	}
	if err := drv.Publish(discover(), nil); err != nil {
		t.Fatal(err)
	}
	waitDevices(t, client, drv, mig0, "gpu-0-mig-2g20gb-14-4", "gpu-0-mig-1g10gb-19-6", whole)

	// Drain withdraws, Undrain brings back.
	devs, _ := drv.Published()
	if err := drv.Drain(context.Background(), []string{devs[0].UUID}); err != nil {
		t.Fatal(err)
	}
	waitDevices(t, client, drv, "gpu-0-mig-2g20gb-14-4", "gpu-0-mig-1g10gb-19-6", whole)
	drv.Undrain([]string{devs[0].UUID})
	waitDevices(t, client, drv, mig0, "gpu-0-mig-2g20gb-14-4", "gpu-0-mig-1g10gb-19-6", whole)

	// A layout that cannot be named changes nothing.
	bad := discover()
	bad[0].Instances[0].UUID = ""
	if err := drv.Publish(bad, nil); err == nil || !strings.Contains(err.Error(), "has no UUID") {
		t.Errorf("Publish of an unnamable layout: err = %v", err)
	}
	if got, _ := drv.Published(); len(got) != 4 {
		t.Errorf("after a refused Publish: %v", got)
	}
}

func TestUnhealthy(t *testing.T) {
	_, discover := simGPUs(t)
	gpus := discover()
	unhealthy := map[string]dra.Fault{gpus[1].UUID: {Xid: 79, Reason: "Xid 79"}}
	const tainted = whole + " gpu.migflex.io/xid=79:NoSchedule"
	tests := []struct {
		name       string
		policy     dra.UnhealthyPolicy
		dropTaints bool // the API server drops taints, as with DRADeviceTaints off
		want       []string
	}{
		{"taint", dra.UnhealthyTaint, false, []string{mig0, mig4, tainted}},
		{"withdraw", dra.UnhealthyWithdraw, false, []string{mig0, mig4}},
		{"auto where taints are kept", UnhealthyAuto, false, []string{mig0, mig4, tainted}},
		{"auto where taints are dropped: withdrawn", UnhealthyAuto, true, []string{mig0, mig4}},
		{"taint where taints are dropped: shown untainted, an error logged", dra.UnhealthyTaint, true, []string{mig0, mig4, whole}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel() // each waits a second for its informer
			client := fakeClient()
			if tt.dropTaints {
				dropTaints(client)
			}
			drv := startDriver(t, client, newDirs(t), Options{Unhealthy: tt.policy})
			if err := drv.Publish(gpus, unhealthy); err != nil {
				t.Fatal(err)
			}
			var got []string
			waitFor(t, "the slice to settle at "+strings.Join(tt.want, ", "), func() bool {
				got = sliceDevices(t, client)
				return slices.Equal(got, tt.want)
			})
		})
	}
}

// dropTaints makes the fake API server store ResourceSlices without device
// taints, as an API server with DRADeviceTaints off does. A dry run (dynamic
// mode's check at start) goes on to the reactors after it: it stores
// nothing.
func dropTaints(client *fake.Clientset) {
	gvr := resourceapi.SchemeGroupVersion.WithResource("resourceslices")
	strip := func(obj runtime.Object) *resourceapi.ResourceSlice {
		s := obj.(*resourceapi.ResourceSlice).DeepCopy()
		for i := range s.Spec.Devices {
			s.Spec.Devices[i].Taints = nil
		}
		return s
	}
	client.PrependReactor("create", "resourceslices", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if c, ok := action.(k8stesting.CreateActionImpl); ok && slices.Contains(c.CreateOptions.DryRun, metav1.DryRunAll) {
			return false, nil, nil
		}
		s := strip(action.(k8stesting.CreateAction).GetObject())
		if s.Name == "" && s.GenerateName != "" {
			s.Name = s.GenerateName + strings.ToLower(strings.ReplaceAll(time.Now().Format("150405.000000000"), ".", ""))
		}
		if err := client.Tracker().Create(gvr, s, ""); err != nil {
			return true, nil, err
		}
		return true, s, nil
	})
	client.PrependReactor("update", "resourceslices", func(action k8stesting.Action) (bool, runtime.Object, error) {
		s := strip(action.(k8stesting.UpdateAction).GetObject())
		if err := client.Tracker().Update(gvr, s, ""); err != nil {
			return true, nil, err
		}
		return true, s, nil
	})
}

func TestWatchHealthStatus(t *testing.T) {
	_, discover := simGPUs(t)
	gpus := discover()
	drv := startDriver(t, fakeClient(), newDirs(t), Options{})
	if err := drv.Publish(gpus, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	reports := make(chan kubeletplugin.DeviceHealthReport)
	done := make(chan error, 1)
	go func() { done <- drv.WatchHealthStatus(ctx, reports) }()
	health := func(r kubeletplugin.DeviceHealthReport) []string {
		var out []string
		for _, d := range r.Devices {
			if d.PoolName != node || d.HealthCheckTimeout != healthTimeout {
				t.Errorf("device %+v", d)
			}
			out = append(out, d.DeviceName+"="+string(d.Health)+":"+d.Message)
		}
		return out
	}
	if diff := cmp.Diff([]string{mig0 + "=Healthy:", mig4 + "=Healthy:", whole + "=Healthy:"}, health(<-reports)); diff != "" {
		t.Errorf("first report (-want,+got):\n%s", diff)
	}
	// A publication sends a report at once.
	if err := drv.Publish(gpus, map[string]dra.Fault{gpus[1].UUID: {Xid: 48, Reason: "Xid 48"}}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{mig0 + "=Healthy:", mig4 + "=Healthy:", whole + "=Unhealthy:Xid 48"}, health(<-reports)); diff != "" {
		t.Errorf("report after Xid (-want,+got):\n%s", diff)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("WatchHealthStatus: %v", err)
	}
}

func TestPrepareBeforePublish(t *testing.T) {
	c := allocated("ns", "early", "p", [2]string{"r", mig0})
	d := newDirs(t)
	startDriver(t, fakeClient(c), d, Options{})
	r := dialKubelet(t, d).prepare(c)["uid-early"]
	if !strings.Contains(r.GetError(), "has not published this node's layout yet") {
		t.Errorf("prepare before publish: %v", r)
	}
}

func TestStartRefusesABadCheckpoint(t *testing.T) {
	tests := []struct{ name, content, want string }{
		{"not JSON", "{", "is not a checkpoint"},
		{"another version", `{"version": 9, "driver": "gpu.migflex.io", "node": "node-a"}`, "has format version 9"},
		{"another node", `{"version": 1, "driver": "gpu.migflex.io", "node": "node-b"}`, `on node "node-b"`},
		{"claim without UID", `{"version": 1, "driver": "gpu.migflex.io", "node": "node-a", "claims": [{"name": "c"}]}`, "without a UID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDirs(t)
			path := filepath.Join(d.state, CheckpointFile)
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, ctx := ktesting.NewTestContext(t)
			_, err := Start(ctx, Options{
				NodeName: node, KubeClient: fakeClient(), Editor: simulated,
				RegistrarDir: d.registrar, PluginDir: d.plugin, StateDir: d.state, CDIDir: d.cdi,
			})
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "away only once") {
				t.Fatalf("Start: err = %v, want one containing %q and what to do", err, tt.want)
			}
			if b, _ := os.ReadFile(path); string(b) != tt.content {
				t.Errorf("the checkpoint was changed: %q", b)
			}
		})
	}
}

// TestStartRestoresACorruptCheckpointFromItsCopy: a checkpoint that
// cannot be parsed (truncated, or garbage, on disk) while a claim is
// prepared is restored from its copy: the restarted driver still knows the
// claim (it answers its Prepare again and keeps its CDI spec), the
// checkpoint is whole again and the corrupt file is kept aside. Without a
// good copy it refuses as before, and changes nothing.
func TestStartRestoresACorruptCheckpointFromItsCopy(t *testing.T) {
	tests := []struct {
		name    string
		corrupt func(t *testing.T, main, cp string)
		// restored: the driver starts with the claim; otherwise Start
		// fails with refused in its error.
		restored bool
		refused  string
	}{
		{"truncated", func(t *testing.T, main, _ string) { truncateHalf(t, main) }, true, ""},
		{"garbage", func(t *testing.T, main, _ string) { writeFile(t, main, "\x00\x00not json") }, true, ""},
		{"copy corrupt too", func(t *testing.T, main, cp string) { truncateHalf(t, main); truncateHalf(t, cp) }, false, CheckpointCopyFile + " is not a checkpoint"},
		{"no copy", func(t *testing.T, main, cp string) {
			truncateHalf(t, main)
			if err := os.Remove(cp); err != nil {
				t.Fatal(err)
			}
		}, false, "no copy to restore it from"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, discover := simGPUs(t)
			kept := allocated("ns", "kept", "p", [2]string{"r", mig0})
			client := fakeClient(kept)
			d := newDirs(t)
			drv := startDriver(t, client, d, Options{})
			if err := drv.Publish(discover(), nil); err != nil {
				t.Fatal(err)
			}
			if r := dialKubelet(t, d).prepare(kept)["uid-kept"]; r.GetError() != "" {
				t.Fatal(r.GetError())
			}
			drv.Stop()
			main, cp := filepath.Join(d.state, CheckpointFile), filepath.Join(d.state, CheckpointCopyFile)
			good, err := os.ReadFile(main)
			if err != nil {
				t.Fatal(err)
			}
			if c, err := os.ReadFile(cp); err != nil || string(c) != string(good) {
				t.Fatalf("the copy %q (%v) is not the checkpoint %q", c, err, good)
			}
			tt.corrupt(t, main, cp)
			bad, _ := os.ReadFile(main)
			spec := filepath.Join(d.cdi, "migflex.io-gpu_uid-kept.json")

			if !tt.restored {
				_, ctx := ktesting.NewTestContext(t)
				_, err := Start(ctx, Options{
					NodeName: node, KubeClient: client, Editor: simulated,
					RegistrarDir: d.registrar, PluginDir: d.plugin, StateDir: d.state, CDIDir: d.cdi,
				})
				if err == nil || !strings.Contains(err.Error(), "is not a checkpoint") || !strings.Contains(err.Error(), tt.refused) {
					t.Fatalf("Start: err = %v, want it to name the unreadable checkpoint and %q", err, tt.refused)
				}
				if b, _ := os.ReadFile(main); string(b) != string(bad) {
					t.Errorf("the checkpoint was changed: %q", b)
				}
				if _, err := os.Stat(spec); err != nil {
					t.Errorf("the prepared claim's CDI spec: %v", err)
				}
				return
			}
			drv = startDriver(t, client, d, Options{})
			if got := drv.Prepared(); len(got) != 1 || got[0].UID != "uid-kept" {
				t.Fatalf("prepared after the restore: %+v, want claim uid-kept", got)
			}
			if _, err := os.Stat(spec); err != nil {
				t.Errorf("the prepared claim's CDI spec was removed: %v", err)
			}
			if b, _ := os.ReadFile(main); string(b) != string(good) {
				t.Errorf("checkpoint after the restore %q, want %q", b, good)
			}
			if b, _ := os.ReadFile(filepath.Join(d.state, checkpointCorruptFile)); string(b) != string(bad) {
				t.Errorf("the corrupt checkpoint kept as %q, want %q", b, bad)
			}
			if err := drv.Publish(discover(), nil); err != nil {
				t.Fatal(err)
			}
			if r := dialKubelet(t, d).prepare(kept)["uid-kept"]; r.GetError() != "" || len(r.GetDevices()) != 1 {
				t.Errorf("Prepare again after the restore: %v", r)
			}
		})
	}
}

func truncateHalf(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, string(b[:len(b)/2]))
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestStartRemovesStraySpecs(t *testing.T) {
	_, discover := simGPUs(t)
	kept := allocated("ns", "kept", "p", [2]string{"r", mig0})
	client := fakeClient(kept)
	d := newDirs(t)
	drv := startDriver(t, client, d, Options{})
	if err := drv.Publish(discover(), nil); err != nil {
		t.Fatal(err)
	}
	if r := dialKubelet(t, d).prepare(kept)["uid-kept"]; r.GetError() != "" {
		t.Fatal(r.GetError())
	}
	drv.Stop()
	// A Prepare that wrote its spec and died before the checkpoint.
	stray := filepath.Join(d.cdi, "migflex.io-gpu_uid-stray.json")
	if err := os.WriteFile(stray, []byte(`{"cdiVersion":"0.3.0","kind":"migflex.io/gpu","devices":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(d.cdi, "nvidia.com-gpu.json")
	if err := os.WriteFile(other, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	startDriver(t, client, d, Options{})
	if _, err := os.Stat(stray); !os.IsNotExist(err) {
		t.Errorf("stray spec kept: %v", err)
	}
	for _, keep := range []string{other, filepath.Join(d.cdi, "migflex.io-gpu_uid-kept.json")} {
		if _, err := os.Stat(keep); err != nil {
			t.Errorf("%s removed: %v", keep, err)
		}
	}
}

func TestOptionsErrors(t *testing.T) {
	d := newDirs(t)
	_, ctx := ktesting.NewTestContext(t)
	_, err := Start(ctx, Options{
		Unhealthy: "ignore", RegistrarDir: "relative", PluginDir: filepath.Join(d.plugin, "missing"),
		StateDir: d.state, CDIDir: d.cdi,
	})
	for _, want := range []string{"no node name", "no Kubernetes client", "no CDI editor", `unknown unhealthy-device policy "ignore"`, `registrar directory "relative" is not an absolute path`, "plugin directory must exist"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Start: err = %v, want it to say %q", err, want)
		}
	}
}
