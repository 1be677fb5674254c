package fallback

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/migflex/migflex/internal/domain/resourcename"
)

// DefaultMaxTypes is the most distinct GPU resource types (nvidia.com/gpu
// and nvidia.com/mig-*) a pod may name for the webhook to decide on it. A
// real pod names one or two; anyone who may create pods can name thousands,
// and every type costs a fallback search. Beyond the cap the pod is left as
// it is, with a warning, after a scan that stops at the first name too many.
const DefaultMaxTypes = 16

// gathered is what one pass over a pod's resources found.
type gathered struct {
	// types are the distinct GPU resource types with a positive quantity,
	// in the order of the pod spec (containers, then init containers;
	// requests, then limits; by name within one list).
	types []corev1.ResourceName
	// tooMany is set when the pod names more than the cap; types is then
	// incomplete.
	tooMany bool
	// invalid says why the API server will reject the pod's quantities,
	// or is "".
	invalid string
}

// gather collects the pod's GPU types and checks the quantities of its
// extended resources as the API server's validation will, after mutating
// admission. Its work is linear in the pod's resources and its memory is
// bounded by maxTypes, whatever the pod names.
func gather(pod *corev1.Pod, maxTypes int) gathered {
	var g gathered
	seen := make(map[corev1.ResourceName]bool, 4)
	// One list's new types, sorted before they are appended so that the
	// order does not depend on map iteration. Never longer than maxTypes.
	var list []corev1.ResourceName
	for _, part := range []struct {
		kind string
		cs   []corev1.Container
	}{{"container", pod.Spec.Containers}, {"init container", pod.Spec.InitContainers}} {
		for i := range part.cs {
			c := &part.cs[i]
			if why := invalidQuantities(&c.Resources); why != "" {
				g.invalid = fmt.Sprintf("%s %s: %s", part.kind, quote(c.Name), why)
				return g
			}
			for _, l := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
				list = list[:0]
				for r, q := range l {
					if !resourcename.IsGPU(r) || q.Sign() <= 0 || seen[r] {
						continue
					}
					if len(g.types)+len(list) == maxTypes {
						g.tooMany = true
						return g
					}
					list = append(list, r)
				}
				slices.Sort(list)
				for _, r := range list {
					seen[r] = true
					g.types = append(g.types, r)
				}
			}
		}
	}
	return g
}

// invalidQuantities says why the API server will refuse a container's
// extended-resource quantities (apis/core/validation: they must be whole
// numbers, not negative, and a request needs an equal limit; a limit alone
// is copied to the request by defaulting), or returns "". The webhook must
// not rewrite such a pod: the API server's message then names a resource
// the user never wrote.
func invalidQuantities(r *corev1.ResourceRequirements) string {
	for name, q := range r.Limits {
		if why := badQuantity(name, q); why != "" {
			return why
		}
	}
	for name, q := range r.Requests {
		if !extended(name) {
			continue
		}
		if why := badQuantity(name, q); why != "" {
			return why
		}
		lim, ok := r.Limits[name]
		switch {
		case !ok:
			return fmt.Sprintf("%s: a request without a limit", quote(string(name)))
		case q.Cmp(lim) != 0:
			return fmt.Sprintf("%s: request %s differs from limit %s", quote(string(name)), quote(q.String()), quote(lim.String()))
		}
	}
	return ""
}

func badQuantity(name corev1.ResourceName, q resource.Quantity) string {
	switch {
	case !extended(name):
		return ""
	case q.Sign() < 0:
		return fmt.Sprintf("%s: %s is negative", quote(string(name)), quote(q.String()))
	case q.MilliValue()%1000 != 0:
		return fmt.Sprintf("%s: %s is not a whole number", quote(string(name)), quote(q.String()))
	}
	return ""
}

// extended reports whether the API server treats name as an extended
// resource (apis/core/helper.IsExtendedResourceName, without its check
// that the name is qualified, which validation makes anyway): a name with
// a domain outside kubernetes.io that is not a quota "requests." name.
func extended(name corev1.ResourceName) bool {
	s := string(name)
	return strings.Contains(s, "/") && !strings.Contains(s, corev1.ResourceDefaultNamespacePrefix) &&
		!strings.HasPrefix(s, corev1.DefaultResourceRequestsPrefix)
}
