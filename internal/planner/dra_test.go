package planner

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/domain/schedview"
)

// Each pending pod is told once what of its claims the planner does not
// read, again when that changes, and forgotten when it stops waiting.
func TestTellUnread(t *testing.T) {
	m := newMemory(0)
	c := newCluster(t)
	p := c.pod("p", mig1g, 1)
	unread := map[types.UID][]string{p.UID: {"claim gpu request r: allocationMode All is not read"}}
	if evs := m.tellUnread([]*corev1.Pod{p}, unread); len(evs) != 1 || evs[0].reason != ReasonClaimUnread {
		t.Fatalf("first round: %+v, want one %s", evs, ReasonClaimUnread)
	}
	if evs := m.tellUnread([]*corev1.Pod{p}, unread); len(evs) != 0 {
		t.Errorf("same news again: %+v", evs)
	}
	unread[p.UID] = []string{"claim gpu request r: firstAvailable is not read yet"}
	if evs := m.tellUnread([]*corev1.Pod{p}, unread); len(evs) != 1 {
		t.Errorf("changed news: %+v, want one Event", evs)
	}
	// A pod naming many claims: the message stays within an Event's size.
	var many []string
	for range 100 {
		many = append(many, "claim gpu request r: `device.attributes['gpu.migflex.io'].profile == 3`: profile == 3 is false on every device")
	}
	unread[p.UID] = many
	evs := m.tellUnread([]*corev1.Pod{p}, unread)
	if len(evs) != 1 {
		t.Fatalf("100 lines: %d Events, want 1", len(evs))
	}
	if n := len(evs[0].message); n > maxUnreadMessage || !strings.HasSuffix(evs[0].message, "...") {
		t.Errorf("100 lines: a message of %d bytes; want at most %d, cut", n, maxUnreadMessage)
	}
	bound := p.DeepCopy()
	bound.Spec.NodeName = "n"
	if evs := m.tellUnread([]*corev1.Pod{bound}, unread); len(evs) != 0 || len(m.unread) != 0 {
		t.Errorf("a bound pod: %+v, memory %v; want none", evs, m.unread)
	}
}

// fakeDRA is a DRAView over fixed classes and claims.
type fakeDRA struct {
	classes *schedview.DRAClasses
	claims  map[string]*resourceapi.ResourceClaim
}

func (f fakeDRA) Classes() *schedview.DRAClasses { return f.classes }
func (f fakeDRA) Claim(ns, name string) *resourceapi.ResourceClaim {
	return f.claims[ns+"/"+name]
}
func (f fakeDRA) Template(string, string) *resourceapi.ResourceClaimTemplate { return nil }

// A pod that has not started and whose claims hold devices of ours is
// claimed on that node, bound or between allocation and binding; one
// running, deleted, or holding another driver's devices is not.
func TestAsScheduledClaimed(t *testing.T) {
	dcs, err := dra.DeviceClasses([]string{"1g.10gb", "3g.40gb"})
	if err != nil {
		t.Fatal(err)
	}
	var classes []*resourceapi.DeviceClass
	for i := range dcs {
		classes = append(classes, &dcs[i])
	}
	alloc := func(driver, pool string) *resourceapi.AllocationResult {
		return &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
			{Request: "r", Driver: driver, Pool: pool, Device: "gpu-0-mig-3g40gb-9-0"}}}}
	}
	dv := fakeDRA{classes: schedview.NewDRAClasses(classes), claims: map[string]*resourceapi.ResourceClaim{
		"ns/ours":   {ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ours"}, Status: resourceapi.ResourceClaimStatus{Allocation: alloc(dra.DriverName, "n1")}},
		"ns/theirs": {ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "theirs"}, Status: resourceapi.ResourceClaimStatus{Allocation: alloc("gpu.nvidia.com", "n1")}},
		"ns/open":   {ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "open"}},
	}}
	pod := func(name, claim string, mod func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name)},
			Spec:   corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(claim)}}},
			Status: corev1.PodStatus{Phase: corev1.PodPending}}
		if mod != nil {
			mod(p)
		}
		return p
	}
	pods := []*corev1.Pod{
		pod("being-bound", "ours", nil),
		pod("bound", "ours", func(p *corev1.Pod) { p.Spec.NodeName = "n2" }),
		pod("running", "ours", func(p *corev1.Pod) { p.Spec.NodeName = "n1"; p.Status.Phase = corev1.PodRunning }),
		pod("deleted", "ours", func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} }),
		pod("other-driver", "theirs", nil),
		pod("not-allocated", "open", nil),
	}
	got := asScheduled(dv, pods).claimed
	want := map[string][]string{"n1": {"ns/being-bound"}, "n2": {"ns/bound"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("claimed (-want +got):\n%s", diff)
	}
	if got := asScheduled(nil, pods).claimed; got != nil {
		t.Errorf("without DRA: %v", got)
	}
}
