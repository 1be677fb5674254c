package agent

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
)

// TestEventsFollowTheReport: while the agent cannot apply its labels to
// the Node, it records no Event (users would read of a change the Node
// does not show) and its retries pile up none; once a report succeeds,
// the change is recorded once.
func TestEventsFollowTheReport(t *testing.T) {
	api := startAPIServer(t)
	n := newNode(t, api, withAnnotation(nodeinfo.AnnotationMigConfig, mixedLayout))

	var failing atomic.Bool
	failing.Store(true)
	cfg := rest.CopyConfig(api.cfg)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if failing.Load() && r.Method == http.MethodPatch && strings.HasPrefix(r.URL.Path, "/api/v1/nodes/") {
				return &http.Response{
					StatusCode: http.StatusServiceUnavailable,
					Header:     http.Header{"Content-Type": {"text/plain"}},
					Body:       http.NoBody,
					Request:    r,
				}, nil
			}
			return rt.RoundTrip(r)
		})
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	run := n.start(withClient(client))

	// The first reconcile changes the GPUs and fails to report; the
	// retries find the layout in place and fail to report again.
	waitCounter(t, run, "migflex_agent_reconcile_errors_total", "stage", stageReport, 3)
	if evs := n.events(); len(evs) != 0 {
		t.Errorf("Events before any report succeeded: %s", describeEvents(evs))
	}

	failing.Store(false)
	n.waitState(nodeinfo.StateSuccess)
	ev := n.waitEvent(corev1.EventTypeNormal, ReasonApplied, "create 2g.20gb@0:2")
	// The report that succeeded recorded the Events; the next reconcile
	// (a resync) would add none, so the count is final once the state is
	// success and the Event is there.
	if evs := n.events(); len(evs) != 1 {
		t.Errorf("%d Events, want the one MigConfigApplied that names the change (%q): %s", len(evs), ev.Message, describeEvents(evs))
	}
}

func TestKeepUnsent(t *testing.T) {
	applied := func(m string) event { return event{corev1.EventTypeNormal, ReasonApplied, m} }
	pending := event{corev1.EventTypeNormal, ReasonPending, "waiting"}
	tests := []struct {
		name        string
		unsent, evs []event
		wantKept    []event
	}{
		{name: "first", evs: []event{applied("changed")}, wantKept: []event{applied("changed")}},
		{
			name:     "same reason again keeps the first",
			unsent:   []event{applied("changed")},
			evs:      []event{applied("in place")},
			wantKept: []event{applied("changed")},
		},
		{
			name:     "other reasons are history",
			unsent:   []event{pending},
			evs:      []event{applied("changed")},
			wantKept: []event{pending, applied("changed")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kept := keepUnsent(tt.unsent, tt.evs)
			if !slicesEqual(kept, tt.wantKept) {
				t.Errorf("keepUnsent = %v, want %v", kept, tt.wantKept)
			}
		})
	}

	// A reconcile after a failed report that reaches the same conclusion
	// less precisely adds nothing to what waited.
	got := withUnsent([]event{applied("GPU 0: create 3g.40gb")}, []event{applied("the layout is in place")})
	if !slicesEqual(got, []event{applied("GPU 0: create 3g.40gb")}) {
		t.Errorf("withUnsent = %v, want only the waiting Event", got)
	}

	var many []event
	for i := range 2 * maxUnsent {
		many = keepUnsent(many, []event{{corev1.EventTypeWarning, ReasonFailed + string(rune('a'+i)), "x"}})
	}
	if len(many) != maxUnsent || many[len(many)-1].Reason != ReasonFailed+string(rune('a'+2*maxUnsent-1)) {
		t.Errorf("keepUnsent kept %d (last %v), want the newest %d", len(many), many[len(many)-1], maxUnsent)
	}
}

func slicesEqual(a, b []event) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
