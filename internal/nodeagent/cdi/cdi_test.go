package cdi

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	oci "github.com/opencontainers/runtime-spec/specs-go"
	cdilib "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend"
)

var (
	// simulated is the Editor of the simulated backend, whose devices the
	// environment names.
	simulated = EnvEditor(nvmlbackend.SimulatedDevices{})

	mig1 = dra.Device{Name: "gpu-0-mig-1g10gb-19-0", UUID: "MIG-aaaa", MIG: true, Profile: "1g.10gb", Minor: 0, GI: 1, CI: 0}
	mig2 = dra.Device{Name: "gpu-0-mig-1g10gb-19-1", UUID: "MIG-bbbb", MIG: true, Profile: "1g.10gb+me", Minor: 0, GI: 2, CI: 0}
	gpu1 = dra.Device{Name: "gpu-1", UUID: "GPU-cccc", Minor: 1}
)

// inject reads the specs in dir with the CDI library, as the container
// runtime does, and applies the given CDI devices to an empty container
// spec; it returns the container's environment, sorted.
func inject(t *testing.T, dir string, ids ...string) []string {
	t.Helper()
	cache, err := cdilib.NewCache(cdilib.WithSpecDirs(dir), cdilib.WithAutoRefresh(false))
	if err != nil {
		t.Fatalf("CDI cache: %v", err)
	}
	if errs := cache.GetErrors(); len(errs) > 0 {
		t.Fatalf("the CDI library rejects the specs: %v", errs)
	}
	spec := &oci.Spec{Process: &oci.Process{}}
	if unresolved, err := cache.InjectDevices(spec, ids...); err != nil {
		t.Fatalf("injecting %v: %v (unresolved %v)", ids, err, unresolved)
	}
	env := slices.Clone(spec.Process.Env)
	slices.Sort(env)
	return env
}

func TestWriteClaimSimulated(t *testing.T) {
	dir := t.TempDir()
	w, err := NewWriter(dir, DefaultKind, simulated)
	if err != nil {
		t.Fatal(err)
	}
	const uid = "0b6f0c9e-4d6e-4b8a-9d5e-0123456789ab"
	ids, err := w.WriteClaim(uid, []Request{
		{Name: "container-0-request-0", Devices: []dra.Device{mig1, mig2}},
		{Name: "gpu/whole", Devices: []dra.Device{gpu1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	wantIDs := []string{"migflex.io/gpu=" + uid + "-container-0-request-0", "migflex.io/gpu=" + uid + "-gpu.whole"}
	if diff := cmp.Diff(wantIDs, ids); diff != "" {
		t.Fatalf("CDI IDs (-want,+got):\n%s", diff)
	}
	if _, err := os.Stat(filepath.Join(dir, "migflex.io-gpu_"+uid+".json")); err != nil {
		t.Errorf("spec not at the transient-spec name: %v", err)
	}

	// Each request's device gives the container all of its devices at
	// once, in allocation order.
	if diff := cmp.Diff([]string{
		"MIGFLEX_DEVICE_IDS=MIG-aaaa,MIG-bbbb", "MIGFLEX_MIG_PROFILES=1g.10gb,1g.10gb+me",
		"MIGFLEX_SIMULATED=true", "NVIDIA_VISIBLE_DEVICES=MIG-aaaa,MIG-bbbb",
	}, inject(t, dir, ids[0])); diff != "" {
		t.Errorf("request 0 environment (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{
		"MIGFLEX_DEVICE_IDS=GPU-cccc", "MIGFLEX_MIG_PROFILES=gpu", "MIGFLEX_SIMULATED=true", "NVIDIA_VISIBLE_DEVICES=GPU-cccc",
	}, inject(t, dir, ids[1])); diff != "" {
		t.Errorf("request 1 environment (-want,+got):\n%s", diff)
	}

	// Rewriting (a repeated Prepare) gives the same IDs and file.
	before, _ := os.ReadFile(w.SpecPath(uid))
	again, err := w.WriteClaim(uid, []Request{
		{Name: "container-0-request-0", Devices: []dra.Device{mig1, mig2}},
		{Name: "gpu/whole", Devices: []dra.Device{gpu1}},
	})
	after, _ := os.ReadFile(w.SpecPath(uid))
	if err != nil || !slices.Equal(again, ids) || string(before) != string(after) {
		t.Errorf("rewrite: %v, %v; file changed: %v", again, err, string(before) != string(after))
	}
}

func TestWriteClaimDeviceNodes(t *testing.T) {
	host := t.TempDir()
	minors := filepath.Join(host, "proc/driver/nvidia-caps/mig-minors")
	if err := os.MkdirAll(filepath.Dir(minors), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(minors, []byte("gpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	w, err := NewWriter(dir, DefaultKind, DeviceNodes{HostRoot: host})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteClaim("uid-1", []Request{{Name: "r", Devices: []dra.Device{mig1}}}); err != nil {
		t.Fatal(err)
	}
	// The runtime fills in a node's type and numbers from the host when
	// it injects it; here the nodes do not exist, so the spec is checked
	// as the CDI library reads it, without injecting.
	cache, err := cdilib.NewCache(cdilib.WithSpecDirs(dir), cdilib.WithAutoRefresh(false))
	if err != nil || len(cache.GetErrors()) > 0 {
		t.Fatalf("CDI library: %v, %v", err, cache.GetErrors())
	}
	d := cache.GetDevice("migflex.io/gpu=uid-1-r")
	if d == nil {
		t.Fatalf("device not found; have %v", cache.ListDevices())
	}
	var nodes []string
	for _, n := range d.ContainerEdits.DeviceNodes {
		nodes = append(nodes, n.Path+"<-"+n.HostPath+":"+n.Permissions)
	}
	want := []string{
		"/dev/nvidiactl<-/dev/nvidiactl:rw", "/dev/nvidia0<-/dev/nvidia0:rw",
		"/dev/nvidia-caps/nvidia-cap12<-/dev/nvidia-caps/nvidia-cap12:rw", "/dev/nvidia-caps/nvidia-cap13<-/dev/nvidia-caps/nvidia-cap13:rw",
	}
	if diff := cmp.Diff(want, nodes); diff != "" {
		t.Errorf("device nodes (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"NVIDIA_VISIBLE_DEVICES=MIG-aaaa"}, d.ContainerEdits.Env); diff != "" {
		t.Errorf("env (-want,+got):\n%s", diff)
	}

	// A layout that changed under the claim: its capability is not listed.
	if _, err := w.WriteClaim("uid-2", []Request{{Name: "r", Devices: []dra.Device{mig2}}}); err == nil || !strings.Contains(err.Error(), `no "gpu0/gi2/access"`) {
		t.Errorf("missing capability: err = %v", err)
	}
	if _, err := os.Stat(w.SpecPath("uid-2")); !os.IsNotExist(err) {
		t.Errorf("a failed write left a spec: %v", err)
	}
}

func TestRemoveAndList(t *testing.T) {
	dir := t.TempDir()
	w, err := NewWriter(dir, DefaultKind, simulated)
	if err != nil {
		t.Fatal(err)
	}
	for _, uid := range []string{"uid-b", "uid-a"} {
		if _, err := w.WriteClaim(uid, []Request{{Name: "r", Devices: []dra.Device{gpu1}}}); err != nil {
			t.Fatal(err)
		}
	}
	// Other vendors' specs and our temporary files are not ours to list.
	for _, name := range []string{"nvidia.com-gpu.json", "migflex.io-gpu_x.yaml", ".migflex.io-gpu_uid-c.json.tmp-1"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := w.Claims()
	if err != nil || !slices.Equal(got, []string{"uid-a", "uid-b"}) {
		t.Fatalf("Claims = %v, %v", got, err)
	}
	for range 2 { // idempotent
		if err := w.RemoveClaim("uid-a"); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := w.Claims(); !slices.Equal(got, []string{"uid-b"}) {
		t.Errorf("after remove: %v", got)
	}
}

func TestErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		dir, kind string
		e         Editor
		want      string
	}{
		{dir, "migflex.io", simulated, "not vendor/class"},
		{dir, "9vendor/gpu", simulated, "not vendor/class"},
		{dir, "migflex.io/gpu-", simulated, "not vendor/class"},
		{"relative", DefaultKind, simulated, "not an absolute path"},
		{filepath.Join(dir, "missing"), DefaultKind, simulated, "not a directory"},
		{dir, DefaultKind, nil, "no CDI editor"},
	} {
		if _, err := NewWriter(tt.dir, tt.kind, tt.e); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewWriter(%q, %q): err = %v, want %q", tt.dir, tt.kind, err, tt.want)
		}
	}
	w, err := NewWriter(dir, DefaultKind, simulated)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		uid  string
		reqs []Request
		want string
	}{
		{"../x", []Request{{Name: "r", Devices: []dra.Device{gpu1}}}, "only letters, digits"},
		{"", nil, "empty"},
		{"u", []Request{{Name: "r"}}, `request "r" has no devices`},
		{"u", []Request{{Name: "a/b", Devices: []dra.Device{gpu1}}, {Name: "a/b", Devices: []dra.Device{mig1}}}, "have one CDI name"},
	} {
		if _, err := w.WriteClaim(tt.uid, tt.reqs); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("WriteClaim(%q): err = %v, want %q", tt.uid, err, tt.want)
		}
	}
	if err := w.RemoveClaim("a/b"); err == nil {
		t.Error("RemoveClaim with a path in the UID: want an error")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("failed writes left files: %v", entries)
	}
}
