package agent

import (
	"context"
	"testing"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"

	"github.com/migflex/migflex/internal/nodeagent/podresources"
)

// TestEvictLeavesClaims: a ResourceClaim that no pod has reserved holds
// its device itself (DRA): there is no pod to evict, so the eviction
// sends nothing for it and the note says the GPU waits for the claim.
func TestEvictLeavesClaims(t *testing.T) {
	client := fake.NewClientset()
	a := &Agent{opts: Options{Client: client}, log: klog.Background()}
	holder := podresources.Assignment{Namespace: "ml", Claim: "shared"}.PodKey()
	note, err := a.evict(context.Background(), []string{holder})
	if err != nil {
		t.Fatalf("evict: %v", err)
	}
	if want := "waiting for ResourceClaim ml/shared (no pod to evict)"; note != want {
		t.Errorf("note %q, want %q", note, want)
	}
	if n := len(client.Actions()); n != 0 {
		t.Errorf("%d API requests for a claim, want none: %v", n, client.Actions())
	}
}
