package fallback

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

func TestEscapePointer(t *testing.T) {
	tests := map[string]string{
		"nvidia.com/mig-2g.20gb":      "nvidia.com~1mig-2g.20gb",
		"gpu-webhook.k8s.io/fallback": "gpu-webhook.k8s.io~1fallback",
		"a~b":                         "a~0b",
		// "~1" in the input is a tilde and a one, not an escaped slash.
		"~1":    "~01",
		"/~/":   "~1~0~1",
		"~/":    "~0~1",
		"plain": "plain",
		"":      "",
	}
	for in, want := range tests {
		if got := EscapePointer(in); got != want {
			t.Errorf("EscapePointer(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestBuildPatch(t *testing.T) {
	tests := map[string]struct {
		pod      *corev1.Pod
		rewrites []Rewrite
		want     []Operation
	}{
		"no annotations: the map is added whole": {
			pod:      gpuPod(mig2g20, "1"),
			rewrites: []Rewrite{{mig2g20, mig1g10, ReasonAbsent}},
			want: []Operation{
				{Op: "remove", Path: "/spec/containers/0/resources/requests/nvidia.com~1mig-2g.20gb"},
				{Op: "add", Path: "/spec/containers/0/resources/requests/nvidia.com~1mig-1g.10gb", Value: "1"},
				{Op: "remove", Path: "/spec/containers/0/resources/limits/nvidia.com~1mig-2g.20gb"},
				{Op: "add", Path: "/spec/containers/0/resources/limits/nvidia.com~1mig-1g.10gb", Value: "1"},
				{Op: "add", Path: "/metadata/annotations", Value: map[string]string{
					AnnotationFallback: "2g.20gb->1g.10gb",
					AnnotationReason:   "2g.20gb->1g.10gb=absent",
					AnnotationOriginal: `{"containers":{"main":{"requests":{"nvidia.com/mig-2g.20gb":"1"},"limits":{"nvidia.com/mig-2g.20gb":"1"}}}}`,
				}},
			},
		},
		"existing annotations: one op per key, escaped": {
			pod:      newPod(withInit("i", corev1.ResourceRequirements{Limits: rl(string(mig3g40), "2")}), withAnnotation("x", "y")),
			rewrites: []Rewrite{{mig3g40, gpu, ReasonExhausted}},
			want: []Operation{
				{Op: "remove", Path: "/spec/initContainers/0/resources/limits/nvidia.com~1mig-3g.40gb"},
				{Op: "add", Path: "/spec/initContainers/0/resources/limits/nvidia.com~1gpu", Value: "2"},
				{Op: "add", Path: "/metadata/annotations/gpu-webhook.k8s.io~1fallback", Value: "3g.40gb->gpu"},
				{Op: "add", Path: "/metadata/annotations/migflex.io~1fallback-reason", Value: "3g.40gb->gpu=exhausted"},
				{Op: "add", Path: "/metadata/annotations/migflex.io~1original-resources", Value: `{"initContainers":{"i":{"limits":{"nvidia.com/mig-3g.40gb":"2"}}}}`},
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := buildPatch(tc.pod, tc.rewrites, json.Marshal)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("patch (-want +got):\n%s", diff)
			}
			// The patch must apply to the pod it was built from.
			applyPatch(t, tc.pod, got)
		})
	}
}

// A patch that cannot be encoded is an error of the decision, not a panic:
// the webhook answers it as its own fault and the pod is not rewritten.
func TestDecideReportsPatchErrors(t *testing.T) {
	d, err := NewDecider(Options{Policy: DefaultPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	d.marshal = func(any) ([]byte, error) { return nil, errors.New("disk on fire") }
	got := d.Decide(gpuPod(mig2g20, "1"), snapshotOf(node("a", alloc{mig1g10: 7})))
	if got.Outcome != OutcomeError || got.Allowed || got.Err == nil || !strings.Contains(got.Err.Error(), "disk on fire") || len(got.Patch) != 0 {
		t.Errorf("Decide with a failing encoder = %+v, want outcome %s, not allowed, the error and no patch", got, OutcomeError)
	}
}
