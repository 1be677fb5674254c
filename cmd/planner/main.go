// Command planner is migflex's planner in the cluster: it turns pods the
// scheduler could not place for lack of a MIG profile into layouts on
// opted-in nodes (internal/planner).
package main

import (
	"github.com/migflex/migflex/internal/planner"
	"github.com/migflex/migflex/internal/platform/cli"
)

func main() { cli.ServerMain(planner.Main) }
