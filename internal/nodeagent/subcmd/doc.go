// Package subcmd holds the node agent binary's subcommands that need no
// cluster: validate (a mig.config against simulated GPUs, through the
// agent's own parse, select, validate and plan), models (the GPU models'
// tables), sim (inspect or poke a simulated node) and probe (dump a node's
// GPUs as a simulator config). Each is a function of its arguments and
// streams that returns the exit status, so the main only dispatches.
package subcmd
