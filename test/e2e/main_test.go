//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

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
	os.Exit(m.Run())
}
