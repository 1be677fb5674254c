package agent

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
)

func TestParseBusyPolicy(t *testing.T) {
	for _, s := range []string{"wait", "evict"} {
		if p, err := BusyPolicies.Parse(s); err != nil || string(p) != s {
			t.Errorf("BusyPolicies.Parse(%q) = %q, %v", s, p, err)
		}
	}
	if _, err := BusyPolicies.Parse("delete"); err == nil || err.Error() != `unknown busy policy "delete" (want one of wait, evict)` {
		t.Errorf("BusyPolicies.Parse(delete) error = %v", err)
	}
}

// TestFinish pins when an outcome is worth an Event: news only, so an agent
// restarted on a node it already configured records nothing.
func TestFinish(t *testing.T) {
	applied := event{corev1.EventTypeNormal, ReasonApplied, "changed GPU 0"}
	tests := []struct {
		name    string
		prev    status
		out     outcome
		reason  string
		message string
		want    []event
	}{
		{
			name: "success again, nothing changed: no Event",
			prev: status{State: nodeinfo.StateSuccess}, out: outcome{status: status{State: nodeinfo.StateSuccess}},
			reason: ReasonApplied, message: "in place",
		},
		{
			name: "first success without changes: Applied with the message",
			prev: status{}, out: outcome{status: status{State: nodeinfo.StateSuccess}},
			reason: ReasonApplied, message: "in place",
			want: []event{{corev1.EventTypeNormal, ReasonApplied, "in place"}},
		},
		{
			name: "success after changes keeps its own Applied Event only",
			prev: status{State: nodeinfo.StateFailed, Reason: "x"}, out: outcome{status: status{State: nodeinfo.StateSuccess}, events: []event{applied}},
			reason: ReasonApplied, message: "in place",
			want: []event{applied},
		},
		{
			name: "changes while success stays success: the Applied Event stays",
			prev: status{State: nodeinfo.StateSuccess}, out: outcome{status: status{State: nodeinfo.StateSuccess}, events: []event{applied}},
			reason: ReasonApplied,
			want:   []event{applied},
		},
		{
			name: "new failure: Warning with the reason",
			prev: status{State: nodeinfo.StateSuccess}, out: outcome{status: status{nodeinfo.StateFailed, "bad yaml"}},
			reason: ReasonInvalid,
			want:   []event{{corev1.EventTypeWarning, ReasonInvalid, "bad yaml"}},
		},
		{
			name: "the same failure again: no Event",
			prev: status{nodeinfo.StateFailed, "bad yaml"}, out: outcome{status: status{nodeinfo.StateFailed, "bad yaml"}},
			reason: ReasonInvalid,
		},
		{
			name: "another failure: Warning",
			prev: status{nodeinfo.StateFailed, "bad yaml"}, out: outcome{status: status{nodeinfo.StateFailed, "GPU 0 failed"}},
			reason: ReasonFailed,
			want:   []event{{corev1.EventTypeWarning, ReasonFailed, "GPU 0 failed"}},
		},
		{
			name: "pending with other GPUs applied: both",
			prev: status{}, out: outcome{status: status{nodeinfo.StatePending, "GPU 0: ns/p"}, events: []event{applied}},
			reason: ReasonPending,
			want:   []event{applied, {corev1.EventTypeNormal, ReasonPending, "GPU 0: ns/p"}},
		},
		{
			name: "still pending on the same pods: no Event",
			prev: status{nodeinfo.StatePending, "GPU 0: ns/p"}, out: outcome{status: status{nodeinfo.StatePending, "GPU 0: ns/p"}},
			reason: ReasonPending,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := finish(tc.prev, tc.out, tc.reason, tc.message)
			if diff := cmp.Diff(tc.want, got.events, cmp.AllowUnexported(event{})); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}
