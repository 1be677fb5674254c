package schedview

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
)

// The names read here are the driver's own.
func TestDRANamesAreTheDrivers(t *testing.T) {
	for got, want := range map[string]string{
		DRADriver: dra.DriverName, draAttrType: dra.AttrType, draAttrProfile: dra.AttrProfile,
		draTypeMIG: dra.TypeMIG, draTypeGPU: dra.TypeGPU,
	} {
		if got != want {
			t.Errorf("schedview reads %q where internal/domain/dra says %q", got, want)
		}
	}
}

func TestParseSelector(t *testing.T) {
	const attr = `device.attributes["gpu.migflex.io"]`
	tests := []struct {
		expr string
		want Selection
		ok   bool
	}{
		{`device.driver == "gpu.migflex.io"`, Selection{Driver: true}, true},
		{attr + `.profile == "3g.40gb"`, Selection{Profile: "3g.40gb"}, true},
		{`device.attributes['gpu.migflex.io'].type == 'mig' && device.attributes['gpu.migflex.io'].profile == '3g.40gb'`, Selection{Type: "mig", Profile: "3g.40gb"}, true},
		{`device.driver=="gpu.migflex.io" &&` + attr + `.type=="gpu"`, Selection{Driver: true, Type: "gpu"}, true},
		{attr + `.profile == "1g.10gb+me"`, Selection{Profile: "1g.10gb+me"}, true},
		// Not understood: left to the scheduler, counted as unknown.
		{`device.driver == "gpu.nvidia.com"`, Selection{}, false},
		{`device.attributes["gpu.nvidia.com"].profile == "3g.40gb"`, Selection{}, false},
		{attr + `.profile == "3g.40gb" || ` + attr + `.profile == "2g.20gb"`, Selection{}, false},
		{attr + `.profile != "3g.40gb"`, Selection{}, false},
		{`device.capacity["gpu.migflex.io"].memory.compareTo(quantity("40Gi")) >= 0`, Selection{}, false},
		{attr + `.productName == "A100"`, Selection{}, false},
		{attr + `.type == "vgpu"`, Selection{}, false},
		{attr + `.profile == "3g.40gb" && ` + attr + `.profile == "2g.20gb"`, Selection{}, false},
		{attr + `.type == "gpu" && ` + attr + `.profile == "2g.20gb"`, Selection{}, false},
		{`(` + attr + `.profile == "3g.40gb")`, Selection{}, false},
		{attr + `.profile == "3g.40gb`, Selection{}, false},
		{``, Selection{}, false},
	}
	for _, tt := range tests {
		got, ok := ParseSelector(tt.expr)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseSelector(%s) = %+v, %v; want %+v, %v", tt.expr, got, ok, tt.want, tt.ok)
		}
	}
}

// classes are the driver's generated DeviceClasses for a few profiles,
// plus one of NVIDIA's and one of ours this view cannot read.
func classes(t *testing.T, profiles ...string) *DRAClasses {
	t.Helper()
	cs, err := dra.DeviceClasses(profiles)
	if err != nil {
		t.Fatal(err)
	}
	var ptrs []*resourceapi.DeviceClass
	for i := range cs {
		ptrs = append(ptrs, &cs[i])
	}
	ptrs = append(ptrs,
		deviceClass("gpu.nvidia.com", `device.driver == "gpu.nvidia.com"`, "example.com/gpu"),
		deviceClass("big.migflex.io", `device.driver == "gpu.migflex.io" && device.capacity["gpu.migflex.io"].memory.isGreaterThan(quantity("40Gi"))`, ""))
	return NewDRAClasses(ptrs)
}

func deviceClass(name, expr, resource string) *resourceapi.DeviceClass {
	c := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}}}}
	if resource != "" {
		c.Spec.ExtendedResourceName = ptr.To(resource)
	}
	return c
}

func TestDRAClasses(t *testing.T) {
	c := classes(t, "1g.10gb", "3g.40gb")
	for r, want := range map[corev1.ResourceName]bool{mig1g10: true, "nvidia.com/mig-3g.40gb": true, gpu: true, mig2g20: false, "example.com/gpu": false} {
		if got := c.Serves(r); got != want {
			t.Errorf("Serves(%s) = %v, want %v", r, got, want)
		}
	}
	if diff := cmp.Diff([]string{"big.migflex.io"}, c.Unread); diff != "" {
		t.Errorf("Unread (-want,+got):\n%s", diff)
	}
	const why = "selector `device.driver == \"gpu.migflex.io\" && device.capacity[\"gpu.migflex.io\"].memory.isGreaterThan(quantity(\"40Gi\"))` is not of the forms migflex reads"
	if got := c.UnreadWhy("big.migflex.io"); got != why {
		t.Errorf("UnreadWhy(big.migflex.io) = %q, want %q", got, why)
	}
	if got := c.UnreadWhy(dra.ClassMIG); got != "" {
		t.Errorf("UnreadWhy of a class read: %q", got)
	}
	var none *DRAClasses
	if none.Serves(gpu) {
		t.Error("no classes serve nvidia.com/gpu")
	}
}

// migDevice is a MIG device as the driver publishes it.
func migDevice(minor int, profile string, start int) resourceapi.Device {
	return dra.APIDevice(dra.Device{
		Name: "gpu-" + string(rune('0'+minor)) + "-mig-" + profile + "-" + string(rune('0'+start)),
		UUID: "MIG-" + profile + string(rune('0'+start)), MIG: true, Profile: profile, GPUUUID: "GPU-0", Minor: minor,
		Start: start, Size: 1, MemoryMB: 10240,
	})
}

func wholeGPU(minor int) resourceapi.Device {
	return dra.APIDevice(dra.Device{Name: "gpu-" + string(rune('0'+minor)), UUID: "GPU-" + string(rune('0'+minor)), Minor: minor, MemoryMB: 81920})
}

func slice(node string, gen int64, devs ...resourceapi.Device) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{
		Driver: dra.DriverName, NodeName: ptr.To(node),
		Pool:    resourceapi.ResourcePool{Name: node, Generation: gen, ResourceSliceCount: 1},
		Devices: devs,
	}}
}

func allocatedClaim(name string, results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}
	return c
}

func result(driver, pool, device string) resourceapi.DeviceRequestAllocationResult {
	return resourceapi.DeviceRequestAllocationResult{Request: "r", Driver: driver, Pool: pool, Device: device}
}

func TestDRASupply(t *testing.T) {
	c := classes(t, "1g.10gb", "3g.40gb")
	mig3g := corev1.ResourceName("nvidia.com/mig-3g.40gb")
	a, b, big := migDevice(0, "1g.10gb", 0), migDevice(0, "1g.10gb", 1), migDevice(0, "3g.40gb", 4)
	unhealthy := migDevice(1, "1g.10gb", 0)
	unhealthy.Taints = []resourceapi.DeviceTaint{{Key: dra.TaintXid, Value: "79", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	other := slice("n1", 1, migDevice(0, "3g.40gb", 0))
	other.Spec.Driver = "gpu.nvidia.com"
	unserved := migDevice(1, "2g.20gb", 2)
	tests := []struct {
		name            string
		slices          []*resourceapi.ResourceSlice
		claims          []*resourceapi.ResourceClaim
		classes         *DRAClasses
		alloc, allocted alloc
	}{
		{name: "no slice: no supply", classes: c},
		{name: "devices per profile", slices: []*resourceapi.ResourceSlice{slice("n1", 1, a, b, big, wholeGPU(2))}, classes: c,
			alloc: alloc{mig1g10: 2, mig3g: 1, gpu: 1}, allocted: alloc{}},
		{
			name:   "allocated devices of our pool are in use; other drivers, pools and admin access are not",
			slices: []*resourceapi.ResourceSlice{slice("n1", 1, a, b, big)},
			claims: []*resourceapi.ResourceClaim{
				allocatedClaim("c1", result(dra.DriverName, "n1", a.Name)),
				allocatedClaim("c2", result("gpu.nvidia.com", "n1", big.Name), result(dra.DriverName, "n2", big.Name)),
				allocatedClaim("admin", func() resourceapi.DeviceRequestAllocationResult {
					r := result(dra.DriverName, "n1", big.Name)
					r.AdminAccess = ptr.To(true)
					return r
				}()),
				{ObjectMeta: metav1.ObjectMeta{Name: "unallocated"}},
			},
			classes: c, alloc: alloc{mig1g10: 2, mig3g: 1}, allocted: alloc{mig1g10: 1},
		},
		{name: "an allocated device gone from the slice is not counted", slices: []*resourceapi.ResourceSlice{slice("n1", 1, big)},
			claims:  []*resourceapi.ResourceClaim{allocatedClaim("c1", result(dra.DriverName, "n1", a.Name))},
			classes: c, alloc: alloc{mig3g: 1}, allocted: alloc{}},
		{name: "the pool's newest generation only", slices: []*resourceapi.ResourceSlice{slice("n1", 1, a, b), slice("n1", 2, big)},
			classes: c, alloc: alloc{mig3g: 1}, allocted: alloc{}},
		{name: "other nodes' pools and other drivers are not the node's", slices: []*resourceapi.ResourceSlice{slice("n2", 1, a), other},
			classes: c},
		{name: "a tainted device is no supply", slices: []*resourceapi.ResourceSlice{slice("n1", 1, unhealthy, big)},
			classes: c, alloc: alloc{mig3g: 1}, allocted: alloc{}},
		{name: "a profile no class serves is not offered", slices: []*resourceapi.ResourceSlice{slice("n1", 1, unserved)}, classes: c},
		{name: "no classes: nothing served", slices: []*resourceapi.ResourceSlice{slice("n1", 1, a)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gotA, gotU := DRASupply("n1", tt.slices, tt.claims, tt.classes)
			if diff := cmp.Diff(tt.alloc, gotA); diff != "" {
				t.Errorf("allocatable (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.allocted, gotU); diff != "" {
				t.Errorf("allocated (-want,+got):\n%s", diff)
			}
		})
	}
}

// A DRA node's free devices are its slices' less its claims', whatever its
// status.allocatable says and whatever its pods request.
func TestBuilderDRANode(t *testing.T) {
	c := classes(t, "1g.10gb")
	stale := node("n1", alloc{mig1g10: 7, mig2g20: 3}, labeled(nodeinfo.LabelServing, nodeinfo.ServingDRA))
	b := NewBuilder(nil)
	n := NodeFromAPI(stale)
	if !n.DRA || n.Allocatable != nil {
		t.Fatalf("a DRA node before its slices: %+v, want DRA and no supply", n)
	}
	b.SetNode(n)
	if s := b.Snapshot(); s.Has(mig1g10) || s.Has(mig2g20) {
		t.Error("a DRA node with no slice offers the device plugin's stale types")
	}
	a, bb := migDevice(0, "1g.10gb", 0), migDevice(0, "1g.10gb", 1)
	n.SetDRA(DRASupply("n1", []*resourceapi.ResourceSlice{slice("n1", 1, a, bb)},
		[]*resourceapi.ResourceClaim{allocatedClaim("c", result(dra.DriverName, "n1", a.Name))}, c))
	b.SetNode(n)
	b.SetPod("default/p", "n1", alloc{mig1g10: 1})
	_, m := b.Snapshot().Find("n1")
	if diff := cmp.Diff(alloc{mig1g10: 1}, m.Free()); diff != "" {
		t.Errorf("free (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff(alloc{mig1g10: 2}, m.Allocatable()); diff != "" {
		t.Errorf("allocatable (-want,+got):\n%s", diff)
	}
	// The only device left allocated too: none free.
	n.SetDRA(DRASupply("n1", []*resourceapi.ResourceSlice{slice("n1", 1, a, bb)},
		[]*resourceapi.ResourceClaim{allocatedClaim("c", result(dra.DriverName, "n1", a.Name), result(dra.DriverName, "n1", bb.Name))}, c))
	b.SetNode(n)
	if _, m := b.Snapshot().Find("n1"); m.Free()[mig1g10] != 0 {
		t.Errorf("free %v, want no 1g.10gb free", m.Free())
	}
}

type claimSource struct {
	claims    map[string]*resourceapi.ResourceClaim
	templates map[string]*resourceapi.ResourceClaimTemplate
}

func (s claimSource) Claim(ns, name string) *resourceapi.ResourceClaim { return s.claims[ns+"/"+name] }
func (s claimSource) Template(ns, name string) *resourceapi.ResourceClaimTemplate {
	return s.templates[ns+"/"+name]
}

func exactly(class string, count int64, exprs ...string) resourceapi.DeviceRequest {
	r := resourceapi.DeviceRequest{Name: "r", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class, Count: count,
		AllocationMode: resourceapi.DeviceAllocationModeExactCount}}
	for _, e := range exprs {
		r.Exactly.Selectors = append(r.Exactly.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: e}})
	}
	return r
}

func claimSpec(reqs ...resourceapi.DeviceRequest) resourceapi.ResourceClaimSpec {
	return resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: reqs}}
}

func withClaim(entry string, claim, template *string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: entry, ResourceClaimName: claim, ResourceClaimTemplateName: template})
	}
}

func TestPodClaims(t *testing.T) {
	c := classes(t, "1g.10gb", "3g.40gb")
	const prof3g = `device.attributes["gpu.migflex.io"].profile == "3g.40gb"`
	mig3g := corev1.ResourceName("nvidia.com/mig-3g.40gb")
	src := claimSource{claims: map[string]*resourceapi.ResourceClaim{}, templates: map[string]*resourceapi.ResourceClaimTemplate{}}
	addClaim := func(name string, spec resourceapi.ResourceClaimSpec) {
		src.claims["default/"+name] = &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: spec}
	}
	addTemplate := func(name string, spec resourceapi.ResourceClaimSpec) {
		src.templates["default/"+name] = &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: resourceapi.ResourceClaimTemplateSpec{Spec: spec}}
	}
	addClaim("by-cel", claimSpec(exactly(dra.ClassMIG, 1, prof3g)))
	addClaim("per-profile", claimSpec(exactly(dra.ProfileClass("1g.10gb"), 2)))
	addClaim("general", claimSpec(exactly(dra.ClassAll, 1, `device.attributes['gpu.migflex.io'].type == 'mig' && device.attributes['gpu.migflex.io'].profile == '3g.40gb'`)))
	addClaim("whole", claimSpec(exactly(dra.ClassGPU, 0)))
	addClaim("nvidia", claimSpec(exactly("gpu.nvidia.com", 1)))
	addClaim("memory", claimSpec(exactly(dra.ClassMIG, 1, `device.capacity["gpu.migflex.io"].memory.compareTo(quantity("40Gi")) >= 0`)))
	addClaim("int-profile", claimSpec(exactly(dra.ClassMIG, 1, `device.attributes['gpu.migflex.io'].profile == 3`)))
	addClaim("no-such-attribute", claimSpec(exactly(dra.ClassMIG, 1, prof3g, `device.attributes['gpu.migflex.io'].memory == "40Gi"`)))
	addClaim("compile-error", claimSpec(exactly(dra.ClassMIG, 1, `device.driver == 3`)))
	addClaim("two-profiles", claimSpec(exactly(dra.ClassMIG, 1, prof3g, `device.attributes["gpu.migflex.io"].profile == "1g.10gb"`)))
	addClaim("any-mig", claimSpec(exactly(dra.ClassMIG, 1)))
	addClaim("contradicts", claimSpec(exactly(dra.ProfileClass("1g.10gb"), 1, prof3g)))
	all := exactly(dra.ClassMIG, 0, prof3g)
	all.Exactly.AllocationMode = resourceapi.DeviceAllocationModeAll
	addClaim("all", claimSpec(all))
	addClaim("first-available", claimSpec(resourceapi.DeviceRequest{Name: "r", FirstAvailable: []resourceapi.DeviceSubRequest{{Name: "a", DeviceClassName: dra.ClassMIG}}}))
	addClaim("unread-class", claimSpec(exactly("big.migflex.io", 1)))
	addClaim("two-requests", claimSpec(exactly(dra.ClassMIG, 1, prof3g), func() resourceapi.DeviceRequest {
		r := exactly(dra.ProfileClass("1g.10gb"), 1)
		r.Name = "small"
		return r
	}()))
	addClaim("allocated", claimSpec(exactly(dra.ClassMIG, 1, prof3g)))
	src.claims["default/allocated"].Status.Allocation = allocatedIn("n2", "n1")
	addTemplate("tmpl", claimSpec(exactly(dra.ClassMIG, 1, prof3g)))
	addClaim("pod-gpu-abc", claimSpec(exactly(dra.ClassMIG, 1, prof3g)))
	src.claims["default/pod-gpu-abc"].Status.Allocation = allocatedIn("n1")
	addClaim("nvidia-allocated", claimSpec(exactly("gpu.nvidia.com", 1)))
	src.claims["default/nvidia-allocated"].Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
		Results: []resourceapi.DeviceRequestAllocationResult{{Request: "r", Driver: "gpu.nvidia.com", Pool: "n3", Device: "gpu-0"}}}}

	tests := []struct {
		name string
		pod  *corev1.Pod
		want ClaimDemand
	}{
		{"no claims", newPod(), ClaimDemand{}},
		{"profile by CEL on the MIG class", newPod(withClaim("gpu", ptr.To("by-cel"), nil)), ClaimDemand{Devices: alloc{mig3g: 1}}},
		{"the per-profile class", newPod(withClaim("gpu", ptr.To("per-profile"), nil)), ClaimDemand{Devices: alloc{mig1g10: 2}}},
		{"the general class, as the docs write it", newPod(withClaim("gpu", ptr.To("general"), nil)), ClaimDemand{Devices: alloc{mig3g: 1}}},
		{"whole GPU class, count defaulted", newPod(withClaim("gpu", ptr.To("whole"), nil)), ClaimDemand{Devices: alloc{gpu: 1}}},
		{"another driver's class is not ours to read", newPod(withClaim("gpu", ptr.To("nvidia"), nil)), ClaimDemand{}},
		{"claims add up", newPod(withClaim("a", ptr.To("by-cel"), nil), withClaim("b", ptr.To("two-requests"), nil)),
			ClaimDemand{Devices: alloc{mig3g: 2, mig1g10: 1}}},
		{"an allocated claim asks for nothing more, and says where", newPod(withClaim("gpu", ptr.To("allocated"), nil)), ClaimDemand{AllocatedIn: []string{"n1", "n2"}}},
		{"another driver's allocation is not where ours are", newPod(withClaim("gpu", ptr.To("nvidia-allocated"), nil)), ClaimDemand{}},
		{"pools counted once", newPod(withClaim("a", ptr.To("allocated"), nil), withClaim("b", ptr.To("by-cel"), nil), func(p *corev1.Pod) {
			p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: "c", ResourceClaimTemplateName: ptr.To("tmpl")})
			p.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "c", ResourceClaimName: ptr.To("pod-gpu-abc")}}
		}), ClaimDemand{Devices: alloc{mig3g: 1}, AllocatedIn: []string{"n1", "n2"}}},
		{"from a template", newPod(withClaim("gpu", nil, ptr.To("tmpl"))), ClaimDemand{Devices: alloc{mig3g: 1}}},
		{"from a template, its claim allocated", newPod(withClaim("gpu", nil, ptr.To("tmpl")), func(p *corev1.Pod) {
			p.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To("pod-gpu-abc")}}
		}), ClaimDemand{AllocatedIn: []string{"n1"}}},
		{"unknown CEL", newPod(withClaim("gpu", ptr.To("memory"), nil)),
			ClaimDemand{Unknown: []string{"claim gpu request r: selector `device.capacity[\"gpu.migflex.io\"].memory.compareTo(quantity(\"40Gi\")) >= 0` is not of the forms migflex reads"}}},
		{"issue 35: a profile compared with an int", newPod(withClaim("gpu", ptr.To("int-profile"), nil)),
			ClaimDemand{Unknown: []string{"claim gpu request r: `device.attributes['gpu.migflex.io'].profile == 3`: profile == 3 is false on every device: profile is a string, 3 an int, and CEL finds values of two types unequal"}}},
		{"an attribute the driver does not publish", newPod(withClaim("gpu", ptr.To("no-such-attribute"), nil)),
			ClaimDemand{Unknown: []string{"claim gpu request r: `device.attributes['gpu.migflex.io'].memory == \"40Gi\"`: device.attributes[\"gpu.migflex.io\"].memory fails on every device: gpu.migflex.io publishes no attribute memory (it has type, uuid, parentUUID, profile, productName; memory and engines are capacities)"}}},
		{"a compile error", newPod(withClaim("gpu", ptr.To("compile-error"), nil)),
			ClaimDemand{Unknown: []string{"claim gpu request r: CEL compile error in `device.driver == 3`: 1:15: found no matching overload for '_==_' applied to '(string, int)'"}}},
		{"two profiles", newPod(withClaim("gpu", ptr.To("two-profiles"), nil)),
			ClaimDemand{Unknown: []string{"claim gpu request r: its selectors contradict each other: no device matches"}}},
		{"any MIG device", newPod(withClaim("gpu", ptr.To("any-mig"), nil)),
			ClaimDemand{Unknown: []string{"claim gpu request r: class mig.migflex.io selects devices of several profiles; the planner does not choose one"}}},
		{"contradicts its class", newPod(withClaim("gpu", ptr.To("contradicts"), nil)),
			ClaimDemand{Unknown: []string{"claim gpu request r: its selectors contradict class mig-1g.10gb.migflex.io: no device matches"}}},
		{"allocationMode All", newPod(withClaim("gpu", ptr.To("all"), nil)),
			ClaimDemand{Unknown: []string{"claim gpu request r: allocationMode All is not read"}}},
		{"firstAvailable", newPod(withClaim("gpu", ptr.To("first-available"), nil)),
			ClaimDemand{Unknown: []string{"claim gpu request r: firstAvailable is not read yet"}}},
		{"a class of ours it cannot read is not counted, and said so", newPod(withClaim("gpu", ptr.To("unread-class"), nil)),
			ClaimDemand{Unknown: []string{"claim gpu request r: class big.migflex.io is not read: selector `device.driver == \"gpu.migflex.io\" && device.capacity[\"gpu.migflex.io\"].memory.isGreaterThan(quantity(\"40Gi\"))` is not of the forms migflex reads"}}},
		{"missing claim and template", newPod(withClaim("a", ptr.To("gone"), nil), withClaim("b", nil, ptr.To("gone"))),
			ClaimDemand{Unknown: []string{"claim a: ResourceClaim gone not found", "claim b: ResourceClaimTemplate gone not found"}}},
		{"the known part counts beside an unknown one", newPod(withClaim("a", ptr.To("by-cel"), nil), withClaim("b", ptr.To("memory"), nil)),
			ClaimDemand{Devices: alloc{mig3g: 1}, Unknown: []string{"claim b request r: selector `device.capacity[\"gpu.migflex.io\"].memory.compareTo(quantity(\"40Gi\")) >= 0` is not of the forms migflex reads"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, c.PodClaims(tt.pod, src)); diff != "" {
				t.Errorf("(-want,+got):\n%s", diff)
			}
		})
	}
	var none *DRAClasses
	if got := none.PodClaims(newPod(withClaim("gpu", ptr.To("by-cel"), nil)), src); got.Devices != nil {
		t.Errorf("no classes: %+v", got)
	}
}

// allocatedIn is an allocation of our driver with one device in each pool.
func allocatedIn(pools ...string) *resourceapi.AllocationResult {
	a := &resourceapi.AllocationResult{}
	for i, p := range pools {
		a.Devices.Results = append(a.Devices.Results, resourceapi.DeviceRequestAllocationResult{Request: "r", Driver: DRADriver, Pool: p, Device: fmt.Sprintf("gpu-%d", i)})
	}
	return a
}

// Where the view lets a pod land: DRA nodes only for claims, no DRA node
// for an extended resource no class serves, anywhere otherwise.
func TestAsScheduled(t *testing.T) {
	c := classes(t, "1g.10gb")
	mig3g := corev1.ResourceName("nvidia.com/mig-3g.40gb")
	draNode := node("d", nil, labeled(nodeinfo.LabelServing, nodeinfo.ServingDRA), labeled("pool", "a"))
	dpNode := node("p", nil, labeled(nodeinfo.LabelServing, nodeinfo.ServingDevicePlugin), labeled("pool", "a"))
	oldNode := node("o", nil, labeled("pool", "a"))
	snap := snapshotOf(draNode, dpNode, oldNode)
	eligible := func(p *corev1.Pod) []string { return eligibleNames(snap, NewFilter(p, snap)) }
	served := newPod(withContainer("c", both(string(mig1g10), "1")))
	if got := c.AsScheduled(served, ClaimDemand{}); got != served {
		t.Error("a pod whose resources our classes serve is copied; want it as is")
	}
	tests := []struct {
		name    string
		pod     *corev1.Pod
		d       ClaimDemand
		devices alloc
		nodes   []string
	}{
		{"served extended resource: anywhere", served, ClaimDemand{}, alloc{mig1g10: 1}, []string{"d", "o", "p"}},
		{"unserved extended resource: no DRA node", newPod(withContainer("c", both(string(mig2g20), "1"))), ClaimDemand{}, alloc{mig2g20: 1}, []string{"o", "p"}},
		{"claims: DRA nodes only, counted as the resource", newPod(withContainer("c", both("cpu", "1"))), ClaimDemand{Devices: alloc{mig3g: 1}},
			alloc{mig3g: 1}, []string{"d"}},
		{"claims add to the pod's own requests", served, ClaimDemand{Devices: alloc{mig1g10: 2}}, alloc{mig1g10: 3}, []string{"d"}},
		{"claims join each of the pod's affinity terms", newPod(withContainer("c", both("cpu", "1")), withRequiredAffinity(
			corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "pool", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}},
			corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "pool", Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}}}},
		)), ClaimDemand{Devices: alloc{gpu: 1}}, alloc{gpu: 1}, []string{"d"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.pod.DeepCopy()
			got := c.AsScheduled(tt.pod, tt.d)
			if diff := cmp.Diff(before, tt.pod); diff != "" {
				t.Errorf("the pod changed (-before,+after):\n%s", diff)
			}
			if diff := cmp.Diff(tt.devices, Devices(got)); diff != "" {
				t.Errorf("devices (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.nodes, eligible(got)); diff != "" {
				t.Errorf("eligible nodes (-want,+got):\n%s", diff)
			}
		})
	}
}
