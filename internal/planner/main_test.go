package planner

import (
	"flag"
	"os"
	"testing"

	"k8s.io/klog/v2"
)

// TestMain lets MIGFLEX_TEST_V=2 go test show the rounds' logs.
func TestMain(m *testing.M) {
	if v := os.Getenv("MIGFLEX_TEST_V"); v != "" {
		fs := flag.NewFlagSet("klog", flag.ExitOnError)
		klog.InitFlags(fs)
		_ = fs.Set("v", v)
	}
	os.Exit(m.Run())
}
