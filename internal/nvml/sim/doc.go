// Package sim is a simulated NVML: it implements go-nvml's nvml.Interface and
// its handle interfaces for GPU models with real MIG profile tables, so the
// code above NVML runs unchanged without a GPU.
//
// What it models: device enumeration and identity (index, UUID, name, PCI
// device id, memory, minor number, architecture, compute capability); MIG
// mode with Ampere's pending-until-reset and Hopper's immediate switch; GPU
// instances with placements, overlap, per-profile counts and the 7 compute
// slices; one full-size compute instance per GPU instance; MIG device
// handles and UUIDs; Xid events through event sets; and Init/Shutdown
// reference counting. Every other method answers nvml.ERROR_NOT_SUPPORTED
// (see zz_generated_unsupported.go); none panics.
//
// The sim-only methods of *Lib stand in for the physical world: SetBusy
// (processes running on an instance), InjectXid, ResetGPU and Reboot. With
// a state directory the state survives a process restart, like a real GPU's
// layout, and other processes reach a running simulator through an inbox
// file (see Send).
package sim

//go:generate go run ./internal/gen -o zz_generated_unsupported.go
