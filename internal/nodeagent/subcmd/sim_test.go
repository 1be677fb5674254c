package subcmd

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
	"github.com/migflex/migflex/internal/nvml/nvmlmig"
	"github.com/migflex/migflex/internal/testsupport/testutil"
)

// simCLI runs `device-plugin sim ARGS` and returns exit code, stdout, stderr.
func simCLI(args ...string) (int, string, string) {
	var stdout, stderr strings.Builder
	code := Sim(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func writeSimConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sim.yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

const simConfigYAML = `version: v1
gpus:
- {model: A100-SXM4-40GB, count: 1}
- {model: H100-SXM5-80GB, count: 1}
stateDir: state
`

// TestSimCommandsWithoutSimulator: with no simulator running, commands
// act on the persisted state and show reads it.
func TestSimCommandsWithoutSimulator(t *testing.T) {
	t.Setenv("NODE_NAME", "node-1")
	cfgPath := writeSimConfig(t, simConfigYAML)
	cfg, err := sim.LoadConfig(cfgPath, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	// Set up a layout as the agent would, then stop.
	l, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := nvmlmig.NewPartitioner(l)
	p.SetMigMode(0, true) // pending: Ampere
	p.SetMigMode(1, true)
	inst, err := p.CreateInstance(1, "3g.40gb", 4)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.CreateInstance(1, "1g.10gb", 0); err != nil {
		t.Fatal(err)
	}
	l.Close()

	steps := []struct {
		args     []string
		wantCode int
		wantOut  []string
		wantErr  string
	}{
		{[]string{"busy", "--sim-config", cfgPath, "--gpu", "1", "--gi", "1"}, 0,
			[]string{"busy: applied to the state in " + cfg.StateDir + " (no simulator running)"}, ""},
		{[]string{"show", "--sim-config", cfgPath}, 0, []string{
			"GPU 0  A100-SXM4-40GB  GPU-", "MIG disabled (enabled pending until reset)",
			"GPU 1  H100-SXM5-80GB  GPU-", "MIG enabled\n",
			"GI PROFILE PLACEMENT CI BUSY MIG DEVICE\n",
			"2 1g.10gb 0:1 0 - MIG-",
			"1 3g.40gb 4:4 0 yes " + inst.UUID + "\n",
		}, ""},
		{[]string{"busy", "--sim-config", cfgPath, "--gpu", "1", "--gi", "7"}, 1, nil, "GPU 1 has no GPU instance 7"},
		{[]string{"inject-xid", "--sim-config", cfgPath, "--gpu", "1", "--xid", "79"}, 1, nil, "no simulator is running on " + cfg.StateDir},
		{[]string{"reset", "--sim-config", cfgPath, "--gpu", "1"}, 1, nil, "GPU 1: reset: 2 GPU instances exist: ERROR_IN_USE"},
		{[]string{"reboot", "--sim-config", cfgPath}, 0, []string{"reboot: applied"}, ""},
		{[]string{"show", "--sim-config", cfgPath}, 0, []string{"GPU 0  A100-SXM4-40GB  GPU-", "MIG enabled\n\nGPU 1"}, ""},
	}
	for _, s := range steps {
		code, out, errOut := simCLI(s.args...)
		if code != s.wantCode {
			t.Fatalf("sim %v = %d, want %d\nstdout:\n%s\nstderr:\n%s", s.args, code, s.wantCode, out, errOut)
		}
		for _, w := range s.wantOut {
			if !strings.Contains(squashSpaces(out), squashSpaces(w)) {
				t.Errorf("sim %v stdout lacks %q; got:\n%s", s.args, w, out)
			}
		}
		if !strings.Contains(errOut, s.wantErr) {
			t.Errorf("sim %v stderr lacks %q; got:\n%s", s.args, s.wantErr, errOut)
		}
	}
}

// TestSimInjectXidReachesRunningSimulator: the demo's path, a CLI process
// raising an Xid in the agent's simulator through the inbox.
func TestSimInjectXidReachesRunningSimulator(t *testing.T) {
	cfgPath := writeSimConfig(t, simConfigYAML)
	cfg, err := sim.LoadConfig(cfgPath, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	l, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Init()
	defer l.Shutdown()
	d, _ := l.DeviceGetHandleByIndex(1)
	set, _ := l.EventSetCreate()
	if ret := d.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}

	code, out, errOut := simCLI("inject-xid", "--sim-config", cfgPath, "--node-name", "node-1", "--gpu", "1", "--xid", "79")
	if code != 0 || !strings.Contains(out, "inject-xid: queued for the simulator running on "+cfg.StateDir) {
		t.Fatalf("inject-xid = %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	e, ret := set.Wait(60_000) // hang guard only
	if ret != nvml.SUCCESS || e.EventData != 79 || e.GpuInstanceId != sim.NoInstance || e.ComputeInstanceId != sim.NoInstance {
		t.Errorf("event = %+v, %v, want Xid 79 on the whole GPU", e, ret)
	}
}

func TestSimUsage(t *testing.T) {
	inMemory := writeSimConfig(t, "version: v1\ngpus: [{model: H100-SXM5-80GB, count: 1}]\n")
	cfgPath := writeSimConfig(t, simConfigYAML)
	t.Setenv("SIM_CONFIG", "")
	tests := []struct {
		args     []string
		wantCode int
		wantErr  string
	}{
		{nil, 2, "usage: device-plugin sim COMMAND"},
		{[]string{"help"}, 0, "usage: device-plugin sim COMMAND"},
		{[]string{"explode"}, 2, `sim: unknown command "explode"`},
		{[]string{"show"}, 2, "--sim-config is required"},
		{[]string{"show", "--sim-config", inMemory}, 2, "sets no stateDir"},
		{[]string{"show", "--sim-config", filepath.Join(t.TempDir(), "nope.yaml")}, 2, "reading simulator config"},
		{[]string{"inject-xid", "--sim-config", cfgPath}, 2, "--xid is required"},
		{[]string{"inject-xid", "--sim-config", cfgPath, "--xid", "79", "--gi", "4294967296"}, 2, "must fit in 32 bits"},
		{[]string{"reboot", "--sim-config", cfgPath, "now"}, 2, `unexpected arguments ["now"]`},
		{[]string{"reboot", "--gpu", "x"}, 2, "invalid value"},
		{[]string{"show", "--xid", "3"}, 2, "flag provided but not defined: -xid"},
	}
	for _, tc := range tests {
		code, _, errOut := simCLI(tc.args...)
		if code != tc.wantCode || !strings.Contains(errOut, tc.wantErr) {
			t.Errorf("sim %v = %d, stderr:\n%s\nwant %d and %q", tc.args, code, errOut, tc.wantCode, tc.wantErr)
		}
	}
}

// TestSimFaultCommands: faults armed, listed and cleared from another
// process through the running simulator's inbox, as the fault tests do.
func TestSimFaultCommands(t *testing.T) {
	cfgPath := writeSimConfig(t, simConfigYAML)
	cfg, err := sim.LoadConfig(cfgPath, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) (int, string, string) {
		return simCLI(append(args, "--sim-config", cfgPath, "--node-name", "node-1")...)
	}
	if code, _, errOut := cli("fault", "--kind", "lost", "--gpu", "0"); code != 1 || !strings.Contains(errOut, "no simulator is running") {
		t.Errorf("fault with no simulator = %d, stderr:\n%s", code, errOut)
	}
	if code, out, _ := cli("faults"); code != 0 || !strings.Contains(out, "no faults armed") {
		t.Errorf("faults with none = %d, stdout:\n%s", code, out)
	}

	l, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p := nvmlmig.NewPartitioner(l)
	p.SetMigMode(1, true)

	for _, bad := range []struct {
		args    []string
		code    int
		wantErr string
	}{
		{[]string{"fault", "--kind", "error"}, 1, "a fault of kind error needs call"},
		{[]string{"fault", "--kind", "explode", "--call", "setMigMode"}, 1, `kind "explode"`},
		{[]string{"fault", "--kind", "xidStorm", "--gpu", "1", "--xid", "48", "--events", "2", "--gi", "9"}, 1, "GPU 1 has no GPU instance 9"},
		{[]string{"fault", "--kind", "xidStorm", "--gpu", "1", "--xid", "48", "--gi", "4294967296"}, 2, "must fit in 32 bits"},
		{[]string{"fault", "--kind", "hang", "--call", "setMigMode", "--duration", "soon"}, 2, "invalid value"},
		{[]string{"clear-faults", "--kind", "hang"}, 2, "flag provided but not defined: -kind"},
		{[]string{"fault", "--kind", "oom", "--call", "setMigMode"}, 1, "mib 0: an OOM fault allocates 1 to 4096 MiB"},
	} {
		if code, _, errOut := cli(bad.args...); code != bad.code || !strings.Contains(errOut, bad.wantErr) {
			t.Errorf("sim %v = %d, stderr:\n%s\nwant %d and %q", bad.args, code, errOut, bad.code, bad.wantErr)
		}
	}

	code, out, errOut := cli("fault", "--kind", "error", "--call", "createGpuInstance", "--gpu", "1", "--nth", "2", "--return", "IN_USE", "--name", "boom")
	if code != 0 || !strings.Contains(out, "fault: queued for the simulator running on "+cfg.StateDir) {
		t.Fatalf("fault = %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	testutil.Eventually(t, "the fault armed", func() bool { return len(l.Faults()) == 1 })
	if _, err := p.CreateInstance(1, "1g.10gb", 0); err != nil {
		t.Fatalf("first create: %v", err)
	}
	if _, err := p.CreateInstance(1, "1g.10gb", 1); !errors.Is(err, nvml.ERROR_IN_USE) {
		t.Errorf("second create = %v, want the fault's ERROR_IN_USE", err)
	}
	code, out, _ = cli("faults")
	want := "boom command 2 1 0 0 yes error IN_USE at createGpuInstance call 2 on GPU 1"
	if code != 0 || !strings.Contains(squashSpaces(out), want) {
		t.Errorf("faults = %d, stdout:\n%s\nwant a line %q", code, out, want)
	}

	if code, _, errOut := cli("fault", "--kind", "lost", "--gpu", "0", "--name", "gone"); code != 0 {
		t.Fatalf("fault lost = %d, stderr:\n%s", code, errOut)
	}
	testutil.Eventually(t, "GPU 0 lost", func() bool { return l.Snapshot()[0].Lost })
	if _, out, _ := cli("show"); !strings.Contains(out, "(fallen off the bus until a reboot)") {
		t.Errorf("show with GPU 0 lost:\n%s", out)
	}
	if code, _, errOut := cli("clear-faults"); code != 0 {
		t.Fatalf("clear-faults = %d, stderr:\n%s", code, errOut)
	}
	testutil.Eventually(t, "the faults cleared", func() bool { return len(l.Faults()) == 0 && !l.Snapshot()[0].Lost })

	// --mib reaches an oom fault.
	if code, _, errOut := cli("fault", "--kind", "oom", "--call", "setMigMode", "--mib", "3", "--name", "hog"); code != 0 {
		t.Fatalf("fault oom = %d, stderr:\n%s", code, errOut)
	}
	testutil.Eventually(t, "the oom fault armed", func() bool { return len(l.Faults()) == 1 })
	if f := l.Faults()[0].Fault; f.Kind != sim.FaultOOM || f.MiB != 3 || f.Call != sim.CallSetMigMode {
		t.Errorf("armed %+v, want an oom fault of 3 MiB at setMigMode", f)
	}
}
