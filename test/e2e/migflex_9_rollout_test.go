//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/test/e2e/framework"
)

// TestWebhookRolloutIsHitless: `kubectl rollout restart` of the webhook,
// with pods being created all along, misses no admission. The webhook's
// failurePolicy is Ignore, so a moment with no replica answering would
// admit pods unchecked; the probe is a dry run that only the webhook
// denies (an invalid fallback-policy annotation), so a probe the API server
// accepts is a missed admission.
func TestWebhookRolloutIsHitless(t *testing.T) {
	migflex(t)
	// The local overlay's replicas share the port on this host; a stopping
	// one hands its waiting connections to the others only with this.
	if b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_migrate_req"); err != nil || strings.TrimSpace(string(b)) != "1" {
		t.Fatalf("net.ipv4.tcp_migrate_req is %q (%v), want 1: hack/cluster/up.sh sets it", strings.TrimSpace(string(b)), err)
	}
	ctx := t.Context()
	ns := cluster.Namespace(t)
	probe := gpuPod(ns, "rollout-probe", "nvidia.com/mig-1g.10gb", 1, "env")
	probe.Annotations = map[string]string{annotationPolicy: "not-a-policy"}

	var (
		mu       sync.Mutex
		answered int
		missed   []string
		failed   []string
	)
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for loadCtx.Err() == nil {
				_, err := cluster.Client.CoreV1().Pods(ns).Create(loadCtx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
				at := time.Now().Format("15:04:05.000")
				mu.Lock()
				switch {
				case loadCtx.Err() != nil:
				case err == nil:
					missed = append(missed, at)
				case strings.Contains(err.Error(), "denied the request"):
					answered++
				default:
					failed = append(failed, at+" "+err.Error())
				}
				mu.Unlock()
			}
		}()
	}
	stop := func() {
		stopLoad()
		wg.Wait()
	}
	defer stop()

	start := time.Now()
	if out, err := cluster.Kubectl(ctx, "rollout", "restart", "-n", framework.MigflexNamespace, "deployment/"+framework.WebhookName); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if err := cluster.WaitForDeploymentRollout(ctx, framework.MigflexNamespace, framework.WebhookName); err != nil {
		t.Fatal(err)
	}
	// The old pods serve until they are gone (preStop, then the drain):
	// keep creating pods until then.
	if err := framework.WaitFor(ctx, "the old webhook pods to be gone", timeout, func(ctx context.Context) (bool, error) {
		pods, err := cluster.Client.CoreV1().Pods(framework.MigflexNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + framework.WebhookName})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil || p.CreationTimestamp.Time.Before(start.Add(-time.Second)) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	stop()

	mu.Lock()
	defer mu.Unlock()
	t.Logf("rollout and old pods gone in %v; %d admissions answered by the webhook, %d missed, %d failed",
		time.Since(start).Round(time.Millisecond), answered, len(missed), len(failed))
	if answered == 0 {
		t.Fatal("no admission reached the webhook during the rollout")
	}
	if len(missed) > 0 {
		t.Errorf("%d pods admitted without the webhook during the rollout, at %s", len(missed), summarize(missed))
	}
	if len(failed) > 0 {
		t.Errorf("%d creations failed otherwise: %s", len(failed), summarize(failed))
	}
}

// summarize is the first and last few of many lines.
func summarize(lines []string) string {
	if len(lines) <= 6 {
		return strings.Join(lines, "; ")
	}
	return fmt.Sprintf("%s; ... %d more ...; %s", strings.Join(lines[:3], "; "), len(lines)-6, strings.Join(lines[len(lines)-3:], "; "))
}
