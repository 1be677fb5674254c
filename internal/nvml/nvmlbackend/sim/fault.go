package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// A Fault is something going wrong in the simulated driver or hardware,
// armed from the simulator config (faults:) or a command (Apply, Send;
// `device-plugin sim fault`). Faults exist only in the simulator: the real
// backend is go-nvml's library, which has no way to take one.
//
// What a fault does (Kind):
//
//   - FaultError: the call fails with Return (default ERROR_UNKNOWN) and
//     changes nothing, like a driver call that fails: a GPU instance made by
//     an earlier call stays when its compute instance's create fails.
//   - FaultHang: the call waits Duration (at most MaxHang), then runs. Only
//     the calling goroutine waits; other calls answer meanwhile. Clearing
//     the fault or closing the simulator ends the wait.
//   - FaultXidStorm: Events Xid errors Xid on GPU (its GPU instance GI and
//     compute instance CI when given), Interval apart.
//   - FaultLost: GPU falls off the bus: Xid 79, then every call on it, its
//     instances and its MIG devices answers ERROR_GPU_IS_LOST (see
//     doc.go), until a reboot brings it back, or with Permanent until the
//     fault is cleared.
//   - FaultReboot: the node reboots (Reboot): every instance is gone, MIG
//     modes stay, pending ones take effect. At a call site it happens just
//     before the Nth call, which then runs on the rebooted GPUs (a stale
//     instance handle answers ERROR_INVALID_ARGUMENT), as an agent that lived
//     through the reboot would see it.
//   - FaultOOM: the calling process allocates and touches MiB MiB (at most
//     MaxOOMMiB) and keeps it until the fault is cleared, then the call
//     runs. Under a memory limit below that (its container's cgroup) the
//     kernel's OOM killer ends the process in the call, as an agent that
//     runs out of memory in the middle of an apply; the bound keeps a
//     process without such a limit, a test's, from taking the machine's
//     memory.
//
// When: an error or a hang fires at a call site (Call), on the Nth call
// there (default 1) and the Times-1 after it, or on every call from the
// Nth with Always; a storm or a loss starts at once when armed, or with a
// Call, at the Nth call there. With GPU set, only calls on that GPU count;
// a storm's or a loss's GPU is also the GPU it happens to. A reboot fires
// once, at once when armed or at the Nth call of its site. An OOM fires
// once, at the Nth call of its site.
type Fault struct {
	// Name identifies the fault in listings and for clearing; default
	// "<kind>-<n>", n counting the faults armed.
	Name string    `json:"name,omitempty"`
	Kind FaultKind `json:"kind"`
	// Call is the call site; required for errors and hangs.
	Call CallSite `json:"call,omitempty"`
	// GPU restricts the call site to one GPU index; required for storms
	// and losses.
	GPU *int `json:"gpu,omitempty"`
	// Nth is the first call that fires (1-based; default 1).
	Nth int `json:"nth,omitempty"`
	// Times is how many calls fire from the Nth on (default 1); Always
	// makes every one from the Nth on fire. Errors and hangs only.
	Times  int  `json:"times,omitempty"`
	Always bool `json:"always,omitempty"`
	// Return is the NVML return an error fault gives, by name
	// ("ERROR_IN_USE", or "IN_USE"); default ERROR_UNKNOWN.
	Return string `json:"return,omitempty"`
	// Duration is how long a hang lasts, at most MaxHang.
	Duration Duration `json:"duration,omitempty"`
	// Xid, Events and Interval make a storm; GI and CI attribute its
	// Xids to an instance (default: the whole GPU).
	Xid      uint64   `json:"xid,omitempty"`
	GI       *uint32  `json:"gi,omitempty"`
	CI       *uint32  `json:"ci,omitempty"`
	Events   int      `json:"events,omitempty"`
	Interval Duration `json:"interval,omitempty"`
	// Permanent keeps a lost GPU lost across reboots, until the fault is
	// cleared.
	Permanent bool `json:"permanent,omitempty"`
	// MiB is how much memory an OOM fault allocates, 1 to MaxOOMMiB.
	MiB int `json:"mib,omitempty"`
}

// FaultKind is what a fault does.
type FaultKind string

const (
	FaultError    FaultKind = "error"
	FaultHang     FaultKind = "hang"
	FaultXidStorm FaultKind = "xidStorm"
	FaultLost     FaultKind = "lost"
	FaultReboot   FaultKind = "reboot"
	FaultOOM      FaultKind = "oom"
)

// FaultKinds are the kinds a Fault may have.
var FaultKinds = []FaultKind{FaultError, FaultHang, FaultXidStorm, FaultLost, FaultReboot, FaultOOM}

// CallSite names the simulated calls a fault can fire at.
type CallSite string

const (
	// CallCreateGpuInstance is Device.CreateGpuInstance and
	// CreateGpuInstanceWithPlacement.
	CallCreateGpuInstance CallSite = "createGpuInstance"
	// CallCreateComputeInstance is GpuInstance.CreateComputeInstance and
	// CreateComputeInstanceWithPlacement.
	CallCreateComputeInstance CallSite = "createComputeInstance"
	// CallDestroyComputeInstance is ComputeInstance.Destroy.
	CallDestroyComputeInstance CallSite = "destroyComputeInstance"
	// CallDestroyGpuInstance is GpuInstance.Destroy.
	CallDestroyGpuInstance CallSite = "destroyGpuInstance"
	// CallSetMigMode is Device.SetMigMode.
	CallSetMigMode CallSite = "setMigMode"
	// CallGetHandle is DeviceGetHandleByIndex, ByUUID and ByPciBusId for a
	// GPU (not a MIG device): every discovery of the GPUs makes one.
	CallGetHandle CallSite = "getHandle"
	// CallResetGpu is the simulator's ResetGPU (the agent resets Ampere
	// GPUs through it); its error wraps the fault's return.
	CallResetGpu CallSite = "resetGpu"
)

// CallSites are the call sites a fault may name.
var CallSites = []CallSite{CallCreateGpuInstance, CallCreateComputeInstance, CallDestroyComputeInstance,
	CallDestroyGpuInstance, CallSetMigMode, CallGetHandle, CallResetGpu}

// Limits on faults, so that no test can stop a simulator for good.
const (
	// MaxHang is the longest a hang may last.
	MaxHang = 10 * time.Minute
	// MaxStormEvents is the most Xids one storm raises.
	MaxStormEvents = 10000
	// MaxStormInterval is the longest pause between a storm's Xids.
	MaxStormInterval = time.Minute
	// MaxOOMMiB is the most memory an OOM fault allocates: far above an
	// agent's limit (256 MiB in the manifests), far below a node's memory.
	MaxOOMMiB = 4096
)

// Duration is a time.Duration written as Go writes it ("250ms", "1m30s").
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string such as \"30s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: want a Go duration such as 30s or 250ms", s)
	}
	*d = Duration(v)
	return nil
}

// returnNames are the NVML error returns a fault may inject, by their
// names in nvml.h less the NVML_ prefix.
var returnNames = map[string]nvml.Return{
	"ERROR_UNINITIALIZED":             nvml.ERROR_UNINITIALIZED,
	"ERROR_INVALID_ARGUMENT":          nvml.ERROR_INVALID_ARGUMENT,
	"ERROR_NOT_SUPPORTED":             nvml.ERROR_NOT_SUPPORTED,
	"ERROR_NO_PERMISSION":             nvml.ERROR_NO_PERMISSION,
	"ERROR_ALREADY_INITIALIZED":       nvml.ERROR_ALREADY_INITIALIZED,
	"ERROR_NOT_FOUND":                 nvml.ERROR_NOT_FOUND,
	"ERROR_INSUFFICIENT_SIZE":         nvml.ERROR_INSUFFICIENT_SIZE,
	"ERROR_INSUFFICIENT_POWER":        nvml.ERROR_INSUFFICIENT_POWER,
	"ERROR_DRIVER_NOT_LOADED":         nvml.ERROR_DRIVER_NOT_LOADED,
	"ERROR_TIMEOUT":                   nvml.ERROR_TIMEOUT,
	"ERROR_IRQ_ISSUE":                 nvml.ERROR_IRQ_ISSUE,
	"ERROR_LIBRARY_NOT_FOUND":         nvml.ERROR_LIBRARY_NOT_FOUND,
	"ERROR_FUNCTION_NOT_FOUND":        nvml.ERROR_FUNCTION_NOT_FOUND,
	"ERROR_CORRUPTED_INFOROM":         nvml.ERROR_CORRUPTED_INFOROM,
	"ERROR_GPU_IS_LOST":               nvml.ERROR_GPU_IS_LOST,
	"ERROR_RESET_REQUIRED":            nvml.ERROR_RESET_REQUIRED,
	"ERROR_OPERATING_SYSTEM":          nvml.ERROR_OPERATING_SYSTEM,
	"ERROR_LIB_RM_VERSION_MISMATCH":   nvml.ERROR_LIB_RM_VERSION_MISMATCH,
	"ERROR_IN_USE":                    nvml.ERROR_IN_USE,
	"ERROR_MEMORY":                    nvml.ERROR_MEMORY,
	"ERROR_NO_DATA":                   nvml.ERROR_NO_DATA,
	"ERROR_VGPU_ECC_NOT_SUPPORTED":    nvml.ERROR_VGPU_ECC_NOT_SUPPORTED,
	"ERROR_INSUFFICIENT_RESOURCES":    nvml.ERROR_INSUFFICIENT_RESOURCES,
	"ERROR_FREQ_NOT_SUPPORTED":        nvml.ERROR_FREQ_NOT_SUPPORTED,
	"ERROR_ARGUMENT_VERSION_MISMATCH": nvml.ERROR_ARGUMENT_VERSION_MISMATCH,
	"ERROR_DEPRECATED":                nvml.ERROR_DEPRECATED,
	"ERROR_NOT_READY":                 nvml.ERROR_NOT_READY,
	"ERROR_GPU_NOT_FOUND":             nvml.ERROR_GPU_NOT_FOUND,
	"ERROR_INVALID_STATE":             nvml.ERROR_INVALID_STATE,
	"ERROR_RESET_TYPE_NOT_SUPPORTED":  nvml.ERROR_RESET_TYPE_NOT_SUPPORTED,
	"ERROR_UNKNOWN":                   nvml.ERROR_UNKNOWN,
}

// parseReturn reads an NVML return name, with or without "ERROR_".
func parseReturn(s string) (nvml.Return, error) {
	name := strings.ToUpper(strings.TrimSpace(s))
	name = strings.TrimPrefix(name, "NVML_")
	if !strings.HasPrefix(name, "ERROR_") {
		name = "ERROR_" + name
	}
	if r, ok := returnNames[name]; ok {
		return r, nil
	}
	return 0, fmt.Errorf("return %q: not an NVML error return (ERROR_UNKNOWN, ERROR_IN_USE, ERROR_INSUFFICIENT_RESOURCES, ERROR_GPU_IS_LOST, ...)", s)
}

// faultPlan is a validated fault, with its durations and return resolved.
type faultPlan struct {
	Fault
	ret nvml.Return
}

// check validates f for a simulator of gpus GPUs. fromConfig refuses what
// would fire at start before anything could see it (a storm without a
// call site).
func (f Fault) check(gpus int, fromConfig bool) (faultPlan, error) {
	p := faultPlan{Fault: f}
	if p.Nth == 0 {
		p.Nth = 1
	}
	if p.Times == 0 && !p.Always {
		p.Times = 1
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	notFor := func(field string, set bool) {
		if set {
			bad("%s does not apply to a fault of kind %s", field, f.Kind)
		}
	}
	if strings.ContainsFunc(f.Name, func(r rune) bool { return r <= ' ' || r == ',' }) {
		bad("name %q: want no spaces or commas", f.Name)
	}
	if f.Call != "" && !slices.Contains(CallSites, f.Call) {
		bad("call %q: want one of %s", f.Call, joinNames(CallSites))
	}
	if f.GPU != nil && (*f.GPU < 0 || *f.GPU >= gpus) {
		bad("gpu %d: the simulator has %d GPU(s), indexes 0 to %d", *f.GPU, gpus, gpus-1)
	}
	if f.Nth < 0 || f.Times < 0 {
		bad("nth %d, times %d: want whole numbers >= 1", f.Nth, f.Times)
	}
	if f.Call == "" {
		notFor("nth without call", f.Nth != 0)
	}
	if f.Always && f.Times != 0 {
		bad("times %d and always: choose one", f.Times)
	}
	if f.Kind != FaultOOM {
		notFor("mib", f.MiB != 0)
	}
	// notStormOrLoss refuses what only storms and losses take.
	notStormOrLoss := func() {
		notFor("xid", f.Xid != 0)
		notFor("gi", f.GI != nil)
		notFor("ci", f.CI != nil)
		notFor("events", f.Events != 0)
		notFor("interval", f.Interval != 0)
		notFor("permanent", f.Permanent)
	}
	// onlyCallSite refuses what only errors, hangs, storms and losses
	// take: a reboot or an OOM has a call site (call, gpu, nth) and no
	// more.
	onlyCallSite := func() {
		notFor("times", f.Times != 0)
		notFor("always", f.Always)
		notFor("return", f.Return != "")
		notFor("duration", f.Duration != 0)
		notStormOrLoss()
	}
	switch f.Kind {
	case FaultError, FaultHang:
		if f.Call == "" {
			bad("a fault of kind %s needs call: one of %s", f.Kind, joinNames(CallSites))
		}
		notStormOrLoss()
		if f.Kind == FaultError {
			notFor("duration", f.Duration != 0)
			p.ret = nvml.ERROR_UNKNOWN
			if f.Return != "" {
				r, err := parseReturn(f.Return)
				if err != nil {
					errs = append(errs, err)
				}
				p.ret = r
			}
		} else {
			notFor("return", f.Return != "")
			if d := time.Duration(f.Duration); d <= 0 || d > MaxHang {
				bad("duration %s: a hang needs a duration above 0 and at most %s", d, MaxHang)
			}
		}
	case FaultXidStorm, FaultLost:
		if f.GPU == nil {
			bad("a fault of kind %s needs gpu: the GPU it happens to", f.Kind)
		}
		notFor("times", f.Times != 0)
		notFor("always", f.Always)
		notFor("return", f.Return != "")
		notFor("duration", f.Duration != 0)
		if f.Kind == FaultLost {
			notFor("xid (a lost GPU raises Xid 79)", f.Xid != 0)
			notFor("gi", f.GI != nil)
			notFor("ci", f.CI != nil)
			notFor("events", f.Events != 0)
			notFor("interval", f.Interval != 0)
			break
		}
		notFor("permanent", f.Permanent)
		if f.Xid == 0 {
			bad("a storm needs xid: the Xid error it raises, such as 48 or 79")
		}
		if f.Events < 1 || f.Events > MaxStormEvents {
			bad("events %d: a storm raises 1 to %d Xids", f.Events, MaxStormEvents)
		}
		if d := time.Duration(f.Interval); d < 0 || d > MaxStormInterval {
			bad("interval %s: want 0 to %s between a storm's Xids", d, MaxStormInterval)
		}
		if f.CI != nil && f.GI == nil {
			bad("ci %d needs gi, its GPU instance", *f.CI)
		}
		if fromConfig && f.Call == "" {
			bad("a storm in the simulator config needs call: one that fires at start is over before anything watches; inject it with `device-plugin sim fault` instead")
		}
	case FaultReboot:
		onlyCallSite()
		if fromConfig && f.Call == "" {
			bad("a reboot in the simulator config needs call: one at start would reboot the node at every start; reboot it with `device-plugin sim reboot` instead")
		}
	case FaultOOM:
		if f.Call == "" {
			bad("a fault of kind %s needs call: one of %s", f.Kind, joinNames(CallSites))
		}
		onlyCallSite()
		if f.MiB < 1 || f.MiB > MaxOOMMiB {
			bad("mib %d: an OOM fault allocates 1 to %d MiB", f.MiB, MaxOOMMiB)
		}
	case "":
		bad("kind is required: one of %s", joinNames(FaultKinds))
	default:
		bad("kind %q: want one of %s", f.Kind, joinNames(FaultKinds))
	}
	if len(errs) > 0 {
		return faultPlan{}, errors.Join(errs...)
	}
	return p, nil
}

// checkFaults validates a list of faults, naming each by its place.
func checkFaults(faults []Fault, gpus int, fromConfig bool) error {
	names := map[string]bool{}
	for i, f := range faults {
		if _, err := f.check(gpus, fromConfig); err != nil {
			return fmt.Errorf("faults[%d]: %w", i, err)
		}
		if f.Name != "" && names[f.Name] {
			return fmt.Errorf("faults[%d]: name %q is used twice", i, f.Name)
		}
		names[f.Name] = true
	}
	return nil
}

func joinNames[T ~string](vals []T) string {
	s := make([]string, len(vals))
	for i, v := range vals {
		s[i] = string(v)
	}
	return strings.Join(s, ", ")
}

// gpuMatches reports whether a call on GPU gpu counts for p.
func (p *faultPlan) gpuMatches(gpu int) bool { return p.GPU == nil || *p.GPU == gpu }

// String describes the fault for logs and listings: "error ERROR_UNKNOWN
// at createComputeInstance call 2 on GPU 1".
func (f Fault) String() string {
	var b strings.Builder
	b.WriteString(string(f.Kind))
	switch f.Kind {
	case FaultError:
		ret := f.Return
		if ret == "" {
			ret = "ERROR_UNKNOWN"
		}
		fmt.Fprintf(&b, " %s", ret)
	case FaultHang:
		fmt.Fprintf(&b, " %s", time.Duration(f.Duration))
	case FaultXidStorm:
		fmt.Fprintf(&b, " of %d Xid %d, %s apart", f.Events, f.Xid, time.Duration(f.Interval))
		if f.GI != nil {
			fmt.Fprintf(&b, " on GPU instance %d", *f.GI)
			if f.CI != nil {
				fmt.Fprintf(&b, " compute instance %d", *f.CI)
			}
		}
	case FaultLost:
		if f.Permanent {
			b.WriteString(" (permanent)")
		}
	case FaultOOM:
		fmt.Fprintf(&b, " of %d MiB", f.MiB)
	}
	if f.Call != "" {
		nth := max(f.Nth, 1)
		fmt.Fprintf(&b, " at %s call %d", f.Call, nth)
		switch {
		case f.Always:
			b.WriteString(" and every one after")
		case f.Times > 1:
			fmt.Fprintf(&b, " to %d", nth+f.Times-1)
		}
	}
	if f.GPU != nil {
		fmt.Fprintf(&b, " on GPU %d", *f.GPU)
	}
	return b.String()
}
