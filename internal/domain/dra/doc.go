// Package dra is the pure part of migflex's Dynamic Resource Allocation
// driver: what a node's GPU layout looks like as DRA devices, and what the
// rest of migflex needs to know about them. It does no I/O.
//
//   - Devices names the devices of a layout ([]mig.GPU): each MIG device
//     that exists and each whole GPU with MIG off, under names that stay the
//     same across republishing and restarts (a claim names a device).
//   - Resources turns them into the one ResourceSlice pool of a node, with
//     attributes and capacities that follow NVIDIA's DRA driver where it
//     has a convention, and unhealthy devices tainted or withdrawn.
//   - Uses says which devices pods or claims hold, from allocated
//     ResourceClaims, the kubelet's pod-resources answer and the claims the
//     kubelet plugin has prepared: the busy check's view of DRA.
//   - DeviceClasses generates the DeviceClasses that map nvidia.com/mig-*
//     and nvidia.com/gpu to these devices.
//
// The kubelet plugin is draplugin; the CDI specs it writes are cdi.
// docs/DRA.md documents the schema.
package dra
