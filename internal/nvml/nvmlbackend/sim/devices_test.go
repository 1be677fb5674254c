package sim_test

import (
	"regexp"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"

	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
)

type identity struct {
	Index, Minor int
	Name         string
	PCIDeviceID  uint32
	BusID        string
	MemoryMiB    uint64
	Arch         nvml.DeviceArchitecture
	CC           [2]int
}

func identityOf(t *testing.T, d nvml.Device) identity {
	t.Helper()
	var id identity
	var ret [8]nvml.Return
	id.Index, ret[0] = d.GetIndex()
	id.Minor, ret[1] = d.GetMinorNumber()
	id.Name, ret[2] = d.GetName()
	pci, r := d.GetPciInfo()
	ret[3] = r
	id.PCIDeviceID = pci.PciDeviceId
	for _, c := range pci.BusId {
		if c == 0 {
			break
		}
		id.BusID += string(rune(c))
	}
	mem, r := d.GetMemoryInfo()
	ret[4] = r
	id.MemoryMiB = mem.Total >> 20
	id.Arch, ret[5] = d.GetArchitecture()
	id.CC[0], id.CC[1], ret[6] = d.GetCudaComputeCapability()
	for i, r := range ret[:7] {
		if r != nvml.SUCCESS {
			t.Fatalf("identity call %d = %v", i, r)
		}
	}
	return id
}

func TestDeviceIdentity(t *testing.T) {
	l := newLib(t, gpu("A100-SXM4-40GB"), sim.GPUSpec{Model: "H200-SXM-141GB", Count: 2})
	if n, ret := l.DeviceGetCount(); n != 3 || ret != nvml.SUCCESS {
		t.Fatalf("DeviceGetCount() = %d, %v", n, ret)
	}
	want := []identity{
		{0, 0, "A100-SXM4-40GB", 0x20B010DE, "00000000:18:00.0", 40960, nvml.DEVICE_ARCH_AMPERE, [2]int{8, 0}},
		{1, 1, "H200-SXM-141GB", 0x233510DE, "00000000:28:00.0", 143771, nvml.DEVICE_ARCH_HOPPER, [2]int{9, 0}},
		{2, 2, "H200-SXM-141GB", 0x233510DE, "00000000:38:00.0", 143771, nvml.DEVICE_ARCH_HOPPER, [2]int{9, 0}},
	}
	var got []identity
	uuids := map[string]bool{}
	for i := range 3 {
		d := device(t, l, i)
		got = append(got, identityOf(t, d))
		uuid, _ := d.GetUUID()
		if !regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(uuid) {
			t.Errorf("GPU %d UUID %q is not a GPU-<uuid>", i, uuid)
		}
		uuids[uuid] = true
		if byUUID, ret := l.DeviceGetHandleByUUID(uuid); ret != nvml.SUCCESS || byUUID != d {
			t.Errorf("DeviceGetHandleByUUID(%s) = %v, %v", uuid, byUUID, ret)
		}
		if byBus, ret := l.DeviceGetHandleByPciBusId(want[i].BusID); ret != nvml.SUCCESS || byBus != d {
			t.Errorf("DeviceGetHandleByPciBusId(%s) = %v", want[i].BusID, ret)
		}
		if isMig, _ := d.IsMigDeviceHandle(); isMig {
			t.Errorf("GPU %d claims to be a MIG device", i)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("identities (-want +got):\n%s", diff)
	}
	if len(uuids) != 3 {
		t.Errorf("GPU UUIDs not distinct: %v", uuids)
	}
	if _, ret := l.DeviceGetHandleByIndex(3); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("DeviceGetHandleByIndex(3) = %v, want ERROR_INVALID_ARGUMENT", ret)
	}
	if _, ret := l.DeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000"); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("DeviceGetHandleByUUID(unknown) = %v, want ERROR_NOT_FOUND", ret)
	}
	if v, _ := l.SystemGetDriverVersion(); v != sim.DriverVersion {
		t.Errorf("SystemGetDriverVersion() = %q", v)
	}
	if v, _ := l.SystemGetCudaDriverVersion(); v != 12040 {
		t.Errorf("SystemGetCudaDriverVersion() = %d", v)
	}
}

func TestUUIDSeeds(t *testing.T) {
	uuidsOf := func(seed string) []string {
		l := newLibConfig(t, sim.Config{GPUs: []sim.GPUSpec{{Model: "H100-SXM5-80GB", Count: 2}}, UUIDSeed: seed})
		var out []string
		for i := range 2 {
			u, _ := device(t, l, i).GetUUID()
			out = append(out, u)
		}
		return out
	}
	a, a2, b := uuidsOf("node-a"), uuidsOf("node-a"), uuidsOf("node-b")
	if diff := cmp.Diff(a, a2); diff != "" {
		t.Errorf("same seed, different UUIDs (-first +second):\n%s", diff)
	}
	if a[0] == b[0] || a[1] == b[1] {
		t.Errorf("seeds node-a and node-b share UUIDs: %v %v", a, b)
	}
}

func TestMigDevices(t *testing.T) {
	l := newLib(t, gpu("A100-SXM4-80GB"))
	d := device(t, l, 0)
	if n, _ := d.GetMaxMigDeviceCount(); n != 0 {
		t.Errorf("GetMaxMigDeviceCount() with MIG off = %d, want 0", n)
	}
	enableMIG(t, l, 0)
	if n, _ := d.GetMaxMigDeviceCount(); n != 7 {
		t.Errorf("GetMaxMigDeviceCount() = %d, want 7", n)
	}
	createInstance(t, d, byKind["3g"], 4)
	createInstance(t, d, byKind["1g.2m"], 0)
	// A GPU instance without a compute instance is no MIG device.
	if _, ret := createGI(d, profileInfo(t, d, byKind["1g"]), 2, 1); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}

	type migDev struct {
		GI, CI  int
		Name    string
		MemMiB  uint64
		Attrs   nvml.DeviceAttributes
		UUIDFmt bool
	}
	var got []migDev
	gpuUUID, _ := d.GetUUID()
	for i := 0; ; i++ {
		m, ret := d.GetMigDeviceHandleByIndex(i)
		if ret == nvml.ERROR_NOT_FOUND {
			break
		}
		if ret != nvml.SUCCESS {
			t.Fatalf("GetMigDeviceHandleByIndex(%d) = %v", i, ret)
		}
		var md migDev
		md.GI, _ = m.GetGpuInstanceId()
		md.CI, _ = m.GetComputeInstanceId()
		md.Name, _ = m.GetName()
		mem, _ := m.GetMemoryInfo()
		md.MemMiB = mem.Total >> 20
		md.Attrs, _ = m.GetAttributes()
		uuid, _ := m.GetUUID()
		md.UUIDFmt = regexp.MustCompile(`^MIG-[0-9a-f-]{36}$`).MatchString(uuid)
		got = append(got, md)

		if isMig, _ := m.IsMigDeviceHandle(); !isMig {
			t.Errorf("MIG device %d: IsMigDeviceHandle() = false", i)
		}
		parent, ret := m.GetDeviceHandleFromMigDeviceHandle()
		if pu, _ := parent.GetUUID(); ret != nvml.SUCCESS || pu != gpuUUID {
			t.Errorf("MIG device %d parent = %v, %v", i, pu, ret)
		}
		if byUUID, ret := l.DeviceGetHandleByUUID(uuid); ret != nvml.SUCCESS {
			t.Errorf("DeviceGetHandleByUUID(%s) = %v", uuid, ret)
		} else if u, _ := byUUID.GetUUID(); u != uuid {
			t.Errorf("DeviceGetHandleByUUID(%s) found %s", uuid, u)
		}
	}
	want := []migDev{ // ordered by GPU instance id
		{1, 0, "A100-SXM4-80GB MIG 3g.40gb", 40192, nvml.DeviceAttributes{MultiprocessorCount: 42, GpuInstanceSliceCount: 3, ComputeInstanceSliceCount: 3, MemorySizeMB: 40192}, true},
		{2, 0, "A100-SXM4-80GB MIG 1g.20gb", 19968, nvml.DeviceAttributes{MultiprocessorCount: 14, GpuInstanceSliceCount: 1, ComputeInstanceSliceCount: 1, MemorySizeMB: 19968}, true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("MIG devices (-want +got):\n%s", diff)
	}
	if _, ret := d.GetMigDeviceHandleByIndex(-1); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("GetMigDeviceHandleByIndex(-1) = %v", ret)
	}
	// A MIG device handle goes stale with its compute instance.
	m, _ := d.GetMigDeviceHandleByIndex(0)
	destroyAll(t, firstGI(t, d, byKind["3g"]))
	if _, ret := m.GetUUID(); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("stale MIG device GetUUID() = %v, want ERROR_INVALID_ARGUMENT", ret)
	}
	if _, ret := d.GetGpuInstanceId(); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("GPU handle GetGpuInstanceId() = %v, want ERROR_NOT_SUPPORTED", ret)
	}
	if _, ret := d.GetDeviceHandleFromMigDeviceHandle(); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("GPU handle GetDeviceHandleFromMigDeviceHandle() = %v, want ERROR_INVALID_ARGUMENT", ret)
	}
}

func firstGI(t *testing.T, d nvml.Device, query int) nvml.GpuInstance {
	t.Helper()
	info := profileInfo(t, d, query)
	gis, ret := d.GetGpuInstances(&info)
	if ret != nvml.SUCCESS || len(gis) == 0 {
		t.Fatalf("GetGpuInstances(%d) = %d instances, %v", query, len(gis), ret)
	}
	return gis[0]
}

// TestMIGUUIDIdentity: a MIG device UUID names one created instance. GPU
// instance ids are reused (lowest free), so an instance created where a
// destroyed one was gets the destroyed one's ids, but never its UUID, not
// even with the same profile at the same place: a real driver mints a new
// one on every create.
func TestMIGUUIDIdentity(t *testing.T) {
	for name, tc := range map[string]struct {
		kind  string
		start int
	}{
		"same profile and placement": {kind: "2g", start: 0},
		"another profile":            {kind: "1g", start: 0},
		"another placement":          {kind: "2g", start: 2},
	} {
		t.Run(name, func(t *testing.T) {
			l := newLib(t, gpu("H100-SXM5-80GB"))
			d := enableMIG(t, l, 0)
			old, _ := createInstance(t, d, byKind["2g"], 0)
			createInstance(t, d, byKind["2g"], 4)
			oldGI := giID(t, old)
			oldUUID := migUUIDOf(t, l, oldGI)
			destroyAll(t, old)

			gi, _ := createInstance(t, d, byKind[tc.kind], tc.start)
			if id := giID(t, gi); id != oldGI {
				t.Fatalf("new instance got GPU instance id %d, want the freed %d", id, oldGI)
			}
			uuid := migUUIDOf(t, l, oldGI)
			if uuid == oldUUID {
				t.Errorf("instance created again (%s) has the destroyed one's UUID %s", name, uuid)
			}
			if m, ret := l.DeviceGetHandleByUUID(uuid); ret != nvml.SUCCESS {
				t.Errorf("DeviceGetHandleByUUID(new) = %v", ret)
			} else if id, _ := m.GetGpuInstanceId(); uint32(id) != oldGI {
				t.Errorf("DeviceGetHandleByUUID(new) found GPU instance %d, want %d", id, oldGI)
			}
			if _, ret := l.DeviceGetHandleByUUID(oldUUID); ret != nvml.ERROR_NOT_FOUND {
				t.Errorf("DeviceGetHandleByUUID(destroyed device) = %v, want ERROR_NOT_FOUND", ret)
			}
		})
	}
}

// migUUIDOf is the MIG device UUID of GPU 0's GPU instance gi.
func migUUIDOf(t *testing.T, l *sim.Lib, gi uint32) string {
	t.Helper()
	for _, in := range l.Snapshot()[0].Instances {
		if in.GI == gi && in.UUID != "" {
			return in.UUID
		}
	}
	t.Fatalf("GPU 0 has no MIG device in GPU instance %d", gi)
	return ""
}
