// Package nvmlmig reads and changes the MIG state of GPUs through an NVML
// interface: Discover fills mig's types, Partitioner creates and destroys
// instances. It is the only code that talks to NVML about partitions; the
// config engine, the device plugin and the node agent work on mig's plain
// types, so they never care whether NVML is real or simulated.
package nvmlmig
