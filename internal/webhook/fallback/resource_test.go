package fallback

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/resourcename"
)

func TestParseResource(t *testing.T) {
	tests := map[corev1.ResourceName]struct {
		want Profile
		ok   bool
	}{
		"nvidia.com/gpu":             {Profile{Resource: "nvidia.com/gpu"}, true},
		"nvidia.com/mig-1g.10gb":     {Profile{Resource: "nvidia.com/mig-1g.10gb", Slices: 1, MemoryGB: 10}, true},
		"nvidia.com/mig-7g.141gb":    {Profile{Resource: "nvidia.com/mig-7g.141gb", Slices: 7, MemoryGB: 141}, true},
		"nvidia.com/mig-1g.10gb.me":  {Profile{Resource: "nvidia.com/mig-1g.10gb.me", Slices: 1, MemoryGB: 10, Suffix: ".me"}, true},
		"nvidia.com/mig-1g.5gb.me.x": {Profile{Resource: "nvidia.com/mig-1g.5gb.me.x", Slices: 1, MemoryGB: 5, Suffix: ".me.x"}, true},
		"nvidia.com/mig-1g.24gb-me":  {Profile{Resource: "nvidia.com/mig-1g.24gb-me", Slices: 1, MemoryGB: 24, Suffix: "-me"}, true},
		"nvidia.com/mig-2g.48gb.gfx": {Profile{Resource: "nvidia.com/mig-2g.48gb.gfx", Slices: 2, MemoryGB: 48, Suffix: ".gfx"}, true},
		"nvidia.com/mig-1c.3g.40gb":  {},
		"nvidia.com/mig-0g.10gb":     {},
		"nvidia.com/mig-2g.20":       {},
		"nvidia.com/mig-2g.20gb.":    {},
		"nvidia.com/mig-2g.20gb-":    {},
		"nvidia.com/mig-3g.40GB":     {},
		"nvidia.com/mig-foo":         {},
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
		if got := resourcename.Short(in); got != want {
			t.Errorf("resourcename.Short(%q) = %q, want %q", in, got, want)
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

func TestMetricLabel(t *testing.T) {
	chain := DefaultPolicy()
	chain.Chains = map[corev1.ResourceName][]corev1.ResourceName{
		"nvidia.com/mig-5g.50gb": {"nvidia.com/mig-6g.60gb"},
	}
	d, err := NewDecider(Options{Policy: chain})
	if err != nil {
		t.Fatal(err)
	}
	// A custom simulated model's profile, present on a node.
	snap := snapshotOf(node("n1", alloc{"nvidia.com/mig-1g.9gb": 7, mig1g10: 7}))
	tests := map[corev1.ResourceName]string{
		"nvidia.com/gpu":                    "gpu",
		"nvidia.com/mig-2g.20gb":            "2g.20gb",        // A100-80GB, H100-80GB; absent here
		"nvidia.com/mig-7g.141gb":           "7g.141gb",       // H200
		"nvidia.com/mig-1g.10gb.me":         "1g.10gb.me",     // media extensions
		"nvidia.com/mig-1g.24gb.me.all":     "1g.24gb.me.all", // RTX PRO 6000 Blackwell
		"nvidia.com/mig-2g.48gb.gfx":        "2g.48gb.gfx",
		"nvidia.com/mig-1g.9gb":             "1g.9gb",  // not a known GPU's, but on a node
		"nvidia.com/mig-5g.50gb":            "5g.50gb", // the policy names it
		"nvidia.com/mig-6g.60gb":            "6g.60gb", // the policy names it
		"nvidia.com/mig-999g.99999gb.zz.yy": LabelOther,
		"nvidia.com/mig-1g.11gb":            LabelOther, // well formed, no GPU has it
		"nvidia.com/mig-9g.80gb":            LabelOther,
		"nvidia.com/mig-1g.10gb.zz":         LabelOther, // unknown attribute
		"nvidia.com/mig-1g.10gb.me.me":      LabelOther,
		"nvidia.com/mig-1c.3g.40gb":         LabelOther, // not a profile name at all
		"example.com/gpu":                   LabelOther,
	}
	for r, want := range tests {
		if got := d.MetricLabel(r, snap); got != want {
			t.Errorf("MetricLabel(%s) = %q, want %q", r, got, want)
		}
	}
}

// Every profile in the known table parses, and attributes are known only
// on the profiles that have them.
func TestKnown(t *testing.T) {
	for short := range knownProfiles {
		r := corev1.ResourceName(resourcename.MIGPrefix + short)
		if _, ok := ParseResource(r); !ok || !Known(r) {
			t.Errorf("%s: parses %v, known %v", r, ok, Known(r))
		}
	}
	for r, want := range map[corev1.ResourceName]bool{
		"nvidia.com/gpu":                true,
		"nvidia.com/mig-1g.10gb":        true,
		"nvidia.com/mig-1g.10gb.me":     true,
		"nvidia.com/mig-1g.24gb-me":     true,
		"nvidia.com/mig-1g.24gb.me.all": true,
		"nvidia.com/mig-4g.96gb.gfx":    true,
		"nvidia.com/mig-7g.80gb.me":     false, // +me is on one-slice profiles
		"nvidia.com/mig-1g.10gb.gfx":    false,
		"nvidia.com/mig-1g.10gb.me.me":  false,
		"nvidia.com/mig-9g.99gb":        false,
		"nvidia.com/mig-3g.40GB":        false,
		"mig-1g.10gb":                   false,
		"example.com/mig-1g.10gb":       false,
	} {
		if got := Known(r); got != want {
			t.Errorf("Known(%s) = %v, want %v", r, got, want)
		}
	}
}
