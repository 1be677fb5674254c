//go:build e2e

package e2e

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/migflex/migflex/test/apiwarn"
)

// TestDeprecationWarningsAreCaught: the suite's check that nothing it sends
// is deprecated (TestMain) can fail. This API server's own warning for a
// deprecated field, in its own words, reaches a client's warning handler
// and is recognised as a deprecation: a dry-run pod selecting nodes by
// beta.kubernetes.io/arch (deprecated since 1.14), with a client of its own
// so that the suite's collector stays clean.
func TestDeprecationWarningsAreCaught(t *testing.T) {
	ns := cluster.Namespace(t)
	warnings := &apiwarn.Collector{Source: "probe"}
	cfg := rest.CopyConfig(cluster.Config)
	cfg.WarningHandlerWithContext = warnings
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pod := cluster.TestboxPod(ns, "deprecated-selector", "env")
	pod.Spec.NodeName = ""
	pod.Spec.NodeSelector = map[string]string{corev1.LabelArchStable: "amd64", "beta.kubernetes.io/arch": "amd64"}
	if _, err := cs.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatal(err)
	}
	all := warnings.All()
	if deps := apiwarn.Deprecations(all); len(deps) != 1 {
		t.Fatalf("warnings %v: want exactly one deprecation (beta.kubernetes.io/arch)", all)
	}
	t.Logf("caught: %s", all[0])
}
