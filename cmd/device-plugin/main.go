// Command device-plugin is migflex's node agent: it partitions the node's GPUs
// as the Node's mig.config asks and serves the resulting devices to the
// kubelet. Subcommands expose the config engine and the simulator offline.
package main

func main() {}
