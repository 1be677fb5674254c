package sim_test

import (
	"reflect"
	"slices"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
)

// modelled lists, per go-nvml interface, the methods the simulator
// implements; every other method must answer ERROR_NOT_SUPPORTED. Interface
// methods that delegate to a handle (DeviceGetName -> Device.GetName) count
// as modelled when the handle method is.
var modelled = map[string][]string{
	"Interface": {
		"DeviceGetCount", "DeviceGetHandleByIndex", "DeviceGetHandleByPciBusId", "DeviceGetHandleByUUID",
		"ErrorString", "EventSetCreate", "Extensions", "Init", "InitWithFlags", "Shutdown",
		"SystemGetCudaDriverVersion", "SystemGetCudaDriverVersion_v2", "SystemGetDriverVersion", "SystemGetNVMLVersion",
	},
	"GPU": {
		"CreateGpuInstance", "CreateGpuInstanceWithPlacement", "GetArchitecture", "GetCudaComputeCapability",
		"GetDeviceHandleFromMigDeviceHandle", "GetGpuInstanceById", "GetGpuInstancePossiblePlacements",
		"GetGpuInstanceProfileInfo", "GetGpuInstanceRemainingCapacity", "GetGpuInstances", "GetIndex",
		"GetMaxMigDeviceCount", "GetMemoryInfo", "GetMigDeviceHandleByIndex", "GetMigMode", "GetMinorNumber",
		"GetName", "GetPciInfo", "GetSupportedEventTypes", "GetUUID", "IsMigDeviceHandle", "RegisterEvents", "SetMigMode",
	},
	"MIG": {
		"GetArchitecture", "GetAttributes", "GetComputeInstanceId", "GetCudaComputeCapability",
		"GetDeviceHandleFromMigDeviceHandle", "GetGpuInstanceId", "GetMemoryInfo", "GetName", "GetUUID", "IsMigDeviceHandle",
	},
	"GpuInstance": {
		"CreateComputeInstance", "CreateComputeInstanceWithPlacement", "Destroy", "GetComputeInstanceById",
		"GetComputeInstancePossiblePlacements", "GetComputeInstanceProfileInfo", "GetComputeInstanceRemainingCapacity",
		"GetComputeInstances", "GetInfo",
	},
	"ComputeInstance": {"Destroy", "GetInfo"},
	"EventSet":        {"Free", "Wait"},
}

// handles is a live instance of every handle type on an A100 with MIG
// enabled and one 3g.20gb instance.
type handles struct {
	lib *sim.Lib
	gpu nvml.Device
	mig nvml.Device
	gi  nvml.GpuInstance
	ci  nvml.ComputeInstance
	set nvml.EventSet
}

func newHandles(t *testing.T) handles {
	l := newLib(t, gpu("A100-SXM4-40GB"))
	d := enableMIG(t, l, 0)
	gi, ci := createInstance(t, d, nvml.GPU_INSTANCE_PROFILE_3_SLICE, 4)
	m, ret := d.GetMigDeviceHandleByIndex(0)
	if ret != nvml.SUCCESS {
		t.Fatalf("GetMigDeviceHandleByIndex(0) = %v", ret)
	}
	set, ret := l.EventSetCreate()
	if ret != nvml.SUCCESS {
		t.Fatalf("EventSetCreate() = %v", ret)
	}
	return handles{lib: l, gpu: d, mig: m, gi: gi, ci: ci, set: set}
}

var (
	deviceType          = reflect.TypeFor[nvml.Device]()
	gpuInstanceType     = reflect.TypeFor[nvml.GpuInstance]()
	computeInstanceType = reflect.TypeFor[nvml.ComputeInstance]()
	eventSetType        = reflect.TypeFor[nvml.EventSet]()
	returnType          = reflect.TypeFor[nvml.Return]()
)

// zeroArg is the zero value of t.
func zeroArg(t reflect.Type) reflect.Value { return reflect.Zero(t) }

// liveArg passes live simulator handles and pointers to zero structs, so
// calls get past argument checks.
func (h handles) liveArg(t reflect.Type) reflect.Value {
	switch t {
	case deviceType:
		return reflect.ValueOf(h.gpu)
	case gpuInstanceType:
		return reflect.ValueOf(h.gi)
	case computeInstanceType:
		return reflect.ValueOf(h.ci)
	case eventSetType:
		return reflect.ValueOf(h.set)
	}
	if t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct {
		return reflect.New(t.Elem())
	}
	return reflect.Zero(t)
}

// callAll calls every method of iface on v and returns, per method, the
// nvml.Return results. A panic fails the test.
func callAll(t *testing.T, v any, iface reflect.Type, arg func(reflect.Type) reflect.Value) map[string][]nvml.Return {
	t.Helper()
	out := map[string][]nvml.Return{}
	rv := reflect.ValueOf(v)
	for i := range iface.NumMethod() {
		m := iface.Method(i)
		args := make([]reflect.Value, m.Type.NumIn())
		for j := range args {
			args[j] = arg(m.Type.In(j))
		}
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s.%s panicked: %v", iface.Name(), m.Name, p)
				}
			}()
			for _, r := range rv.MethodByName(m.Name).Call(args) {
				if r.Type() == returnType {
					out[m.Name] = append(out[m.Name], nvml.Return(r.Int()))
				}
			}
		}()
	}
	return out
}

// TestNoMethodPanics calls every method of every interface the simulator
// implements with zero arguments (nil handles, nil pointers), before and
// after Init, then with live handles.
func TestNoMethodPanics(t *testing.T) {
	h := newHandles(t)
	targets := []struct {
		name  string
		v     any
		iface reflect.Type
	}{
		{"Lib", h.lib, reflect.TypeFor[nvml.Interface]()},
		{"GPU", h.gpu, deviceType},
		{"MIG", h.mig, deviceType},
		{"GpuInstance", h.gi, gpuInstanceType},
		{"ComputeInstance", h.ci, computeInstanceType},
		{"EventSet", h.set, eventSetType},
		{"Extensions", h.lib.Extensions(), reflect.TypeFor[nvml.ExtendedInterface]()},
	}
	for _, phase := range []string{"initialized, zero args", "initialized, live args", "uninitialized, zero args"} {
		t.Run(phase, func(t *testing.T) {
			if phase == "uninitialized, zero args" {
				h.lib.Shutdown()
				defer h.lib.Init()
			}
			for _, tg := range targets {
				arg := zeroArg
				if phase == "initialized, live args" {
					arg = newHandles(t).liveArg
				}
				callAll(t, tg.v, tg.iface, arg)
			}
		})
	}
}

// TestUnmodelledMethodsAreNotSupported checks that every method outside
// the modelled list answers ERROR_NOT_SUPPORTED, and that the list names
// only real methods.
func TestUnmodelledMethodsAreNotSupported(t *testing.T) {
	interfaceModelled := slices.Clone(modelled["Interface"])
	for _, kind := range []struct{ prefix, list string }{
		{"Device", "GPU"}, {"GpuInstance", "GpuInstance"}, {"ComputeInstance", "ComputeInstance"}, {"EventSet", "EventSet"},
	} {
		for _, m := range modelled[kind.list] {
			interfaceModelled = append(interfaceModelled, kind.prefix+m)
		}
	}
	tests := []struct {
		name     string
		v        func(h handles) any
		iface    reflect.Type
		modelled []string
	}{
		{"Interface", func(h handles) any { return h.lib }, reflect.TypeFor[nvml.Interface](), interfaceModelled},
		{"GPU", func(h handles) any { return h.gpu }, deviceType, modelled["GPU"]},
		{"MIG", func(h handles) any { return h.mig }, deviceType, modelled["MIG"]},
		{"GpuInstance", func(h handles) any { return h.gi }, gpuInstanceType, modelled["GpuInstance"]},
		{"ComputeInstance", func(h handles) any { return h.ci }, computeInstanceType, modelled["ComputeInstance"]},
		{"EventSet", func(h handles) any { return h.set }, eventSetType, modelled["EventSet"]},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHandles(t)
			got := callAll(t, tc.v(h), tc.iface, h.liveArg)
			for name, rets := range got {
				if slices.Contains(tc.modelled, name) {
					continue
				}
				for _, r := range rets {
					if r != nvml.ERROR_NOT_SUPPORTED {
						t.Errorf("%s.%s returned %v, want ERROR_NOT_SUPPORTED (or list it as modelled)", tc.name, name, r)
					}
				}
			}
			for _, name := range tc.modelled {
				if _, ok := tc.iface.MethodByName(name); !ok {
					t.Errorf("modelled list names %s.%s, which go-nvml does not have", tc.name, name)
				}
			}
		})
	}
}

func TestUninitialized(t *testing.T) {
	l, err := sim.New(sim.Config{GPUs: []sim.GPUSpec{gpu("H100-SXM5-80GB")}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	check := func(step string, want nvml.Return) {
		t.Helper()
		if _, ret := l.DeviceGetCount(); ret != want {
			t.Errorf("%s: DeviceGetCount() = %v, want %v", step, ret, want)
		}
	}
	check("before Init", nvml.ERROR_UNINITIALIZED)
	l.Init()
	d := device(t, l, 0)
	l.Init()
	check("after two Inits", nvml.SUCCESS)
	l.Shutdown()
	check("after one Shutdown", nvml.SUCCESS)
	if ret := l.Shutdown(); ret != nvml.SUCCESS {
		t.Errorf("second Shutdown() = %v", ret)
	}
	check("after matching Shutdowns", nvml.ERROR_UNINITIALIZED)
	if _, ret := d.GetUUID(); ret != nvml.ERROR_UNINITIALIZED {
		t.Errorf("handle call after Shutdown = %v, want ERROR_UNINITIALIZED", ret)
	}
	if ret := l.Shutdown(); ret != nvml.ERROR_UNINITIALIZED {
		t.Errorf("extra Shutdown() = %v, want ERROR_UNINITIALIZED", ret)
	}
	if s := l.ErrorString(nvml.ERROR_IN_USE); s != nvml.ERROR_IN_USE.Error() {
		t.Errorf("ErrorString() = %q", s)
	}
	if err := l.Extensions().LookupSymbol("nvmlInit_v2"); err == nil {
		t.Error("LookupSymbol() = nil, want an error")
	}
}
