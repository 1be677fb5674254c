package framework

import "testing"

// TestVMRSS reads this test's own resident memory: above zero.
func TestVMRSS(t *testing.T) {
	rss, err := vmRSS("/proc/self/status")
	if err != nil || rss <= 0 {
		t.Fatalf("vmRSS(/proc/self/status) = %d, %v; want a size", rss, err)
	}
	if _, err := vmRSS("/proc/1/nonexistent"); err == nil {
		t.Error("vmRSS of a missing file: no error")
	}
}
