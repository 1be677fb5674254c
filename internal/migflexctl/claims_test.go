package migflexctl

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/testsupport/draslices"
)

const prof3g = `device.attributes["gpu.migflex.io"].profile == "3g.40gb"`

// draCluster is a node serving through DRA, its ResourceSlice (two
// 3g.40gb devices on GPU 0, GPU 1 whole) and the driver's DeviceClasses.
func draCluster(t *testing.T) []runtime.Object {
	t.Helper()
	n := node(t, "gpu-a", nodeinfo.StateSuccess, gpu(0, "3g.40gb@0:4", "3g.40gb@4:4"), wholeGPU(1))
	n.Labels[nodeinfo.LabelServing] = nodeinfo.ServingDRA
	n.Labels[nodeinfo.LabelPlanner] = nodeinfo.PlannerEnabled
	mig := func(start int) resourceapi.Device {
		return dra.APIDevice(dra.Device{Name: fmt.Sprintf("gpu-0-mig-3g40gb-9-%d", start), UUID: "MIG-" + string(rune('0'+start)), MIG: true, Profile: "3g.40gb", ProfileID: 9,
			GPUUUID: "GPU-0", Model: h100, Start: start, Size: 4, MemoryMB: 40960})
	}
	whole := dra.APIDevice(dra.Device{Name: "gpu-1", UUID: "GPU-1", GPUIndex: 1, Minor: 1, Model: h100, MemoryMB: 81920})
	objs := []runtime.Object{n, &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "gpu-a-gpu.migflex.io"},
		Spec: resourceapi.ResourceSliceSpec{Driver: dra.DriverName, NodeName: ptr.To("gpu-a"),
			Pool: resourceapi.ResourcePool{Name: "gpu-a", Generation: 1, ResourceSliceCount: 1}, Devices: []resourceapi.Device{mig(0), mig(4), whole}}}}
	classes, err := dra.DeviceClasses([]string{"1g.10gb", "3g.40gb"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range classes {
		objs = append(objs, &classes[i])
	}
	return objs
}

func claimOf(name, class string, count int64, exprs ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
	c.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "r", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, Count: count, AllocationMode: resourceapi.DeviceAllocationModeExactCount}}}
	for _, e := range exprs {
		c.Spec.Devices.Requests[0].Exactly.Selectors = append(c.Spec.Devices.Requests[0].Exactly.Selectors,
			resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: e}})
	}
	return c
}

// claimPod is a pending pod the scheduler found no node for, with one
// claim entry "gpu": a ResourceClaim, or a template when template.
func claimPod(name, claim string, template bool) *corev1.Pod {
	p := pendingPod(name, "cpu", 1)
	pc := corev1.PodResourceClaim{Name: "gpu", ResourceClaimName: ptr.To(claim)}
	if template {
		pc = corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To(claim)}
	}
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{pc}
	return p
}

// TestExplainClaims: issue 35. A pod whose GPU comes from ResourceClaims
// is explained by its claims (class, selectors, count, allocation or
// why not, CEL errors named with the expression) and exits 1 while it
// waits, as the README says.
func TestExplainClaims(t *testing.T) {
	allocated := claimOf("held", dra.ClassMIG, 1, prof3g)
	allocated.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "r", Driver: dra.DriverName, Pool: "gpu-a", Device: "gpu-0-mig-3g40gb-9-0"}}}}
	running := claimPod("runs", "held", false)
	running.Spec.NodeName, running.Status.Phase, running.Status.Conditions = "gpu-a", corev1.PodRunning, nil
	template := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "one-3g", Namespace: "ns"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: claimOf("", dra.ClassMIG, 1, prof3g).Spec}}
	failed := func(p *corev1.Pod) *corev1.Event {
		return event(p, corev1.EventTypeWarning, "FailedScheduling", "0/1 nodes are available: 1 cannot allocate all claims.", 1)
	}
	tests := []struct {
		name  string
		objs  []runtime.Object
		pod   string
		code  int
		lines []string // each wrapped line of the text, in order
	}{
		{
			name: "count 100", pod: "p", code: ExitAttention,
			objs: []runtime.Object{claimPod("p", "big", false), claimOf("big", dra.ClassMIG, 100, prof3g), failed(claimPod("p", "big", false))},
			lines: []string{
				"POD ns/p  Pending, waits for a node",
				"  asked for:   100 x nvidia.com/mig-3g.40gb through its ResourceClaims",
				"  admitted as: its ResourceClaims as written (the webhook does not rewrite",
				"               claims)",
				"  claim:       gpu: ResourceClaim big",
				"  request:     gpu/r: 100 x class mig.migflex.io where",
				`               device.attributes["gpu.migflex.io"].profile == "3g.40gb"`,
				"  unallocated: gpu/r: it asks for 100; 2 devices match, 2 free, at most 2 on one",
				`               node (gpu-a); the scheduler says "cannot allocate all claims"`,
				"  event:       Warning FailedScheduling: 0/1 nodes are available: 1 cannot",
				"               allocate all claims.",
			},
		},
		{
			name: "issue 35: a profile compared with an int: asked for no GPU the planner reads", pod: "p", code: ExitAttention,
			objs:  []runtime.Object{claimPod("p", "int", false), claimOf("int", dra.ClassMIG, 1, `device.attributes['gpu.migflex.io'].profile == 3`)},
			lines: []string{"  asked for:   devices through its ResourceClaims (below)"},
		},
		{
			name: "issue 35: a profile compared with an int", pod: "p", code: ExitAttention,
			objs: []runtime.Object{claimPod("p", "int", false), claimOf("int", dra.ClassMIG, 1, `device.attributes['gpu.migflex.io'].profile == 3`)},
			lines: []string{
				"  request:     gpu/r: 1 x class mig.migflex.io where",
				"               device.attributes['gpu.migflex.io'].profile == 3",
				"  unallocated: gpu/r: none of the 3 devices gpu.migflex.io publishes matches",
				`               class mig.migflex.io and the selectors; the scheduler says`,
				`               "cannot allocate all claims"`,
				"  note:        the planner does not read claim gpu request r:",
				"               `device.attributes['gpu.migflex.io'].profile == 3`: profile == 3",
				"               is false on every device: profile is a string, 3 an int, and CEL",
				"               finds values of two types unequal",
				"  planner now: does not plan for it: it reads no GPU request of the pod that it",
				"               can plan for",
			},
		},
		{
			name: "a profile unguarded on the general class errs on a whole GPU", pod: "p", code: ExitAttention,
			objs: []runtime.Object{claimPod("p", "general", false), claimOf("general", dra.ClassAll, 1, prof3g)},
			lines: []string{
				"  unallocated: gpu/r: CEL runtime error in",
				"               `device.attributes[\"gpu.migflex.io\"].profile == \"3g.40gb\"` on",
				"               device gpu-a/gpu-1: no such key: profile. consider using CEL",
			},
		},
		{
			name: "an allocated claim of a running pod", pod: "runs", code: ExitOK,
			objs: []runtime.Object{running, allocated},
			lines: []string{
				"POD ns/runs  Running, on node gpu-a",
				"  asked for:   devices through its ResourceClaims (below)",
				"  admitted as: its ResourceClaims as written (the webhook does not rewrite",
				"               claims)",
				"  claim:       gpu: ResourceClaim held",
				"  request:     gpu/r: 1 x class mig.migflex.io where",
				`               device.attributes["gpu.migflex.io"].profile == "3g.40gb"`,
				"  allocated:   gpu/r: gpu-0-mig-3g40gb-9-0 on node gpu-a",
			},
		},
		{
			name: "the claim the scheduler made for an extended resource", pod: "ext", code: ExitOK,
			objs: []runtime.Object{func() *corev1.Pod {
				p := pendingPod("ext", mig3g, 1)
				p.Spec.NodeName, p.Status.Phase, p.Status.Conditions = "gpu-a", corev1.PodRunning, nil
				p.Status.ExtendedResourceClaimStatus = &corev1.PodExtendedResourceClaimStatus{ResourceClaimName: "held"}
				return p
			}(), allocated},
			lines: []string{
				"  admitted as: 1 x nvidia.com/mig-3g.40gb (the webhook did not change it)",
				"  claim:       extended resources: ResourceClaim held",
				"  request:     extended resources/r: 1 x class mig.migflex.io where",
				`               device.attributes["gpu.migflex.io"].profile == "3g.40gb"`,
				"  allocated:   extended resources/r: gpu-0-mig-3g40gb-9-0 on node gpu-a",
			},
		},
		{
			name: "a template whose claim is not made yet", pod: "p", code: ExitAttention,
			objs: []runtime.Object{claimPod("p", "one-3g", true), template, allocated},
			lines: []string{
				"  claim:       gpu: from template one-3g: its ResourceClaim is not made from the",
				"               template yet",
				"  request:     gpu/r: 1 x class mig.migflex.io where",
				`               device.attributes["gpu.migflex.io"].profile == "3g.40gb"`,
				"  unallocated: gpu/r: 2 devices match, 1 free, 1 on node gpu-a: it can be",
				"               allocated there (the scheduler has not yet, or another of the",
				"               pod's needs keeps it)",
			},
		},
		{
			name: "a claim that does not exist", pod: "p", code: ExitAttention,
			objs:  []runtime.Object{claimPod("p", "gone", false)},
			lines: []string{"  claim:       gpu: ResourceClaim gone: ResourceClaim gone not found"},
		},
		{
			name: "a pod naming more claims than explain shows", pod: "many", code: ExitAttention,
			objs: []runtime.Object{func() *corev1.Pod {
				p := pendingPod("many", "cpu", 1)
				for i := range 20 {
					p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: fmt.Sprintf("c%d", i), ResourceClaimName: ptr.To("gone")})
				}
				return p
			}()},
			lines: []string{
				"  claim:       c15: ResourceClaim gone: ResourceClaim gone not found",
				"  claim:       ...: 4 more claims not shown",
			},
		},
		{
			name: "a long selector is cut", pod: "p", code: ExitAttention,
			objs: []runtime.Object{claimPod("p", "long", false), claimOf("long", dra.ClassMIG, 1, prof3g+strings.Repeat(` && `+prof3g, 100))},
			lines: []string{
				"  request:     gpu/r: 1 x class mig.migflex.io where",
				`               device.attributes["gpu.migflex.io"].profile == "3g.40gb" &&`,
				`               device.attributes["gpu.migflex.io"].profile == "3g.40gb" ...`,
			},
		},
		{
			name: "a selector that does not compile (stored by a newer API server)", pod: "p", code: ExitAttention,
			objs: []runtime.Object{claimPod("p", "bad", false), claimOf("bad", dra.ClassMIG, 1, `device.driver == 3`)},
			lines: []string{
				"  unallocated: gpu/r: CEL compile error in `device.driver == 3`: 1:15: found no",
				"               matching overload for '_==_' applied to '(string, int)': the",
				"               scheduler fails every attempt to schedule the pod with this error",
			},
		},
		{
			name: "a class that does not exist", pod: "p", code: ExitAttention,
			objs: []runtime.Object{claimPod("p", "odd", false), claimOf("odd", "odd.example.com", 1)},
			lines: []string{"  unallocated: gpu/r: DeviceClass odd.example.com does not exist: the scheduler",
				"               waits for it"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fakeClient(append(draCluster(t), tt.objs...)...)
			code, out, errOut := run(t, client, "", "explain", tt.pod)
			if code != tt.code || errOut != "" {
				t.Errorf("exit %d, stderr %q; want %d", code, errOut, tt.code)
			}
			if !strings.Contains(out, strings.Join(tt.lines, "\n")+"\n") {
				t.Errorf("no lines\n%s\nin:\n%s", strings.Join(tt.lines, "\n"), out)
			}
			checkWidth(t, out)
			for _, a := range client.Actions() {
				if a.GetVerb() != "list" && a.GetVerb() != "get" {
					t.Errorf("explain wrote: %s %s", a.GetVerb(), a.GetResource().Resource)
				}
			}
		})
	}
}

// The claims in -o json: what each asks and what the scheduler finds.
func TestExplainClaimsJSON(t *testing.T) {
	p := claimPod("p", "big", false)
	client := fakeClient(append(draCluster(t), p, claimOf("big", dra.ClassMIG, 100, prof3g))...)
	code, out, _ := run(t, client, "", "explain", "p", "-o", "json")
	var ex Explanation
	if err := json.Unmarshal([]byte(out), &ex); err != nil || code != ExitAttention {
		t.Fatalf("exit %d, %v:\n%s", code, err, out)
	}
	want := []ClaimView{{Name: "gpu", Claim: "big", Requests: []RequestView{{
		Name: "r", Class: dra.ClassMIG, Selectors: []string{prof3g}, Mode: "ExactCount", Count: 100,
		Devices: &DeviceMatch{Published: 3, Matching: 2, Free: 2, MostFree: 2, Node: "gpu-a"},
		Why:     `it asks for 100; 2 devices match, 2 free, at most 2 on one node (gpu-a); the scheduler says "cannot allocate all claims"`,
	}}}}
	if diff := cmp.Diff(want, ex.Claims); diff != "" {
		t.Errorf("claims (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int64{"nvidia.com/mig-3g.40gb": 100}, ex.ClaimDevices); diff != "" {
		t.Errorf("claimDevices (-want +got):\n%s", diff)
	}
	if !ex.Waiting {
		t.Error("a pending pod with claims does not wait")
	}
}

// Issue 35 (5g): a device-plugin pod whose resource a DeviceClass maps to
// DRA is told why the scheduler may say "cannot allocate all claims".
func TestExplainExtendedResourceMappedToDRA(t *testing.T) {
	n := node(t, "gpu-b", nodeinfo.StateSuccess, all1g(0))
	p := pendingPod("dp", mig3g, 1)
	classes, err := dra.DeviceClasses([]string{"3g.40gb"})
	if err != nil {
		t.Fatal(err)
	}
	objs := []runtime.Object{n, p}
	for i := range classes {
		objs = append(objs, &classes[i])
	}
	code, out, _ := run(t, fakeClient(objs...), "", "explain", "dp")
	want := "  note:        DeviceClass mig-3g.40gb.migflex.io maps nvidia.com/mig-3g.40gb to\n" +
		"               DRA: on a node whose allocatable has none of it the scheduler\n" +
		"               hands the request to DRA, and where no device of the class is\n" +
		"               free it says \"cannot allocate all claims\" instead of\n" +
		"               \"Insufficient nvidia.com/mig-3g.40gb\" (docs/DRA.md)\n"
	if code != ExitAttention || !strings.Contains(out, want) {
		t.Errorf("exit %d; no %q in:\n%s", code, want, out)
	}
	if _, out, _ := run(t, fakeClient(n, p), "", "explain", "dp"); strings.Contains(out, "maps nvidia.com") {
		t.Errorf("a note without a DeviceClass:\n%s", out)
	}
}

// plan reads pods' claims as the planner does: a claim naming one
// profile is planned for on a DRA node, one it does not read gets the
// MigReshapeClaimUnread Event with what the scheduler's CEL finds.
func TestPlanClaims(t *testing.T) {
	objs := draCluster(t)
	n := objs[0].(*corev1.Node)
	n.Annotations[nodeinfo.AnnotationLayout] = layoutJSON(t, all1g(0))
	objs = append(objs, claimPod("good", "good", false), claimOf("good", dra.ClassMIG, 1, prof3g),
		claimPod("int", "int", false), claimOf("int", dra.ClassMIG, 1, `device.attributes['gpu.migflex.io'].profile == 3`))
	code, out, _ := run(t, fakeClient(objs...), "", "plan")
	for _, want := range []string{
		"  ns/good asks 1 x nvidia.com/mig-3g.40gb: reshape on gpu-a\n",
		"  ns/int Warning MigReshapeClaimUnread: the planner does not read part of the\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	if code != ExitOK {
		t.Errorf("exit %d, want %d", code, ExitOK)
	}
	checkWidth(t, out)
}

func layoutJSON(t *testing.T, gpus ...nodeinfo.GPU) string {
	t.Helper()
	b, err := json.Marshal(gpus)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// dynamicCluster is a DRA node in dynamic mode: one H100 with MIG on,
// every placement offered with the GPU's counters, and the driver's
// DeviceClasses; held are the devices allocated to a claim.
func dynamicCluster(t *testing.T, held ...string) []runtime.Object {
	t.Helper()
	n := node(t, "gpu-d", nodeinfo.StateSuccess, gpu(0))
	n.Labels[nodeinfo.LabelServing] = nodeinfo.ServingDRA
	n.Labels[nodeinfo.LabelDRAMode] = nodeinfo.DRAModeDynamic
	objs := []runtime.Object{n}
	for _, s := range draslices.Dynamic(t, "gpu-d", h100, true) {
		objs = append(objs, &s)
	}
	if len(held) > 0 {
		objs = append(objs, draslices.Claim("ns", "held", "gpu-d", held...))
	}
	classes, err := dra.DeviceClasses([]string{"1g.10gb", "3g.40gb"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range classes {
		objs = append(objs, &classes[i])
	}
	return objs
}

// On a dynamic node the placements overlap: explain counts free what the
// counters the allocated devices leave still allow, not every placement
// no claim holds.
func TestExplainClaimsDynamic(t *testing.T) {
	tests := []struct {
		name string
		held []string
		want string
	}{
		{name: "an empty GPU: two 3g.40gb", want: "  unallocated: gpu/r: it asks for 3; 2 devices match, 2 free, at most 2 on one\n"},
		{name: "a 1g at 1 leaves one 3g.40gb (at 4)", held: []string{"gpu-0-mig-1g10gb-19-1"},
			want: "  unallocated: gpu/r: it asks for 3; 2 devices match, 1 free, at most 1 on one\n"},
		{name: "a 1g at 1 and one at 5 leave none", held: []string{"gpu-0-mig-1g10gb-19-1", "gpu-0-mig-1g10gb-19-5"},
			want: "  unallocated: gpu/r: 2 devices match, none free (held by claims, or on a\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := append(dynamicCluster(t, tt.held...), claimPod("p", "big", false), claimOf("big", dra.ClassMIG, 3, prof3g))
			code, out, errOut := run(t, fakeClient(objs...), "", "explain", "p")
			if code != ExitAttention || errOut != "" {
				t.Errorf("exit %d, stderr %q; want %d", code, errOut, ExitAttention)
			}
			if !strings.Contains(out, tt.want) {
				t.Errorf("no line\n%s\nin:\n%s", tt.want, out)
			}
		})
	}
}

// A pod's requests are allocated on one node at once; on a dynamic node
// each request's free count is its own alone, so explain says whether
// they fit together. A free H100 makes two 3g.40gb, or a 3g.40gb and a
// 1g.10gb, but not two 3g.40gb and a 1g.10gb.
func TestExplainClaimsTogether(t *testing.T) {
	const prof1g = `device.attributes["gpu.migflex.io"].profile == "1g.10gb"`
	tests := []struct {
		name     string
		held     []string
		big, one int64
		want     string
	}{
		{name: "a 3g.40gb and a 1g.10gb on a free H100", big: 1, one: 1,
			want: "  together:    its 2 requests fit together on node gpu-d\n"},
		{name: "two 3g.40gb and a 1g.10gb: each fits alone, not together", big: 2, one: 1,
			want: "  together:    no node can allocate its 2 requests at once: on node gpu-d each\n"},
		{name: "beside a 1g at 1, a 3g.40gb and three 1g.10gb", held: []string{"gpu-0-mig-1g10gb-19-1"}, big: 1, one: 3,
			want: "  together:    its 2 requests fit together on node gpu-d\n"},
		{name: "beside a 1g at 1, a 3g.40gb and four 1g.10gb take eight memory slices", held: []string{"gpu-0-mig-1g10gb-19-1"}, big: 1, one: 4,
			want: "  together:    no node can allocate its 2 requests at once: on node gpu-d each\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := claimOf("pair", dra.ClassMIG, tt.big, prof3g)
			small := claimOf("", dra.ClassMIG, tt.one, prof1g).Spec.Devices.Requests[0]
			small.Name = "s"
			c.Spec.Devices.Requests = append(c.Spec.Devices.Requests, small)
			objs := append(dynamicCluster(t, tt.held...), claimPod("p", "pair", false), c)
			code, out, errOut := run(t, fakeClient(objs...), "", "explain", "p")
			if code != ExitAttention || errOut != "" {
				t.Errorf("exit %d, stderr %q; want %d", code, errOut, ExitAttention)
			}
			if !strings.Contains(out, tt.want) {
				t.Errorf("no line\n%s\nin:\n%s", tt.want, out)
			}
		})
	}
}
