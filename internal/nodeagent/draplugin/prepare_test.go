package draplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/migflex/migflex/internal/domain/dra"
)

func TestPrepareAndUnprepare(t *testing.T) {
	_, discover := simGPUs(t)
	c1 := allocated("ns", "c1", "p1", [2]string{"r", mig0})
	// One request with two devices: the container must see both at once.
	c2 := allocated("ns", "c2", "p2", [2]string{"x", mig4}, [2]string{"x", whole})
	client := fakeClient(c1, c2)
	d := newDirs(t)
	drv := startDriver(t, client, d, Options{})
	gpus := discover()
	if err := drv.Publish(gpus, nil); err != nil {
		t.Fatal(err)
	}
	k := dialKubelet(t, d)

	got := k.prepare(c1, c2)
	want := map[string]*drapb.NodePrepareResourceResponse{
		"uid-c1": {Devices: []*drapb.Device{{RequestNames: []string{"r"}, PoolName: node, DeviceName: mig0, CdiDeviceIds: []string{"migflex.io/gpu=uid-c1-r"}}}},
		"uid-c2": {Devices: []*drapb.Device{
			{RequestNames: []string{"x"}, PoolName: node, DeviceName: mig4, CdiDeviceIds: []string{"migflex.io/gpu=uid-c2-x"}},
			{RequestNames: []string{"x"}, PoolName: node, DeviceName: whole},
		}},
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Fatalf("prepare (-want,+got):\n%s", diff)
	}
	// The kubelet asks again (it restarted): the same answer.
	if diff := cmp.Diff(want, k.prepare(c1, c2), protocmp.Transform()); diff != "" {
		t.Errorf("repeated prepare (-want,+got):\n%s", diff)
	}
	devs, _ := drv.Published()
	uuid := map[string]string{}
	for _, dev := range devs {
		uuid[dev.Name] = dev.UUID
	}
	spec := readSpecEnv(t, filepath.Join(d.cdi, "migflex.io-gpu_uid-c2.json"))
	if want := "NVIDIA_VISIBLE_DEVICES=" + uuid[mig4] + "," + uuid[whole]; !strings.Contains(spec, want) {
		t.Errorf("c2's spec %s lacks %s", spec, want)
	}

	// The busy check sees both claims' pods through the checkpoint alone.
	uses := dra.Uses(devs, dra.DriverName, node, dra.Sources{Prepared: drv.Prepared()})
	var holders []string
	for _, u := range uses {
		holders = append(holders, u.Holder+" "+u.Device)
	}
	if diff := cmp.Diff([]string{"ns/p1 " + mig0, "ns/p2 " + mig4, "ns/p2 " + whole}, holders); diff != "" {
		t.Errorf("uses (-want,+got):\n%s", diff)
	}

	for range 2 { // idempotent
		if r := k.unprepare(c1)["uid-c1"]; r.GetError() != "" {
			t.Fatalf("unprepare c1: %s", r.GetError())
		}
	}
	if _, err := os.Stat(filepath.Join(d.cdi, "migflex.io-gpu_uid-c1.json")); !os.IsNotExist(err) {
		t.Errorf("c1's spec still there: %v", err)
	}
	if p := drv.Prepared(); len(p) != 1 || p[0].UID != "uid-c2" {
		t.Errorf("prepared after unprepare: %+v", p)
	}

	// The agent restarts: c2 is still prepared, answered the same before
	// any layout is published, and unprepared by the new process.
	drv.Stop()
	drv = startDriver(t, client, d, Options{})
	if p := drv.Prepared(); len(p) != 1 || p[0].UID != "uid-c2" || len(p[0].Pods) != 1 || p[0].Pods[0] != "ns/p2" {
		t.Fatalf("prepared after restart: %+v", p)
	}
	k = dialKubelet(t, d)
	if diff := cmp.Diff(want["uid-c2"], k.prepare(c2)["uid-c2"], protocmp.Transform()); diff != "" {
		t.Errorf("prepare after restart (-want,+got):\n%s", diff)
	}
	if r := k.unprepare(c2)["uid-c2"]; r.GetError() != "" {
		t.Fatalf("unprepare c2 after restart: %s", r.GetError())
	}
	if p := drv.Prepared(); len(p) != 0 {
		t.Errorf("prepared after unprepare: %+v", p)
	}
	if entries, _ := os.ReadDir(d.cdi); len(entries) != 0 {
		t.Errorf("CDI specs left: %v", entries)
	}
}

func readSpecEnv(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Devices []struct {
			ContainerEdits struct{ Env []string } `json:"containerEdits"`
		} `json:"devices"`
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, d := range spec.Devices {
		env = append(env, d.ContainerEdits.Env...)
	}
	return strings.Join(env, " ")
}

func TestPrepareRefuses(t *testing.T) {
	_, discover := simGPUs(t)
	gpus := discover()
	held := allocated("ns", "held", "p0", [2]string{"r", mig0})
	otherPool := allocated("ns", "other-pool", "p", [2]string{"r", mig4})
	otherPool.Status.Allocation.Devices.Results[0].Pool = "node-b"
	// Each case runs against a driver that prepared held (GPU 0's first
	// instance) and drains GPU 1.
	for _, tt := range []struct {
		name string
		c    *resourceapi.ResourceClaim
		want string
	}{
		{"device prepared for another claim", allocated("ns", "twice", "p", [2]string{"r", mig0}), "already prepared for claim ns/held"},
		{"device not in the layout", allocated("ns", "gone", "p", [2]string{"r", "gpu-0-mig-1g10gb-19-0"}), `device "gpu-0-mig-1g10gb-19-0" (request "r") is not in this node's MIG layout any more`},
		{"device draining", allocated("ns", "drained", "p", [2]string{"r", whole}), `device "gpu-1" (request "r") is draining`},
		{"device of another pool", otherPool, `is in pool "node-b", not this node's "node-a"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel() // each waits a second for its informer
			client := fakeClient(held, tt.c)
			d := newDirs(t)
			drv := startDriver(t, client, d, Options{})
			if err := drv.Publish(gpus, nil); err != nil {
				t.Fatal(err)
			}
			devs, _ := drv.Published()
			if err := drv.Drain(context.Background(), []string{devs[2].UUID}); err != nil {
				t.Fatal(err)
			}
			k := dialKubelet(t, d)
			if r := k.prepare(held)["uid-held"]; r.GetError() != "" {
				t.Fatalf("prepare held: %s", r.GetError())
			}
			r := k.prepare(tt.c)[string(tt.c.UID)]
			if !strings.Contains(r.GetError(), tt.want) || len(r.GetDevices()) != 0 {
				t.Fatalf("prepare %s = %v; want an error containing %q", tt.c.Name, r, tt.want)
			}
			if !strings.Contains(r.GetError(), "claim ns/"+tt.c.Name) {
				t.Errorf("error %q does not name the claim", r.GetError())
			}
			if p := drv.Prepared(); len(p) != 1 {
				t.Errorf("a refused claim was checkpointed: %+v", p)
			}
			if _, err := os.Stat(filepath.Join(d.cdi, "migflex.io-gpu_"+string(tt.c.UID)+".json")); !os.IsNotExist(err) {
				t.Errorf("a refused claim has a CDI spec: %v", err)
			}
		})
	}
}

// TestPrepareCDIDirUnwritable: a CDI directory that takes no file
// refuses Prepare with an error that names the claim and its CDI spec,
// checkpoints nothing and leaves nothing behind; once the directory takes
// files again the kubelet's retry prepares the claim. A file in the
// directory's place stands for it (ENOTDIR stops root too, as the
// immutable directory of the e2e TestFaultCDIDirReadOnly does).
func TestPrepareCDIDirUnwritable(t *testing.T) {
	_, discover := simGPUs(t)
	c1 := allocated("ns", "c1", "p1", [2]string{"r", mig0})
	d := newDirs(t)
	drv := startDriver(t, fakeClient(c1), d, Options{})
	if err := drv.Publish(discover(), nil); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(d.cdi); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(d.cdi, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	k := dialKubelet(t, d)
	r := k.prepare(c1)["uid-c1"]
	if want := "claim ns/c1: writing its CDI spec: "; !strings.Contains(r.GetError(), want) || len(r.GetDevices()) != 0 {
		t.Fatalf("prepare with the CDI directory unwritable = %v; want an error containing %q", r, want)
	}
	if p := drv.Prepared(); len(p) != 0 {
		t.Errorf("a claim without its CDI spec was checkpointed: %+v", p)
	}
	if err := os.Remove(d.cdi); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(d.cdi, 0o755); err != nil {
		t.Fatal(err)
	}
	if r := k.prepare(c1)["uid-c1"]; r.GetError() != "" || len(r.GetDevices()) != 1 {
		t.Fatalf("prepare once the directory is writable = %v; want the claim's device", r)
	}
	entries, err := os.ReadDir(d.cdi)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if diff := cmp.Diff([]string{"migflex.io-gpu_uid-c1.json"}, names); diff != "" {
		t.Errorf("the CDI directory (-want +got):\n%s", diff)
	}
	if p := drv.Prepared(); len(p) != 1 || p[0].UID != "uid-c1" {
		t.Errorf("prepared: %+v, want uid-c1", p)
	}
}

// TestPrepareLogs: at the default verbosity a claim's Prepare and its
// Unprepare are one line each, naming the claim, its devices and pods;
// the kubelet's repeats of either add nothing there.
func TestPrepareLogs(t *testing.T) {
	_, discover := simGPUs(t)
	c1 := allocated("ns", "c1", "p1", [2]string{"r", mig0})
	drv := startDriver(t, fakeClient(c1), newDirs(t), Options{})
	if err := drv.Publish(discover(), nil); err != nil {
		t.Fatal(err)
	}
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true), ktesting.Verbosity(0)))
	ctx := klog.NewContext(context.Background(), logger)
	ref := kubeletplugin.NamespacedObject{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "c1"}, UID: c1.UID}
	for range 2 {
		if res, err := drv.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c1}); err != nil || res[c1.UID].Err != nil {
			t.Fatalf("prepare: %v, %v", err, res[c1.UID].Err)
		}
	}
	for range 2 {
		if res, err := drv.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{ref}); err != nil || res[c1.UID] != nil {
			t.Fatalf("unprepare: %v, %v", err, res[c1.UID])
		}
	}
	underlier, ok := logger.GetSink().(ktesting.Underlier)
	if !ok {
		t.Fatalf("sink %T has no buffer", logger.GetSink())
	}
	var got []string
	for _, e := range underlier.GetBuffer().Data() {
		if e.Type != ktesting.LogInfo || e.Verbosity != 0 {
			continue
		}
		line := e.Message
		for i := 0; i+1 < len(e.ParameterKVList); i += 2 {
			line += fmt.Sprintf(" %v=%v", e.ParameterKVList[i], e.ParameterKVList[i+1])
		}
		got = append(got, line)
	}
	want := []string{
		"Prepared a claim claim=ns/c1 uid=uid-c1 devices=[" + mig0 + "] pods=[ns/p1]",
		"Unprepared a claim claim=ns/c1 uid=uid-c1 devices=[" + mig0 + "] pods=[ns/p1]",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("lines at V(0) (-want +got):\n%s", diff)
	}
}
