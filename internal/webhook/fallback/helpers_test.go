package fallback

import (
	"encoding/json"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/testsupport/kubefixture"
)

// Fixture builders, so that each table case states only what it is about.

const (
	mig1g10  corev1.ResourceName = "nvidia.com/mig-1g.10gb"
	mig1g20  corev1.ResourceName = "nvidia.com/mig-1g.20gb"
	mig2g20  corev1.ResourceName = "nvidia.com/mig-2g.20gb"
	mig3g40  corev1.ResourceName = "nvidia.com/mig-3g.40gb"
	mig4g40  corev1.ResourceName = "nvidia.com/mig-4g.40gb"
	mig7g80  corev1.ResourceName = "nvidia.com/mig-7g.80gb"
	mig1g10m corev1.ResourceName = "nvidia.com/mig-1g.10gb.me"
	gpu                          = resourcename.GPU
)

// The builders of internal/testsupport/kubefixture, by the short names
// the tables use.
type (
	nodeOpt = kubefixture.NodeOpt
	podOpt  = kubefixture.PodOpt
)

var (
	node                 = kubefixture.Node
	labeled              = kubefixture.Labeled
	tainted              = kubefixture.Tainted
	cordoned             = kubefixture.Cordoned
	newPod               = kubefixture.Pod
	rl                   = kubefixture.RL
	both                 = kubefixture.Both
	withContainer        = kubefixture.WithContainer
	withInit             = kubefixture.WithInit
	withSidecar          = kubefixture.WithSidecar
	withAnnotation       = kubefixture.WithAnnotation
	withNodeSelector     = kubefixture.WithNodeSelector
	withRequiredAffinity = kubefixture.WithRequiredAffinity
	withToleration       = kubefixture.WithToleration
	onNode               = kubefixture.OnNode
)

func snapshotOf(nodes ...*corev1.Node) *schedview.Snapshot {
	ns := make([]schedview.Node, len(nodes))
	for i, n := range nodes {
		ns[i] = schedview.NodeFromAPI(n)
	}
	return schedview.NewSnapshot(ns)
}

func gpuPod(r corev1.ResourceName, n string, opts ...podOpt) *corev1.Pod {
	return newPod(append([]podOpt{withContainer("main", both(string(r), n))}, opts...)...)
}

// quantityEqual compares quantities by value: "1" and "1000m" are equal.
var quantityEqual = cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })

// applyPatch applies the decision's patch to the pod as the API server would.
func applyPatch(t *testing.T, pod *corev1.Pod, ops []Operation) *corev1.Pod {
	t.Helper()
	doc, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(ops)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := jsonpatch.DecodePatch(raw)
	if err != nil {
		t.Fatalf("decode patch %s: %v", raw, err)
	}
	out, err := patch.Apply(doc)
	if err != nil {
		t.Fatalf("apply patch %s: %v", raw, err)
	}
	var got corev1.Pod
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	return &got
}
