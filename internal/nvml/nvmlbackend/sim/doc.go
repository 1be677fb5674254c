// Package sim is a simulated NVML: it implements go-nvml's nvml.Interface and
// its handle interfaces for GPU models with real MIG profile tables, so the
// code above NVML runs unchanged without a GPU.
//
// What it models: device enumeration and identity (index, UUID, name, PCI
// device id and bus id, memory, minor number, architecture, compute
// capability); MIG mode with Ampere's pending-until-reset and Hopper's
// immediate switch; GPU instances with placements, overlap, per-profile
// counts, the model's compute slices (7, or 4 on A30 and RTX PRO) and
// placement units (8, 4 or 12), and the media engines instances share (a
// GPU's decoders, encoders, JPEG decoders and OFAs are never handed out
// twice, and an _ALL_ME instance coexists only with _NO_ME ones, as nvml.h
// documents); one full-size compute instance per GPU instance (smaller
// compute-instance profiles a model lists are reported, never created); MIG
// device handles and UUIDs; Xid events through event sets; an initial state
// per GPU (MIG mode and instances, what `device-plugin probe` reads off a
// real GPU); and Init/Shutdown reference counting. Every other method answers
// nvml.ERROR_NOT_SUPPORTED (see zz_generated_unsupported.go); none panics.
//
// The sim-only methods of *Lib stand in for the physical world: SetBusy
// (processes running on an instance), InjectXid, ResetGPU and Reboot. With
// a state directory the state survives a process restart, like a real GPU's
// layout, and other processes reach a running simulator through an inbox
// file (see Send).
//
// Faults (fault.go) make the simulated driver misbehave on purpose: a call
// site that fails with a chosen return on its Nth call, or hangs; an Xid
// storm; a GPU that falls off the bus; a node reboot at a chosen call. They come from Config.Faults (the
// config file's faults:) or, on a running simulator, from ArmFault (the
// inbox's fault command), and are listed with what they did by Faults and,
// for other processes, ReadFaults. None is armed unless listed, a
// read-only simulator arms none, and the real backend has no way to take
// one: they are methods and config of this package only.
//
// Choices where real NVML leaves room or the simulator simplifies:
//
//   - SetMigMode on Ampere returns SUCCESS with activation status
//     ERROR_RESET_REQUIRED and leaves the mode pending (what a node whose GPU
//     is held open sees); Hopper and Blackwell switch at once. Either way a
//     GPU with GPU instances or processes gets ERROR_IN_USE and no change;
//     asking for the mode already in effect is a no-op.
//   - GPU-instance creation reports ERROR_INVALID_ARGUMENT for an unknown
//     profile or a placement not in the profile's list, ERROR_NOT_SUPPORTED
//     while MIG is not currently enabled (as nvml.h documents), and
//     ERROR_INSUFFICIENT_RESOURCES for overlap, the profile's max count or
//     the 7 compute slices. CreateGpuInstance places first fit by ascending
//     start; GPU instance ids are the lowest free id from 1 (0 is "the whole
//     GPU" for SetBusy); compute instance ids the lowest free from 0. Real
//     drivers derive GI ids from the placement: nothing may rely on ids.
//   - Profile info and possible placements answer whatever the MIG mode, so
//     layouts can be validated before MIG is on; instance lists and remaining
//     capacity need MIG enabled.
//   - Handles to destroyed instances answer ERROR_INVALID_ARGUMENT, even when
//     a new instance got the same id. Calls before Init answer
//     ERROR_UNINITIALIZED, except the unmodelled ones (ERROR_NOT_SUPPORTED).
//   - Only Xid events exist (GetSupportedEventTypes); RegisterEvents on a MIG
//     device handle is ERROR_NOT_SUPPORTED, as NVML reports MIG events on the
//     parent GPU with GpuInstanceId/ComputeInstanceId (0xFFFFFFFF when the
//     event concerns no instance).
//   - A state file written for other GPUs (model or count differ from the
//     config) makes New fail with an error naming the file; nothing is reset
//     behind the user's back. GPU UUIDs in the state file win over the seed.
//   - A MIG device UUID is drawn at random when its compute instance is
//     created, and the state file keeps it: stable for one instance across
//     restarts, new for every create, even of the same profile at the same
//     place, as on a real GPU (GPU instance ids are reused, lowest free; a
//     UUID never is). Instances in a state file written before UUIDs were
//     stored keep the UUID derived then from the GPU UUID, the ids, the
//     profile and the placement.
//   - Reboot keeps GPU handles and event sets usable (the simulator's
//     process survives what a real one would not); instances, their handles
//     and busy marks are gone; pending MIG modes take effect.
//   - A GPU off the bus (FaultLost) raises Xid 79 (the whole GPU), then
//     answers ERROR_GPU_IS_LOST to every call on its handle, its GPU and
//     compute instances and its MIG devices, to DeviceGetHandleByIndex and
//     ByPciBusId for it, to DeviceGetHandleByUUID when the search meets it
//     (nvml.h: "if any GPU has fallen off the bus"; the simulator searches
//     in index order), to ResetGPU (nvidia-smi cannot reset a GPU it
//     cannot reach), and to EventSet.Wait on a set it is registered with
//     once nothing is queued. DeviceGetCount still counts it, as
//     nvidia-smi still lists it. A reboot brings it back without
//     instances, its MIG mode kept, unless it is lost for good.
//
// Not modelled: creating compute instances smaller than their GPU instance,
// P2P and capabilities in profile info, compute capability per model (it
// follows the architecture: RTX PRO Blackwell reports 10.0, not 12.0), processes
// and utilization (busy is a flag, not a process list), ECC, clocks, power,
// temperature, NVLink, vGPU, GPM, confidential computing, the V2/V3 profile
// info handlers (they call C; the simulator returns zero handlers), and
// device removal (a GPU off the bus is a fault, FaultLost). GPU reset
// exists only as the sim-only ResetGPU (real NVML has no reset call;
// nvidia-smi -r does it).
package sim

//go:generate go run ./internal/gen -o zz_generated_unsupported.go
