package planner

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/testsupport/testenv"
)

// TestMeasureWrites times a round's write phase (sendWrites) of 500 Node
// applies against envtest's API server, serial and parallel, under the
// client limits named, in one run: a measurement for docs/BENCHMARKS.md,
// not a check, run only with MIGFLEX_MEASURE_WRITES=1.
func TestMeasureWrites(t *testing.T) {
	if os.Getenv("MIGFLEX_MEASURE_WRITES") == "" {
		t.Skip("a measurement: MIGFLEX_MEASURE_WRITES=1 runs it")
	}
	const nodes = 500
	cfg := testenv.Start(t)
	admin := rest.CopyConfig(cfg)
	admin.QPS, admin.Burst = -1, 0
	ac := kubernetes.NewForConfigOrDie(admin)
	ctx := context.Background()
	for i := range nodes {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%03d", i)}}
		if _, err := ac.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for round, tc := range []struct {
		qps        float32
		burst, par int
	}{
		{20, 40, 1}, {20, 40, 8}, {50, 100, 1}, {50, 100, 8}, {50, 100, 16}, {-1, 0, 1}, {-1, 0, 8}, {-1, 0, 16},
		{20, 40, 1}, {20, 40, 8}, {50, 100, 1}, {50, 100, 8}, {50, 100, 16}, {-1, 0, 1}, {-1, 0, 8}, {-1, 0, 16},
	} {
		rc := rest.CopyConfig(cfg)
		rc.QPS, rc.Burst = tc.qps, tc.burst
		c, err := New(Options{Client: kubernetes.NewForConfigOrDie(rc), Policy: testOptions().Policy, WriteParallelism: tc.par})
		if err != nil {
			t.Fatal(err)
		}
		list, err := ac.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var ws []nodeWrite
		for i := range list.Items {
			ws = append(ws, nodeWrite{node: &list.Items[i], key: nodeinfo.AnnotationMigConfig, value: fmt.Sprint("layout-", round), manager: DefaultFieldManager})
		}
		start := time.Now()
		errs := c.sendWrites(ctx, ws)
		took := time.Since(start)
		failed := 0
		for _, err := range errs {
			if err != nil {
				failed++
			}
		}
		t.Logf("qps %g burst %d parallelism %d: %d writes in %v (%.0f/s), %d failed", tc.qps, tc.burst, tc.par, len(ws), took.Round(time.Millisecond), float64(len(ws))/took.Seconds(), failed)
	}
}
