package agent

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/nodeagent/podresources"
)

// The agent starting, restarting, and its Node going away.

// testServesBeforeTheAPIServerAnswers: the devices NVML has are served
// before the Node is read, so a restart with the API server down zeroes
// nothing.
func testServesBeforeTheAPIServerAnswers(t *testing.T, api *apiServer) {
	n := newNode(t, api)
	n.partition(0, "3g.40gb", "2g.20gb")
	// Nothing listens there: the Node never arrives, the devices are
	// served all the same.
	down, err := kubernetes.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	r := n.start(withClient(down))
	n.waitServed(map[string]int{resource2g: 1, resource3g: 1, string(resourcename.GPU): 1})
	if got := httptestGet(t, r.agent.Handler(), "/healthz"); got != "ok\n" {
		t.Errorf("/healthz = %q", got)
	}
	r.stop()
}

// testRestartTouchesNothing: an agent restarted on the same layout
// changes no GPU and records no Event.
func testRestartTouchesNothing(t *testing.T, api *apiServer) {
	n := newNode(t, api, withStateDir(t.TempDir()), withAnnotation(nodeinfo.AnnotationMigConfig, mixedLayout))
	first := n.start()
	n.waitState(nodeinfo.StateSuccess)
	n.waitServed(map[string]int{resource2g: 2, resource3g: 1, resource7g: 1})
	n.waitEvent(corev1.EventTypeNormal, ReasonApplied)
	first.stop()
	n.lib.Close()

	statePath := filepath.Join(n.simCfg.StateDir, "state.json")
	stateBefore := statFile(t, statePath)
	layoutBefore := n.layoutOf()
	nodeBefore := n.get()
	eventsBefore := len(n.events())

	// A new agent (a new process would see exactly this) on the same
	// state directory, through a client that counts requests.
	n.openSim()
	counts := &requestCounter{counts: map[string]int{}}
	cfg := rest.CopyConfig(api.cfg)
	cfg.WrapTransport = counts.wrap
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The counter counts a reconcile before its report and Events are
	// sent; the loop is sequential, so a second reconcile (a resync)
	// means the first one's requests, if any, were all made.
	second := n.start(withClient(client), withResync(50*time.Millisecond))
	waitCounter(t, second, "migflex_agent_reconciles_total", "result", resultSuccess, 2)
	n.waitServed(map[string]int{resource2g: 2, resource3g: 1, resource7g: 1})
	second.stop()

	if got := statFile(t, statePath); got != stateBefore {
		t.Errorf("the simulator state was written: %+v, before %+v", got, stateBefore)
	}
	if diff := cmp.Diff(layoutBefore, n.layoutOf()); diff != "" {
		t.Errorf("layout changed (-before +after):\n%s", diff)
	}
	if p := counts.get("PATCH nodes"); p != 0 {
		t.Errorf("%d Node patches, want none", p)
	}
	if e := counts.get("POST events"); e != 0 {
		t.Errorf("%d Events created, want none", e)
	}
	if rv := n.get().ResourceVersion; rv != nodeBefore.ResourceVersion {
		t.Errorf("Node resourceVersion %s, before %s", rv, nodeBefore.ResourceVersion)
	}
	if got := len(n.events()); got != eventsBefore {
		t.Errorf("%d Events, before %d", got, eventsBefore)
	}
}

// testDeletedNodeIsNotRecreated: a report on a Node deleted meanwhile
// fails instead of creating the Node again.
func testDeletedNodeIsNotRecreated(t *testing.T, api *apiServer) {
	n := newNode(t, api)
	a, err := New(Options{NodeName: n.name, Client: api.client, NVML: n.lib, Server: nopServer{}, PodResources: podresources.New(n.podres.Socket), Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	a.nodes = nopMutationCache{}
	stale := n.get()
	if err := api.client.CoreV1().Nodes().Delete(context.Background(), n.name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.applyMetadata(context.Background(), stale, map[string]string{nodeinfo.LabelGPUCount: "2"}, nil); err == nil {
		t.Error("applying to a deleted Node succeeded")
	}
	if _, err := api.client.CoreV1().Nodes().Get(context.Background(), n.name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Node is back after the apply: %v", err)
	}
}
