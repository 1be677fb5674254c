package planner

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
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
	bound := p.DeepCopy()
	bound.Spec.NodeName = "n"
	if evs := m.tellUnread([]*corev1.Pod{bound}, unread); len(evs) != 0 || len(m.unread) != 0 {
		t.Errorf("a bound pod: %+v, memory %v; want none", evs, m.unread)
	}
}
