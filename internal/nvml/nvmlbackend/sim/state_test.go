package sim_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"

	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
)

func persistentConfig(dir string, gpus ...sim.GPUSpec) sim.Config {
	return sim.Config{GPUs: gpus, StateDir: dir, UUIDSeed: "node-a"}
}

// open starts a simulator on cfg; stop it with closeLib to restart.
func open(t *testing.T, cfg sim.Config) *sim.Lib {
	t.Helper()
	l, err := sim.New(cfg)
	if err != nil {
		t.Fatalf("sim.New() = %v", err)
	}
	l.Init()
	return l
}

func closeLib(t *testing.T, l *sim.Lib) {
	t.Helper()
	l.Shutdown()
	if err := l.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
}

// TestRestartKeepsState: a new process with the same config finds the MIG
// layout, modes (pending ones too), busy marks and UUIDs a real GPU would
// still have.
func TestRestartKeepsState(t *testing.T) {
	dir := t.TempDir()
	cfg := persistentConfig(dir, gpu("H100-SXM5-80GB"), gpu("A100-SXM4-40GB"))
	l := open(t, cfg)
	d := enableMIG(t, l, 0)
	gi, _ := createInstance(t, d, byKind["4g"], 0)
	createInstance(t, d, byKind["2g"], 4)
	if _, ret := createGI(d, profileInfo(t, d, byKind["1g"]), 6, 1); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if err := l.SetBusy(0, giID(t, gi), true); err != nil {
		t.Fatal(err)
	}
	device(t, l, 1).SetMigMode(nvml.DEVICE_MIG_ENABLE) // pending (Ampere)
	before := l.Snapshot()
	closeLib(t, l)

	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("temporary file %s left in the state directory", e.Name())
		}
	}

	cfg.UUIDSeed = "another-seed" // UUIDs in the state win over the seed
	l = open(t, cfg)
	defer closeLib(t, l)
	after := l.Snapshot()
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("state after restart (-before +after):\n%s", diff)
	}
	if got := modes(t, device(t, l, 1)); got != (migModes{nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_ENABLE}) {
		t.Errorf("GPU 1 modes after restart = %+v, want still pending", got)
	}
	// The busy instance is still busy; new handles work on loaded state.
	if ret := firstGI(t, device(t, l, 0), byKind["4g"]).Destroy(); ret != nvml.ERROR_IN_USE {
		t.Errorf("Destroy() of the busy instance after restart = %v, want ERROR_IN_USE", ret)
	}
}

// TestMIGUUIDsAcrossRestartsAndCreates: a restart keeps the UUID of every
// MIG device that still exists (the state file holds it), and every create
// mints a new one, also for a compute instance or a GPU instance created
// again with the same profile at the same place, and after a reboot.
func TestMIGUUIDsAcrossRestartsAndCreates(t *testing.T) {
	dir := t.TempDir()
	cfg := persistentConfig(dir, gpu("H100-SXM5-80GB"))
	restart := func(l *sim.Lib) *sim.Lib {
		t.Helper()
		before := l.Snapshot()
		closeLib(t, l)
		l = open(t, cfg)
		if diff := cmp.Diff(before, l.Snapshot()); diff != "" {
			t.Errorf("restart changed the devices (-before +after):\n%s", diff)
		}
		return l
	}
	seen := map[string]string{}
	newUUID := func(l *sim.Lib, what string) {
		t.Helper()
		u := migUUIDOf(t, l, 1)
		if earlier, ok := seen[u]; ok {
			t.Errorf("%s: UUID %s again, first given %s", what, u, earlier)
		}
		seen[u] = what
		if !strings.Contains(readState(t, dir), u) {
			t.Errorf("%s: state file does not hold UUID %s", what, u)
		}
	}

	l := open(t, cfg)
	createInstance(t, enableMIG(t, l, 0), byKind["2g"], 0)
	newUUID(l, "first create")
	l = restart(l)

	// The compute instance destroyed and created again in its GPU instance.
	gi := firstGI(t, device(t, l, 0), byKind["2g"])
	ciInfo, _ := gi.GetComputeInstanceProfileInfo(fullCI[2], nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	cis, _ := gi.GetComputeInstances(&ciInfo)
	if len(cis) != 1 || cis[0].Destroy() != nvml.SUCCESS {
		t.Fatalf("destroying the compute instance of %d", len(cis))
	}
	if _, ret := gi.CreateComputeInstance(&ciInfo); ret != nvml.SUCCESS {
		t.Fatalf("CreateComputeInstance() = %v", ret)
	}
	newUUID(l, "compute instance created again")
	l = restart(l)

	// Both destroyed and created again with the same profile and placement.
	destroyAll(t, firstGI(t, device(t, l, 0), byKind["2g"]))
	createInstance(t, device(t, l, 0), byKind["2g"], 0)
	newUUID(l, "GPU instance created again")
	l = restart(l)

	if err := l.Reboot(); err != nil {
		t.Fatal(err)
	}
	createInstance(t, device(t, l, 0), byKind["2g"], 0)
	newUUID(l, "created after a reboot")
	closeLib(t, restart(l))
}

func readState(t *testing.T, dir string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestStateFileFromEarlierSimulator loads a state file as the simulator
// wrote it before it stored MIG device UUIDs, when it derived them from the
// GPU UUID, the ids, the profile and the placement. The GPU UUID in the
// file wins over the seed; the MIG device keeps the UUID the earlier
// simulator reported (an upgraded agent finds its devices under the UUIDs it
// knew), and the file holds it from then on.
func TestStateFileFromEarlierSimulator(t *testing.T) {
	const gpuUUID = "GPU-0d4c5f1e-8a7b-5c3d-9e2f-1a0b9c8d7e6f"
	// What the earlier simulator derived for the instance below.
	const migUUID = "MIG-f4963d7e-f919-52d4-977a-a4e421f63e8a"
	const earlier = `{
  "version": 1,
  "gpus": [
    {
      "model": "H100-SXM5-80GB",
      "uuid": "` + gpuUUID + `",
      "migEnabled": true,
      "migPending": false,
      "instances": [
        {"id": 1, "profileID": 14, "start": 0, "computeInstances": [{"id": 0, "profileID": 1}]}
      ]
    }
  ]
}
`
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "state.json"), []byte(earlier), 0o644); err != nil {
		t.Fatal(err)
	}
	load := func(readOnly bool) sim.GPUSnapshot {
		t.Helper()
		cfg := persistentConfig(dir, gpu("H100-SXM5-80GB"))
		cfg.ReadOnly = readOnly
		l := open(t, cfg)
		defer closeLib(t, l)
		snap := l.Snapshot()[0]
		if len(snap.Instances) == 1 {
			if _, ret := l.DeviceGetHandleByUUID(snap.Instances[0].UUID); ret != nvml.SUCCESS {
				t.Errorf("DeviceGetHandleByUUID(%s) = %v", snap.Instances[0].UUID, ret)
			}
		}
		return snap
	}
	want := sim.GPUSnapshot{Model: "H100-SXM5-80GB", UUID: gpuUUID, MigEnabled: true, Instances: []sim.InstanceSnapshot{
		{GI: 1, Profile: "2g.20gb", Start: 0, Size: 2, HasCI: true, CI: 0, UUID: migUUID},
	}}
	if diff := cmp.Diff(want, load(true)); diff != "" {
		t.Errorf("loaded read-only (-want +got):\n%s", diff)
	}
	if readState(t, dir) != earlier {
		t.Error("a read-only simulator rewrote the state file")
	}
	if diff := cmp.Diff(want, load(false)); diff != "" {
		t.Errorf("loaded (-want +got):\n%s", diff)
	}
	if !strings.Contains(readState(t, dir), migUUID) {
		t.Errorf("state file does not hold the MIG UUID now:\n%s", readState(t, dir))
	}
	if diff := cmp.Diff(want, load(false)); diff != "" {
		t.Errorf("state after a restart (-want +got):\n%s", diff)
	}
}

func TestStateFileErrors(t *testing.T) {
	valid := func(t *testing.T, dir string) {
		l := open(t, persistentConfig(dir, gpu("H100-SXM5-80GB")))
		d := enableMIG(t, l, 0)
		createInstance(t, d, byKind["3g"], 0)
		closeLib(t, l)
	}
	tests := []struct {
		name   string
		edit   func(st map[string]any) // nil: write "corrupt" instead
		config []sim.GPUSpec
		want   string
	}{
		{name: "different model", config: []sim.GPUSpec{gpu("A100-SXM4-40GB")},
			want: "state has GPUs [H100-SXM5-80GB] but the config asks for [A100-SXM4-40GB]: remove the state file to start over with the new GPUs"},
		{name: "more GPUs", config: []sim.GPUSpec{{Model: "H100-SXM5-80GB", Count: 2}},
			want: "state has GPUs [H100-SXM5-80GB] but the config asks for [H100-SXM5-80GB H100-SXM5-80GB]"},
		{name: "corrupt JSON", want: "is corrupt"},
		{name: "placement not in the profile", edit: func(st map[string]any) { instance(st)["start"] = 2 },
			want: "GPU 0: GPU instance 1: 3g.40gb cannot start at 2"},
		{name: "unknown profile", edit: func(st map[string]any) { instance(st)["profileID"] = 77 },
			want: "model H100-SXM5-80GB has no profile id 77"},
		{name: "instances with MIG off", edit: func(st map[string]any) { gpu0(st)["migEnabled"] = false },
			want: "GPU instances while MIG mode is disabled"},
		{name: "overlap", edit: func(st map[string]any) {
			g := gpu0(st)
			g["instances"] = append(g["instances"].([]any), map[string]any{"id": 2, "profileID": 19, "start": 1})
		}, want: "GPU instance 2 (1g.10gb at 1) overlaps another"},
		{name: "too many of a profile", edit: func(st map[string]any) {
			g := gpu0(st)
			g["instances"] = append(g["instances"].([]any),
				map[string]any{"id": 2, "profileID": 20, "start": 4}, map[string]any{"id": 3, "profileID": 20, "start": 5})
		}, want: "more 1g.10gb+me instances than its max count 1"},
		{name: "partial compute instance", edit: func(st map[string]any) {
			instance(st)["computeInstances"].([]any)[0].(map[string]any)["profileID"] = 0
		}, want: "compute instance 0 has profile 0, only the full-size profile 2 is simulated"},
		{name: "MIG UUID not MIG-", edit: func(st map[string]any) {
			instance(st)["computeInstances"].([]any)[0].(map[string]any)["uuid"] = "GPU-x"
		}, want: `GPU 0: GPU instance 1: compute instance 0 has UUID "GPU-x", want MIG-<uuid>`},
		{name: "MIG UUID twice", edit: func(st map[string]any) {
			g := gpu0(st)
			uuid := instance(st)["computeInstances"].([]any)[0].(map[string]any)["uuid"]
			g["instances"] = append(g["instances"].([]any), map[string]any{"id": 2, "profileID": 19, "start": 4,
				"computeInstances": []any{map[string]any{"id": 0, "profileID": 0, "uuid": uuid}}})
		}, want: "GPU 0: GPU instance 2: compute instance 0: MIG device UUID MIG-"},
		{name: "schema version", edit: func(st map[string]any) { st["version"] = 9 }, want: "state version 9, want 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			valid(t, dir)
			path := filepath.Join(dir, "state.json")
			data, _ := os.ReadFile(path)
			if tc.config == nil {
				if tc.edit == nil {
					data = []byte("{corrupt")
				} else {
					var st map[string]any
					if err := json.Unmarshal(data, &st); err != nil {
						t.Fatal(err)
					}
					tc.edit(st)
					data, _ = json.Marshal(st)
				}
				os.WriteFile(path, data, 0o644)
				tc.config = []sim.GPUSpec{gpu("H100-SXM5-80GB")}
			}
			_, err := sim.New(persistentConfig(dir, tc.config...))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New() error = %v, want it to contain %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the state file", err)
			}
			// The failed New released the directory: trying again gives the
			// same error, not a lock conflict.
			if _, err := sim.New(persistentConfig(dir, tc.config...)); errors.Is(err, sim.ErrStateLocked) {
				t.Error("a failed New left the state directory locked")
			}
			// The bad state is still there for the user to look at.
			if got, _ := os.ReadFile(path); string(got) != string(data) {
				t.Error("a failed New changed the state file")
			}
		})
	}
}

func gpu0(st map[string]any) map[string]any { return st["gpus"].([]any)[0].(map[string]any) }

func instance(st map[string]any) map[string]any {
	return gpu0(st)["instances"].([]any)[0].(map[string]any)
}

func TestStateLock(t *testing.T) {
	dir := t.TempDir()
	cfg := persistentConfig(dir, gpu("H100-SXM5-80GB"))
	l := open(t, cfg)
	d := enableMIG(t, l, 0)
	createInstance(t, d, byKind["7g"], 0)

	if _, err := sim.New(cfg); !errors.Is(err, sim.ErrStateLocked) {
		t.Errorf("second writable New() = %v, want ErrStateLocked", err)
	}

	// A read-only simulator sees the state without the lock and changes
	// nothing.
	ro := cfg
	ro.ReadOnly = true
	r := open(t, ro)
	if diff := cmp.Diff(l.Snapshot(), r.Snapshot()); diff != "" {
		t.Errorf("read-only view (-writer +reader):\n%s", diff)
	}
	rd := device(t, r, 0)
	if _, ret := rd.SetMigMode(nvml.DEVICE_MIG_DISABLE); ret != nvml.ERROR_NO_PERMISSION {
		t.Errorf("read-only SetMigMode() = %v, want ERROR_NO_PERMISSION", ret)
	}
	if ret := firstGI(t, rd, byKind["7g"]).Destroy(); ret != nvml.ERROR_NO_PERMISSION {
		t.Errorf("read-only Destroy() = %v, want ERROR_NO_PERMISSION", ret)
	}
	if err := r.Reboot(); !errors.Is(err, nvml.ERROR_NO_PERMISSION) {
		t.Errorf("read-only Reboot() = %v, want ERROR_NO_PERMISSION", err)
	}
	closeLib(t, r)

	closeLib(t, l)
	l = open(t, cfg) // the lock is free again
	closeLib(t, l)
}

// TestFailedWriteKeepsState: a change whose state cannot be persisted is
// not applied.
func TestFailedWriteKeepsState(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	l := open(t, persistentConfig(dir, gpu("H100-SXM5-80GB")))
	defer closeLib(t, l)
	d := enableMIG(t, l, 0)
	before := l.Snapshot()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, ret := createGI(d, profileInfo(t, d, byKind["1g"]), 0, 1); ret != nvml.ERROR_UNKNOWN {
		t.Errorf("create with an unwritable state = %v, want ERROR_UNKNOWN", ret)
	}
	if err := l.Reboot(); err == nil || !strings.Contains(err.Error(), "reboot: persisting simulator state") {
		t.Errorf("Reboot() with an unwritable state = %v", err)
	}
	if diff := cmp.Diff(before, l.Snapshot()); diff != "" {
		t.Errorf("state changed although it could not be written (-before +after):\n%s", diff)
	}
}

// TestClosedRefusesChanges: after Close the directory may belong to another
// simulator, so a closed one must not write it.
func TestClosedRefusesChanges(t *testing.T) {
	dir := t.TempDir()
	cfg := persistentConfig(dir, gpu("H100-SXM5-80GB"))
	l := open(t, cfg)
	d := device(t, l, 0)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	next := open(t, cfg) // takes the directory over
	defer closeLib(t, next)
	if _, ret := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.ERROR_NO_PERMISSION {
		t.Errorf("SetMigMode() after Close = %v, want ERROR_NO_PERMISSION", ret)
	}
	if err := l.Reboot(); !errors.Is(err, nvml.ERROR_NO_PERMISSION) {
		t.Errorf("Reboot() after Close = %v, want ERROR_NO_PERMISSION", err)
	}
	if _, ret := d.GetUUID(); ret != nvml.SUCCESS {
		t.Errorf("GetUUID() after Close = %v, want SUCCESS", ret)
	}
	ro := cfg
	ro.ReadOnly = true
	r := open(t, ro)
	defer closeLib(t, r)
	if g := r.Snapshot()[0]; g.MigEnabled {
		t.Error("the closed simulator wrote the state file")
	}
}
