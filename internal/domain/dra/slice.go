package dra

import (
	"fmt"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"
)

// Attribute and capacity names, unqualified: they are in the driver's
// domain (device.attributes['gpu.migflex.io'].profile). Where NVIDIA's
// driver has a name for the same thing, it is that name, so selectors
// carry over with the domain changed.
const (
	AttrType        = "type"
	AttrUUID        = "uuid"
	AttrParentUUID  = "parentUUID"
	AttrProfile     = "profile"
	AttrProductName = "productName"

	CapMemory          = "memory"
	CapMultiprocessors = "multiprocessors"
	CapCopyEngines     = "copyEngines"
	CapDecoders        = "decoders"
	CapEncoders        = "encoders"
	CapJPEGEngines     = "jpegEngines"
	CapOFAEngines      = "ofaEngines"
	// CapMemorySlicePrefix followed by i is a capacity of 1 on a MIG
	// device that occupies memory slice i of its GPU.
	CapMemorySlicePrefix = "memorySlice"
)

// Values of the type attribute.
const (
	TypeGPU = "gpu"
	TypeMIG = "mig"
)

// Taint keys of unhealthy devices, as NVIDIA's driver spells them under
// its own domain.
const (
	// TaintXid: the device had an Xid error; the value is the Xid.
	TaintXid = DriverName + "/xid"
	// TaintGPULost: the GPU fell off the bus.
	TaintGPULost = DriverName + "/gpu-lost"
)

// MaxDevicesPerSlice is how many devices one ResourceSlice holds. The API
// allows 128, but only 64 once a device has a taint; taints come and go
// with health, so every slice keeps to 64 and a device never moves to
// another slice because its GPU became unhealthy.
const MaxDevicesPerSlice = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures

// Fault is why a device is unhealthy, as the health watcher reports it.
type Fault struct {
	// Xid is the Xid of the error; 0 for a lost GPU.
	Xid uint64
	// Reason says it in words ("Xid 79").
	Reason string
}

// UnhealthyPolicy says how an unhealthy device is published.
type UnhealthyPolicy string

const (
	// UnhealthyTaint publishes it with a NoSchedule taint: the scheduler
	// allocates it to no new claim, pods that hold it keep running, and
	// users see why (DRADeviceTaints: beta and on in 1.36, GA in 1.37).
	UnhealthyTaint UnhealthyPolicy = "taint"
	// UnhealthyWithdraw leaves it out of the slice, for API servers that
	// drop taints (DRADeviceTaints off, the default in 1.35).
	UnhealthyWithdraw UnhealthyPolicy = "withdraw"
)

// Resources is the node's one pool, named pool (the node's name), with
// devs in their order: the scheduler takes the first device that fits, in
// slice and device order, and Devices orders them by GPU and placement.
// An empty layout still publishes one empty slice: an empty pool says the
// driver runs and has no devices, where no pool says nothing.
//
// unhealthy maps device UUIDs to their fault; policy says whether such a
// device is tainted or left out.
func Resources(pool string, devs []Device, unhealthy map[string]Fault, policy UnhealthyPolicy) (resourceslice.DriverResources, error) {
	if pool == "" {
		return resourceslice.DriverResources{}, fmt.Errorf("no pool name (the node's name)")
	}
	if policy != UnhealthyTaint && policy != UnhealthyWithdraw {
		return resourceslice.DriverResources{}, fmt.Errorf("unknown unhealthy-device policy %q", policy)
	}
	var devices []resourceapi.Device
	for _, d := range devs {
		f, bad := unhealthy[d.UUID]
		if bad && policy == UnhealthyWithdraw {
			continue
		}
		ad := APIDevice(d)
		if bad {
			ad.Taints = []resourceapi.DeviceTaint{taint(f)}
		}
		devices = append(devices, ad)
	}
	slices := []resourceslice.Slice{{}}
	for i, d := range devices {
		if i > 0 && i%MaxDevicesPerSlice == 0 {
			slices = append(slices, resourceslice.Slice{})
		}
		last := &slices[len(slices)-1]
		last.Devices = append(last.Devices, d)
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{pool: {Slices: slices}}}, nil
}

func taint(f Fault) resourceapi.DeviceTaint {
	if f.Xid == 0 {
		return resourceapi.DeviceTaint{Key: TaintGPULost, Effect: resourceapi.DeviceTaintEffectNoSchedule}
	}
	return resourceapi.DeviceTaint{Key: TaintXid, Value: strconv.FormatUint(f.Xid, 10), Effect: resourceapi.DeviceTaintEffectNoSchedule}
}

// APIDevice is d as a ResourceSlice lists it: its name, attributes and
// capacities (docs/DRA.md has the table).
func APIDevice(d Device) resourceapi.Device {
	str := func(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: ptr.To(s)} }
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		AttrType:        str(TypeGPU),
		AttrProductName: str(d.Model),
	}
	// A MIG device offered in dynamic mode does not exist yet, so has no
	// UUID; every device static mode publishes has one.
	if d.UUID != "" {
		attrs[AttrUUID] = str(d.UUID)
	}
	capacity := map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
		CapMemory: {Value: *resource.NewQuantity(int64(d.MemoryMB)<<20, resource.BinarySI)},
	}
	if d.MIG {
		attrs[AttrType] = str(TypeMIG)
		attrs[AttrParentUUID] = str(d.GPUUUID)
		attrs[AttrProfile] = str(d.Profile)
		count := func(n int) resourceapi.DeviceCapacity {
			return resourceapi.DeviceCapacity{Value: *resource.NewQuantity(int64(n), resource.DecimalSI)}
		}
		capacity[CapMultiprocessors] = count(d.SMs)
		capacity[CapCopyEngines] = count(d.Engines.CopyEngines)
		capacity[CapDecoders] = count(d.Engines.Decoders)
		capacity[CapEncoders] = count(d.Engines.Encoders)
		capacity[CapJPEGEngines] = count(d.Engines.JPEGs)
		capacity[CapOFAEngines] = count(d.Engines.OFAs)
		for i := d.Start; i < d.Start+d.Size; i++ {
			capacity[resourceapi.QualifiedName(CapMemorySlicePrefix+strconv.Itoa(i))] = count(1)
		}
	}
	return resourceapi.Device{Name: d.Name, Attributes: attrs, Capacity: capacity}
}
