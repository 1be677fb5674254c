package fallback

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

func TestParseResource(t *testing.T) {
	tests := map[corev1.ResourceName]struct {
		want Profile
		ok   bool
	}{
		"nvidia.com/gpu":             {Profile{Resource: "nvidia.com/gpu"}, true},
		"nvidia.com/mig-1g.10gb":     {Profile{Resource: "nvidia.com/mig-1g.10gb", Slices: 1, MemoryGB: 10}, true},
		"nvidia.com/mig-7g.141gb":    {Profile{Resource: "nvidia.com/mig-7g.141gb", Slices: 7, MemoryGB: 141}, true},
		"nvidia.com/mig-1g.10gb.me":  {Profile{Resource: "nvidia.com/mig-1g.10gb.me", Slices: 1, MemoryGB: 10, Attrs: []string{"me"}}, true},
		"nvidia.com/mig-1g.5gb.me.x": {Profile{Resource: "nvidia.com/mig-1g.5gb.me.x", Slices: 1, MemoryGB: 5, Attrs: []string{"me", "x"}}, true},
		"nvidia.com/mig-1c.3g.40gb":  {},
		"nvidia.com/mig-0g.10gb":     {},
		"nvidia.com/mig-2g.20":       {},
		"nvidia.com/mig-2g.20gb.":    {},
		"nvidia.com/mig-2g.20gb+me":  {},
		"amd.com/gpu":                {},
		"cpu":                        {},
		"":                           {},
	}
	for in, tc := range tests {
		got, ok := ParseResource(in)
		if ok != tc.ok {
			t.Errorf("ParseResource(%q) ok = %v, want %v", in, ok, tc.ok)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("ParseResource(%q) (-want +got):\n%s", in, diff)
		}
	}
}

func TestShortName(t *testing.T) {
	tests := map[corev1.ResourceName]string{
		"nvidia.com/gpu":            "gpu",
		"nvidia.com/mig-2g.20gb":    "2g.20gb",
		"nvidia.com/mig-1g.10gb.me": "1g.10gb.me",
		"example.com/thing":         "example.com/thing",
	}
	for in, want := range tests {
		if got := ShortName(in); got != want {
			t.Errorf("ShortName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDirection(t *testing.T) {
	p := func(r corev1.ResourceName) Profile {
		out, ok := ParseResource(r)
		if !ok {
			t.Fatalf("ParseResource(%q) failed", r)
		}
		return out
	}
	tests := []struct {
		from, to corev1.ResourceName
		want     Direction
	}{
		{mig2g20, mig1g10, Down},
		{mig2g20, mig1g20, Down},
		{mig1g20, mig1g10, Down},
		{mig1g10m, mig1g10, Down},
		{mig1g10, mig1g10m, Up},
		{mig1g10, mig2g20, Up},
		{mig3g40, mig4g40, Up},
		{mig3g40, gpu, Whole},
		{gpu, mig7g80, Down},
	}
	for _, tc := range tests {
		if got := direction(p(tc.from), p(tc.to)); got != tc.want {
			t.Errorf("direction(%s, %s) = %s, want %s", tc.from, tc.to, got, tc.want)
		}
	}
}
