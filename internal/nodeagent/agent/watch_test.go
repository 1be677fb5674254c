package agent

import (
	"context"
	"net/http"
	"net/url"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
)

// TestWatchesOnlyItsNode: the agent's list and watch of Nodes carry a field
// selector on its own name, so a thousand agents do not each receive every
// Node of the cluster.
func TestWatchesOnlyItsNode(t *testing.T) {
	api := startAPIServer(t)
	n := newNode(t, api, withAnnotation(nodeinfo.AnnotationMigConfig, allThree))
	// Another Node, which the agent must not see.
	if _, err := api.client.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name + "-other"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var (
		mu      sync.Mutex
		queries []url.Values
	)
	cfg := rest.CopyConfig(api.cfg)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodGet && r.URL.Path == "/api/v1/nodes" {
				mu.Lock()
				queries = append(queries, r.URL.Query())
				mu.Unlock()
			}
			return rt.RoundTrip(r)
		})
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	run := n.start(withClient(client))
	n.waitState(nodeinfo.StateSuccess)
	run.stop()

	mu.Lock()
	defer mu.Unlock()
	if len(queries) == 0 {
		t.Fatal("the agent never listed or watched Nodes")
	}
	want := "metadata.name=" + n.name
	for _, q := range queries {
		if got := q.Get("fieldSelector"); got != want {
			t.Errorf("Node list/watch %v: fieldSelector %q, want %q", q, got, want)
		}
	}
}
