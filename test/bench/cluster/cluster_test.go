package cluster

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/testsupport/testenv"
	"github.com/migflex/migflex/test/bench/fleet"
)

func TestParallel(t *testing.T) {
	var calls atomic.Int64
	seen := make([]atomic.Bool, 100)
	if err := Parallel(context.Background(), 100, 7, func(_ context.Context, i int) error {
		calls.Add(1)
		seen[i].Store(true)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 100 {
		t.Errorf("%d calls, want 100", calls.Load())
	}
	for i := range seen {
		if !seen[i].Load() {
			t.Errorf("index %d not called", i)
		}
	}

	boom := errors.New("boom")
	calls.Store(0)
	err := Parallel(context.Background(), 1000, 1, func(_ context.Context, i int) error {
		calls.Add(1)
		if i == 3 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Errorf("error %v, want %v", err, boom)
	}
	if calls.Load() != 4 {
		t.Errorf("%d calls after an error at the 4th with one worker, want 4", calls.Load())
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Parallel(ctx, 10, 2, func(context.Context, int) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: error %v, want %v", err, context.Canceled)
	}
}

func TestCreateNodesFake(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset()
	if err := CreateNodes(ctx, c, 0, 40, 4); err != nil {
		t.Fatal(err)
	}
	checkNodes(t, c, 40)
}

func checkNodes(t *testing.T, c kubernetes.Interface, want int) {
	t.Helper()
	list, err := c.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != want {
		t.Fatalf("%d nodes, want %d", len(list.Items), want)
	}
	for _, n := range list.Items {
		var i int
		for i = range want {
			if fleet.NodeName(i) == n.Name {
				break
			}
		}
		got := schedview.NodeFromAPI(&n).Allocatable
		if len(got) != len(fleet.KindOf(i).Devices) {
			t.Errorf("%s: GPU allocatable %v, want %v", n.Name, got, fleet.KindOf(i).Devices)
		}
		// No taint but the fleet's: a leftover not-ready taint would keep
		// every pod off the node.
		if diff := cmp.Diff(fleet.Node(i).Spec.Taints, n.Spec.Taints, cmpopts.IgnoreFields(corev1.Taint{}, "TimeAdded")); diff != "" {
			t.Errorf("%s: taints (-want +got):\n%s", n.Name, diff)
		}
	}
}

// TestPopulateAPIServer fills a real API server as the benchmark does, at a
// small size, and checks what a webhook would see.
func TestPopulateAPIServer(t *testing.T) {
	cfg := testenv.Start(t)
	ctx := context.Background()
	c, err := SetupClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := CreateNodes(ctx, c, 0, 60, 8); err != nil {
		t.Fatal(err)
	}
	checkNodes(t, c, 60)
	if err := CreateNamespaces(ctx, c); err != nil {
		t.Fatal(err)
	}
	pods, err := fleet.BoundPods(60, 300)
	if err != nil {
		t.Fatal(err)
	}
	if err := CreatePods(ctx, c, pods, 8); err != nil {
		t.Fatal(err)
	}
	list, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName!="})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 300 {
		t.Fatalf("%d bound pods, want 300", len(list.Items))
	}
	for _, p := range list.Items {
		if p.Status.Phase != corev1.PodPending {
			t.Errorf("pod %s/%s is %s, want Pending", p.Namespace, p.Name, p.Status.Phase)
		}
	}

	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := WriteKubeconfig(cfg, path); err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	kcClient, err := kubernetes.NewForConfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kcClient.CoreV1().Nodes().Get(ctx, fleet.NodeName(0), metav1.GetOptions{}); err != nil {
		t.Errorf("client from the written kubeconfig: %v", err)
	}
}
