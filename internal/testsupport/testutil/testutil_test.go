package testutil

import "testing"

func TestEventually(t *testing.T) {
	n := 0
	Eventually(t, "the third look", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Errorf("cond called %d times, want 3", n)
	}
}
