package main

import (
	"fmt"
	"io"
)

// runAgent runs the node agent. It lands with the node-agent issue.
func runAgent(args []string, stdout, stderr io.Writer) int {
	fmt.Fprint(stderr, "the node agent is not built yet; available now:\n"+usage)
	return 2
}
