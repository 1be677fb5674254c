// Command webhook is migflex's fallback admission webhook: it rewrites a
// pod's MIG request to a GPU type the nodes it can land on have
// (internal/webhook).
package main

import (
	"github.com/migflex/migflex/internal/platform/cli"
	"github.com/migflex/migflex/internal/webhook"
)

func main() { cli.ServerMain(webhook.Main) }
