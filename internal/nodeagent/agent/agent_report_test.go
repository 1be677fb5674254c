package agent

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/nodeagent/health"
	"github.com/migflex/migflex/internal/nodeagent/podresources/podresourcestest"
	"github.com/migflex/migflex/internal/testsupport/testutil"
)

// What the agent reports beside the state: device health, the pods holding
// devices, metrics.

// testHealthInTheLayout: an Xid on a device shows in the layout
// annotation's health.
func testHealthInTheLayout(t *testing.T, api *apiServer) {
	n := newNode(t, api, withAnnotation(nodeinfo.AnnotationMigConfig, allThree))
	w, err := health.New(n.lib, health.Options{QuietPeriod: -1, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	n.start(withHealth(w))
	n.waitState(nodeinfo.StateSuccess)
	n.waitServed(map[string]int{resource3g: 4})
	gpus := n.discover()
	victim := gpus[1].Instances[0]
	deadline := time.Now().Add(hangTimeout)
	for len(w.Watching()) < 2 { // an Xid before the watch is lost, as on real NVML
		if time.Now().After(deadline) {
			t.Fatal("the health watcher never watched both GPUs")
		}
		time.Sleep(pollInterval) // polling a condition nothing signals
	}
	if err := n.lib.InjectXid(1, victim.GIID, victim.CIID, 79); err != nil {
		t.Fatal(err)
	}
	n.waitNode("the unhealthy device in the layout", func(o *corev1.Node) bool {
		var l []nodeinfo.GPU
		if json.Unmarshal([]byte(o.Annotations[nodeinfo.AnnotationLayout]), &l) != nil || len(l) != 2 {
			return false
		}
		for _, in := range l[1].Instances {
			if in.UUID == victim.UUID {
				return in.Health == nodeinfo.HealthUnhealthy
			}
		}
		return false
	})
}

// The pods holding each device are in the layout annotation as they
// come and go, with one write per change and none while nothing
// changes; the profile table of the node's model is published beside.
func testDevicesInUseInTheLayout(t *testing.T, api *apiServer) {
	n := newNode(t, api, withAnnotation(nodeinfo.AnnotationMigConfig, allThree))
	r := n.start(withInUseInterval(20 * time.Millisecond))
	obj := n.waitState(nodeinfo.StateSuccess)
	models, err := nodeinfo.ParseProfiles(obj.Annotations[nodeinfo.AnnotationProfiles])
	if err != nil {
		t.Fatal(err)
	}
	if want := n.discover()[0].Profiles; len(models) != 1 || models[0].Name != "H100-SXM5-80GB" || !cmp.Equal(models[0].MIGProfiles(), want) {
		t.Errorf("profiles annotation %+v, want the H100's table %+v", models, want)
	}
	victim := n.discover()[1].Instances[1]
	usedBy := func(o *corev1.Node) []string {
		l, err := nodeinfo.ParseLayout(o.Annotations[nodeinfo.AnnotationLayout])
		if err != nil || len(l) != 2 {
			return []string{"unreadable"}
		}
		for _, in := range l[1].Instances {
			if in.UUID == victim.UUID {
				return in.UsedBy
			}
		}
		return []string{"missing"}
	}
	// Settled: no write happens while nothing changes. The agent counts
	// a write after the API server answers it, so the Node can show a
	// write before its count does; polls are one loop, so the count is
	// complete once the poll after the one that wrote has begun.
	settled := func() float64 {
		t.Helper()
		calls := n.podres.Calls()
		testutil.Eventually(t, "one more pod-resources poll", func() bool { return n.podres.Calls() > calls })
		before := r.counter("migflex_agent_node_writes_total", "cause", causeInUse)
		calls = n.podres.Calls()
		testutil.Eventually(t, "five more pod-resources polls", func() bool { return n.podres.Calls() >= calls+5 })
		after := r.counter("migflex_agent_node_writes_total", "cause", causeInUse)
		if after != before {
			t.Errorf("%v in-use writes while nothing changed", after-before)
		}
		return after
	}
	base := settled()
	n.podres.Set(podresourcestest.Device{Namespace: "ml", Pod: "train", Container: "c", Resource: resource3g, IDs: []string{victim.UUID}})
	n.waitNode("the pod in the layout", func(o *corev1.Node) bool { return slices.Equal(usedBy(o), []string{"ml/train"}) })
	if got := settled(); got != base+1 {
		t.Errorf("%v in-use writes for one pod starting, want 1", got-base)
	}
	n.podres.Set()
	n.waitNode("the pod gone from the layout", func(o *corev1.Node) bool { return usedBy(o) == nil })
	if got := settled(); got != base+2 {
		t.Errorf("%v in-use writes for one pod starting and ending, want 2", got-base)
	}
}

// testMetrics: /metrics serves the agent's metrics after a reconcile.
func testMetrics(t *testing.T, api *apiServer) {
	n := newNode(t, api, withAnnotation(nodeinfo.AnnotationMigConfig, allThree))
	r := n.start()
	n.waitState(nodeinfo.StateSuccess)
	waitCounter(t, r, "migflex_agent_reconciles_total", "result", resultSuccess)
	rec := httptestGet(t, r.agent.Handler(), "/metrics")
	for _, want := range []string{
		`migflex_agent_reconciles_total{result="success"}`,
		`migflex_agent_reconcile_duration_seconds_count{result="success"}`,
		`migflex_agent_devices{health="healthy",resource="nvidia.com/mig-3g.40gb"} 4`,
		`migflex_agent_devices{health="unhealthy",resource="nvidia.com/mig-3g.40gb"} 0`,
	} {
		if !strings.Contains(rec, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, rec)
		}
	}
	if got := httptestGet(t, r.agent.Handler(), "/healthz"); got != "ok\n" {
		t.Errorf("/healthz = %q", got)
	}
}
