// Command kubectl-migflex is the `kubectl migflex` plugin: what migflex
// does with a cluster's GPUs, and why a pod waits (internal/migflexctl).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/migflex/migflex/internal/migflexctl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := migflexctl.New().Run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
