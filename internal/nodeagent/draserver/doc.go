// Package draserver puts migflex's DRA kubelet plugin (draplugin) behind
// the node agent's Server port, so a node chosen for DRA is served through
// ResourceSlices instead of the device plugin, with the agent unchanged:
// Server publishes every layout the agent serves, drains around a
// repartition, reports the devices' health and says "visible" once the
// API server's slices show the layout, signalling each change of those
// slices so that the agent hears of it at once. Holders is the busy
// check's view of such a node: the devices ResourceClaims hold, so that
// no GPU is repartitioned under a claim.
package draserver
