package schedview

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/migflex/migflex/internal/domain/dracel"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/domain/resourcename"
)

// The names of migflex's DRA driver that the scheduling view reads. They
// are internal/domain/dra's (a test holds them equal); that package is not
// imported here because it brings the kubelet plugin's dependencies into
// the webhook and the planner.
const (
	DRADriver      = "gpu.migflex.io"
	draAttrType    = "type"
	draAttrProfile = "profile"
	draTypeMIG     = "mig"
	draTypeGPU     = "gpu"
)

// Selection is what a CEL selector of the forms migflex documents picks
// among the driver's devices: the driver, a device type, a profile.
// The zero Selection picks every device of every driver.
type Selection struct {
	// Driver: the selector requires device.driver == DRADriver.
	Driver bool
	// Type is "mig", "gpu" or "" (any).
	Type string
	// Profile is a MIG profile ("3g.40gb") or "" (any).
	Profile string
}

var (
	// driverTerm and attrTerm are the only conjuncts understood, quoted
	// either way: device.driver == "gpu.migflex.io" and
	// device.attributes["gpu.migflex.io"].profile == "3g.40gb".
	driverTerm = regexp.MustCompile(`^device\.driver\s*==\s*(?:"([^"\\]*)"|'([^'\\]*)')$`)
	attrTerm   = regexp.MustCompile(`^device\.attributes\[\s*(?:"([^"\\]*)"|'([^'\\]*)')\s*\]\.([A-Za-z][A-Za-z0-9]*)\s*==\s*(?:"([^"\\]*)"|'([^'\\]*)')$`)
)

// ParseSelector reads a CEL expression of the documented forms: a
// conjunction (&&) of device.driver == "gpu.migflex.io",
// device.attributes["gpu.migflex.io"].type == "mig" (or "gpu") and
// device.attributes["gpu.migflex.io"].profile == "<profile>". Anything
// else (another operator, another attribute or domain, a capacity, a
// function) is not understood: ok is false, and the caller counts the
// request as unknown rather than guess what it selects.
func ParseSelector(expr string) (Selection, bool) {
	var s Selection
	expr = strings.TrimSpace(expr)
	if expr == "" || strings.ContainsAny(expr, "|!()?:") {
		return Selection{}, false
	}
	for term := range strings.SplitSeq(expr, "&&") {
		term = strings.TrimSpace(term)
		if m := driverTerm.FindStringSubmatch(term); m != nil {
			if m[1]+m[2] != DRADriver {
				return Selection{}, false
			}
			s.Driver = true
			continue
		}
		m := attrTerm.FindStringSubmatch(term)
		if m == nil || m[1]+m[2] != DRADriver {
			return Selection{}, false
		}
		var next Selection
		switch v := m[4] + m[5]; m[3] {
		case draAttrType:
			if v != draTypeMIG && v != draTypeGPU {
				return Selection{}, false
			}
			next.Type = v
		case draAttrProfile:
			if v == "" {
				return Selection{}, false
			}
			next.Profile = v
		default:
			return Selection{}, false
		}
		var ok bool
		if s, ok = s.And(next); !ok {
			// Contradictory (two profiles): it selects nothing, which
			// is no demand the planner can serve either.
			return Selection{}, false
		}
	}
	return s, true
}

// And is both selections at once; ok is false when no device can meet
// both (two types or two profiles, or a whole GPU with a profile).
func (s Selection) And(o Selection) (Selection, bool) {
	out := Selection{Driver: s.Driver || o.Driver, Type: s.Type, Profile: s.Profile}
	for _, p := range [][2]*string{{&out.Type, &o.Type}, {&out.Profile, &o.Profile}} {
		switch {
		case *p[1] == "":
		case *p[0] == "":
			*p[0] = *p[1]
		case *p[0] != *p[1]:
			return Selection{}, false
		}
	}
	if out.Profile != "" && out.Type == draTypeGPU {
		return Selection{}, false
	}
	return out, true
}

// Resource is the extended resource a device of the selection is on the
// device-plugin path: nvidia.com/mig-<profile> for a profile,
// nvidia.com/gpu for whole GPUs. ok is false for a selection that picks
// devices of several profiles (any MIG device): the planner would not
// know which profile to make.
func (s Selection) Resource() (corev1.ResourceName, bool) {
	switch {
	case s.Profile != "":
		r := resourcename.MIG(s.Profile)
		_, ok := resourcename.ParseMIG(r)
		return r, ok
	case s.Type == draTypeGPU:
		return resourcename.GPU, true
	}
	return "", false
}

// matches tells whether a device the driver published is selected.
func (s Selection) matches(d *resourceapi.Device) bool {
	return (s.Type == "" || attribute(d, draAttrType) == s.Type) && (s.Profile == "" || attribute(d, draAttrProfile) == s.Profile)
}

// selectionOf is the selection of a list of selectors, all of which must
// hold; ok is false when one is not understood or they contradict.
func selectionOf(sels []resourceapi.DeviceSelector) (Selection, bool) {
	var s Selection
	for _, sel := range sels {
		if sel.CEL == nil {
			return Selection{}, false
		}
		next, ok := ParseSelector(sel.CEL.Expression)
		if !ok {
			return Selection{}, false
		}
		if s, ok = s.And(next); !ok {
			return Selection{}, false
		}
	}
	return s, true
}

// DRAClasses are the DeviceClasses of migflex's driver, as the scheduling
// view reads them. A class is the driver's when its selectors are of the
// documented forms and require device.driver == "gpu.migflex.io"; other
// classes (NVIDIA's, or ours with CEL this view does not read) are left
// to the scheduler alone.
type DRAClasses struct {
	byName map[string]Selection
	// served are the GPU extended resources a class of ours names in
	// extendedResourceName, with what the class selects.
	served map[corev1.ResourceName]Selection
	// Unread names the classes that select our driver's devices by name
	// (the driver is mentioned) in a form this view does not read.
	Unread []string
	// unreadWhy says, by class of Unread, why it is not read.
	unreadWhy map[string]string
	// checker names what is wrong with a selector not read, as the
	// scheduler's CEL library finds it.
	checker *dracel.Checker
}

// checkerEntries bounds the compiled selectors a DRAClasses keeps: only
// selectors this view does not read are compiled, to say why.
const checkerEntries = 64

// NewDRAClasses reads the DeviceClasses.
func NewDRAClasses(classes []*resourceapi.DeviceClass) *DRAClasses {
	c := &DRAClasses{byName: map[string]Selection{}, served: map[corev1.ResourceName]Selection{},
		unreadWhy: map[string]string{}, checker: dracel.NewChecker(checkerEntries)}
	for _, dc := range classes {
		s, ok := selectionOf(dc.Spec.Selectors)
		if !ok || !s.Driver {
			if !ok && classMentionsDriver(dc) {
				c.Unread = append(c.Unread, dc.Name)
				c.unreadWhy[dc.Name] = c.whyUnread(dc.Spec.Selectors)
			}
			continue
		}
		c.byName[dc.Name] = s
		if r := dc.Spec.ExtendedResourceName; r != nil && resourcename.IsGPU(corev1.ResourceName(*r)) {
			c.served[corev1.ResourceName(*r)] = s
		}
	}
	slices.Sort(c.Unread)
	return c
}

// UnreadWhy says why a class of Unread is not read; "" for another.
func (c *DRAClasses) UnreadWhy(class string) string {
	if c == nil {
		return ""
	}
	return c.unreadWhy[class]
}

// whyUnread says why selectors that selectionOf does not read are not:
// what the scheduler's CEL library finds wrong with the first selector
// not of the documented forms, or that it is not of them, or that they
// contradict each other.
func (c *DRAClasses) whyUnread(sels []resourceapi.DeviceSelector) string {
	for _, sel := range sels {
		if sel.CEL == nil {
			return "a selector that is not CEL"
		}
		if _, ok := ParseSelector(sel.CEL.Expression); ok {
			continue
		}
		var found []string
		for _, f := range c.checker.Check(sel.CEL.Expression) {
			found = append(found, f.String())
		}
		if len(found) > 0 {
			return strings.Join(found, "; ")
		}
		return "selector `" + dracel.Quote(sel.CEL.Expression) + "` is not of the forms migflex reads"
	}
	return "its selectors contradict each other: no device matches"
}

func classMentionsDriver(dc *resourceapi.DeviceClass) bool {
	for _, sel := range dc.Spec.Selectors {
		if sel.CEL != nil && strings.Contains(sel.CEL.Expression, DRADriver) {
			return true
		}
	}
	return false
}

// Serves tells whether a class of ours serves the extended resource r
// (extendedResourceName), so that a pod asking for r may be served by
// DRA nodes.
func (c *DRAClasses) Serves(r corev1.ResourceName) bool {
	if c == nil {
		return false
	}
	_, ok := c.served[r]
	return ok
}

// IsDRANode tells whether a Node's agent serves its GPUs through DRA.
func IsDRANode(labels map[string]string) bool {
	return labels[nodeinfo.LabelServing] == nodeinfo.ServingDRA
}

// DRASupply is a DRA node's GPU devices as the scheduler sees them for
// extended resources: for each resource a class of ours serves, the
// devices of the node's pool that the class selects and that are
// allocated to ResourceClaims (Allocated), and Allocatable that plus what
// the pool can still serve of the class (Pool.Free), so that free is
// Allocatable less Allocated as on any node. In static mode that is every
// device the class selects; in dynamic mode the placements overlap, and
// free is what the GPUs' counters still let be allocated. The pool is the
// node's: our driver's slices with pool name node, at the pool's newest
// generation (older slices are being replaced). A device with a
// NoSchedule or NoExecute taint (unhealthy) is no supply, as an unhealthy
// device is none on the device-plugin path. A node with no slice has no
// supply.
func DRASupply(node string, slices []*resourceapi.ResourceSlice, claims []*resourceapi.ResourceClaim, classes *DRAClasses) (allocatable, allocated map[corev1.ResourceName]int64) {
	if classes == nil {
		return nil, nil
	}
	return classes.Supply(NewPool(node, slices, claims))
}

// Supply is DRASupply of a pool read already.
func (c *DRAClasses) Supply(p *Pool) (allocatable, allocated map[corev1.ResourceName]int64) {
	if c == nil {
		return nil, nil
	}
	for r, s := range c.served {
		used, free := p.Allocated(s), p.Free(s)
		if used+free == 0 {
			continue
		}
		if allocatable == nil {
			allocatable, allocated = map[corev1.ResourceName]int64{}, map[corev1.ResourceName]int64{}
		}
		allocatable[r] = used + free
		if used > 0 {
			allocated[r] = used
		}
	}
	return allocatable, allocated
}

// PoolDevices are the schedulable devices of our driver's pool for node,
// by name, from the slices of the pool's newest generation: a device with
// a NoSchedule or NoExecute taint (unhealthy) is left out.
func PoolDevices(node string, sl []*resourceapi.ResourceSlice) map[string]*resourceapi.Device {
	var gen int64 = -1
	for _, s := range sl {
		if s.Spec.Driver == DRADriver && s.Spec.Pool.Name == node && s.Spec.Pool.Generation > gen {
			gen = s.Spec.Pool.Generation
		}
	}
	out := map[string]*resourceapi.Device{}
	for _, s := range sl {
		if s.Spec.Driver != DRADriver || s.Spec.Pool.Name != node || s.Spec.Pool.Generation != gen {
			continue
		}
		for i := range s.Spec.Devices {
			d := &s.Spec.Devices[i]
			if !slices.ContainsFunc(d.Taints, func(t resourceapi.DeviceTaint) bool {
				return t.Effect == resourceapi.DeviceTaintEffectNoSchedule || t.Effect == resourceapi.DeviceTaintEffectNoExecute
			}) {
				out[d.Name] = d
			}
		}
	}
	return out
}

// ClaimSource finds the ResourceClaims and templates a pod names; nil
// when not found.
type ClaimSource interface {
	Claim(namespace, name string) *resourceapi.ResourceClaim
	Template(namespace, name string) *resourceapi.ResourceClaimTemplate
}

// ClaimDemand is what a pod asks of migflex's driver through its
// ResourceClaims.
type ClaimDemand struct {
	// Devices are the devices its claims ask for, by the extended
	// resource the same device is on the device-plugin path.
	Devices map[corev1.ResourceName]int64
	// Unknown says, one line each, what of its claims on our classes this
	// view cannot read (a CEL form it does not know, firstAvailable, All,
	// a claim or template not found): the planner leaves that part alone.
	Unknown []string
	// AllocatedIn are the pools (node names) of our driver in which the
	// pod's allocated claims hold devices, sorted: where the scheduler
	// has put it, before the pod is bound and before the node's agent
	// reports the devices held.
	AllocatedIn []string
}

// PodClaims reads the pod's ResourceClaims: each request of a class of
// ours whose selection names one profile (or whole GPUs) is demand for
// that many devices. A claim already allocated asks for nothing more. A
// claim from a template is read from the template, so a pod whose claim
// the controller has not created yet is read too.
func (c *DRAClasses) PodClaims(pod *corev1.Pod, src ClaimSource) ClaimDemand {
	var out ClaimDemand
	if c == nil || len(pod.Spec.ResourceClaims) == 0 {
		return out
	}
	unknown := func(format string, args ...any) { out.Unknown = append(out.Unknown, fmt.Sprintf(format, args...)) }
	for _, pc := range pod.Spec.ResourceClaims {
		var spec *resourceapi.ResourceClaimSpec
		switch {
		case pc.ResourceClaimName != nil:
			cl := src.Claim(pod.Namespace, *pc.ResourceClaimName)
			if cl == nil {
				unknown("claim %s: ResourceClaim %s not found", pc.Name, *pc.ResourceClaimName)
				continue
			}
			if cl.Status.Allocation != nil {
				out.allocated(cl.Status.Allocation)
				continue
			}
			spec = &cl.Spec
		case pc.ResourceClaimTemplateName != nil:
			if name := generatedClaim(pod, pc.Name); name != "" {
				if cl := src.Claim(pod.Namespace, name); cl != nil && cl.Status.Allocation != nil {
					out.allocated(cl.Status.Allocation)
					continue
				}
			}
			t := src.Template(pod.Namespace, *pc.ResourceClaimTemplateName)
			if t == nil {
				unknown("claim %s: ResourceClaimTemplate %s not found", pc.Name, *pc.ResourceClaimTemplateName)
				continue
			}
			spec = &t.Spec.Spec
		default:
			continue
		}
		c.addRequests(pc.Name, spec, &out, unknown)
	}
	return out
}

// allocated notes the pools of our driver an allocation holds devices in.
func (d *ClaimDemand) allocated(a *resourceapi.AllocationResult) {
	for _, r := range a.Devices.Results {
		if r.Driver != DRADriver {
			continue
		}
		if i, found := slices.BinarySearch(d.AllocatedIn, r.Pool); !found {
			d.AllocatedIn = slices.Insert(d.AllocatedIn, i, r.Pool)
		}
	}
}

// generatedClaim is the name of the claim made for the pod's claim entry
// from its template, once the controller has made it.
func generatedClaim(pod *corev1.Pod, entry string) string {
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.Name == entry && s.ResourceClaimName != nil {
			return *s.ResourceClaimName
		}
	}
	return ""
}

func (c *DRAClasses) addRequests(entry string, spec *resourceapi.ResourceClaimSpec, out *ClaimDemand, unknown func(string, ...any)) {
	for _, req := range spec.Devices.Requests {
		where := fmt.Sprintf("claim %s request %s", entry, req.Name)
		if len(req.FirstAvailable) > 0 {
			if slices.ContainsFunc(req.FirstAvailable, func(s resourceapi.DeviceSubRequest) bool {
				return c.ours(s.DeviceClassName) || c.unreadWhy[s.DeviceClassName] != ""
			}) {
				unknown("%s: firstAvailable is not read yet", where)
			}
			continue
		}
		ex := req.Exactly
		if ex == nil {
			continue
		}
		if why := c.unreadWhy[ex.DeviceClassName]; why != "" {
			unknown("%s: class %s is not read: %s", where, ex.DeviceClassName, why)
			continue
		}
		if !c.ours(ex.DeviceClassName) {
			continue
		}
		class := c.byName[ex.DeviceClassName]
		sel, ok := selectionOf(ex.Selectors)
		if !ok {
			unknown("%s: %s", where, c.whyUnread(ex.Selectors))
			continue
		}
		if sel, ok = class.And(sel); !ok {
			unknown("%s: its selectors contradict class %s: no device matches", where, ex.DeviceClassName)
			continue
		}
		switch {
		case ex.AllocationMode == resourceapi.DeviceAllocationModeAll:
			unknown("%s: allocationMode All is not read", where)
			continue
		case ex.AdminAccess != nil && *ex.AdminAccess:
			unknown("%s: adminAccess asks for no device", where)
			continue
		case ex.Capacity != nil:
			unknown("%s: capacity requests are not read", where)
			continue
		}
		r, ok := sel.Resource()
		if !ok {
			unknown("%s: class %s selects devices of several profiles; the planner does not choose one", where, ex.DeviceClassName)
			continue
		}
		if out.Devices == nil {
			out.Devices = map[corev1.ResourceName]int64{}
		}
		out.Devices[r] += max(ex.Count, 1)
	}
}

func (c *DRAClasses) ours(class string) bool {
	_, ok := c.byName[class]
	return ok
}

// AsScheduled is the pod as the scheduling view places it: what its
// claims ask of our driver (d) added to its first container's requests as
// the extended resources of the same devices, and a required node
// affinity on the serving label where DRA decides where it may go: only
// DRA nodes when it has such claims, no DRA node when it asks for an
// extended resource that no class of ours serves (those nodes do not
// offer it). The pod is returned as is when neither applies, and
// otherwise copied.
func (c *DRAClasses) AsScheduled(pod *corev1.Pod, d ClaimDemand) *corev1.Pod {
	var op corev1.NodeSelectorOperator
	switch {
	case len(d.Devices) > 0:
		op = corev1.NodeSelectorOpIn
	case !c.servesAll(Devices(pod)):
		op = corev1.NodeSelectorOpNotIn
	default:
		return pod
	}
	out := pod.DeepCopy()
	if len(d.Devices) > 0 && len(out.Spec.Containers) > 0 {
		r := &out.Spec.Containers[0].Resources
		for _, l := range []*corev1.ResourceList{&r.Requests, &r.Limits} {
			if *l == nil {
				*l = corev1.ResourceList{}
			}
			for _, name := range slices.Sorted(maps.Keys(d.Devices)) {
				q := (*l)[name]
				q.Add(*resource.NewQuantity(d.Devices[name], resource.DecimalSI))
				(*l)[name] = q
			}
		}
	}
	req := corev1.NodeSelectorRequirement{Key: nodeinfo.LabelServing, Operator: op, Values: []string{nodeinfo.ServingDRA}}
	if out.Spec.Affinity == nil {
		out.Spec.Affinity = &corev1.Affinity{}
	}
	if out.Spec.Affinity.NodeAffinity == nil {
		out.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := out.Spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{}
	}
	terms := &na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(*terms) == 0 {
		*terms = []corev1.NodeSelectorTerm{{}}
	}
	// Terms are ORed: the requirement joins each.
	for i := range *terms {
		(*terms)[i].MatchExpressions = append((*terms)[i].MatchExpressions, req)
	}
	return out
}

func (c *DRAClasses) servesAll(devs map[corev1.ResourceName]int64) bool {
	for r := range devs {
		if !c.Serves(r) {
			return false
		}
	}
	return true
}
