package fallback

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"

	"github.com/migflex/migflex/internal/domain/resourcename"
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
	parts := []struct {
		field string
		cs    []corev1.Container
		rec   *map[string]ContainerResources
	}{
		{"containers", pod.Spec.Containers, nil},
		{"initContainers", pod.Spec.InitContainers, nil},
	}
	// The annotations first: when they do not fit, no operation is built.
	orig := OriginalResources{}
	parts[0].rec, parts[1].rec = &orig.Containers, &orig.InitContainers
	for _, part := range parts {
		for i := range part.cs {
			c := &part.cs[i]
			if !rewritten(c.Resources.Requests, to) && !rewritten(c.Resources.Limits, to) {
				continue
			}
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
	if err := checkAnnotationsSize(pod.Annotations, ann); err != nil {
		return nil, err
	}

	var ops []Operation
	for _, part := range parts {
		for i := range part.cs {
			c := &part.cs[i]
			if !rewritten(c.Resources.Requests, to) && !rewritten(c.Resources.Limits, to) {
				continue
			}
			base := fmt.Sprintf("/spec/%s/%d/resources/", part.field, i)
			ops = append(ops, rewriteList(base+"requests", c.Resources.Requests, to)...)
			ops = append(ops, rewriteList(base+"limits", c.Resources.Limits, to)...)
		}
	}
	if pod.Annotations == nil {
		return append(ops, Operation{Op: "add", Path: "/metadata/annotations", Value: ann}), nil
	}
	for _, k := range slices.Sorted(maps.Keys(ann)) {
		ops = append(ops, Operation{Op: "add", Path: "/metadata/annotations/" + EscapePointer(k), Value: ann[k]})
	}
	return ops, nil
}

// rewritten reports whether l has a positive quantity of a type in to.
func rewritten(l corev1.ResourceList, to map[corev1.ResourceName]corev1.ResourceName) bool {
	for from := range to {
		if q, ok := l[from]; ok && q.Sign() > 0 {
			return true
		}
	}
	return false
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
		if resourcename.IsGPU(name) {
			if out == nil {
				out = corev1.ResourceList{}
			}
			out[name] = q.DeepCopy()
		}
	}
	return out
}

// annotationsTooLarge is a rewrite whose annotations would take the pod
// over the API server's limit on the total size of its annotations.
type annotationsTooLarge struct {
	size, limit int
}

func (e *annotationsTooLarge) Error() string {
	return fmt.Sprintf("annotations would total %d bytes, over the API server's limit of %d", e.size, e.limit)
}

// checkAnnotationsSize applies the API server's limit on the total size of a
// pod's annotations (keys and values, apimachinery's
// ValidateAnnotationsSize) to the pod's annotations with ours added: a
// mutation must never make a valid pod invalid.
func checkAnnotationsSize(existing, added map[string]string) error {
	size := 0
	for k, v := range existing {
		if _, replaced := added[k]; !replaced {
			size += len(k) + len(v)
		}
	}
	for k, v := range added {
		size += len(k) + len(v)
	}
	if size > apivalidation.TotalAnnotationSizeLimitB {
		return &annotationsTooLarge{size: size, limit: apivalidation.TotalAnnotationSizeLimitB}
	}
	return nil
}
