package apiwarn

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The API server's own texts (k8s.io/apiserver's deprecation warning,
// pod validation's field warnings) and warnings that are not about
// deprecation, such as migflex's webhook's.
func TestIsDeprecation(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		want bool
	}{
		{"policy/v1beta1 PodSecurityPolicy is deprecated in v1.21+, unavailable in v1.25+", true},
		{"flowcontrol.apiserver.k8s.io/v1beta3 FlowSchema is deprecated in v1.29+, unavailable in v1.32+; use flowcontrol.apiserver.k8s.io/v1 FlowSchema", true},
		{`spec.nodeSelector[beta.kubernetes.io/arch]: deprecated since v1.14; use "kubernetes.io/arch" instead`, true},
		{`metadata.annotations[seccomp.security.alpha.kubernetes.io/pod]: non-functional in v1.27+; use the "seccompProfile" field instead`, true},
		{"migflex: nvidia.com/mig-9g.99gb is no NVIDIA GPU's MIG profile and no node has it: left as it is", false},
		{"would violate PodSecurity \"restricted:latest\": privileged", false},
	} {
		if got := IsDeprecation(tc.msg); got != tc.want {
			t.Errorf("IsDeprecation(%q) = %v, want %v", tc.msg, got, tc.want)
		}
	}
}

func TestCollector(t *testing.T) {
	c := &Collector{Source: "client-go"}
	c.HandleWarningHeaderWithContext(t.Context(), 299, "-", "a is deprecated in v1.30+")
	c.HandleWarningHeaderWithContext(t.Context(), 200, "-", "not a warning code")
	c.AddOutput("kubectl apply", "deployment.apps/x configured\nWarning: b is deprecated in v1.31+\n")
	c.AddOutput("helm install", `W1127 03:58:01.123456    4242 warnings.go:70] "Warning: c: deprecated since v1.14"`+"\n")
	want := []Warning{
		{"client-go", "a is deprecated in v1.30+"},
		{"kubectl apply", "b is deprecated in v1.31+"},
		{"helm install", "c: deprecated since v1.14"},
	}
	if diff := cmp.Diff(want, c.All()); diff != "" {
		t.Errorf("All (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, Deprecations(c.Take())); diff != "" {
		t.Errorf("Deprecations (-want +got):\n%s", diff)
	}
	if got := c.All(); len(got) != 0 {
		t.Errorf("after Take: %v, want none", got)
	}
}
