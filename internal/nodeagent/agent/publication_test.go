package agent

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
)

// visibleServer answers Visible as told.
type visibleServer struct {
	nopServer
	layout  string
	missing []string
	err     error
}

func (s *visibleServer) Visible(context.Context, *corev1.Node) (string, []string, error) {
	return s.layout, s.missing, s.err
}

func (s *visibleServer) Publisher() (string, string, string) {
	return "the publisher", "the place", "check the publisher"
}

// Success waits until the server says the scheduler sees the layout, in the
// server's words; a server that cannot tell keeps the state pending.
func TestAwaitPublication(t *testing.T) {
	src := nodeinfo.Source{Kind: nodeinfo.SourceAnnotation}
	success := status{State: nodeinfo.StateSuccess}
	srv := &visibleServer{layout: "L1", missing: []string{"x 0 of 1"}}
	a := &Agent{opts: Options{Server: srv, AllocatableTimeout: time.Hour}}
	ctx, node := context.Background(), &corev1.Node{}

	st, evs, retry := a.awaitPublication(ctx, node, src, success)
	if st.State != nodeinfo.StatePending || !strings.Contains(st.Reason, "waiting for the publisher to publish it in the place (x 0 of 1)") || !retry || len(evs) != 0 {
		t.Errorf("not visible yet: %+v, %v, %v", st, evs, retry)
	}
	srv.missing, srv.err = nil, errors.New("API server unreachable")
	if st, _, retry := a.awaitPublication(ctx, node, src, success); st.State != nodeinfo.StatePending || !strings.Contains(st.Reason, "cannot tell: API server unreachable") || !retry {
		t.Errorf("cannot tell: %+v, %v", st, retry)
	}
	srv.err = nil
	if st, _, retry := a.awaitPublication(ctx, node, src, success); st != success || retry {
		t.Errorf("visible: %+v, %v; want success", st, retry)
	}
	// Once visible, the layout is not waited for again.
	srv.missing = []string{"x 0 of 1"}
	if st, _, _ := a.awaitPublication(ctx, node, src, success); st != success {
		t.Errorf("a published layout waited for again: %+v", st)
	}
	// A new layout is; past the timeout it fails, once with a Warning.
	srv.layout, a.opts.AllocatableTimeout = "L2", time.Nanosecond
	a.awaitPublication(ctx, node, src, success)
	time.Sleep(time.Millisecond)
	st, evs, _ = a.awaitPublication(ctx, node, src, success)
	if st.State != nodeinfo.StateFailed || !strings.HasSuffix(st.Reason, ": check the publisher") || len(evs) != 1 || evs[0].Reason != ReasonNotPublished {
		t.Errorf("timed out: %+v, %v", st, evs)
	}
	if _, evs, _ := a.awaitPublication(ctx, node, src, success); len(evs) != 0 {
		t.Errorf("the Warning repeated: %v", evs)
	}
}
