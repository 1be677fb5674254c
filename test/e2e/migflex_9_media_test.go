//go:build e2e

package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/test/e2e/framework"
)

// TestMediaExtensionProfile: a layout with the media-extension profile
// 1g.10gb+me (the one instance of a GPU that gets its OFA and JPEG decoder)
// is served as its own resource, nvidia.com/mig-1g.10gb.me, as NVIDIA's
// device plugin names it; the GFD labels count it; a pod asking for it gets
// that device. A layout with two of it per GPU is refused and the old one
// stays.
func TestMediaExtensionProfile(t *testing.T) {
	migflex(t)
	node, layout := applyLayout(t, "1g.10gb+me", "1g.10gb", "2g.20gb", "3g.40gb")
	if got := gpuResources(node.Status.Allocatable)["nvidia.com/mig-1g.10gb.me"]; got != simGPUs {
		t.Errorf("allocatable nvidia.com/mig-1g.10gb.me = %d, want %d", got, simGPUs)
	}
	checkGFDLabels(t, node, map[string]int{"1g.10gb.me": simGPUs, "1g.10gb": simGPUs, "2g.20gb": simGPUs, "3g.40gb": simGPUs})

	ns := cluster.Namespace(t)
	env := runEnvPod(t, gpuPod(ns, "mig-1g-me", "nvidia.com/mig-1g.10gb.me", 1, "env"))
	checkAllocateEnv(t, env, layout, "1g.10gb+me", 1)

	// Two +me instances on one GPU: more than its one per GPU.
	setMigConfig(t, annotationMigConfig, migConfig("1g.10gb+me", "1g.10gb+me"))
	node, err := cluster.WaitForNode(t.Context(), "state failed", timeout, func(n *corev1.Node) error {
		if s := n.Labels[labelState]; s != "failed" {
			return fmt.Errorf("state %q", s)
		}
		if r := n.Annotations[annotationReason]; !strings.Contains(r, "1g.10gb+me x2 exceeds the maximum of 1 per GPU") {
			return fmt.Errorf("reason %q", r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	after, err := framework.NodeLayout(node)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(framework.LayoutProfiles(layout), framework.LayoutProfiles(after)); diff != "" {
		t.Errorf("layout after a refused config (-before +after):\n%s", diff)
	}
	if ids := uuidsOf(after, "1g.10gb+me"); !slices.Equal(ids, uuidsOf(layout, "1g.10gb+me")) {
		t.Errorf("the 1g.10gb+me devices changed: %v, were %v", ids, uuidsOf(layout, "1g.10gb+me"))
	}
}
