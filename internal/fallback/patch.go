package fallback

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Operation is one RFC 6902 JSON patch operation.
type Operation struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// EscapePointer escapes one reference token of an RFC 6901 JSON pointer.
// "~" must become "~0" before "/" becomes "~1", or the "~" of "~1" would be
// escaped again.
func EscapePointer(token string) string {
	return strings.ReplaceAll(strings.ReplaceAll(token, "~", "~0"), "/", "~1")
}

// OriginalResources is the JSON in AnnotationOriginal: the GPU requests and
// limits of every rewritten container before the rewrite, by container name.
type OriginalResources struct {
	Containers     map[string]ContainerResources `json:"containers,omitempty"`
	InitContainers map[string]ContainerResources `json:"initContainers,omitempty"`
}

// ContainerResources is one container's GPU requests and limits.
type ContainerResources struct {
	Requests corev1.ResourceList `json:"requests,omitempty"`
	Limits   corev1.ResourceList `json:"limits,omitempty"`
}

// buildPatch rewrites every container and init container, requests and
// limits alike (the API server requires them equal for extended resources,
// and defaults a missing request from the limit after mutation), and adds
// the annotations. marshal encodes the original resources (json.Marshal).
func buildPatch(pod *corev1.Pod, rewrites []Rewrite, marshal func(any) ([]byte, error)) ([]Operation, error) {
	to := make(map[corev1.ResourceName]corev1.ResourceName, len(rewrites))
	for _, rw := range rewrites {
		to[rw.From] = rw.To
	}
	var ops []Operation
	orig := OriginalResources{}
	for _, part := range []struct {
		field string
		cs    []corev1.Container
		rec   *map[string]ContainerResources
	}{
		{"containers", pod.Spec.Containers, &orig.Containers},
		{"initContainers", pod.Spec.InitContainers, &orig.InitContainers},
	} {
		for i := range part.cs {
			c := &part.cs[i]
			base := fmt.Sprintf("/spec/%s/%d/resources/", part.field, i)
			reqOps := rewriteList(base+"requests", c.Resources.Requests, to)
			limOps := rewriteList(base+"limits", c.Resources.Limits, to)
			if len(reqOps)+len(limOps) == 0 {
				continue
			}
			ops = append(append(ops, reqOps...), limOps...)
			if *part.rec == nil {
				*part.rec = map[string]ContainerResources{}
			}
			(*part.rec)[c.Name] = ContainerResources{
				Requests: gpuResources(c.Resources.Requests),
				Limits:   gpuResources(c.Resources.Limits),
			}
		}
	}

	labels := make([]string, len(rewrites))
	reasons := make([]string, len(rewrites))
	for i, rw := range rewrites {
		labels[i] = rw.Label()
		reasons[i] = rw.Label() + "=" + rw.Reason
	}
	origJSON, err := marshal(orig)
	if err != nil {
		return nil, fmt.Errorf("encoding annotation %s: %w", AnnotationOriginal, err)
	}
	ann := map[string]string{
		AnnotationFallback: strings.Join(labels, ","),
		AnnotationReason:   strings.Join(reasons, ","),
		AnnotationOriginal: string(origJSON),
	}
	if pod.Annotations == nil {
		return append(ops, Operation{Op: "add", Path: "/metadata/annotations", Value: ann}), nil
	}
	for _, k := range slices.Sorted(maps.Keys(ann)) {
		ops = append(ops, Operation{Op: "add", Path: "/metadata/annotations/" + EscapePointer(k), Value: ann[k]})
	}
	return ops, nil
}

// rewriteList moves the quantity of every rewritten type in l to its target,
// keeping the quantity and adding to a target the list already has.
func rewriteList(path string, l corev1.ResourceList, to map[corev1.ResourceName]corev1.ResourceName) []Operation {
	var removes []Operation
	sums := map[corev1.ResourceName]resource.Quantity{}
	for _, from := range slices.Sorted(maps.Keys(l)) {
		target, ok := to[from]
		q := l[from]
		if !ok || q.Sign() <= 0 {
			continue
		}
		removes = append(removes, Operation{Op: "remove", Path: path + "/" + EscapePointer(string(from))})
		sum, seen := sums[target]
		if !seen {
			if existing, ok := l[target]; ok {
				if _, moving := to[target]; !moving {
					sum = existing.DeepCopy()
				}
			}
		}
		sum.Add(q)
		sums[target] = sum
	}
	ops := removes
	for _, target := range slices.Sorted(maps.Keys(sums)) {
		q := sums[target]
		// "add" replaces a member that exists (RFC 6902 4.1).
		ops = append(ops, Operation{Op: "add", Path: path + "/" + EscapePointer(string(target)), Value: q.String()})
	}
	return ops
}

func gpuResources(l corev1.ResourceList) corev1.ResourceList {
	var out corev1.ResourceList
	for name, q := range l {
		if IsGPUResource(name) {
			if out == nil {
				out = corev1.ResourceList{}
			}
			out[name] = q.DeepCopy()
		}
	}
	return out
}
