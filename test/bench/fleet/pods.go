package fleet

import (
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Namespaces the bound pods are spread over.
const Namespaces = 20

// NamespaceName is namespace j of the bound pods.
func NamespaceName(j int) string { return fmt.Sprintf("team-%02d", j) }

// exhausted is the type the bound pods use up on every node first, so that
// in capacity mode a request for it falls back with reason "exhausted"
// while existence mode leaves it alone.
const exhausted = MIG3g40

// BoundPods returns total pods bound to the first nodes nodes of the fleet,
// one GPU device each: first every exhausted device, then round-robin over
// the GPU nodes and, on each, over its other types with a device left. It
// fails when the fleet has fewer devices than total.
func BoundPods(nodes, total int) ([]*corev1.Pod, error) {
	type gpuNode struct {
		index int
		free  map[corev1.ResourceName]int64
		types []corev1.ResourceName
		next  int
	}
	var gpuNodes []*gpuNode
	for i := range nodes {
		k := KindOf(i)
		if len(k.Devices) == 0 {
			continue
		}
		g := &gpuNode{index: i, free: maps.Clone(k.Devices)}
		for _, r := range slices.Sorted(maps.Keys(k.Devices)) {
			if r != exhausted {
				g.types = append(g.types, r)
			}
		}
		gpuNodes = append(gpuNodes, g)
	}
	pods := make([]*corev1.Pod, 0, total)
	add := func(g *gpuNode, r corev1.ResourceName) {
		g.free[r]--
		pods = append(pods, boundPod(len(pods), NodeName(g.index), r))
	}
	for _, g := range gpuNodes {
		for g.free[exhausted] > 0 && len(pods) < total {
			add(g, exhausted)
		}
	}
	for len(pods) < total {
		placed := false
		for _, g := range gpuNodes {
			if len(pods) == total {
				break
			}
			for range g.types {
				r := g.types[g.next%len(g.types)]
				g.next++
				if g.free[r] > 0 {
					add(g, r)
					placed = true
					break
				}
			}
		}
		if !placed {
			return nil, fmt.Errorf("%d nodes hold only %d GPU devices, %d pods asked for", nodes, len(pods), total)
		}
	}
	return pods, nil
}

// boundPod is pod n of a batch job, bound to node, holding one device of r.
func boundPod(n int, node string, r corev1.ResourceName) *corev1.Pod {
	p := podTemplate(fmt.Sprintf("job-%06d", n), NamespaceName(n%Namespaces),
		gpuContainer("worker", r, 1))
	p.Spec.NodeName = node
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	return p
}

func podTemplate(name, namespace string, containers ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: namespace,
			Labels: map[string]string{
				"app.kubernetes.io/name":       "trainer",
				"app.kubernetes.io/component":  "worker",
				"batch.kubernetes.io/job-name": name,
			},
		},
		Spec: corev1.PodSpec{
			Containers:                    containers,
			RestartPolicy:                 corev1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: ptrTo[int64](30),
			AutomountServiceAccountToken:  ptrTo(false),
		},
	}
}

// gpuContainer requests n devices of r (as requests and limits, as
// extended resources require) besides CPU and memory; an empty r requests
// no GPU.
func gpuContainer(name string, r corev1.ResourceName, n int64) corev1.Container {
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("16Gi"),
	}
	if r != "" {
		res[r] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	return corev1.Container{
		Name:    name,
		Image:   "registry.example.com/ml/trainer:v2.4.1",
		Command: []string{"python", "-m", "trainer"},
		Args:    []string{"--epochs=10", "--batch-size=64"},
		Env: []corev1.EnvVar{
			{Name: "NCCL_DEBUG", Value: "WARN"},
			{Name: "OMP_NUM_THREADS", Value: "4"},
		},
		Resources: corev1.ResourceRequirements{Requests: res, Limits: res.DeepCopy()},
	}
}

func ptrTo[T any](v T) *T { return &v }
