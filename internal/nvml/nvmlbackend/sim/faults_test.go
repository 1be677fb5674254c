package sim_test

import (
	"errors"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"

	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
	"github.com/migflex/migflex/internal/testsupport/testutil"
)

func intp(i int) *int       { return &i }
func u32p(i uint32) *uint32 { return &i }

func dur(s string) sim.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return sim.Duration(d)
}

// TestFaultValidation: a fault that cannot mean anything is refused with
// an error that names the field, from the config and from a command alike.
func TestFaultValidation(t *testing.T) {
	gpus := []sim.GPUSpec{{Model: "H100-SXM5-80GB", Count: 2}}
	tests := []struct {
		name  string
		fault sim.Fault
		want  string // "" valid
		// command: valid as a command, not in the config
		command bool
	}{
		{"error", sim.Fault{Kind: sim.FaultError, Call: sim.CallCreateComputeInstance, GPU: intp(1), Nth: 2, Return: "ERROR_IN_USE"}, "", false},
		{"error, short return name", sim.Fault{Kind: sim.FaultError, Call: sim.CallSetMigMode, Return: "insufficient_resources"}, "", false},
		{"error always", sim.Fault{Kind: sim.FaultError, Call: sim.CallGetHandle, Always: true}, "", false},
		{"hang", sim.Fault{Kind: sim.FaultHang, Call: sim.CallDestroyGpuInstance, Duration: dur("30s"), Times: 2}, "", false},
		{"lost", sim.Fault{Kind: sim.FaultLost, GPU: intp(0), Permanent: true}, "", false},
		{"lost at a call", sim.Fault{Kind: sim.FaultLost, GPU: intp(1), Call: sim.CallCreateGpuInstance, Nth: 3}, "", false},
		{"storm at a call", sim.Fault{Kind: sim.FaultXidStorm, GPU: intp(0), Call: sim.CallCreateGpuInstance, Xid: 48, Events: 10, Interval: dur("100ms")}, "", false},
		{"storm now", sim.Fault{Kind: sim.FaultXidStorm, GPU: intp(0), Xid: 48, Events: 10}, "a storm in the simulator config needs call", true},

		{"reboot at a call", sim.Fault{Kind: sim.FaultReboot, Call: sim.CallCreateComputeInstance, GPU: intp(1), Nth: 4}, "", false},
		{"reboot now", sim.Fault{Kind: sim.FaultReboot}, "a reboot in the simulator config needs call", true},
		{"reboot with times", sim.Fault{Kind: sim.FaultReboot, Call: sim.CallSetMigMode, Times: 2}, "times does not apply to a fault of kind reboot", false},
		{"reboot with a return", sim.Fault{Kind: sim.FaultReboot, Call: sim.CallSetMigMode, Return: "ERROR_UNKNOWN"}, "return does not apply to a fault of kind reboot", false},
		{"no kind", sim.Fault{Call: sim.CallSetMigMode}, "kind is required: one of error, hang, xidStorm, lost, reboot, oom", false},
		{"unknown kind", sim.Fault{Kind: "explode", Call: sim.CallSetMigMode}, `kind "explode"`, false},
		{"unknown call", sim.Fault{Kind: sim.FaultError, Call: "createInstance"}, `call "createInstance": want one of createGpuInstance, `, false},
		{"error without call", sim.Fault{Kind: sim.FaultError}, "a fault of kind error needs call", false},
		{"unknown return", sim.Fault{Kind: sim.FaultError, Call: sim.CallSetMigMode, Return: "ERROR_OOPS"}, `return "ERROR_OOPS": not an NVML error return`, false},
		{"success is no error", sim.Fault{Kind: sim.FaultError, Call: sim.CallSetMigMode, Return: "SUCCESS"}, `return "SUCCESS"`, false},
		{"GPU out of range", sim.Fault{Kind: sim.FaultError, Call: sim.CallSetMigMode, GPU: intp(2)}, "gpu 2: the simulator has 2 GPU(s), indexes 0 to 1", false},
		{"negative nth", sim.Fault{Kind: sim.FaultError, Call: sim.CallSetMigMode, Nth: -1}, "want whole numbers >= 1", false},
		{"times and always", sim.Fault{Kind: sim.FaultError, Call: sim.CallSetMigMode, Times: 2, Always: true}, "choose one", false},
		{"hang without duration", sim.Fault{Kind: sim.FaultHang, Call: sim.CallSetMigMode}, "a hang needs a duration above 0 and at most 10m0s", false},
		{"hang too long", sim.Fault{Kind: sim.FaultHang, Call: sim.CallSetMigMode, Duration: dur("11m")}, "duration 11m0s", false},
		{"hang with a return", sim.Fault{Kind: sim.FaultHang, Call: sim.CallSetMigMode, Duration: dur("1s"), Return: "ERROR_UNKNOWN"}, "return does not apply to a fault of kind hang", false},
		{"error with xid", sim.Fault{Kind: sim.FaultError, Call: sim.CallSetMigMode, Xid: 79}, "xid does not apply to a fault of kind error", false},
		{"lost without GPU", sim.Fault{Kind: sim.FaultLost}, "a fault of kind lost needs gpu", false},
		{"lost with times", sim.Fault{Kind: sim.FaultLost, GPU: intp(0), Call: sim.CallSetMigMode, Times: 2}, "times does not apply to a fault of kind lost", false},
		{"lost with xid", sim.Fault{Kind: sim.FaultLost, GPU: intp(0), Xid: 48}, "a lost GPU raises Xid 79", false},
		{"nth without call", sim.Fault{Kind: sim.FaultLost, GPU: intp(0), Nth: 2}, "nth without call does not apply", false},
		{"storm without xid", sim.Fault{Kind: sim.FaultXidStorm, GPU: intp(0), Call: sim.CallSetMigMode, Events: 1}, "a storm needs xid", false},
		{"storm without events", sim.Fault{Kind: sim.FaultXidStorm, GPU: intp(0), Call: sim.CallSetMigMode, Xid: 48}, "events 0: a storm raises 1 to 10000 Xids", false},
		{"storm too slow", sim.Fault{Kind: sim.FaultXidStorm, GPU: intp(0), Call: sim.CallSetMigMode, Xid: 48, Events: 2, Interval: dur("2m")}, "interval 2m0s", false},
		{"storm ci without gi", sim.Fault{Kind: sim.FaultXidStorm, GPU: intp(0), Call: sim.CallSetMigMode, Xid: 48, Events: 2, CI: u32p(0)}, "ci 0 needs gi", false},
		{"oom", sim.Fault{Kind: sim.FaultOOM, Call: sim.CallCreateGpuInstance, GPU: intp(1), Nth: 3, MiB: 512}, "", false},
		{"oom without call", sim.Fault{Kind: sim.FaultOOM, MiB: 512}, "a fault of kind oom needs call", false},
		{"oom without mib", sim.Fault{Kind: sim.FaultOOM, Call: sim.CallSetMigMode}, "mib 0: an OOM fault allocates 1 to 4096 MiB", false},
		{"oom too big", sim.Fault{Kind: sim.FaultOOM, Call: sim.CallSetMigMode, MiB: 4097}, "mib 4097", false},
		{"oom with times", sim.Fault{Kind: sim.FaultOOM, Call: sim.CallSetMigMode, MiB: 1, Times: 2}, "times does not apply to a fault of kind oom", false},
		{"oom always", sim.Fault{Kind: sim.FaultOOM, Call: sim.CallSetMigMode, MiB: 1, Always: true}, "always does not apply to a fault of kind oom", false},
		{"mib on an error", sim.Fault{Kind: sim.FaultError, Call: sim.CallSetMigMode, MiB: 1}, "mib does not apply to a fault of kind error", false},
		{"name with a space", sim.Fault{Name: "my fault", Kind: sim.FaultError, Call: sim.CallSetMigMode}, `name "my fault"`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := (&sim.Config{GPUs: gpus, Faults: []sim.Fault{tc.fault}}).Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("config: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("config error = %v, want one containing %q", err, tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), "faults[0]: "):
				t.Errorf("config error %q does not say which fault", err)
			}
			l := newLib(t, gpus...)
			_, err = l.ArmFault(tc.fault)
			if valid := tc.want == "" || tc.command; valid != (err == nil) {
				t.Errorf("ArmFault() = %v, want valid %v", err, valid)
			}
		})
	}
	dup := sim.Fault{Name: "x", Kind: sim.FaultError, Call: sim.CallSetMigMode}
	if err := (&sim.Config{GPUs: gpus, Faults: []sim.Fault{dup, dup}}).Validate(); err == nil || !strings.Contains(err.Error(), `faults[1]: name "x" is used twice`) {
		t.Errorf("two faults named x: %v", err)
	}
	l := newLib(t, gpus...)
	if _, err := l.ArmFault(dup); err != nil {
		t.Fatal(err)
	}
	if _, err := l.ArmFault(dup); err == nil || !strings.Contains(err.Error(), "armed already") {
		t.Errorf("arming x twice: %v", err)
	}
}

// TestParseConfigFaults: faults: in the config file, per node too.
func TestParseConfigFaults(t *testing.T) {
	doc := `version: v1
gpus: [{model: H100-SXM5-80GB, count: 2}]
faults:
- {kind: error, call: createComputeInstance, gpu: 1, nth: 2, return: ERROR_IN_USE}
- {kind: hang, call: createGpuInstance, duration: 90s, always: true}
nodes:
  quiet: {faults: []}
  broken:
    faults: [{name: gone, kind: lost, gpu: 0, permanent: true}]
`
	want := []sim.Fault{
		{Kind: sim.FaultError, Call: sim.CallCreateComputeInstance, GPU: intp(1), Nth: 2, Return: "ERROR_IN_USE"},
		{Kind: sim.FaultHang, Call: sim.CallCreateGpuInstance, Duration: dur("90s"), Always: true},
	}
	for node, want := range map[string][]sim.Fault{
		"worker": want,
		"quiet":  {},
		"broken": {{Name: "gone", Kind: sim.FaultLost, GPU: intp(0), Permanent: true}},
	} {
		cfg, err := sim.ParseConfig([]byte(doc), "/etc", node)
		if err != nil {
			t.Fatalf("%s: %v", node, err)
		}
		if diff := cmp.Diff(want, cfg.Faults); diff != "" {
			t.Errorf("%s faults (-want +got):\n%s", node, diff)
		}
	}
	for bad, wantErr := range map[string]string{
		"- {kind: hang, call: setMigMode, duration: soon}":  `duration "soon": want a Go duration`,
		"- {kind: error, call: setMigMode, returns: OOPS}":  `unknown field "returns"`,
		"- {kind: error, call: setMigMode, gpu: 2}":         "faults[0]: gpu 2: the simulator has 2 GPU(s)",
		"- {kind: xidStorm, gpu: 0, xid: 48, events: 3}":    "a storm in the simulator config needs call",
		"- {kind: hang, call: setMigMode, duration: 1h}":    "at most 10m0s",
		"- {kind: error, call: setMigMode, duration: 30s}":  "duration does not apply to a fault of kind error",
		"- {kind: lost, gpu: 0, call: setMigMode, nth: -2}": "nth -2",
	} {
		_, err := sim.ParseConfig([]byte("version: v1\ngpus: [{model: H100-SXM5-80GB, count: 2}]\nfaults:\n"+bad+"\n"), "/etc", "")
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%s: error %v, want one containing %q", bad, err, wantErr)
		}
	}
}

// createFirstFit creates a 1g GPU instance where the driver likes and
// destroys it again when that worked: one call at createGpuInstance.
func createFirstFit(t *testing.T, l *sim.Lib, gpu int) nvml.Return {
	t.Helper()
	d := device(t, l, gpu)
	info := profileInfo(t, d, byKind["1g"])
	gi, ret := d.CreateGpuInstance(&info)
	if ret == nvml.SUCCESS {
		if r := gi.Destroy(); r != nvml.SUCCESS {
			t.Fatalf("Destroy() = %v", r)
		}
	}
	return ret
}

// TestErrorFaultCounting: an error fault fires on the calls its nth,
// times, always and gpu pick, and only those; the listing counts them.
func TestErrorFaultCounting(t *testing.T) {
	const U, S = nvml.ERROR_UNKNOWN, nvml.SUCCESS
	tests := []struct {
		name  string
		fault sim.Fault
		// want is the return of calls 1 to 5 on GPU 0.
		want []nvml.Return
		// wantCalls: the calls counted until it was spent.
		wantCalls, wantFired int
		wantDone             bool
	}{
		{"first", sim.Fault{}, []nvml.Return{U, S, S, S, S}, 1, 1, true},
		{"third", sim.Fault{Nth: 3}, []nvml.Return{S, S, U, S, S}, 3, 1, true},
		{"second and third", sim.Fault{Nth: 2, Times: 2}, []nvml.Return{S, U, U, S, S}, 3, 2, true},
		{"from the fourth on", sim.Fault{Nth: 4, Always: true}, []nvml.Return{S, S, S, U, U}, 5, 2, false},
		{"chosen return", sim.Fault{Nth: 2, Return: "ERROR_INSUFFICIENT_RESOURCES"}, []nvml.Return{S, nvml.ERROR_INSUFFICIENT_RESOURCES, S, S, S}, 2, 1, true},
		{"another GPU", sim.Fault{GPU: intp(1)}, []nvml.Return{S, S, S, S, S}, 0, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newLib(t, gpu("H100-SXM5-80GB"), gpu("H100-SXM5-80GB"))
			enableMIG(t, l, 0)
			f := tc.fault
			f.Kind, f.Call = sim.FaultError, sim.CallCreateGpuInstance
			name, err := l.ArmFault(f)
			if err != nil {
				t.Fatal(err)
			}
			if name != "error-1" {
				t.Errorf("default name %q, want error-1", name)
			}
			var got []nvml.Return
			for range 5 {
				got = append(got, createFirstFit(t, l, 0))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("returns of calls 1-5 (-want +got):\n%s", diff)
			}
			st := l.Faults()
			if len(st) != 1 || st[0].Calls != tc.wantCalls || st[0].Fired != tc.wantFired || st[0].Done != tc.wantDone || st[0].Source != sim.SourceCommand {
				t.Errorf("listing %+v, want %d calls counted, %d fired, done %v", st, tc.wantCalls, tc.wantFired, tc.wantDone)
			}
		})
	}
}

// TestErrorFaultChangesNothing: at every call site a failed call leaves
// the GPU as it was, as a failed driver call does; what earlier calls made
// stays (a GPU instance whose compute instance could not be created).
func TestErrorFaultChangesNothing(t *testing.T) {
	type layout struct {
		Mig       bool
		Instances []string
	}
	snap := func(l *sim.Lib) layout {
		g := l.Snapshot()[0]
		out := layout{Mig: g.MigEnabled}
		for _, in := range g.Instances {
			s := in.Profile
			if in.HasCI {
				s += "+ci"
			}
			out.Instances = append(out.Instances, s)
		}
		return out
	}
	tests := []struct {
		call sim.CallSite
		// do makes the failing call on a GPU with MIG on and a 3g.40gb at
		// 0 with its compute instance.
		do   func(t *testing.T, l *sim.Lib) nvml.Return
		want layout
	}{
		{sim.CallCreateGpuInstance, func(t *testing.T, l *sim.Lib) nvml.Return {
			_, ret := createGI(device(t, l, 0), profileInfo(t, device(t, l, 0), byKind["2g"]), 4, 2)
			return ret
		}, layout{true, []string{"3g.40gb+ci"}}},
		{sim.CallCreateComputeInstance, func(t *testing.T, l *sim.Lib) nvml.Return {
			d := device(t, l, 0)
			gi, ret := createGI(d, profileInfo(t, d, byKind["2g"]), 4, 2)
			if ret != nvml.SUCCESS {
				t.Fatalf("create GPU instance = %v", ret)
			}
			ciInfo, _ := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
			_, ret = gi.CreateComputeInstance(&ciInfo)
			return ret
		}, layout{true, []string{"3g.40gb+ci", "2g.20gb"}}}, // the GPU instance stays
		{sim.CallDestroyComputeInstance, func(t *testing.T, l *sim.Lib) nvml.Return {
			gi := firstGI(t, device(t, l, 0), byKind["3g"])
			ciInfo, _ := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
			cis, _ := gi.GetComputeInstances(&ciInfo)
			return cis[0].Destroy()
		}, layout{true, []string{"3g.40gb+ci"}}},
		{sim.CallDestroyGpuInstance, func(t *testing.T, l *sim.Lib) nvml.Return {
			gi := firstGI(t, device(t, l, 0), byKind["3g"])
			ciInfo, _ := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
			cis, _ := gi.GetComputeInstances(&ciInfo)
			if ret := cis[0].Destroy(); ret != nvml.SUCCESS {
				t.Fatalf("destroy compute instance = %v", ret)
			}
			return gi.Destroy()
		}, layout{true, []string{"3g.40gb"}}}, // the compute instance went first
		{sim.CallSetMigMode, func(t *testing.T, l *sim.Lib) nvml.Return {
			destroyAll(t, firstGI(t, device(t, l, 0), byKind["3g"]))
			_, ret := device(t, l, 0).SetMigMode(nvml.DEVICE_MIG_DISABLE)
			return ret
		}, layout{Mig: true}},
		{sim.CallGetHandle, func(t *testing.T, l *sim.Lib) nvml.Return {
			_, ret := l.DeviceGetHandleByIndex(0)
			return ret
		}, layout{true, []string{"3g.40gb+ci"}}},
		{sim.CallResetGpu, func(t *testing.T, l *sim.Lib) nvml.Return {
			destroyAll(t, firstGI(t, device(t, l, 0), byKind["3g"]))
			err := l.ResetGPU(0)
			var ret nvml.Return
			if !errors.As(err, &ret) {
				t.Fatalf("ResetGPU() = %v, want an nvml.Return inside", err)
			}
			return ret
		}, layout{Mig: true}},
	}
	for _, tc := range tests {
		t.Run(string(tc.call), func(t *testing.T) {
			l := newLib(t, gpu("H100-SXM5-80GB"))
			createInstance(t, enableMIG(t, l, 0), byKind["3g"], 0)
			if _, err := l.ArmFault(sim.Fault{Kind: sim.FaultError, Call: tc.call, GPU: intp(0), Return: "ERROR_IN_USE"}); err != nil {
				t.Fatal(err)
			}
			if ret := tc.do(t, l); ret != nvml.ERROR_IN_USE {
				t.Errorf("call = %v, want the fault's ERROR_IN_USE", ret)
			}
			if diff := cmp.Diff(tc.want, snap(l)); diff != "" {
				t.Errorf("GPU after the failed call (-want +got):\n%s", diff)
			}
			if st := l.Faults(); st[0].Fired != 1 {
				t.Errorf("fired %d times, want 1", st[0].Fired)
			}
		})
	}
}

// TestHangFault: a hung call holds up its caller only; clearing the fault
// or closing the simulator ends it, and a hang that runs out lets the call
// run.
func TestHangFault(t *testing.T) {
	setup := func(t *testing.T, duration string) (*sim.Lib, chan nvml.Return) {
		l := newLib(t, gpu("H100-SXM5-80GB"))
		enableMIG(t, l, 0)
		if _, err := l.ArmFault(sim.Fault{Kind: sim.FaultHang, Call: sim.CallCreateGpuInstance, Duration: dur(duration)}); err != nil {
			t.Fatal(err)
		}
		done := make(chan nvml.Return, 1)
		go func() {
			d, _ := l.DeviceGetHandleByIndex(0)
			info, _ := d.GetGpuInstanceProfileInfo(byKind["7g"])
			_, ret := d.CreateGpuInstance(&info)
			done <- ret
		}()
		return l, done
	}
	hanging := func(t *testing.T, l *sim.Lib) {
		testutil.Eventually(t, "the call to hang", func() bool { return l.Faults()[0].Hanging == 1 })
	}

	t.Run("cleared", func(t *testing.T) {
		l, done := setup(t, "10m")
		hanging(t, l)
		// Other calls answer meanwhile.
		d := device(t, l, 0)
		if got := modes(t, d); got.Current != nvml.DEVICE_MIG_ENABLE {
			t.Errorf("GetMigMode during the hang: %+v", got)
		}
		select {
		case ret := <-done:
			t.Fatalf("the hung call returned %v before the fault was cleared", ret)
		default:
		}
		if n, err := l.ClearFaults(""); n != 1 || err != nil {
			t.Fatalf("ClearFaults() = %d, %v", n, err)
		}
		if ret := <-done; ret != nvml.SUCCESS {
			t.Errorf("the call after the hang = %v, want SUCCESS", ret)
		}
		if len(l.Faults()) != 0 {
			t.Errorf("faults after clearing: %+v", l.Faults())
		}
	})
	t.Run("closed", func(t *testing.T) {
		l, done := setup(t, "10m")
		hanging(t, l)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if ret := <-done; ret != nvml.ERROR_NO_PERMISSION {
			t.Errorf("the call released by Close = %v, want ERROR_NO_PERMISSION (a closed simulator changes nothing)", ret)
		}
	})
	t.Run("runs out", func(t *testing.T) {
		l, done := setup(t, "1ms")
		if ret := <-done; ret != nvml.SUCCESS {
			t.Errorf("the call after the hang = %v, want SUCCESS", ret)
		}
		if st := l.Faults()[0]; st.Fired != 1 || st.Hanging != 0 || !st.Done {
			t.Errorf("listing %+v, want fired once, done, nothing hanging", st)
		}
	})
}

// TestXidStorm: a storm raises its Xids on its instance, at once or from
// the call that sets it off; clearing stops it.
func TestXidStorm(t *testing.T) {
	l := newLib(t, gpu("H100-SXM5-80GB"), gpu("H100-SXM5-80GB"))
	d := enableMIG(t, l, 0)
	gi, _ := createInstance(t, d, byKind["3g"], 0)
	giid := giID(t, gi)
	set := newEventSet(t, l, d, device(t, l, 1))
	u, _ := d.GetUUID()

	if _, err := l.ArmFault(sim.Fault{Kind: sim.FaultXidStorm, GPU: intp(0), GI: u32p(giid + 1), Xid: 48, Events: 3}); err == nil {
		t.Error("a storm on a GPU instance that does not exist was armed")
	}
	if _, err := l.ArmFault(sim.Fault{Kind: sim.FaultXidStorm, GPU: intp(0), GI: u32p(giid), CI: u32p(0), Xid: 48, Events: 3}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		want := event{GPU: u, Type: nvml.EventTypeXidCriticalError, Xid: 48, GI: giid, CI: 0}
		if diff := cmp.Diff(want, wait(t, set, hangGuard)); diff != "" {
			t.Fatalf("Xid %d of the storm (-want +got):\n%s", i+1, diff)
		}
	}
	testutil.Eventually(t, "the storm's count", func() bool { return l.Faults()[0].XidsSent == 3 })
	if e := wait(t, set, 0); e.Outcome != nvml.ERROR_TIMEOUT {
		t.Errorf("after the storm: %+v, want nothing more", e)
	}

	// Set off by a call: nothing before it.
	if _, err := l.ArmFault(sim.Fault{Name: "late", Kind: sim.FaultXidStorm, GPU: intp(1), Call: sim.CallSetMigMode, Xid: 31, Events: 2}); err != nil {
		t.Fatal(err)
	}
	if e := wait(t, set, 0); e.Outcome != nvml.ERROR_TIMEOUT {
		t.Errorf("before the call: %+v, want nothing", e)
	}
	device(t, l, 1).SetMigMode(nvml.DEVICE_MIG_ENABLE)
	for range 2 {
		if e := wait(t, set, hangGuard); e.Xid != 31 || e.GI != sim.NoInstance {
			t.Errorf("storm set off by SetMigMode: %+v, want Xid 31 on the whole GPU", e)
		}
	}

	// A slow storm stops when cleared.
	if _, err := l.ArmFault(sim.Fault{Name: "slow", Kind: sim.FaultXidStorm, GPU: intp(1), Xid: 94, Events: 5, Interval: dur("1m")}); err != nil {
		t.Fatal(err)
	}
	if e := wait(t, set, hangGuard); e.Xid != 94 {
		t.Errorf("first Xid of the slow storm: %+v", e)
	}
	if _, err := l.ClearFaults("slow"); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil { // waits for the storm to end
		t.Fatal(err)
	}
	if e := wait(t, set, 0); e.Outcome != nvml.ERROR_TIMEOUT {
		t.Errorf("after clearing the storm: %+v, want nothing more", e)
	}
}

// TestLostGPU: a GPU off the bus raises Xid 79 and answers
// ERROR_GPU_IS_LOST wherever nvml.h says so, the other GPU works on, and a
// reboot brings it back without its instances, its MIG mode kept.
func TestLostGPU(t *testing.T) {
	l := newLib(t, gpu("H100-SXM5-80GB"), gpu("H100-SXM5-80GB"), gpu("H100-SXM5-80GB"))
	d0, d1 := enableMIG(t, l, 0), enableMIG(t, l, 1)
	enableMIG(t, l, 2)
	gi, ci := createInstance(t, d1, byKind["3g"], 0)
	mig, _ := d1.GetMigDeviceHandleByIndex(0)
	migUUID, _ := mig.GetUUID()
	uuids := []string{}
	for i := range 3 {
		u, _ := device(t, l, i).GetUUID()
		uuids = append(uuids, u)
	}
	set := newEventSet(t, l, d1)
	other := newEventSet(t, l, d0)

	if _, err := l.ArmFault(sim.Fault{Kind: sim.FaultLost, GPU: intp(1)}); err != nil {
		t.Fatal(err)
	}
	want := event{GPU: "", Type: nvml.EventTypeXidCriticalError, Xid: 79, GI: sim.NoInstance, CI: sim.NoInstance}
	got, ret := set.Wait(hangGuard)
	if ret != nvml.SUCCESS || got.EventData != want.Xid || got.GpuInstanceId != want.GI || got.ComputeInstanceId != want.CI || got.Device != d1 {
		t.Errorf("first event = %+v, %v; want Xid 79 on the whole GPU 1", got, ret)
	}
	if e := wait(t, set, 0); e.Outcome != nvml.ERROR_GPU_IS_LOST {
		t.Errorf("Wait() on a set with the lost GPU = %v, want ERROR_GPU_IS_LOST", e.Outcome)
	}
	if e := wait(t, other, 0); e.Outcome != nvml.ERROR_TIMEOUT {
		t.Errorf("Wait() on a set without it = %v, want ERROR_TIMEOUT", e.Outcome)
	}

	lost := map[string]nvml.Return{}
	_, lost["GetUUID"] = d1.GetUUID()
	_, _, lost["GetMigMode"] = d1.GetMigMode()
	_, lost["GetGpuInstanceProfileInfo"] = d1.GetGpuInstanceProfileInfo(byKind["1g"])
	_, lost["GpuInstance.GetInfo"] = gi.GetInfo()
	_, lost["ComputeInstance.GetInfo"] = ci.GetInfo()
	lost["ComputeInstance.Destroy"] = ci.Destroy()
	_, lost["MIG device GetUUID"] = mig.GetUUID()
	_, lost["SetMigMode"] = d1.SetMigMode(nvml.DEVICE_MIG_DISABLE)
	_, lost["DeviceGetHandleByIndex"] = l.DeviceGetHandleByIndex(1)
	_, lost["DeviceGetHandleByUUID(its own)"] = l.DeviceGetHandleByUUID(uuids[1])
	_, lost["DeviceGetHandleByUUID(past it)"] = l.DeviceGetHandleByUUID(uuids[2])
	_, lost["DeviceGetHandleByUUID(its MIG device)"] = l.DeviceGetHandleByUUID(migUUID)
	lost["RegisterEvents"] = d1.RegisterEvents(nvml.EventTypeXidCriticalError, other)
	for call, ret := range lost {
		if ret != nvml.ERROR_GPU_IS_LOST {
			t.Errorf("%s on the lost GPU = %v, want ERROR_GPU_IS_LOST", call, ret)
		}
	}
	if err := l.ResetGPU(1); !errors.Is(err, nvml.ERROR_GPU_IS_LOST) {
		t.Errorf("ResetGPU(1) = %v, want ERROR_GPU_IS_LOST", err)
	}
	if n, ret := l.DeviceGetCount(); n != 3 || ret != nvml.SUCCESS {
		t.Errorf("DeviceGetCount() = %d, %v; want the lost GPU still counted", n, ret)
	}
	// GPU 0 comes before the lost one and works on.
	if _, ret := l.DeviceGetHandleByUUID(uuids[0]); ret != nvml.SUCCESS {
		t.Errorf("DeviceGetHandleByUUID(GPU 0) = %v", ret)
	}
	createInstance(t, d0, byKind["7g"], 0)
	if g := l.Snapshot()[1]; !g.Lost || g.LostPermanent {
		t.Errorf("snapshot of GPU 1: lost %v permanent %v", g.Lost, g.LostPermanent)
	}

	if err := l.Reboot(); err != nil {
		t.Fatal(err)
	}
	if got := modes(t, d1); got != (migModes{nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE}) {
		t.Errorf("GPU 1 after the reboot: modes %+v, want MIG kept", got)
	}
	if g := l.Snapshot()[1]; g.Lost || len(g.Instances) != 0 {
		t.Errorf("GPU 1 after the reboot: lost %v, %d instances; want back, none", g.Lost, len(g.Instances))
	}
	if e := wait(t, set, 0); e.Outcome != nvml.ERROR_TIMEOUT {
		t.Errorf("Wait() after the reboot = %v, want ERROR_TIMEOUT", e.Outcome)
	}
}

// TestLostGPUPermanentAndTriggered: a GPU lost for good stays lost across a
// reboot until its fault is cleared; a loss set off by a call fails that
// call.
func TestLostGPUPermanentAndTriggered(t *testing.T) {
	l := newLib(t, gpu("H100-SXM5-80GB"), gpu("H100-SXM5-80GB"))
	enableMIG(t, l, 1)
	if _, err := l.ArmFault(sim.Fault{Name: "dead", Kind: sim.FaultLost, GPU: intp(1), Call: sim.CallCreateGpuInstance, Nth: 2, Permanent: true}); err != nil {
		t.Fatal(err)
	}
	if ret := createFirstFit(t, l, 1); ret != nvml.SUCCESS {
		t.Fatalf("first create = %v", ret)
	}
	if ret := createFirstFit(t, l, 1); ret != nvml.ERROR_GPU_IS_LOST {
		t.Errorf("the create that loses the GPU = %v, want ERROR_GPU_IS_LOST", ret)
	}
	if err := l.Reboot(); err != nil {
		t.Fatal(err)
	}
	if _, ret := l.DeviceGetHandleByIndex(1); ret != nvml.ERROR_GPU_IS_LOST {
		t.Errorf("after a reboot, a GPU lost for good = %v, want ERROR_GPU_IS_LOST", ret)
	}
	if _, err := l.ClearFaults("nothing"); err == nil {
		t.Error("clearing a fault nobody armed succeeded")
	}
	if n, err := l.ClearFaults("dead"); err != nil || n != 2 {
		t.Errorf("ClearFaults(dead) = %d, %v; want the fault and its GPU", n, err)
	}
	if ret := createFirstFit(t, l, 1); ret != nvml.SUCCESS {
		t.Errorf("create after clearing = %v", ret)
	}
}

// TestFaultsAcrossProcesses: faults armed through the inbox of a running
// simulator, listed for other processes, cleared; a lost GPU stays lost
// across restarts, as hardware does; the config's faults are armed at each
// start, never by a read-only simulator or by Send.
func TestFaultsAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	cfg := persistentConfig(dir, gpu("H100-SXM5-80GB"), gpu("H100-SXM5-80GB"))
	cfg.Faults = []sim.Fault{{Name: "from-config", Kind: sim.FaultError, Call: sim.CallSetMigMode, GPU: intp(0)}}
	l := open(t, cfg)
	listed := func() []string {
		st, err := sim.ReadFaults(dir)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range st {
			out = append(out, s.Fault.Name+"/"+s.Source+"/"+strconv.Itoa(s.Fired))
		}
		return out
	}
	if diff := cmp.Diff([]string{"from-config/config/0"}, listed()); diff != "" {
		t.Errorf("listing at start (-want +got):\n%s", diff)
	}

	// Refused at once, not queued for the simulator's log.
	for _, c := range []sim.Command{
		{Op: sim.OpFault},
		{Op: sim.OpFault, Fault: &sim.Fault{Kind: sim.FaultError}},
		{Op: sim.OpFault, Fault: &sim.Fault{Kind: sim.FaultLost, GPU: intp(2)}},
		{Op: sim.OpFault, Fault: &sim.Fault{Kind: sim.FaultXidStorm, GPU: intp(0), GI: u32p(3), Xid: 48, Events: 1}},
	} {
		if queued, err := sim.Send(cfg, c); err == nil || queued {
			t.Errorf("Send(%+v) = %v, %v, want an error", c.Fault, queued, err)
		}
	}
	if _, err := sim.Send(cfg, sim.Command{Op: sim.OpFault, Fault: &sim.Fault{Name: "ci", Kind: sim.FaultError, Call: sim.CallCreateGpuInstance, GPU: intp(1), Return: "ERROR_IN_USE"}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the fault from the inbox", func() bool { return len(l.Faults()) == 2 })
	enableMIG(t, l, 1)
	if ret := createFirstFit(t, l, 1); ret != nvml.ERROR_IN_USE {
		t.Errorf("create with the inbox's fault = %v", ret)
	}
	if diff := cmp.Diff([]string{"from-config/config/0", "ci/command/1"}, listed()); diff != "" {
		t.Errorf("listing after the fault fired (-want +got):\n%s", diff)
	}
	if _, err := sim.Send(cfg, sim.Command{Op: sim.OpClearFaults, Name: "ci"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the fault cleared", func() bool { return len(l.Faults()) == 1 })
	if _, err := sim.Send(cfg, sim.Command{Op: sim.OpFault, Fault: &sim.Fault{Name: "gone", Kind: sim.FaultLost, GPU: intp(1)}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the GPU lost", func() bool { return l.Snapshot()[1].Lost })
	closeLib(t, l)

	// Nothing runs: faults cannot be sent, and Send arms none of the
	// config's, but a reboot applies.
	if _, err := sim.Send(cfg, sim.Command{Op: sim.OpFault, Fault: &sim.Fault{Kind: sim.FaultLost, GPU: intp(0)}}); err == nil || !strings.Contains(err.Error(), "no simulator is running") {
		t.Errorf("Send(fault) with no simulator = %v", err)
	}
	ro := cfg
	ro.ReadOnly = true
	view := open(t, ro)
	if len(view.Faults()) != 0 || !view.Snapshot()[1].Lost {
		t.Errorf("read-only view: faults %+v, GPU 1 lost %v; want none armed and the GPU still lost", view.Faults(), view.Snapshot()[1].Lost)
	}
	closeLib(t, view)
	if _, err := sim.Send(cfg, sim.Command{Op: sim.OpReboot}); err != nil {
		t.Fatal(err)
	}
	l = open(t, cfg)
	defer closeLib(t, l)
	if g := l.Snapshot()[1]; g.Lost {
		t.Error("GPU 1 still lost after a reboot")
	}
	if _, ret := device(t, l, 0).SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.ERROR_UNKNOWN {
		t.Errorf("SetMigMode on GPU 0 after a restart = %v, want the config's fault armed again", ret)
	}
}

// TestRebootFault: a reboot armed at once, or set off by the Nth call at
// a site, drops every instance and keeps MIG modes; the call that set it
// off runs on the rebooted GPU, and a stale instance handle is refused.
func TestRebootFault(t *testing.T) {
	profiles := func(l *sim.Lib, gpu int) []string {
		var out []string
		for _, in := range l.Snapshot()[gpu].Instances {
			out = append(out, in.Profile)
		}
		return out
	}
	t.Run("now", func(t *testing.T) {
		l := newLib(t, gpu("H100-SXM5-80GB"), gpu("H100-SXM5-80GB"))
		createInstance(t, enableMIG(t, l, 0), byKind["3g"], 0)
		createInstance(t, enableMIG(t, l, 1), byKind["7g"], 0)
		if _, err := l.ArmFault(sim.Fault{Kind: sim.FaultReboot}); err != nil {
			t.Fatal(err)
		}
		for i, g := range l.Snapshot() {
			if !g.MigEnabled || len(g.Instances) != 0 {
				t.Errorf("GPU %d after the reboot: MIG %v, %d instances; want MIG kept and none", i, g.MigEnabled, len(g.Instances))
			}
		}
		if st := l.Faults()[0]; st.Fired != 1 || !st.Done {
			t.Errorf("listing %+v, want fired once, done", st)
		}
	})
	t.Run("at the second create", func(t *testing.T) {
		l := newLib(t, gpu("H100-SXM5-80GB"))
		d := enableMIG(t, l, 0)
		gi, _ := createInstance(t, d, byKind["3g"], 0)
		if _, err := l.ArmFault(sim.Fault{Kind: sim.FaultReboot, Call: sim.CallCreateGpuInstance, Nth: 2}); err != nil {
			t.Fatal(err)
		}
		if _, ret := createGI(d, profileInfo(t, d, byKind["2g"]), 4, 2); ret != nvml.SUCCESS {
			t.Fatalf("first create = %v", ret)
		}
		if diff := cmp.Diff([]string{"3g.40gb", "2g.20gb"}, profiles(l, 0)); diff != "" {
			t.Errorf("before the reboot (-want +got):\n%s", diff)
		}
		if _, ret := createGI(d, profileInfo(t, d, byKind["1g"]), 6, 1); ret != nvml.SUCCESS {
			t.Fatalf("the create that set off the reboot = %v", ret)
		}
		if diff := cmp.Diff([]string{"1g.10gb"}, profiles(l, 0)); diff != "" {
			t.Errorf("after the reboot (-want +got):\n%s", diff)
		}
		if got := modes(t, d); got.Current != nvml.DEVICE_MIG_ENABLE {
			t.Errorf("MIG after the reboot: %+v, want kept", got)
		}
		if _, ret := gi.GetInfo(); ret != nvml.ERROR_INVALID_ARGUMENT {
			t.Errorf("a GPU instance handle from before the reboot = %v, want ERROR_INVALID_ARGUMENT", ret)
		}
		if _, ret := createGI(d, profileInfo(t, d, byKind["1g"]), 5, 1); ret != nvml.SUCCESS {
			t.Errorf("a third create = %v, want no second reboot", ret)
		}
		if diff := cmp.Diff([]string{"1g.10gb", "1g.10gb"}, profiles(l, 0)); diff != "" {
			t.Errorf("after the third create (-want +got):\n%s", diff)
		}
	})
}

// TestOOMFault: an OOM fault allocates its memory at the Nth call of its
// site, resident (every page touched: the process's resident set grows by
// it, which is what a memory cgroup charges), holds it until it is
// cleared, and lets the call run; it fires once. Under a limit below it
// the kernel would end the process there (TestFaultAgentOOMKilled shows
// it on the cluster).
func TestOOMFault(t *testing.T) {
	const mib = 64
	l := newLib(t, gpu("H100-SXM5-80GB"))
	enableMIG(t, l, 0)
	if _, err := l.ArmFault(sim.Fault{Name: "oom", Kind: sim.FaultOOM, Call: sim.CallCreateGpuInstance, Nth: 2, MiB: mib}); err != nil {
		t.Fatal(err)
	}
	if ret := createFirstFit(t, l, 0); ret != nvml.SUCCESS {
		t.Fatalf("first create = %v", ret)
	}
	if st := l.Faults()[0]; st.Fired != 0 || st.HeldMiB != 0 {
		t.Fatalf("after the first create: %+v, want nothing fired or held", st)
	}
	// The baseline with as little garbage resident as the runtime can
	// manage, so that only memory the fault touched can raise it by mib.
	runtime.GC()
	debug.FreeOSMemory()
	before := residentMiB(t)
	if ret := createFirstFit(t, l, 0); ret != nvml.SUCCESS {
		t.Fatalf("the create the fault fired at = %v, want it to run", ret)
	}
	grew := residentMiB(t) - before
	if st := l.Faults()[0]; st.Fired != 1 || !st.Done || st.HeldMiB != mib {
		t.Errorf("listing %+v, want fired once, done, %d MiB held", st, mib)
	}
	if grew < mib*9/10 {
		t.Errorf("the resident set grew by %d MiB, want about %d: the fault's memory is not touched", grew, mib)
	}
	if ret := createFirstFit(t, l, 0); ret != nvml.SUCCESS {
		t.Fatalf("third create = %v", ret)
	}
	if st := l.Faults()[0]; st.Fired != 1 || st.HeldMiB != mib {
		t.Errorf("after a third create: %+v, want it fired once, %d MiB held", st, mib)
	}
	if _, err := l.ClearFaults("oom"); err != nil {
		t.Fatal(err)
	}
	if st := l.Faults(); len(st) != 0 {
		t.Errorf("after clearing: %+v", st)
	}
}

// residentMiB is this process's resident set (VmRSS), in MiB.
func residentMiB(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status to measure memory with: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb / 1024
		}
	}
	t.Fatal("/proc/self/status has no VmRSS")
	return 0
}
