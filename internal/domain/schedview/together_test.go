package schedview

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// A pod asking for several profiles fits on a dynamic node only if its
// pool makes them together: the profiles draw on the GPUs' counters, and
// each one's free count is what the pool makes of it alone. Every case
// where fits differs from alone is one the counts alone got wrong, and so
// is every case where holds is false but alone is true.
func TestMemberFitsTogether(t *testing.T) {
	const (
		r1g = corev1.ResourceName("nvidia.com/mig-1g.10gb")
		r2g = corev1.ResourceName("nvidia.com/mig-2g.20gb")
		r3g = corev1.ResourceName("nvidia.com/mig-3g.40gb")
		r4g = corev1.ResourceName("nvidia.com/mig-4g.40gb")
	)
	at := func(profile string, start int) string { return placementName(0, profile, start) }
	tests := []struct {
		name   string
		migOn  []bool
		claims []string
		need   map[corev1.ResourceName]int64
		// alone: every profile's free count covers its need (what the
		// webhook counted before); fits: the pool makes them together;
		// holds: every profile's allocatable count (allocated and free)
		// covers its need and the pool could make them together with
		// nothing allocated.
		alone, fits, holds bool
	}{
		{name: "a 4g and a 3g share a free H100", migOn: []bool{true},
			need: alloc{r4g: 1, r3g: 1}, alone: true, fits: true, holds: true},
		{name: "a 4g, a 3g and a 1g take eight memory slices and eight compute slices of seven", migOn: []bool{true},
			need: alloc{r4g: 1, r3g: 1, r1g: 1}, alone: true, fits: false, holds: false},
		{name: "two 3g take every memory slice: no 1g beside them", migOn: []bool{true},
			need: alloc{r3g: 2, r1g: 1}, alone: true, fits: false, holds: false},
		{name: "a 3g, a 2g and two 1g fill a free H100", migOn: []bool{true},
			need: alloc{r3g: 1, r2g: 1, r1g: 2}, alone: true, fits: true, holds: true},
		{name: "on two GPUs the 1g goes to the other", migOn: []bool{true, true},
			need: alloc{r4g: 1, r3g: 1, r1g: 1}, alone: true, fits: true, holds: true},
		{name: "beside a 1g at 0: a 3g at 4 and a 2g at 2", migOn: []bool{true}, claims: []string{at("1g.10gb", 0)},
			need: alloc{r3g: 1, r2g: 1}, alone: true, fits: true, holds: true},
		{name: "beside a 1g at 0 no 4g at all", migOn: []bool{true}, claims: []string{at("1g.10gb", 0)},
			need: alloc{r4g: 1, r1g: 1}, alone: false, fits: false, holds: false},
		{name: "beside 1g at 1 and 5: a 2g and three 1g take the five compute slices left", migOn: []bool{true},
			claims: []string{at("1g.10gb", 1), at("1g.10gb", 5)},
			need:   alloc{r2g: 1, r1g: 3}, alone: true, fits: true, holds: true},
		{name: "beside 1g at 1 and 5: a 2g and four 1g would take six", migOn: []bool{true},
			claims: []string{at("1g.10gb", 1), at("1g.10gb", 5)},
			need:   alloc{r2g: 1, r1g: 4}, alone: true, fits: false, holds: true},
		{name: "one type is its free count", migOn: []bool{true},
			need: alloc{r1g: 7}, alone: true, fits: true, holds: true},
	}
	c := classes(t, "1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := Node{Name: "n1", DRA: true}
			n.SetDRAPool(c, NewPool("n1", dynamicSlices(t, "n1", "H100-SXM5-80GB", tt.migOn...), claimsOn("n1", tt.claims...)))
			m := NewSnapshot([]Node{n}).groups[0].members[0]
			if got := covers(m.Free(), tt.need); got != tt.alone {
				t.Errorf("each profile's free count covers its need: %v, want %v (free %v)", got, tt.alone, m.Free())
			}
			if got := m.Fits(tt.need); got != tt.fits {
				t.Errorf("Fits(%v) = %v, want %v (free %v)", tt.need, got, tt.fits, m.Free())
			}
			if got := m.Holds(tt.need); got != tt.holds {
				t.Errorf("Holds(%v) = %v, want %v (allocatable %v)", tt.need, got, tt.holds, m.Allocatable())
			}
		})
	}
}

func covers(free, need map[corev1.ResourceName]int64) bool {
	for r, n := range need {
		if free[r] < n {
			return false
		}
	}
	return true
}
