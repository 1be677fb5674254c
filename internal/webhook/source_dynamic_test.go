package webhook

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/testsupport/draslices"
	"github.com/migflex/migflex/internal/testsupport/testutil"
	"github.com/migflex/migflex/internal/webhook/fallback"
)

// On a dynamic DRA node every placement is a device and they overlap: the
// webhook counts free what the GPUs' counters, less what the claims hold,
// still let the scheduler allocate. An unchanged 3g.40gb pod is left
// alone while the node can make one, and rewritten once two 1g.10gb held
// at 1 and 5 leave no 3g.40gb placement, though neither 3g.40gb device
// is allocated.
func TestInformerSourceDynamicDRANode(t *testing.T) {
	ctx := context.Background()
	const mig3g40 corev1.ResourceName = "nvidia.com/mig-3g.40gb"
	s, client := dynamicSource(t)
	pod := gpuPod("p", mig3g40, "1")
	testutil.Eventually(t, "the free 3g.40gb placements to leave the pod alone", func() bool {
		return decision(t, s, fallback.ModeCapacity, pod) == nil
	})

	// One 1g.10gb at 1: the 3g.40gb at 4 is still free.
	one := draslices.Claim("team", "one", "d", "gpu-0-mig-1g10gb-19-1")
	if _, err := client.ResourceV1().ResourceClaims("team").Create(ctx, one, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Another at 5: no 3g.40gb placement is left, one 2g.20gb (at 2) is.
	two := draslices.Claim("team", "two", "d", "gpu-0-mig-1g10gb-19-5")
	if _, err := client.ResourceV1().ResourceClaims("team").Create(ctx, two, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []fallback.Rewrite{{From: mig3g40, To: mig2g20, Reason: fallback.ReasonAbsent}}
	testutil.Eventually(t, "the two 1g.10gb to leave no 3g.40gb", func() bool {
		return cmp.Equal(want, decision(t, s, fallback.ModeCapacity, pod))
	})

	if err := client.ResourceV1().ResourceClaims("team").Delete(ctx, "two", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the 3g.40gb at 4 to be free again", func() bool {
		return decision(t, s, fallback.ModeCapacity, pod) == nil
	})
}

// A pod asking for several profiles fits on a dynamic node only if its
// GPUs make them together. Beside a 1g.10gb at 0 an H100 has a 3g.40gb
// (at 4) and two 2g.20gb (at 2 and 4) free, each alone, but not a 3g.40gb
// and two 2g.20gb at once: the 2g.20gb fall back, where the pod was left
// as asked when each profile's count was checked alone. A 3g.40gb and
// one 2g.20gb are left as asked.
func TestInformerSourceDynamicDRANodeTogether(t *testing.T) {
	const mig3g40 corev1.ResourceName = "nvidia.com/mig-3g.40gb"
	s, _ := dynamicSource(t, draslices.Claim("team", "one", "d", "gpu-0-mig-1g10gb-19-0"))
	pair := func(n2g string) *corev1.Pod {
		p := gpuPod("p", mig3g40, "1")
		small := p.Spec.Containers[0]
		small.Name = "small"
		q := resource.MustParse(n2g)
		small.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{mig2g20: q}, Limits: corev1.ResourceList{mig2g20: q}}
		p.Spec.Containers = append(p.Spec.Containers, small)
		return p
	}
	testutil.Eventually(t, "the node's supply", func() bool { return decision(t, s, fallback.ModeCapacity, pair("1")) == nil })
	// Two 1g.10gb fit beside the 3g.40gb at 4: at 1, 2 or 3.
	want := []fallback.Rewrite{{From: mig2g20, To: mig1g10, Reason: fallback.ReasonExhausted}}
	if got := decision(t, s, fallback.ModeCapacity, pair("2")); !cmp.Equal(want, got) {
		t.Errorf("a 3g.40gb and two 2g.20gb beside a 1g.10gb at 0, which the H100 makes each alone but not all: rewrites %+v, want %+v", got, want)
	}
}

// dynamicSource runs an InformerSource on node d, one H100 served in
// dynamic mode with MIG on, the DeviceClasses of three profiles, and objs.
func dynamicSource(t *testing.T, objs ...runtime.Object) (*InformerSource, *fake.Clientset) {
	t.Helper()
	d := gpuNode("d", nil)
	d.Labels[nodeinfo.LabelServing] = nodeinfo.ServingDRA
	d.Labels[nodeinfo.LabelDRAMode] = nodeinfo.DRAModeDynamic
	objs = append(objs, d)
	for _, s := range draslices.Dynamic(t, "d", "H100-SXM5-80GB", true) {
		objs = append(objs, &s)
	}
	classes, err := dra.DeviceClasses([]string{"1g.10gb", "2g.20gb", "3g.40gb"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range classes {
		objs = append(objs, &classes[i])
	}
	client := fake.NewClientset(objs...)
	s, err := NewInformerSource(client, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	runSource(t, s)
	return s, client
}
