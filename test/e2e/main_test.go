//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/migflex/migflex/test/apiwarn"
	"github.com/migflex/migflex/test/e2e/framework"
)

// cluster is the local cluster every test runs against.
var cluster *framework.Cluster

func TestMain(m *testing.M) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	c, err := framework.FromEnv(ctx)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		os.Exit(1)
	}
	cluster = c
	fmt.Printf("e2e: Kubernetes %s (minor %d)\n", c.GitVersion, c.Minor)
	code := m.Run()
	// Whatever the suite sent (the installs by kubectl and helm included),
	// the API server must not have called any of it deprecated: an API or
	// field that a coming minor removes. Checked over every test that ran.
	all := c.Warnings.All()
	if len(all) > 0 {
		fmt.Printf("e2e: %d warnings from the API server during the suite:\n", len(all))
		for _, w := range all {
			fmt.Printf("  %s\n", w)
		}
	}
	if deps := apiwarn.Deprecations(all); len(deps) > 0 {
		fmt.Printf("FAIL: the API server (%s) called %d things the suite sent deprecated:\n", c.GitVersion, len(deps))
		for _, w := range deps {
			fmt.Printf("  %s\n", w)
		}
		code = 1
	}
	os.Exit(code)
}
