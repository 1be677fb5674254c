package framework

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

// invariantsWorld is a DRA node as the checker reads it: the Node, the
// simulator's state file, the pods, slices, claims, checkpoint and CDI
// specs. The DRA path needs no kubelet socket, so the whole checker runs
// against it.
type invariantsWorld struct {
	state      string // state.json
	stateLabel string
	ready      corev1.ConditionStatus
	taints     []corev1.Taint
	podUID     string
	slices     []resourceapi.ResourceSlice
	claimUIDs  []string
	checkpoint []string // claim UIDs, each holding MIG-a
	// checkpointCopy is the claim UIDs of the checkpoint's copy; nil: the
	// checkpoint's.
	checkpointCopy []string
	cdiSpecs       []string // claim UIDs
	// layout is the agent's layout annotation; "": goodLayout.
	layout string
	// dynamic: the node's driver serves dynamic mode (dynamicWorld).
	dynamic bool
	// allocated is the device each claim's allocation names, by UID.
	allocated map[string]string
	// prepared is the device each checkpointed claim holds, by UID;
	// none: MIG-a.
	prepared map[string]preparedDevice
}

// preparedDevice is a claim's device as the checkpoint has it.
type preparedDevice struct {
	name, uuid string
	start      int
}

const goodState = `{"version":1,"gpus":[{"model":"A100-SXM4-80GB","uuid":"GPU-0","migEnabled":true,"instances":[
 {"id":1,"profileID":19,"start":0,"computeInstances":[{"id":0,"profileID":0,"uuid":"MIG-a"}]},
 {"id":2,"profileID":9,"start":4,"computeInstances":[{"id":0,"profileID":2,"uuid":"MIG-b"}]}]}]}`

const goodLayout = `[{"index":0,"uuid":"GPU-0","migMode":"Enabled","instances":[
 {"profile":"1g.10gb","uuid":"MIG-a","usedBy":["ns/p"]},{"profile":"3g.40gb","uuid":"MIG-b"}]}]`

func slice(name string, gen int64, uuids ...string) resourceapi.ResourceSlice {
	node := "mf-dra"
	s := resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceSliceSpec{Driver: draDriverName, NodeName: &node,
			Pool: resourceapi.ResourcePool{Name: node, Generation: gen, ResourceSliceCount: 1}},
	}
	for i, u := range uuids {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{
			Name:       "d" + string(rune('0'+i)),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"uuid": {StringValue: &u}},
		})
	}
	return s
}

func goodWorld() invariantsWorld {
	return invariantsWorld{
		state: goodState, stateLabel: "success", ready: corev1.ConditionTrue, podUID: "pod-1",
		slices:    []resourceapi.ResourceSlice{slice("s1", 1, "MIG-a", "MIG-b")},
		claimUIDs: []string{"claim-1"}, checkpoint: []string{"claim-1"}, cdiSpecs: []string{"claim-1"},
	}
}

// dynamicWorld is goodWorld on a node in dynamic mode: the slices offer
// placements with a counter set, and each instance is a claim's, made at
// its Prepare: claim-1's 1g.10gb at 0 (MIG-a, pod ns/p's) and claim-2's
// 3g.40gb at 4 (MIG-b).
func dynamicWorld() invariantsWorld {
	w := goodWorld()
	w.dynamic = true
	node, gpu := "mf-dra", "GPU-0"
	pool := resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 2}
	counters := resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "s0"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: draDriverName, NodeName: &node, Pool: pool,
		SharedCounters: []resourceapi.CounterSet{{Name: "gpu-0-counters"}},
	}}
	devices := resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "s1"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: draDriverName, NodeName: &node, Pool: pool,
	}}
	for name, profile := range map[string]string{
		"gpu-0-mig-1g10gb-19-0": "1g.10gb", "gpu-0-mig-1g10gb-19-6": "1g.10gb",
		"gpu-0-mig-3g40gb-9-0": "3g.40gb", "gpu-0-mig-3g40gb-9-4": "3g.40gb",
	} {
		devices.Spec.Devices = append(devices.Spec.Devices, resourceapi.Device{Name: name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"type": {StringValue: ptr("mig")}, "profile": {StringValue: ptr(profile)}, "parentUUID": {StringValue: &gpu},
		}})
	}
	devices.Spec.Devices = append(devices.Spec.Devices, resourceapi.Device{Name: "gpu-0", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"type": {StringValue: ptr("gpu")}, "uuid": {StringValue: &gpu},
	}})
	w.slices = []resourceapi.ResourceSlice{counters, devices}
	// A second GPU without instances: the layout wanted has it empty.
	w.state = strings.TrimSuffix(goodState, "]}") + `,{"model":"A100-SXM4-80GB","uuid":"GPU-1","migEnabled":true,"instances":[]}]}`
	w.layout = strings.TrimSuffix(goodLayout, "]") + `,{"index":1,"uuid":"GPU-1","migMode":"Enabled","instances":[]}]`
	w.claimUIDs = []string{"claim-1", "claim-2"}
	w.checkpoint = []string{"claim-1", "claim-2"}
	w.cdiSpecs = []string{"claim-1", "claim-2"}
	w.allocated = map[string]string{"claim-1": "gpu-0-mig-1g10gb-19-0", "claim-2": "gpu-0-mig-3g40gb-9-4"}
	w.prepared = map[string]preparedDevice{
		"claim-1": {"gpu-0-mig-1g10gb-19-0", "MIG-a", 0},
		"claim-2": {"gpu-0-mig-3g40gb-9-4", "MIG-b", 4},
	}
	return w
}

// build writes w's files under dir and returns a Cluster on its node.
func (w invariantsWorld) build(t *testing.T, dir string) *Cluster {
	t.Helper()
	n := LocalNode{Name: "mf-dra", Number: 2, KubeletDir: filepath.Join(dir, "kubelet"), CDIDir: filepath.Join(dir, "cdi")}
	write := func(path, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(n.SimStateDir(), "state.json"), w.state)
	checkpoint := func(uids []string) string {
		t.Helper()
		var claims []map[string]any
		for _, uid := range uids {
			dev := map[string]any{"uuid": "MIG-a"}
			if p, ok := w.prepared[uid]; ok {
				dev = map[string]any{"name": p.name, "uuid": p.uuid, "gpuIndex": 0, "start": p.start, "created": true}
			}
			claims = append(claims, map[string]any{"uid": uid, "namespace": "ns", "name": "c-" + uid, "devices": []map[string]any{dev}})
		}
		b, err := json.Marshal(map[string]any{"version": 1, "claims": claims})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	write(filepath.Join(n.DRAPluginDir(), "checkpoint.json"), checkpoint(w.checkpoint))
	cp := w.checkpointCopy
	if cp == nil {
		cp = w.checkpoint
	}
	write(filepath.Join(n.DRAPluginDir(), "checkpoint-copy.json"), checkpoint(cp))
	if err := os.RemoveAll(n.CDIDir); err != nil {
		t.Fatal(err)
	}
	for _, uid := range w.cdiSpecs {
		write(filepath.Join(n.CDIDir, cdiClaimSpecPrefix+uid+".json"), "{}")
	}
	labels := map[string]string{DRANodeLabel: DRANodeLabelValue, labelMigConfigState: w.stateLabel}
	if w.dynamic {
		labels[labelDRAMode] = "dynamic"
	}
	layout := w.layout
	if layout == "" {
		layout = goodLayout
	}
	objs := []runtime.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "mf-dra", Labels: labels,
			Annotations: map[string]string{annotationMigLayout: layout}},
			Spec:   corev1.NodeSpec{Taints: w.taints},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: w.ready}}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "pod-1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}},
	}
	for i := range w.slices {
		objs = append(objs, &w.slices[i])
	}
	for _, uid := range w.claimUIDs {
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c-" + uid, UID: types.UID(uid)}}
		if dev, ok := w.allocated[uid]; ok {
			c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
				Results: []resourceapi.DeviceRequestAllocationResult{{Request: "r", Driver: draDriverName, Pool: "mf-dra", Device: dev}},
			}}
		}
		objs = append(objs, c)
	}
	return &Cluster{Client: fake.NewClientset(objs...), NodeName: "mf-dra", Nodes: []LocalNode{{Name: "vm", Number: 1}, n}}
}

// brokenAfter takes the snapshot on the good world, lets snapped change it
// (when not nil), then breaks the world with break_ and returns the
// snapshot looking at the broken world.
func brokenAfter(t *testing.T, snapped func(*Invariants), break_ func(*invariantsWorld)) *Invariants {
	t.Helper()
	dir := t.TempDir()
	before := goodWorld()
	inv, err := before.build(t, dir).snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if snapped != nil {
		snapped(inv)
	}
	after := goodWorld()
	break_(&after)
	c := after.build(t, dir)
	if after.podUID != before.podUID {
		p, _ := c.Client.CoreV1().Pods("ns").Get(context.Background(), "p", metav1.GetOptions{})
		p.UID = types.UID(after.podUID)
		if _, err := c.Client.CoreV1().Pods("ns").Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	inv.c = c
	return inv
}

// TestInvariantsCatch: the checker passes the node as it should be and
// names each broken invariant: it can fail.
func TestInvariantsCatch(t *testing.T) {
	want := map[int][]string{0: {"1g.10gb", "3g.40gb"}}
	for _, tc := range []struct {
		name    string
		break_  func(*invariantsWorld)
		wantErr string
	}{
		{"all hold", func(*invariantsWorld) {}, ""},
		{"not converged", func(w *invariantsWorld) { w.stateLabel = "pending" }, `state "pending"`},
		{"node not Ready", func(w *invariantsWorld) { w.ready = corev1.ConditionUnknown }, "is not Ready"},
		{"node still tainted", func(w *invariantsWorld) {
			w.taints = []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}}
		}, "has the taint node.kubernetes.io/not-ready"},
		{"pod's instance re-created", func(w *invariantsWorld) {
			w.state = strings.Replace(goodState, `"id":1,"profileID":19,"start":0`, `"id":3,"profileID":19,"start":0`, 1)
		}, "pod ns/p's MIG device MIG-a changed"},
		{"pod's instance destroyed", func(w *invariantsWorld) {
			w.state = strings.Replace(goodState, `"uuid":"MIG-a"`, `"uuid":"MIG-new"`, 1)
		}, "differ"},
		{"leaked GPU instance", func(w *invariantsWorld) {
			w.state = strings.Replace(goodState, `"MIG-b"}]}`, `"MIG-b"}]},{"id":5,"profileID":19,"start":6}`, 1)
		}, "the simulator has 3 GPU instances"},
		{"pod replaced", func(w *invariantsWorld) { w.podUID = "pod-2" }, "want the same pod running"},
		{"orphaned slice", func(w *invariantsWorld) {
			w.slices = append(w.slices, slice("s0", 0, "MIG-old"))
		}, "want one generation"},
		{"device drained from the slice", func(w *invariantsWorld) {
			w.slices = []resourceapi.ResourceSlice{slice("s1", 1, "MIG-a")}
		}, "devices the node's ResourceSlices list"},
		{"stale checkpoint entry", func(w *invariantsWorld) {
			w.checkpoint = append(w.checkpoint, "claim-gone")
			w.cdiSpecs = append(w.cdiSpecs, "claim-gone")
		}, "which the API server does not"},
		{"leaked CDI spec", func(w *invariantsWorld) { w.cdiSpecs = append(w.cdiSpecs, "claim-x") }, "the DRA checkpoint does not have"},
		{"checkpoint entry without its spec", func(w *invariantsWorld) { w.cdiSpecs = nil }, "has no CDI spec"},
		{"checkpoint copy stale", func(w *invariantsWorld) { w.checkpointCopy = []string{} }, "the DRA checkpoint's copy lists other claims"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv := brokenAfter(t, nil, tc.break_)
			err := inv.check(context.Background(), want)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("check: %v, want every invariant to hold", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("check: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestInvariantsCatchDynamic: on a node in dynamic mode the checker wants
// the layout the claims' allocations name, and names an instance no
// checkpointed claim holds (a Prepare killed before its checkpoint), a
// GPU instance without a compute instance, a claim prepared on another
// device than allocated, and slices without counters.
func TestInvariantsCatchDynamic(t *testing.T) {
	const gi6 = `"MIG-b"}]},{"id":5,"profileID":19,"start":6}`
	layoutWith := func(layout, extra string) string {
		return strings.Replace(layout, `"uuid":"MIG-b"}`, `"uuid":"MIG-b"},`+extra, 1)
	}
	for _, tc := range []struct {
		name    string
		break_  func(*invariantsWorld)
		wantErr string
	}{
		{"all hold", func(*invariantsWorld) {}, ""},
		{"allocated, not made", func(w *invariantsWorld) {
			w.claimUIDs = append(w.claimUIDs, "claim-3")
			w.allocated["claim-3"] = "gpu-0-mig-1g10gb-19-6"
		}, "(-want +got)"},
		{"instance of a Prepare killed before its checkpoint", func(w *invariantsWorld) {
			w.checkpoint, w.cdiSpecs = []string{"claim-1"}, []string{"claim-1"}
		}, "instance MIG-b (3g.40gb) is no prepared claim's: leaked"},
		{"GPU instance without a compute instance", func(w *invariantsWorld) {
			w.claimUIDs = append(w.claimUIDs, "claim-3")
			w.allocated["claim-3"] = "gpu-0-mig-1g10gb-19-6"
			w.state = strings.Replace(w.state, `"MIG-b"}]}`, gi6, 1)
			w.layout = layoutWith(w.layout, `{"profile":"1g.10gb","uuid":""}`)
		}, "GPU instance without a compute instance"},
		{"prepared elsewhere than allocated", func(w *invariantsWorld) {
			w.allocated["claim-2"] = "gpu-0-mig-3g40gb-9-0"
		}, "prepared [gpu-0-mig-3g40gb-9-4], allocated [gpu-0-mig-3g40gb-9-0]"},
		{"instance not at its placement", func(w *invariantsWorld) {
			w.prepared["claim-2"] = preparedDevice{"gpu-0-mig-3g40gb-9-4", "MIG-b", 0}
		}, "is on GPU 0 at 4"},
		{"no counters", func(w *invariantsWorld) { w.slices = w.slices[1:] }, "have no counter sets"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			inv, err := dynamicWorld().build(t, dir).snapshot(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if !inv.dynamic {
				t.Fatal("the snapshot does not see the node dynamic")
			}
			after := dynamicWorld()
			tc.break_(&after)
			inv.c = after.build(t, dir)
			err = inv.check(context.Background(), nil)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("check: %v, want every invariant to hold", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("check: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestInvariantsSafety: Safety, which the soak runs every second, names a
// broken instance or a replaced pod as a Violation, ignores what only
// convergence asks (a leaked instance, a state not yet success), reports a
// state it cannot read as an error that is no Violation, and leaves alone
// a pod the test forgot (deleted on purpose).
func TestInvariantsSafety(t *testing.T) {
	for _, tc := range []struct {
		name      string
		break_    func(*invariantsWorld)
		forget    bool
		violation string // "" for none
		readErr   bool
	}{
		{name: "all hold", break_: func(*invariantsWorld) {}},
		{name: "not converged yet", break_: func(w *invariantsWorld) {
			w.stateLabel = "pending"
			w.state = strings.Replace(goodState, `"MIG-b"}]}`, `"MIG-b"}]},{"id":5,"profileID":19,"start":6}`, 1)
		}},
		{name: "pod's instance re-created", break_: func(w *invariantsWorld) {
			w.state = strings.Replace(goodState, `"id":1,"profileID":19,"start":0`, `"id":3,"profileID":19,"start":0`, 1)
		}, violation: "pod ns/p's MIG device MIG-a changed"},
		{name: "pod's instance destroyed", break_: func(w *invariantsWorld) {
			w.state = strings.Replace(goodState, `"uuid":"MIG-a"`, `"uuid":"MIG-new"`, 1)
		}, violation: "was destroyed"},
		{name: "pod replaced", break_: func(w *invariantsWorld) { w.podUID = "pod-2" }, violation: "want the same pod running"},
		{name: "pod replaced, forgotten", break_: func(w *invariantsWorld) { w.podUID = "pod-2" }, forget: true},
		{name: "state unreadable", break_: func(w *invariantsWorld) { w.state = "{" }, readErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv := brokenAfter(t, func(inv *Invariants) {
				if tc.forget {
					inv.Forget("ns/p")
				}
			}, tc.break_)
			pods, err := inv.c.HeldPods(context.Background(), inv)
			if err != nil {
				t.Fatal(err)
			}
			err = inv.Safety(context.Background(), pods)
			var v *Violation
			isViolation := errors.As(err, &v)
			switch {
			case tc.readErr:
				if err == nil || isViolation {
					t.Fatalf("Safety: %v, want an error reading the state, not a violation", err)
				}
			case tc.violation == "" && err != nil:
				t.Fatalf("Safety: %v, want none", err)
			case tc.violation != "" && (!isViolation || !strings.Contains(err.Error(), tc.violation)):
				t.Fatalf("Safety: %v (a Violation: %v), want a Violation containing %q", err, isViolation, tc.violation)
			}
		})
	}
}

// TestHeldPodsListsOnce: the pods of every snapshot are read by one list
// per namespace, however many snapshots and pods: the soak's checker, which
// runs every second on every node, must not cost a request per pod.
func TestHeldPodsListsOnce(t *testing.T) {
	w := goodWorld()
	c := w.build(t, t.TempDir())
	inv, err := c.snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	other := &Invariants{c: c, held: map[string]heldPod{"ns/q": {}, "other/r": {}}}
	cs := c.Client.(*fake.Clientset)
	cs.ClearActions()
	pods, err := c.HeldPods(context.Background(), inv, other, inv)
	if err != nil {
		t.Fatal(err)
	}
	var lists []string
	for _, a := range cs.Actions() {
		lists = append(lists, a.GetVerb()+" "+a.GetResource().Resource+" in "+a.GetNamespace())
	}
	if want := []string{"list pods in ns", "list pods in other"}; !slices.Equal(lists, want) {
		t.Errorf("requests %q, want %q", lists, want)
	}
	if err := inv.Safety(context.Background(), pods); err != nil {
		t.Errorf("Safety on the listed pods: %v, want none", err)
	}
	if err := inv.Safety(context.Background(), Pods{}); err == nil || !strings.Contains(err.Error(), "pod ns/p, which held [MIG-a], is gone") {
		t.Errorf("Safety with ns/p not listed: %v, want it named gone", err)
	}
}

// TestInvariantsWantFromMigConfig: with no layout given, the checker wants
// what the node's mig.config asks, and says so when the node has none.
func TestInvariantsWantFromMigConfig(t *testing.T) {
	dir := t.TempDir()
	w := goodWorld()
	c := w.build(t, dir)
	inv, err := c.snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := inv.check(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "has no "+AnnotationMigConfig) {
		t.Fatalf("check without a mig.config: %v, want it named missing", err)
	}
	for doc, wantErr := range map[string]string{
		"version: v1\nmig-configs:\n  selected:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {1g.10gb: 1, 3g.40gb: 1}\n": "",
		"version: v1\nmig-configs:\n  selected:\n  - devices: all\n    mig-enabled: true\n    mig-devices: [7g.80gb]\n":                "(-want +got)",
	} {
		node, _ := c.Node(context.Background())
		node.Annotations[AnnotationMigConfig] = doc
		if _, err := c.Client.CoreV1().Nodes().Update(context.Background(), node, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		err := inv.check(context.Background(), nil)
		if (wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), wantErr)) {
			t.Errorf("mig.config %q: check %v, want error containing %q", doc, err, wantErr)
		}
	}
}

// TestInvariantsWithWaitsForTheHolder: on a DRA node the snapshot goes by
// the agent's report alone, so one taken for a pod waits until the agent
// names it, and says so when it never does.
func TestInvariantsWithWaitsForTheHolder(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pods    []string
		wantErr string
	}{
		{"named", []string{"ns/p"}, ""},
		{"none asked for", nil, ""},
		{"not named", []string{"ns/q"}, "does not name pod ns/q as holding a device yet (it names [ns/p])"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := goodWorld().build(t, t.TempDir())
			inv, err := c.takeInvariants(context.Background(), 2*Poll, tc.pods)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("takeInvariants: %v", err)
			case tc.wantErr == "" && len(inv.Held()["ns/p"]) != 1:
				t.Fatalf("the snapshot holds %v, want pod ns/p on MIG-a", inv.Held())
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("takeInvariants: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}
