package migflexctl

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/migflex/migflex/internal/domain/dracel"
	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/planner"
)

// Bounds on what explain reads of a pod's claims and how much CEL it
// evaluates: a pod, a claim or a cluster may hold more than a person
// reads, and a hostile one more than a command should evaluate.
const (
	// maxClaimsShown are the claims of a pod shown.
	maxClaimsShown = 16
	// maxSelectorsShown are the selectors of a request shown.
	maxSelectorsShown = 4
	// maxEvaluations bounds the device evaluations of one explain: each
	// request's selectors on each device of the driver.
	maxEvaluations = 1 << 16
	// checkerEntries keeps every selector of one request compiled while
	// it is evaluated on each device: the API allows 32 selectors in a
	// class and 32 in a request.
	checkerEntries = 2 * resourceapi.DeviceSelectorsMaxSize
)

// DRAObjects are the cluster's DRA objects explain and plan read: the
// DeviceClasses, migflex's driver's ResourceSlices, and the
// ResourceClaims and templates of every namespace.
type DRAObjects struct {
	Classes   []resourceapi.DeviceClass
	Slices    []resourceapi.ResourceSlice
	Claims    []resourceapi.ResourceClaim
	Templates []resourceapi.ResourceClaimTemplate
}

// readDRA lists what DRAObjects holds: every list when full, else the
// DeviceClasses only. A cluster that serves no resource.k8s.io/v1 has
// none (not an error).
func readDRA(ctx context.Context, client kubernetes.Interface, full bool) (*DRAObjects, error) {
	d := &DRAObjects{}
	api := client.ResourceV1()
	classes, err := api.DeviceClasses().List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return d, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing DeviceClasses: %w", err)
	}
	d.Classes = classes.Items
	if !full {
		return d, nil
	}
	if err := listSupply(ctx, client, d); err != nil {
		return nil, err
	}
	templates, err := api.ResourceClaimTemplates("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing ResourceClaimTemplates: %w", err)
	}
	d.Templates = templates.Items
	return d, nil
}

// readSupply lists what status reads of DRA nodes' supply: our driver's
// ResourceSlices and the ResourceClaims, only when a node serves through
// DRA. A cluster without resource.k8s.io/v1 has none.
func readSupply(ctx context.Context, client kubernetes.Interface, nodes []corev1.Node) (*DRAObjects, error) {
	if !slices.ContainsFunc(nodes, func(n corev1.Node) bool { return schedview.IsDRANode(n.Labels) }) {
		return nil, nil
	}
	d := &DRAObjects{}
	if err := listSupply(ctx, client, d); err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	return d, nil
}

// listSupply fills d with our driver's ResourceSlices and every
// ResourceClaim: what a DRA node's supply is read from.
func listSupply(ctx context.Context, client kubernetes.Interface, d *DRAObjects) error {
	api := client.ResourceV1()
	sl, err := api.ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.driver", dracel.Driver).String()})
	if err != nil {
		return fmt.Errorf("listing ResourceSlices: %w", err)
	}
	d.Slices = sl.Items
	claims, err := api.ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing ResourceClaims: %w", err)
	}
	d.Claims = claims.Items
	return nil
}

// hasClaims tells whether a pod names ResourceClaims, or the scheduler
// made one for its extended resources (DRAExtendedResource).
func hasClaims(p *corev1.Pod) bool {
	return len(p.Spec.ResourceClaims) > 0 || p.Status.ExtendedResourceClaimStatus != nil
}

// draView is DRAObjects as the planner's round reads them
// (planner.DRAView).
type draView struct {
	classes   *schedview.DRAClasses
	claims    map[string]*resourceapi.ResourceClaim
	templates map[string]*resourceapi.ResourceClaimTemplate
	// slices and allocated are what Pool reads.
	slices    []*resourceapi.ResourceSlice
	allocated []*resourceapi.ResourceClaim
}

func (d *DRAObjects) view() *draView {
	v := &draView{claims: map[string]*resourceapi.ResourceClaim{}, templates: map[string]*resourceapi.ResourceClaimTemplate{}}
	classes := make([]*resourceapi.DeviceClass, len(d.Classes))
	for i := range d.Classes {
		classes[i] = &d.Classes[i]
	}
	v.classes = schedview.NewDRAClasses(classes)
	for i := range d.Claims {
		v.claims[d.Claims[i].Namespace+"/"+d.Claims[i].Name] = &d.Claims[i]
		v.allocated = append(v.allocated, &d.Claims[i])
	}
	for i := range d.Slices {
		v.slices = append(v.slices, &d.Slices[i])
	}
	for i := range d.Templates {
		v.templates[d.Templates[i].Namespace+"/"+d.Templates[i].Name] = &d.Templates[i]
	}
	return v
}

func (v *draView) Classes() *schedview.DRAClasses { return v.classes }
func (v *draView) Claim(ns, name string) *resourceapi.ResourceClaim {
	return v.claims[ns+"/"+name]
}
func (v *draView) Template(ns, name string) *resourceapi.ResourceClaimTemplate {
	return v.templates[ns+"/"+name]
}

// Pool implements planner.PoolSource.
func (v *draView) Pool(node string) *schedview.Pool {
	return schedview.NewPool(node, v.slices, v.allocated)
}

var (
	_ planner.DRAView    = (*draView)(nil)
	_ planner.PoolSource = (*draView)(nil)
)

// ClaimView is one of a pod's ResourceClaims as explain shows it.
type ClaimView struct {
	// Name is the pod's name for it (spec.resourceClaims), or
	// "extended resources" for the claim the scheduler made for the
	// pod's extended resources backed by DRA.
	Name string `json:"name"`
	// Claim is the ResourceClaim; empty while the claim of a template is
	// not made yet.
	Claim string `json:"claim,omitempty"`
	// Template is the ResourceClaimTemplate it is made from.
	Template string `json:"template,omitempty"`
	// Problem says why it cannot be read (not found).
	Problem  string        `json:"problem,omitempty"`
	Requests []RequestView `json:"requests,omitempty"`
	// Allocated are the devices allocated to it.
	Allocated []AllocatedDevice `json:"allocated,omitempty"`
}

// RequestView is one request of a claim (a firstAvailable subrequest is
// "request/subrequest").
type RequestView struct {
	Name  string `json:"name"`
	Class string `json:"class"`
	// Selectors are the request's own CEL selectors, cut.
	Selectors []string `json:"selectors,omitempty"`
	// Mode is its allocationMode (ExactCount, All), Count its count.
	Mode  string `json:"allocationMode"`
	Count int64  `json:"count,omitempty"`
	// Devices is what the scheduler finds for it among the devices of
	// migflex's driver, while the claim is not allocated.
	Devices *DeviceMatch `json:"devices,omitempty"`
	// Why says why it is not allocated, as far as explain can tell.
	Why string `json:"why,omitempty"`
}

// evaluated is a pending request evaluated, and the names of the devices
// it matches by pool, for together.
type evaluated struct {
	RequestView
	matched map[string]map[string]bool
}

// DeviceMatch is a request's class and selectors evaluated, with the
// scheduler's CEL, on the devices migflex's driver publishes.
type DeviceMatch struct {
	// Published are the devices of the driver's pools (newest
	// generation, untainted), Matching those the class and the selectors
	// select, Free how many of them can still be allocated: those no
	// claim holds, and on a dynamic node (placements that overlap) the
	// most that the counters the claims leave allow together.
	Published int `json:"published"`
	Matching  int `json:"matching"`
	Free      int `json:"free"`
	// MostFree is the most free matching devices on one node, Node.
	MostFree int    `json:"mostFree"`
	Node     string `json:"node,omitempty"`
	// Error is the CEL error the scheduler stops at.
	Error *dracel.Finding `json:"error,omitempty"`
	// Partial: the evaluation stopped at explain's bound.
	Partial bool `json:"partial,omitempty"`
}

// AllocatedDevice is one device allocated to a claim.
type AllocatedDevice struct {
	Request string `json:"request"`
	Driver  string `json:"driver"`
	// Pool is the node for migflex's driver.
	Pool   string `json:"pool"`
	Device string `json:"device"`
}

// claimViews are the pod's claims as explain shows them, at most
// maxClaimsShown (more: the last view says how many are left out), and
// whether their pending requests fit together on one node (together).
func claimViews(ctx context.Context, pod *corev1.Pod, d *DRAObjects) ([]ClaimView, string) {
	if d == nil || !hasClaims(pod) {
		return nil, ""
	}
	e := newEvaluator(d)
	var out []ClaimView
	entries := pod.Spec.ResourceClaims
	for i, pc := range entries {
		if i == maxClaimsShown {
			out = append(out, ClaimView{Name: "...", Problem: fmt.Sprintf("%d more claims not shown", len(entries)-i)})
			break
		}
		v := ClaimView{Name: pc.Name}
		var spec *resourceapi.ResourceClaimSpec
		switch {
		case pc.ResourceClaimName != nil:
			v.Claim = *pc.ResourceClaimName
			cl := e.claims[pod.Namespace+"/"+v.Claim]
			if cl == nil {
				v.Problem = "ResourceClaim " + v.Claim + " not found"
				break
			}
			spec, v.Allocated = &cl.Spec, allocatedDevices(cl)
		case pc.ResourceClaimTemplateName != nil:
			v.Template = *pc.ResourceClaimTemplateName
			v.Claim = generatedClaimName(pod, pc.Name)
			if cl := e.claims[pod.Namespace+"/"+v.Claim]; cl != nil {
				spec, v.Allocated = &cl.Spec, allocatedDevices(cl)
				break
			}
			t := e.templates[pod.Namespace+"/"+v.Template]
			if t == nil {
				v.Problem = "ResourceClaimTemplate " + v.Template + " not found"
				break
			}
			spec = &t.Spec.Spec
			if v.Claim == "" {
				v.Problem = "its ResourceClaim is not made from the template yet"
			} else {
				v.Problem = "ResourceClaim " + v.Claim + " not found"
			}
		}
		if spec != nil {
			v.Requests = e.requests(ctx, spec, len(v.Allocated) == 0)
		}
		out = append(out, v)
	}
	if s := pod.Status.ExtendedResourceClaimStatus; s != nil {
		v := ClaimView{Name: "extended resources", Claim: s.ResourceClaimName}
		if cl := e.claims[pod.Namespace+"/"+s.ResourceClaimName]; cl != nil {
			v.Allocated = allocatedDevices(cl)
			v.Requests = e.requests(ctx, &cl.Spec, len(v.Allocated) == 0)
		} else {
			v.Problem = "ResourceClaim " + s.ResourceClaimName + " not found"
		}
		out = append(out, v)
	}
	return out, e.together(out)
}

// generatedClaimName is the claim the controller made for the pod's
// claim entry from its template, once made.
func generatedClaimName(pod *corev1.Pod, entry string) string {
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.Name == entry && s.ResourceClaimName != nil {
			return *s.ResourceClaimName
		}
	}
	return ""
}

func allocatedDevices(cl *resourceapi.ResourceClaim) []AllocatedDevice {
	if cl.Status.Allocation == nil {
		return nil
	}
	var out []AllocatedDevice
	for _, r := range cl.Status.Allocation.Devices.Results {
		out = append(out, AllocatedDevice{Request: r.Request, Driver: r.Driver, Pool: r.Pool, Device: r.Device})
	}
	return out
}

// evaluator evaluates requests on the devices migflex's driver
// publishes, within maxEvaluations.
type evaluator struct {
	*draView
	classes map[string]*resourceapi.DeviceClass
	// devices are the driver's schedulable devices, by pool and name.
	devices []dracel.Device
	pool    []string
	// pools are what each pool can still serve (static: the devices no
	// claim holds; dynamic: what the counters the claims leave allow).
	pools   map[string]*schedview.Pool
	checker *dracel.Checker
	budget  int
	// evaluated are the pending requests evaluated so far.
	evaluated []evaluated
}

func newEvaluator(d *DRAObjects) *evaluator {
	e := &evaluator{draView: d.view(), classes: map[string]*resourceapi.DeviceClass{}, pools: map[string]*schedview.Pool{},
		checker: dracel.NewChecker(checkerEntries), budget: maxEvaluations}
	for i := range d.Classes {
		e.classes[d.Classes[i].Name] = &d.Classes[i]
	}
	ptrs := make([]*resourceapi.ResourceSlice, 0, len(d.Slices))
	pools := map[string]bool{}
	for i := range d.Slices {
		if d.Slices[i].Spec.Driver == dracel.Driver {
			ptrs = append(ptrs, &d.Slices[i])
			pools[d.Slices[i].Spec.Pool.Name] = true
		}
	}
	claims := make([]*resourceapi.ResourceClaim, len(d.Claims))
	for i := range d.Claims {
		claims[i] = &d.Claims[i]
	}
	for _, pool := range slices.Sorted(maps.Keys(pools)) {
		e.pools[pool] = schedview.NewPool(pool, ptrs, claims)
		devs := schedview.PoolDevices(pool, ptrs)
		for _, name := range slices.Sorted(maps.Keys(devs)) {
			e.devices = append(e.devices, dracel.Device{Name: pool + "/" + name, Driver: dracel.Driver, Device: devs[name]})
			e.pool = append(e.pool, pool)
		}
	}
	return e
}

// requests are the claim's requests; pending: the claim is not
// allocated, so each is evaluated and said why it waits.
func (e *evaluator) requests(ctx context.Context, spec *resourceapi.ResourceClaimSpec, pending bool) []RequestView {
	var out []RequestView
	for _, req := range spec.Devices.Requests {
		if req.Exactly != nil {
			out = append(out, e.request(ctx, req.Name, req.Exactly.DeviceClassName, req.Exactly.Selectors, req.Exactly.AllocationMode, req.Exactly.Count, pending))
			continue
		}
		for _, sub := range req.FirstAvailable {
			out = append(out, e.request(ctx, req.Name+"/"+sub.Name, sub.DeviceClassName, sub.Selectors, sub.AllocationMode, sub.Count, pending))
		}
	}
	return out
}

func (e *evaluator) request(ctx context.Context, name, class string, sels []resourceapi.DeviceSelector, mode resourceapi.DeviceAllocationMode, count int64, pending bool) RequestView {
	v := RequestView{Name: name, Class: class, Mode: string(cmp.Or(mode, resourceapi.DeviceAllocationModeExactCount)), Count: count}
	if v.Mode == string(resourceapi.DeviceAllocationModeExactCount) {
		v.Count = max(count, 1)
	}
	var exprs []string
	for i, s := range sels {
		if s.CEL == nil {
			continue
		}
		exprs = append(exprs, s.CEL.Expression)
		if i < maxSelectorsShown {
			v.Selectors = append(v.Selectors, dracel.Quote(s.CEL.Expression))
		} else if i == maxSelectorsShown {
			v.Selectors = append(v.Selectors, fmt.Sprintf("(%d more)", len(sels)-i))
		}
	}
	if !pending {
		return v
	}
	dc := e.classes[class]
	if dc == nil {
		v.Why = "DeviceClass " + class + " does not exist: the scheduler waits for it"
		return v
	}
	var classExprs []string
	for _, s := range dc.Spec.Selectors {
		if s.CEL != nil {
			classExprs = append(classExprs, s.CEL.Expression)
		}
	}
	var matched map[string]map[string]bool
	v.Devices, matched = e.match(ctx, classExprs, exprs)
	v.Why = why(v, class)
	e.evaluated = append(e.evaluated, evaluated{RequestView: v, matched: matched})
	return v
}

// match evaluates the class's and the request's selectors on every
// device, as the scheduler does (the class's first). What is free of the
// matching devices is each pool's to say: on a dynamic node the
// placements overlap, and only what the counters left by the allocated
// devices allow at once is free.
func (e *evaluator) match(ctx context.Context, classExprs, exprs []string) (*DeviceMatch, map[string]map[string]bool) {
	m := &DeviceMatch{Published: len(e.devices)}
	matched := map[string]map[string]bool{}
	for i, d := range e.devices {
		if e.budget <= 0 {
			m.Partial = true
			break
		}
		e.budget--
		ok, f := e.checker.Match(ctx, classExprs, d)
		if ok {
			ok, f = e.checker.Match(ctx, exprs, d)
		}
		if f != nil && m.Error == nil {
			m.Error = f
		}
		if f != nil && f.Kind != dracel.Runtime {
			// It fails on every device alike.
			break
		}
		if !ok {
			continue
		}
		m.Matching++
		if matched[e.pool[i]] == nil {
			matched[e.pool[i]] = map[string]bool{}
		}
		matched[e.pool[i]][d.Device.Name] = true
	}
	for _, pool := range slices.Sorted(maps.Keys(matched)) {
		free := int(e.pools[pool].FreeOf(func(d *resourceapi.Device) bool { return matched[pool][d.Name] }))
		m.Free += free
		if free > m.MostFree {
			m.MostFree, m.Node = free, pool
		}
	}
	return m, matched
}

// together says whether a pod's pending requests, two or more, can be
// allocated at once on one node: the scheduler allocates all of a pod's
// claims on its node, and on a dynamic node the requests' placements draw
// on the same counters, so each request's free count, which is per
// request alone, may hold where all of them do not (schedview's
// Pool.Together). "" when there is nothing to say, or explain cannot
// tell (a request it could not evaluate whole, firstAvailable, All, a
// claim not found or not shown).
func (e *evaluator) together(views []ClaimView) string {
	if slices.ContainsFunc(views, func(v ClaimView) bool { return v.Problem != "" }) {
		return ""
	}
	reqs := e.evaluated
	for _, r := range reqs {
		if r.Devices.Error != nil || r.Devices.Partial || strings.Contains(r.Name, "/") || r.Mode != string(resourceapi.DeviceAllocationModeExactCount) {
			return ""
		}
	}
	if len(reqs) < 2 {
		return ""
	}
	var fit, alone []string
	for _, pool := range slices.Sorted(maps.Keys(e.pools)) {
		wants := make([]schedview.Want, len(reqs))
		each := true
		for i, r := range reqs {
			m := r.matched[pool]
			wants[i] = schedview.Want{Match: func(d *resourceapi.Device) bool { return m[d.Name] }, Count: r.Count}
			each = each && e.pools[pool].FreeOf(wants[i].Match) >= r.Count
		}
		switch {
		case e.pools[pool].Together(wants):
			fit = append(fit, pool)
		case each:
			alone = append(alone, pool)
		}
	}
	switch {
	case len(fit) > 0:
		return fmt.Sprintf("its %d requests fit together on %s", len(reqs), nodeList(fit))
	case len(alone) > 0:
		return fmt.Sprintf("no node can allocate its %d requests at once: on %s each fits alone, but the GPUs' memory and compute slices cannot hold them all", len(reqs), nodeList(alone))
	}
	return fmt.Sprintf("no node can allocate its %d requests at once", len(reqs))
}

// nodeList is "node a", "nodes a, b" or "nodes a, b and 3 more".
func nodeList(nodes []string) string {
	const shown = 2
	if len(nodes) == 1 {
		return "node " + nodes[0]
	}
	if len(nodes) <= shown {
		return "nodes " + strings.Join(nodes, ", ")
	}
	return fmt.Sprintf("nodes %s and %d more", strings.Join(nodes[:shown], ", "), len(nodes)-shown)
}

// cannotAllocate is the scheduler's word for a node where a pod's claims
// cannot all be allocated.
const cannotAllocate = `the scheduler says "cannot allocate all claims"`

// why says, from a pending request's evaluation, why it waits.
func why(v RequestView, class string) string {
	m := v.Devices
	var first string
	switch {
	case m.Error != nil && m.Error.Kind == dracel.TooLong:
		// The API server refuses such a selector; explain does not
		// evaluate it.
		return m.Error.String()
	case m.Error != nil && m.Error.Kind != dracel.Runtime:
		return m.Error.String() + ": the scheduler fails every attempt to schedule the pod with this error"
	case m.Error != nil:
		// The scheduler stops at the first error, in the order of the
		// slices; explain cannot know whether it finds enough devices
		// before it reaches that one.
		first = m.Error.String() + ": the scheduler fails its attempt to schedule the pod with this error when it reaches that device before it has found enough; "
	}
	return first + whyCounts(v, class)
}

// whyCounts says, from the devices a pending request matches, why it
// waits.
func whyCounts(v RequestView, class string) string {
	m := v.Devices
	switch {
	case m.Published == 0:
		return dracel.Driver + " publishes no device (no node serves through DRA)"
	case m.Matching == 0 && m.Partial:
		return fmt.Sprintf("no device matches among those evaluated before explain's bound of %d evaluations", maxEvaluations)
	case m.Matching == 0:
		return fmt.Sprintf("none of the %d devices %s publishes matches class %s and the selectors; %s", m.Published, dracel.Driver, class, cannotAllocate)
	case m.Free == 0:
		return fmt.Sprintf("%d devices match, none free (held by claims, or on a dynamic node overlapping what claims hold); %s", m.Matching, cannotAllocate)
	case v.Mode == string(resourceapi.DeviceAllocationModeExactCount) && v.Count > int64(m.MostFree):
		return fmt.Sprintf("it asks for %d; %d devices match, %d free, at most %d on one node (%s); %s", v.Count, m.Matching, m.Free, m.MostFree, m.Node, cannotAllocate)
	case v.Mode == string(resourceapi.DeviceAllocationModeAll) && m.Free < m.Matching:
		return fmt.Sprintf("allocationMode All: %d devices match, %d of them held by claims; %s", m.Matching, m.Matching-m.Free, cannotAllocate)
	}
	return fmt.Sprintf("%d devices match, %d free, %d on node %s: it can be allocated there (the scheduler has not yet, or another of the pod's needs keeps it)", m.Matching, m.Free, m.MostFree, m.Node)
}

// extendedClassNotes say, for each GPU extended resource a waiting pod
// asks for that a DeviceClass maps (extendedResourceName), why the
// scheduler's word may be DRA's (issue 35): on a node whose allocatable
// has none of the resource, the scheduler hands the request to DRA
// (DRAExtendedResource), and a node without a device of the class then
// fails with "cannot allocate all claims" where it would have said
// "Insufficient <resource>".
func extendedClassNotes(devs map[corev1.ResourceName]int64, d *DRAObjects) []string {
	if d == nil {
		return nil
	}
	var notes []string
	for _, r := range slices.Sorted(maps.Keys(devs)) {
		i := slices.IndexFunc(d.Classes, func(c resourceapi.DeviceClass) bool {
			return c.Spec.ExtendedResourceName != nil && *c.Spec.ExtendedResourceName == string(r)
		})
		if i < 0 {
			continue
		}
		notes = append(notes, fmt.Sprintf("DeviceClass %s maps %s to DRA: on a node whose allocatable has none of it the scheduler "+
			"hands the request to DRA, and where no device of the class is free it says \"cannot allocate all claims\" "+
			"instead of \"Insufficient %s\" (docs/DRA.md)", d.Classes[i].Name, r, r))
	}
	return notes
}

// describeClaim is a claim's first line: "gpu: ResourceClaim x (from
// template t)".
func describeClaim(c ClaimView) string {
	var b strings.Builder
	b.WriteString(c.Name)
	switch {
	case c.Claim != "" && c.Template != "":
		fmt.Fprintf(&b, ": ResourceClaim %s from template %s", c.Claim, c.Template)
	case c.Claim != "":
		fmt.Fprintf(&b, ": ResourceClaim %s", c.Claim)
	case c.Template != "":
		fmt.Fprintf(&b, ": from template %s", c.Template)
	}
	if c.Problem != "" {
		b.WriteString(": " + c.Problem)
	}
	return b.String()
}

// describeRequest is "gpu/r: 2 x class mig.migflex.io where SEL and SEL".
func describeRequest(claim string, r RequestView) string {
	what := fmt.Sprintf("%d x class %s", r.Count, r.Class)
	if r.Mode == string(resourceapi.DeviceAllocationModeAll) {
		what = "all devices of class " + r.Class
	}
	if len(r.Selectors) > 0 {
		what += " where " + strings.Join(r.Selectors, " and ")
	}
	return claim + "/" + r.Name + ": " + what
}
