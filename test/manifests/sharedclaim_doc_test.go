package manifests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"
)

// TestInstallDocSharedClaim: the pod pair of docs/INSTALL.md's "Sharing on
// a DRA node" is a ResourceClaim and a Pod as the API reads them (no
// unknown field), the pod names the claim, and the claim asks for a
// DeviceClass migflex installs.
func TestInstallDocSharedClaim(t *testing.T) {
	root := repoRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs/INSTALL.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n### Sharing on a DRA node\n")
	if !ok {
		t.Fatal(`docs/INSTALL.md has no "Sharing on a DRA node"`)
	}
	_, block, ok := strings.Cut(section, "```yaml\n")
	if !ok {
		t.Fatal(`"Sharing on a DRA node" has no yaml example`)
	}
	block, _, _ = strings.Cut(block, "```")
	docs := strings.Split(block, "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("the example has %d documents, want a ResourceClaim and a Pod", len(docs))
	}
	var claim resourceapi.ResourceClaim
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict([]byte(docs[0]), &claim); err != nil {
		t.Fatalf("the ResourceClaim: %v", err)
	}
	if err := yaml.UnmarshalStrict([]byte(docs[1]), &pod); err != nil {
		t.Fatalf("the Pod: %v", err)
	}
	if claim.Kind != "ResourceClaim" || pod.Kind != "Pod" {
		t.Fatalf("kinds %q and %q, want ResourceClaim and Pod", claim.Kind, pod.Kind)
	}
	if len(pod.Spec.ResourceClaims) != 1 || pod.Spec.ResourceClaims[0].ResourceClaimName == nil || *pod.Spec.ResourceClaims[0].ResourceClaimName != claim.Name {
		t.Errorf("the pod's resourceClaims %+v do not name claim %s", pod.Spec.ResourceClaims, claim.Name)
	} else if c := pod.Spec.Containers[0].Resources.Claims; len(c) != 1 || c[0].Name != pod.Spec.ResourceClaims[0].Name {
		t.Errorf("the container's claims %+v, want %s", c, pod.Spec.ResourceClaims[0].Name)
	}
	classes, err := os.ReadFile(filepath.Join(root, "deployments/dra/deviceclasses.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range claim.Spec.Devices.Requests {
		if r.Exactly == nil || !strings.Contains(string(classes), "\n  name: "+r.Exactly.DeviceClassName+"\n") {
			t.Errorf("request %s asks for %+v, no DeviceClass of deployments/dra/deviceclasses.yaml", r.Name, r.Exactly)
		}
	}
}
