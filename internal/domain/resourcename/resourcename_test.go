package resourcename_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/resourcename"
)

func TestMIG(t *testing.T) {
	for profile, want := range map[string]corev1.ResourceName{
		"2g.20gb":        "nvidia.com/mig-2g.20gb",
		"1g.10gb+me":     "nvidia.com/mig-1g.10gb.me",
		"1g.24gb+me.all": "nvidia.com/mig-1g.24gb.me.all",
		"1g.24gb-me":     "nvidia.com/mig-1g.24gb-me",
		"2g.48gb+gfx":    "nvidia.com/mig-2g.48gb.gfx",
	} {
		if got := resourcename.MIG(profile); got != want {
			t.Errorf("MIG(%q) = %q, want %q", profile, got, want)
		}
		if got, ok := resourcename.ParseMIG(resourcename.MIG(profile)); !ok {
			t.Errorf("ParseMIG(MIG(%q)) = %+v, false", profile, got)
		}
	}
}

func TestParseMIG(t *testing.T) {
	tests := []struct {
		r    corev1.ResourceName
		want resourcename.MIGName
		ok   bool
	}{
		{"nvidia.com/mig-3g.40gb", resourcename.MIGName{Slices: 3, MemoryGB: 40}, true},
		{"nvidia.com/mig-1g.10gb.me", resourcename.MIGName{Slices: 1, MemoryGB: 10, Suffix: ".me"}, true},
		{"nvidia.com/mig-1g.24gb-me", resourcename.MIGName{Slices: 1, MemoryGB: 24, Suffix: "-me"}, true},
		{"nvidia.com/mig-1g.24gb.me.all", resourcename.MIGName{Slices: 1, MemoryGB: 24, Suffix: ".me.all"}, true},
		{"nvidia.com/gpu", resourcename.MIGName{}, false},
		{"nvidia.com/mig-1c.3g.40gb", resourcename.MIGName{}, false},
		{"nvidia.com/mig-0g.10gb", resourcename.MIGName{}, false},
		{"nvidia.com/mig-1g.10gb+me", resourcename.MIGName{}, false},
		{"example.com/mig-1g.10gb", resourcename.MIGName{}, false},
	}
	for _, tc := range tests {
		got, ok := resourcename.ParseMIG(tc.r)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseMIG(%q) = %+v, %v, want %+v, %v", tc.r, got, ok, tc.want, tc.ok)
		}
	}
}

func TestShortAndIsGPU(t *testing.T) {
	tests := []struct {
		r     corev1.ResourceName
		short string
		gpu   bool
	}{
		{resourcename.GPU, "gpu", true},
		{"nvidia.com/mig-2g.20gb", "2g.20gb", true},
		{"nvidia.com/mig-anything", "anything", true},
		{"example.com/gpu", "example.com/gpu", false},
		{"cpu", "cpu", false},
	}
	for _, tc := range tests {
		if got := resourcename.Short(tc.r); got != tc.short {
			t.Errorf("Short(%q) = %q, want %q", tc.r, got, tc.short)
		}
		if got := resourcename.IsGPU(tc.r); got != tc.gpu {
			t.Errorf("IsGPU(%q) = %v, want %v", tc.r, got, tc.gpu)
		}
	}
}
