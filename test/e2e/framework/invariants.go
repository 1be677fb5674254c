package framework

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Converge bounds how long a node may take to come back to what its
// mig.config asks once a fault has healed: hang protection for the poll,
// not a claim about speed (docs/RELIABILITY.md has the measured times).
const Converge = Timeout

// Keys on the Node the checker reads, as users and the GPU operator's
// tools know them.
const (
	annotationMigLayout = "migflex.io/mig.layout"
	labelMigConfigState = "nvidia.com/mig.config.state"
	annotationReason    = "migflex.io/mig.config.reason"
	draDriverName       = "gpu.migflex.io"
	// labelDRAMode is the mode a DRA node's driver serves; dynamic mode
	// makes each instance at a claim's Prepare.
	labelDRAMode = "migflex.io/dra-mode"
	// cdiClaimSpecPrefix starts the name of the CDI spec the DRA plugin
	// writes for a claim: <vendor>-<class>_<claim UID>.json.
	cdiClaimSpecPrefix = "migflex.io-gpu_"
)

// Invariants is what no fault may break on one node, taken before a test
// injects a fault and checked (Check) once it has healed. Every fault test
// uses it (docs/RELIABILITY.md):
//
//   - untouched: every pod that held a MIG device before still runs (the
//     same pod, not a new one by its name) and holds the same devices, each
//     still the same instance in the simulated GPU (GPU, GPU instance,
//     compute instance, profile, placement): nothing under a running pod
//     was destroyed or re-created; the kubelet (pod-resources) and the
//     agent (the layout annotation's usedBy) still say it holds them;
//   - converged: the node is Ready without the not-ready or unreachable
//     taints, its nvidia.com/mig.config.state is success and the agent's
//     layout has the profiles the mig.config asks for;
//   - nothing leaked: the simulated GPUs have exactly the instances of that
//     layout (none that no layout asks for and no pod holds); the kubelet
//     (device plugin: its allocatable devices and the Node's allocatable)
//     or the node's ResourceSlices (DRA: one generation, none orphaned,
//     no device drained) serve exactly its devices; on a DRA node every
//     checkpoint entry and every claim CDI spec belongs to a claim the API
//     server has, each entry has its spec, and names devices of the layout;
//   - on a DRA node in dynamic mode (its driver makes each instance at a
//     claim's Prepare, and no mig.config applies) the layout wanted is the
//     claims' allocations in the node's pool, every instance is a
//     checkpointed claim's (no orphan a Prepare killed before its
//     checkpoint left behind), each at the placement its claim was
//     allocated, and the slices offer placements (counter sets), not the
//     instances.
//
// The checks are polled until they all hold or Converge passes, and a
// failure says what was last missing.
type Invariants struct {
	c   *Cluster
	dra bool
	// dynamic is a DRA node whose driver serves dynamic mode.
	dynamic bool
	// held are the pods holding MIG devices at the snapshot, by
	// "namespace/name".
	held map[string]heldPod
}

type heldPod struct {
	uid types.UID
	// devices are its MIG devices as the simulator had them, by UUID.
	devices map[string]SimInstance
}

// Invariants takes the snapshot on c's node: who holds which device now.
// Take it once the layout a test wants is in place and its pods run.
func (c *Cluster) Invariants(t testing.TB) *Invariants {
	t.Helper()
	return c.InvariantsWith(t)
}

// InvariantsWith is Invariants taken once the agent also names each of
// pods ("namespace/name") as holding a device. On a DRA node, whose
// kubelet says nothing of claims, the agent's report is all the snapshot
// goes by, and it names a pod a little after the pod runs: a snapshot
// taken before would not know the pod a fault must leave running.
func (c *Cluster) InvariantsWith(t testing.TB, pods ...string) *Invariants {
	t.Helper()
	inv, err := c.takeInvariants(t.Context(), Timeout, pods)
	if err != nil {
		t.Fatalf("invariants of node %s before the fault: %v", c.NodeName, err)
	}
	for k, p := range inv.held {
		t.Logf("node %s before the fault: pod %s holds %v", c.NodeName, k, slices.Sorted(maps.Keys(p.devices)))
	}
	return inv
}

// TakeInvariants is Invariants without a test to fail, for the soak: it
// polls until the agent and the kubelet agree on who holds which device,
// or returns what was last missing after timeout.
func (c *Cluster) TakeInvariants(ctx context.Context, timeout time.Duration) (*Invariants, error) {
	return c.takeInvariants(ctx, timeout, nil)
}

// takeInvariants polls the snapshot until it holds each of pods too.
func (c *Cluster) takeInvariants(ctx context.Context, timeout time.Duration, pods []string) (*Invariants, error) {
	// The agent reports who holds a device a little after the kubelet
	// says so: poll until the two agree.
	var inv *Invariants
	var last error
	err := WaitFor(ctx, "the agent and the kubelet of node "+c.NodeName+" to agree on who holds which device", timeout, func(ctx context.Context) (bool, error) {
		got, err := c.snapshot(ctx)
		if err == nil {
			for _, p := range pods {
				if _, ok := got.held[p]; !ok {
					err = fmt.Errorf("the agent of node %s does not name pod %s as holding a device yet (it names %v)", c.NodeName, p, slices.Sorted(maps.Keys(got.held)))
					break
				}
			}
		}
		inv = got
		KeepFinding(&last, err)
		return err == nil, err
	})
	if err != nil {
		if last == nil {
			return nil, err
		}
		return nil, last
	}
	return inv, nil
}

// Forget drops the pod ("namespace/name") from the snapshot: a test that
// deletes it on purpose expects it gone.
func (inv *Invariants) Forget(pod string) { delete(inv.held, pod) }

func (c *Cluster) snapshot(ctx context.Context) (*Invariants, error) {
	node, err := c.Node(ctx)
	if err != nil {
		return nil, err
	}
	dra := node.Labels[DRANodeLabel] == DRANodeLabelValue
	inv := &Invariants{c: c, dra: dra, dynamic: dra && node.Labels[labelDRAMode] == "dynamic", held: map[string]heldPod{}}
	layout, err := NodeLayout(node)
	if err != nil {
		return nil, err
	}
	state, err := c.Local().SimState()
	if err != nil {
		return nil, err
	}
	sim := simDevices(state)
	holders := map[string][]string{} // pod -> UUIDs
	for _, g := range layout {
		for _, in := range g.Instances {
			for _, p := range in.UsedBy {
				if !strings.Contains(p, " ") { // "ResourceClaim ns/name": no pod yet
					holders[p] = append(holders[p], in.UUID)
				}
			}
		}
	}
	if !inv.dra {
		kubelet, err := c.kubeletHolders(ctx)
		if err != nil {
			return nil, err
		}
		if diff := cmp.Diff(sortedValues(holders), sortedValues(kubelet)); diff != "" {
			return nil, fmt.Errorf("the agent's layout and the kubelet disagree on who holds which MIG device (-agent +kubelet):\n%s", diff)
		}
	}
	for key, uuids := range holders {
		ns, name, _ := strings.Cut(key, "/")
		pod, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("pod %s, which holds %v, is gone: the agent has not reported it yet", key, uuids)
		}
		if err != nil {
			return nil, fmt.Errorf("pod %s, which holds %v: %w", key, uuids, err)
		}
		// A pod on its way out (an earlier test's, its namespace being
		// deleted) is no pod a fault must keep running.
		if pod.DeletionTimestamp != nil {
			continue
		}
		if nsObj, err := c.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err == nil && nsObj.DeletionTimestamp != nil {
			continue
		}
		hp := heldPod{uid: pod.UID, devices: map[string]SimInstance{}}
		for _, u := range uuids {
			in, ok := sim[u]
			if !ok {
				return nil, fmt.Errorf("pod %s holds %s, which the simulated GPUs do not have", key, u)
			}
			hp.devices[u] = in
		}
		inv.held[key] = hp
	}
	return inv, nil
}

// Held is the pods holding MIG devices at the snapshot, by
// "namespace/name", with their device UUIDs.
func (inv *Invariants) Held() map[string][]string {
	out := map[string][]string{}
	for k, p := range inv.held {
		out[k] = slices.Sorted(maps.Keys(p.devices))
	}
	return out
}

// Check polls until every invariant holds with want, the profiles the
// node's mig.config asks for on each GPU by index, or fails t with what
// was last missing after Converge. It returns how long the node took to
// converge, from the call.
func (inv *Invariants) Check(t testing.TB, want map[int][]string) time.Duration {
	t.Helper()
	took, err := inv.Converged(t.Context(), want, Converge)
	layout := fmt.Sprint(sortedValues(want))
	switch {
	case want != nil:
	case inv.dynamic:
		layout = "the claims' allocations"
	default:
		layout = "the mig.config's"
	}
	if err != nil {
		t.Fatalf("invariants of node %s after the fault, want layout %s: %v", inv.c.NodeName, layout, err)
	}
	t.Logf("node %s: every invariant holds with layout %s, %v after the check began", inv.c.NodeName, layout, took.Round(time.Second))
	return took
}

// Converged is Check without a test to fail, for the soak: it polls until
// every invariant holds, or returns what was last missing after timeout.
// A nil want is the layout the node's nvidia.com/mig.config asks for when
// each poll reads it (MigConfigLayout), which someone else (the planner)
// may change meanwhile.
func (inv *Invariants) Converged(ctx context.Context, want map[int][]string, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	var w map[int][]string
	if want != nil {
		w = sortedValues(want)
	}
	var last error
	err := WaitFor(ctx, "node "+inv.c.NodeName+" to converge with every invariant", timeout, func(ctx context.Context) (bool, error) {
		err := inv.check(ctx, w)
		KeepFinding(&last, err)
		return err == nil, err
	})
	took := time.Since(start)
	if err != nil {
		if last == nil {
			return took, err
		}
		return took, last
	}
	return took, nil
}

// Verify checks every invariant once, as Converged does at each poll: nil,
// or what is missing now. The soak polls it with its own checks, so that a
// timeout names the node's own finding, not the poll's deadline.
func (inv *Invariants) Verify(ctx context.Context, want map[int][]string) error {
	var w map[int][]string
	if want != nil {
		w = sortedValues(want)
	}
	return inv.check(ctx, w)
}

// Violation is an invariant found broken, as opposed to an error reading
// what it is about (an API server or kubelet that does not answer now).
type Violation struct{ msg string }

func (v *Violation) Error() string { return v.msg }

func violationf(format string, args ...any) error {
	return &Violation{msg: fmt.Sprintf(format, args...)}
}

// Pods is pods by "namespace/name", as one list read them (HeldPods).
type Pods map[string]*corev1.Pod

// HeldPods lists the pods the snapshots hold, one list per namespace for
// all of them, for Safety. The soak checks every node every second: a get
// per held pod and node, on top of its convergence polls, was more than
// the test client's rate limit let through (docs/BENCHMARKS.md, "The
// soak").
func (c *Cluster) HeldPods(ctx context.Context, invs ...*Invariants) (Pods, error) {
	namespaces := map[string]bool{}
	for _, inv := range invs {
		for key := range inv.held {
			ns, _, _ := strings.Cut(key, "/")
			namespaces[ns] = true
		}
	}
	out := Pods{}
	for _, ns := range slices.Sorted(maps.Keys(namespaces)) {
		list, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("listing the pods of namespace %s: %w", ns, err)
		}
		for i := range list.Items {
			p := &list.Items[i]
			out[p.Namespace+"/"+p.Name] = p
		}
	}
	return out, nil
}

// get is the pod as the list had it, or NotFound, as a get would say.
func (p Pods) get(_ context.Context, ns, name string) (*corev1.Pod, error) {
	if pod, ok := p[ns+"/"+name]; ok {
		return pod, nil
	}
	return nil, apierrors.NewNotFound(corev1.Resource("pods"), name)
}

// Safety checks, once, the invariants that hold at every moment, not only
// once the node has converged: every pod of the snapshot still runs (the
// same pod) and each of its MIG devices is still the same instance in the
// simulated GPUs. pods are the pods as HeldPods listed them, for this
// snapshot among others. It returns the first one broken as a *Violation,
// or an error that says what could not be read. The soak runs it every
// second.
func (inv *Invariants) Safety(ctx context.Context, pods Pods) error {
	state, err := inv.c.Local().SimState()
	if err != nil {
		return err
	}
	return inv.untouched(ctx, simDevices(state), pods.get)
}

// KeepFinding keeps err in last unless it is the poll's own deadline
// cutting a call short, which says nothing about the node: a failure then
// shows what the node last failed to meet.
func KeepFinding(last *error, err error) {
	if err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		strings.Contains(err.Error(), "would exceed context deadline") {
		return
	}
	*last = err
}

func (inv *Invariants) check(ctx context.Context, want map[int][]string) error {
	c := inv.c
	node, err := c.Node(ctx)
	if err != nil {
		return err
	}
	// Healed: the node is Ready and the node lifecycle controller's
	// taints are gone, so that the scheduler and the webhook see it again.
	ready := false
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			ready = cond.Status == corev1.ConditionTrue
		}
	}
	if !ready {
		return fmt.Errorf("node %s is not Ready", node.Name)
	}
	for _, taint := range node.Spec.Taints {
		if taint.Key == corev1.TaintNodeNotReady || taint.Key == corev1.TaintNodeUnreachable {
			return fmt.Errorf("node %s has the taint %s", node.Name, taint.ToString())
		}
	}
	// Converged: the state and the layout the mig.config asks for.
	if s := node.Labels[labelMigConfigState]; s != "success" {
		return fmt.Errorf("state %q, reason %q", s, node.Annotations[annotationReason])
	}
	layout, err := NodeLayout(node)
	if err != nil {
		return err
	}
	switch {
	case want != nil:
	case inv.dynamic:
		if want, err = inv.allocatedLayout(ctx, layout); err != nil {
			return err
		}
	default:
		if want, err = MigConfigLayout(node, len(layout)); err != nil {
			return err
		}
	}
	if diff := cmp.Diff(want, LayoutProfiles(layout)); diff != "" {
		return fmt.Errorf("the agent's layout, profiles by GPU (-want +got):\n%s", diff)
	}
	// Nothing leaked: the simulated GPUs have exactly that layout's
	// instances, which are what the agent reports.
	state, err := c.Local().SimState()
	if err != nil {
		return err
	}
	if len(state) != len(layout) {
		return fmt.Errorf("the simulator has %d GPUs, the agent's layout %d", len(state), len(layout))
	}
	for _, g := range layout {
		if g.Index < 0 || g.Index >= len(state) {
			return fmt.Errorf("the agent's layout has GPU %d, the simulator %d GPUs", g.Index, len(state))
		}
		s := state[g.Index]
		var uuids []string
		for _, in := range g.Instances {
			if in.UUID != "" {
				uuids = append(uuids, in.UUID)
			}
		}
		if diff := cmp.Diff(slices.Sorted(slices.Values(uuids)), slices.Sorted(maps.Keys(s.Devices)), cmpEmpty); diff != "" {
			return fmt.Errorf("GPU %d: MIG devices the agent reports and the simulator has differ (-agent +simulator):\n%s", g.Index, diff)
		}
		if s.GIs != len(g.Instances) {
			return fmt.Errorf("GPU %d: the simulator has %d GPU instances, the agent's layout %d", g.Index, s.GIs, len(g.Instances))
		}
	}
	// Untouched: every pod that held a device holds the same instances.
	sim := simDevices(state)
	var kubelet map[string][]string
	if !inv.dra {
		if kubelet, err = c.kubeletHolders(ctx); err != nil {
			return err
		}
	}
	usedBy := map[string][]string{}
	for _, g := range layout {
		for _, in := range g.Instances {
			for _, p := range in.UsedBy {
				usedBy[p] = append(usedBy[p], in.UUID)
			}
		}
	}
	if err := inv.untouched(ctx, sim, c.getPod); err != nil {
		return err
	}
	for _, key := range slices.Sorted(maps.Keys(inv.held)) {
		hp := inv.held[key]
		held := slices.Sorted(maps.Keys(hp.devices))
		if got := slices.Sorted(slices.Values(usedBy[key])); !slices.Equal(held, got) {
			return fmt.Errorf("the agent's layout says pod %s holds %v, it held %v", key, got, held)
		}
		if !inv.dra {
			if got := kubelet[key]; !slices.Equal(held, got) {
				return fmt.Errorf("the kubelet says pod %s holds %v, it held %v", key, got, held)
			}
		}
	}
	// Served: exactly the layout's devices, by the kubelet or the slices;
	// in dynamic mode, the placements and the claims' instances.
	if inv.dynamic {
		return inv.checkDynamic(ctx, layout, sim)
	}
	if inv.dra {
		return inv.checkDRA(ctx, layout)
	}
	return inv.checkDevicePlugin(ctx, node, layout)
}

// getPod reads a pod from the API server.
func (c *Cluster) getPod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	return c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
}

// untouched: every pod of the snapshot is the same pod, running, and each
// of its MIG devices is the same instance in sim. getPod reads a pod (from
// the API server, or from a list taken for several checks).
func (inv *Invariants) untouched(ctx context.Context, sim map[string]SimInstance, getPod func(ctx context.Context, ns, name string) (*corev1.Pod, error)) error {
	for _, key := range slices.Sorted(maps.Keys(inv.held)) {
		hp := inv.held[key]
		ns, name, _ := strings.Cut(key, "/")
		pod, err := getPod(ctx, ns, name)
		if apierrors.IsNotFound(err) {
			return violationf("pod %s, which held %v, is gone", key, slices.Sorted(maps.Keys(hp.devices)))
		}
		if err != nil {
			return err
		}
		if pod.UID != hp.uid || pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
			return violationf("pod %s: UID %s (was %s), phase %s, deleting %v: want the same pod running", key, pod.UID, hp.uid, pod.Status.Phase, pod.DeletionTimestamp != nil)
		}
		for u, was := range hp.devices {
			now, ok := sim[u]
			if !ok {
				return violationf("pod %s's MIG device %s (%+v) was destroyed", key, u, was)
			}
			if now != was {
				return violationf("pod %s's MIG device %s changed: was %+v, is %+v", key, u, was, now)
			}
		}
	}
	return nil
}

// checkDevicePlugin: the kubelet's registered devices and the Node's
// allocatable are the layout's devices.
func (inv *Invariants) checkDevicePlugin(ctx context.Context, node *corev1.Node, layout []LayoutGPU) error {
	want := LayoutDevices(layout)
	got, err := inv.c.Local().KubeletDevices(ctx)
	if err != nil {
		return err
	}
	if diff := cmp.Diff(nonEmpty(want), nonEmpty(got)); diff != "" {
		return fmt.Errorf("devices the kubelet has registered (-layout +kubelet):\n%s", diff)
	}
	counts := map[string]int64{}
	for r := range node.Status.Allocatable {
		if strings.HasPrefix(string(r), "nvidia.com/") {
			q := node.Status.Allocatable[r]
			counts[string(r)] = q.Value()
		}
	}
	wantCounts := map[string]int64{}
	for r := range counts {
		wantCounts[r] = 0
	}
	for r, ids := range want {
		wantCounts[r] = int64(len(ids))
	}
	if diff := cmp.Diff(wantCounts, counts); diff != "" {
		return fmt.Errorf("the Node's GPU allocatable (-layout +node):\n%s", diff)
	}
	return nil
}

// checkDRA: the node's pool is one generation of slices listing exactly
// the layout's devices, and the plugin's checkpoint and CDI specs name
// only claims the API server has.
func (inv *Invariants) checkDRA(ctx context.Context, layout []LayoutGPU) error {
	pool, err := inv.nodePool(ctx)
	if err != nil {
		return err
	}
	var served []string
	for _, s := range pool {
		for _, d := range s.Spec.Devices {
			if a, ok := d.Attributes["uuid"]; ok && a.StringValue != nil {
				served = append(served, *a.StringValue)
			}
		}
	}
	var want []string
	for _, ids := range LayoutDevices(layout) {
		want = append(want, ids...)
	}
	if diff := cmp.Diff(slices.Sorted(slices.Values(want)), slices.Sorted(slices.Values(served)), cmpEmpty); diff != "" {
		return fmt.Errorf("devices the node's ResourceSlices list (-layout +slices):\n%s", diff)
	}
	_, _, err = inv.checkClaimFiles(ctx, want)
	return err
}

// checkDynamic: the node's pool is one generation of slices offering
// placements (counter sets, and no MIG device of an instance); the
// checkpoint and CDI specs name only claims the API server has; every
// instance of the layout is a checkpointed claim's, and each claim's
// instances are the devices its allocation names, at their placements in
// the simulated GPUs (sim).
func (inv *Invariants) checkDynamic(ctx context.Context, layout []LayoutGPU, sim map[string]SimInstance) error {
	pool, err := inv.nodePool(ctx)
	if err != nil {
		return err
	}
	counters := 0
	for _, s := range pool {
		counters += len(s.Spec.SharedCounters)
	}
	if counters == 0 {
		return fmt.Errorf("the node's ResourceSlices of %s have no counter sets: the driver does not serve dynamic mode", draDriverName)
	}
	var want []string
	for _, ids := range LayoutDevices(layout) {
		want = append(want, ids...)
	}
	checkpoint, claims, err := inv.checkClaimFiles(ctx, want)
	if err != nil {
		return err
	}
	owner := map[string]string{} // instance UUID -> claim
	for _, uid := range slices.Sorted(maps.Keys(checkpoint)) {
		cl := checkpoint[uid]
		key := cl.Namespace + "/" + cl.Name
		var prepared []string
		for _, d := range cl.Devices {
			prepared = append(prepared, d.Name)
			owner[d.UUID] = key
			if !d.Created {
				continue
			}
			in, ok := sim[d.UUID]
			if !ok {
				return fmt.Errorf("claim %s's instance %s (%s) is not on the simulated GPUs", key, d.UUID, d.Name)
			}
			if in.GPU != d.GPUIndex || in.Start != d.Start {
				return fmt.Errorf("claim %s's instance %s is on GPU %d at %d, its device %s on GPU %d at %d", key, d.UUID, in.GPU, in.Start, d.Name, d.GPUIndex, d.Start)
			}
		}
		if got, want := slices.Sorted(slices.Values(prepared)), allocatedDevices(claims[uid], inv.c.NodeName); !slices.Equal(got, want) {
			return fmt.Errorf("claim %s: prepared %v, allocated %v", key, got, want)
		}
	}
	for _, g := range layout {
		for _, in := range g.Instances {
			if in.UUID == "" {
				return fmt.Errorf("GPU %d: a %s GPU instance without a compute instance, which Prepare never leaves: leaked", g.Index, in.Profile)
			}
			if _, ok := owner[in.UUID]; !ok {
				return fmt.Errorf("GPU %d: instance %s (%s) is no prepared claim's: leaked", g.Index, in.UUID, in.Profile)
			}
		}
	}
	return nil
}

// nodePool is the node's ResourceSlices of the driver, which must be one
// generation (none orphaned).
func (inv *Invariants) nodePool(ctx context.Context) ([]resourceapi.ResourceSlice, error) {
	list, err := inv.c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	gens := map[int64]int{}
	var out []resourceapi.ResourceSlice
	for _, s := range list.Items {
		if s.Spec.Driver != draDriverName || s.Spec.NodeName == nil || *s.Spec.NodeName != inv.c.NodeName {
			continue
		}
		gens[s.Spec.Pool.Generation]++
		out = append(out, s)
	}
	if len(gens) != 1 {
		return nil, fmt.Errorf("the node's ResourceSlices of %s: slices by pool generation %v, want one generation", draDriverName, gens)
	}
	return out, nil
}

// allocatedDevices is the devices of the driver the claim's allocation
// names in node's pool, sorted.
func allocatedDevices(c *resourceapi.ResourceClaim, node string) []string {
	var out []string
	if c == nil || c.Status.Allocation == nil {
		return out
	}
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver == draDriverName && r.Pool == node {
			out = append(out, r.Device)
		}
	}
	slices.Sort(out)
	return out
}

// allocatedLayout is the layout a dynamic node must have: the MIG
// profiles of the devices the claims' allocations name in its pool, by
// the index (in layout) of the GPU each is a placement of.
func (inv *Invariants) allocatedLayout(ctx context.Context, layout []LayoutGPU) (map[int][]string, error) {
	pool, err := inv.nodePool(ctx)
	if err != nil {
		return nil, err
	}
	index := map[string]int{}
	out := map[int][]string{}
	for _, g := range layout {
		index[g.UUID] = g.Index
		out[g.Index] = []string{}
	}
	type placement struct{ profile, parent string }
	offered := map[string]placement{}
	for _, s := range pool {
		for _, d := range s.Spec.Devices {
			var p placement
			if a, ok := d.Attributes["profile"]; ok && a.StringValue != nil {
				p.profile = *a.StringValue
			}
			if a, ok := d.Attributes["parentUUID"]; ok && a.StringValue != nil {
				p.parent = *a.StringValue
			}
			offered[d.Name] = p
		}
	}
	claims, err := inv.c.Client.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i := range claims.Items {
		for _, name := range allocatedDevices(&claims.Items[i], inv.c.NodeName) {
			p, ok := offered[name]
			if !ok {
				return nil, fmt.Errorf("claim %s/%s is allocated device %s, which the node's slices do not offer", claims.Items[i].Namespace, claims.Items[i].Name, name)
			}
			if p.profile == "" { // a whole GPU: no instance
				continue
			}
			g, ok := index[p.parent]
			if !ok {
				return nil, fmt.Errorf("claim %s/%s's device %s is on GPU %s, which the agent's layout does not have", claims.Items[i].Namespace, claims.Items[i].Name, name, p.parent)
			}
			out[g] = append(out[g], p.profile)
		}
	}
	// Sorted in place: a GPU with none keeps its empty list, as
	// layoutProfiles has it.
	for _, ps := range out {
		slices.Sort(ps)
	}
	return out, nil
}

// checkClaimFiles: the plugin's checkpoint and its copy list the same
// claims, each one the API server has, holding only devices of served (by
// UUID) and with its CDI spec, and every claim CDI spec is a checkpointed
// claim's. It returns the checkpoint and the API server's claims, by UID.
func (inv *Invariants) checkClaimFiles(ctx context.Context, served []string) (map[string]draCheckpointClaim, map[string]*resourceapi.ResourceClaim, error) {
	c := inv.c
	list, err := c.Client.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	known := map[string]*resourceapi.ResourceClaim{}
	for i := range list.Items {
		known[string(list.Items[i].UID)] = &list.Items[i]
	}
	local := c.Local()
	checkpoint, err := readDRACheckpoint(filepath.Join(local.DRAPluginDir(), "checkpoint.json"))
	if err != nil {
		return nil, nil, err
	}
	// Its copy (draplugin.CheckpointCopyFile), which restores an
	// unreadable checkpoint, must say the same: a stale one would restore
	// claims that are gone, or forget prepared ones.
	if cp, err := readDRACheckpoint(filepath.Join(local.DRAPluginDir(), "checkpoint-copy.json")); err != nil {
		return nil, nil, err
	} else if diff := cmp.Diff(slices.Sorted(maps.Keys(checkpoint)), slices.Sorted(maps.Keys(cp))); diff != "" {
		return nil, nil, fmt.Errorf("the DRA checkpoint's copy lists other claims (-checkpoint +copy):\n%s", diff)
	}
	inLayout := map[string]bool{}
	for _, u := range served {
		inLayout[u] = true
	}
	for _, cl := range checkpoint {
		if _, ok := known[cl.UID]; !ok {
			return nil, nil, fmt.Errorf("the DRA checkpoint has claim %s/%s (UID %s), which the API server does not", cl.Namespace, cl.Name, cl.UID)
		}
		for _, d := range cl.Devices {
			if !inLayout[d.UUID] {
				return nil, nil, fmt.Errorf("the DRA checkpoint's claim %s/%s holds %s, which is not in the layout", cl.Namespace, cl.Name, d.UUID)
			}
		}
		if _, err := os.Stat(filepath.Join(local.CDIDir, cdiClaimSpecPrefix+cl.UID+".json")); err != nil {
			return nil, nil, fmt.Errorf("the DRA checkpoint's claim %s/%s has no CDI spec: %w", cl.Namespace, cl.Name, err)
		}
	}
	entries, err := os.ReadDir(local.CDIDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, err
	}
	for _, e := range entries {
		uid, ok := strings.CutPrefix(e.Name(), cdiClaimSpecPrefix)
		if !ok {
			continue
		}
		uid = strings.TrimSuffix(uid, ".json")
		if _, ok := checkpoint[uid]; !ok {
			return nil, nil, fmt.Errorf("CDI spec %s is for a claim the DRA checkpoint does not have", filepath.Join(local.CDIDir, e.Name()))
		}
	}
	return checkpoint, known, nil
}

type draCheckpointClaim struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Devices   []struct {
		Name     string `json:"name"`
		UUID     string `json:"uuid"`
		GPUIndex int    `json:"gpuIndex"`
		Start    int    `json:"start"`
		// Created: dynamic mode made the instance at Prepare.
		Created bool `json:"created"`
	} `json:"devices"`
}

// readDRACheckpoint reads the DRA plugin's checkpoint of prepared claims,
// by UID; none yet is none prepared.
func readDRACheckpoint(path string) (map[string]draCheckpointClaim, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]draCheckpointClaim{}, nil
	}
	if err != nil {
		return nil, err
	}
	var data struct {
		Claims []draCheckpointClaim `json:"claims"`
	}
	if err := json.Unmarshal(b, &data); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := map[string]draCheckpointClaim{}
	for _, cl := range data.Claims {
		out[cl.UID] = cl
	}
	return out, nil
}

// kubeletHolders is the MIG devices each pod's containers hold, as the
// node's kubelet says (pod-resources List), by "namespace/name", sorted.
func (c *Cluster) kubeletHolders(ctx context.Context) (map[string][]string, error) {
	all, err := c.Local().KubeletAllPodDevices(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for pod, byRes := range all {
		for r, ids := range byRes {
			if strings.HasPrefix(r, "nvidia.com/mig-") {
				out[pod] = append(out[pod], ids...)
			}
		}
	}
	for _, ids := range out {
		slices.Sort(ids)
	}
	return out, nil
}

func sortedValues[K comparable](m map[K][]string) map[K][]string {
	out := map[K][]string{}
	for k, v := range m {
		out[k] = slices.Sorted(slices.Values(v))
	}
	return out
}

// cmpEmpty makes a nil and an empty slice or map equal.
var cmpEmpty = cmpopts.EquateEmpty()

// nonEmpty is m without its keys of no value.
func nonEmpty(m map[string][]string) map[string][]string {
	out := map[string][]string{}
	for k, v := range m {
		if len(v) > 0 {
			out[k] = v
		}
	}
	return out
}

// simDevices is every MIG device of the simulated GPUs, by UUID.
func simDevices(state []SimGPU) map[string]SimInstance {
	out := map[string]SimInstance{}
	for _, g := range state {
		maps.Copy(out, g.Devices)
	}
	return out
}

// LayoutGPU and LayoutInstance decode the agent's migflex.io/mig.layout
// annotation.
type LayoutGPU struct {
	Index     int              `json:"index"`
	UUID      string           `json:"uuid"`
	Model     string           `json:"model"`
	MigMode   string           `json:"migMode"`
	Health    string           `json:"health"`
	Instances []LayoutInstance `json:"instances"`
}

type LayoutInstance struct {
	Profile   string `json:"profile"`
	Placement struct {
		Start int `json:"start"`
		Size  int `json:"size"`
	} `json:"placement"`
	GI     uint32   `json:"gi"`
	CI     uint32   `json:"ci"`
	UUID   string   `json:"uuid"`
	Health string   `json:"health"`
	UsedBy []string `json:"usedBy"`
}

// NodeLayout decodes node's migflex.io/mig.layout annotation.
func NodeLayout(node *corev1.Node) ([]LayoutGPU, error) {
	s, ok := node.Annotations[annotationMigLayout]
	if !ok {
		return nil, fmt.Errorf("node %s has no %s annotation", node.Name, annotationMigLayout)
	}
	var l []LayoutGPU
	if err := json.Unmarshal([]byte(s), &l); err != nil {
		return nil, fmt.Errorf("annotation %s: %w: %s", annotationMigLayout, err, s)
	}
	return l, nil
}

// LayoutProfiles is each GPU's MIG profiles, sorted; a GPU without MIG
// has none (an empty list).
func LayoutProfiles(l []LayoutGPU) map[int][]string {
	out := map[int][]string{}
	for _, g := range l {
		ps := []string{}
		for _, in := range g.Instances {
			ps = append(ps, in.Profile)
		}
		slices.Sort(ps)
		out[g.Index] = ps
	}
	return out
}

// LayoutDevices is the device IDs a layout serves under the mixed
// strategy, by resource name: each MIG device as nvidia.com/mig-<profile>,
// each GPU without MIG as nvidia.com/gpu; sorted.
func LayoutDevices(l []LayoutGPU) map[string][]string {
	out := map[string][]string{}
	for _, g := range l {
		if g.MigMode == "Disabled" {
			out["nvidia.com/gpu"] = append(out["nvidia.com/gpu"], g.UUID)
			continue
		}
		for _, in := range g.Instances {
			if in.UUID != "" {
				r := "nvidia.com/mig-" + strings.ReplaceAll(in.Profile, "+", ".")
				out[r] = append(out[r], in.UUID)
			}
		}
	}
	for _, ids := range out {
		slices.Sort(ids)
	}
	return out
}
