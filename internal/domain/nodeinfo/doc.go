// Package nodeinfo is the Node contract: everything the node agent, the
// planner and the webhook's reshape-first mode exchange through a Node,
// and what users read there with kubectl. It owns every key (the layout
// sources the agent reads, in their precedence; the state, reason,
// layout and profile table the agent writes; the planner's opt-in and
// proposal), every value those keys hold (states, MIG modes, health), and
// the wire form of the layout and profiles annotations with their encoder
// and decoder. It is pure: no I/O, no cgo.
//
// The JSON of the annotations is read across versions: an agent and a
// planner of different releases read each other's Node during a rolling
// upgrade. A field is added with omitempty, never renamed or given another
// unit; a change that cannot be read the old way needs a new key.
package nodeinfo
