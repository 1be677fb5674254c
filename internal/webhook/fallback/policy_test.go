package fallback

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

func TestParsePolicy(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    Policy
		wantErr []string
	}{
		"defaults": {
			in:   "apiVersion: migflex.io/v1alpha1\nkind: FallbackPolicy\n",
			want: DefaultPolicy(),
		},
		"everything set": {
			in: `
apiVersion: migflex.io/v1alpha1
kind: FallbackPolicy
allowDown: true
allowUp: false
allowWholeGPU: true
minMemoryGB: 10
chains:
  nvidia.com/mig-3g.40gb: [nvidia.com/mig-2g.20gb, nvidia.com/gpu]
  nvidia.com/gpu: [nvidia.com/mig-7g.80gb]
`,
			want: Policy{AllowDown: true, AllowUp: false, AllowWholeGPU: true, MinMemoryGB: 10,
				Chains: map[corev1.ResourceName][]corev1.ResourceName{
					mig3g40: {mig2g20, gpu},
					gpu:     {mig7g80},
				}},
		},
		"false is not the default": {
			in:   "apiVersion: migflex.io/v1alpha1\nkind: FallbackPolicy\nallowDown: false\nallowWholeGPU: false\n",
			want: Policy{AllowUp: true},
		},
		"unknown field": {
			in:      "apiVersion: migflex.io/v1alpha1\nkind: FallbackPolicy\nallowSideways: true\n",
			wantErr: []string{"allowSideways"},
		},
		"wrong version": {
			in:      "apiVersion: migflex.io/v1\nkind: FallbackPolicy\n",
			wantErr: []string{`apiVersion "migflex.io/v1"`, "want migflex.io/v1alpha1 FallbackPolicy"},
		},
		"wrong kind": {
			in:      "apiVersion: migflex.io/v1alpha1\nkind: Policy\n",
			wantErr: []string{`kind "Policy"`},
		},
		"empty file": {
			in:      "",
			wantErr: []string{`apiVersion ""`},
		},
		"not yaml": {
			in:      "apiVersion: [",
			wantErr: []string{"decoding fallback policy"},
		},
		"wrong type": {
			in:      "apiVersion: migflex.io/v1alpha1\nkind: FallbackPolicy\nminMemoryGB: lots\n",
			wantErr: []string{"decoding fallback policy"},
		},
		"negative memory": {
			in:      "apiVersion: migflex.io/v1alpha1\nkind: FallbackPolicy\nminMemoryGB: -5\n",
			wantErr: []string{"minMemoryGB: -5 is negative"},
		},
		"bad chain entries, all reported": {
			in: `
apiVersion: migflex.io/v1alpha1
kind: FallbackPolicy
allowUp: false
minMemoryGB: 10
chains:
  nvidia.com/mig-3g.40gb:
  - nvidia.com/mig-3g.40gb
  - nvidia.com/mig-2g.20gb
  - nvidia.com/mig-2g.20gb
  - amd.com/gpu
  - nvidia.com/mig-4g.40gb
  - nvidia.com/mig-1g.5gb
  example.com/tpu: [nvidia.com/gpu]
`,
			wantErr: []string{
				`chains: "example.com/tpu" is not nvidia.com/gpu or nvidia.com/mig-<N>g.<M>gb`,
				"chains[nvidia.com/mig-3g.40gb][0]: nvidia.com/mig-3g.40gb falls back to itself",
				"chains[nvidia.com/mig-3g.40gb][2]: nvidia.com/mig-2g.20gb is listed twice",
				`chains[nvidia.com/mig-3g.40gb][3]: "amd.com/gpu" is not`,
				"chains[nvidia.com/mig-3g.40gb][4]: nvidia.com/mig-4g.40gb can never be used: allowUp is false",
				"chains[nvidia.com/mig-3g.40gb][5]: nvidia.com/mig-1g.5gb can never be used: 5GB is below minMemoryGB 10",
			},
		},
		"whole GPU in a chain with allowWholeGPU false": {
			in:      "apiVersion: migflex.io/v1alpha1\nkind: FallbackPolicy\nallowWholeGPU: false\nchains:\n  nvidia.com/mig-1g.10gb: [nvidia.com/gpu]\n",
			wantErr: []string{"nvidia.com/gpu can never be used: allowWholeGPU is false"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParsePolicy([]byte(tc.in))
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("ParsePolicy succeeded with %+v, want an error", got)
				}
				for _, s := range tc.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("ParsePolicy: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("policy (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseFlags(t *testing.T) {
	for _, s := range []string{"existence", "capacity"} {
		if m, err := Modes.Parse(s); err != nil || string(m) != s {
			t.Errorf("Modes.Parse(%q) = %q, %v", s, m, err)
		}
	}
	for _, s := range []string{"", "Existence", "free"} {
		if _, err := Modes.Parse(s); err == nil {
			t.Errorf("Modes.Parse(%q) succeeded, want an error", s)
		}
	}
	for _, s := range []string{"deny", "allow"} {
		if u, err := Unsatisfiables.Parse(s); err != nil || string(u) != s {
			t.Errorf("Unsatisfiables.Parse(%q) = %q, %v", s, u, err)
		}
	}
	for _, s := range []string{"", "ignore"} {
		if _, err := Unsatisfiables.Parse(s); err == nil {
			t.Errorf("Unsatisfiables.Parse(%q) succeeded, want an error", s)
		}
	}
}
