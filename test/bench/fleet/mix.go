package fleet

import (
	"fmt"
	"math/rand/v2"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/webhook/fallback"
)

// Class is what an admission did to a pod, as the client sees it.
type Class string

const (
	// Unchanged: allowed without a patch (no GPU, or the type fits).
	Unchanged Class = "unchanged"
	// Patched: allowed with a patch (the request fell back).
	Patched Class = "patched"
	// Denied: not allowed (no GPU type fits).
	Denied Class = "denied"
)

// Classify reads the class off an admission response.
func Classify(r *admissionv1.AdmissionResponse) Class {
	switch {
	case !r.Allowed:
		return Denied
	case len(r.Patch) > 0:
		return Patched
	default:
		return Unchanged
	}
}

// Admission is one kind of pod sent for admission, how often, and the class
// it must get in each mode against the fleet (with BoundPods in capacity
// mode).
type Admission struct {
	Name string
	// Weight is the share of the mix, out of MixWeight.
	Weight int
	Pod    *corev1.Pod
	Want   map[fallback.Mode]Class
}

// MixWeight is the sum of the weights in Mix.
const MixWeight = 20

func both(c Class) map[fallback.Mode]Class {
	return map[fallback.Mode]Class{fallback.ModeExistence: c, fallback.ModeCapacity: c}
}

// Mix is the admission mix. In existence mode: 50 % left unchanged (20 %
// without any GPU), 30 % fall back, 20 % denied. In capacity mode the
// 3g.40gb requests (10 %) fall back too, because BoundPods uses every
// 3g.40gb device.
func Mix() []Admission {
	withSelector := func(p *corev1.Pod, k, v string) *corev1.Pod {
		p.Spec.NodeSelector = map[string]string{k: v}
		return p
	}
	withPolicy := func(p *corev1.Pod, policy fallback.PodPolicy) *corev1.Pod {
		p.Annotations = map[string]string{fallback.AnnotationPolicy: string(policy)}
		return p
	}
	pod := func(name string, cs ...corev1.Container) *corev1.Pod {
		p := podTemplate("", "default", cs...)
		p.GenerateName = name + "-"
		return p
	}
	return []Admission{
		{Name: "no-gpu", Weight: 4, Want: both(Unchanged),
			Pod: pod("web", gpuContainer("web", "", 0))},
		{Name: "present-1g.10gb", Weight: 4, Want: both(Unchanged),
			Pod: pod("infer", gpuContainer("infer", MIG1g10, 1))},
		{Name: "present-3g.40gb", Weight: 2,
			Want: map[fallback.Mode]Class{fallback.ModeExistence: Unchanged, fallback.ModeCapacity: Patched},
			Pod:  pod("train", gpuContainer("train", MIG3g40, 1))},
		{Name: "absent-7g.80gb", Weight: 3, Want: both(Patched),
			Pod: pod("big", gpuContainer("big", MIG7g80, 1))},
		{Name: "a100-selector-2g.20gb", Weight: 2, Want: both(Patched),
			Pod: withSelector(pod("a100", gpuContainer("a100", MIG2g20, 1)), LabelGPUProduct, Kinds[3].Product)},
		{Name: "two-containers-1g+7g", Weight: 1, Want: both(Patched),
			Pod: pod("pair", gpuContainer("small", MIG1g10, 1), gpuContainer("large", MIG7g80, 1))},
		{Name: "policy-none-7g.80gb", Weight: 2, Want: both(Denied),
			Pod: withPolicy(pod("strict", gpuContainer("strict", MIG7g80, 1)), fallback.PodPolicyNone)},
		{Name: "cpu-pool-1g.10gb", Weight: 2, Want: both(Denied),
			Pod: withSelector(pod("lost", gpuContainer("lost", MIG1g10, 1)), LabelPool, "cpu-0")},
	}
}

// Sequence spreads the mix over MixWeight slots in a fixed pseudo-random
// order, so that a run is neither bursty nor different between runs: slot
// i of a run sends mix[Sequence()[i%MixWeight]].
func Sequence(mix []Admission) ([]int, error) {
	var seq []int
	for i, a := range mix {
		for range a.Weight {
			seq = append(seq, i)
		}
	}
	if len(seq) != MixWeight {
		return nil, fmt.Errorf("mix weights sum to %d, want %d", len(seq), MixWeight)
	}
	r := rand.New(rand.NewPCG(8, 8))
	r.Shuffle(len(seq), func(i, j int) { seq[i], seq[j] = seq[j], seq[i] })
	return seq, nil
}
