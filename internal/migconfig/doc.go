// Package migconfig turns a mig.config document into changes on a node's GPUs:
// Parse reads the document, Config.Select picks the named configuration,
// Validate checks it against the GPUs, Plan works out per GPU what to keep,
// destroy and create, and Apply carries the plan out through a Partitioner,
// rolling a GPU back to its old layout when a step on it fails.
//
// Parse, Validate and Plan are pure; only Apply has effects, and only through
// the Partitioner it is given.
//
// # Accepted document
//
// One model serves the three forms seen in the field:
//
//	version: v1                     # required, as mig-parted requires it
//	mig-configs:
//	  all-balanced:                 # mig-parted v1: profile -> count
//	  - devices: all
//	    device-filter: ["0x233010DE", "0x20B210DE"]
//	    mig-enabled: true
//	    mig-devices: {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
//	  selected:                     # list form: repeats are counts
//	  - devices: [0, 1]
//	    mig-enabled: true
//	    mig-devices: [2g.20gb, 2g.20gb, 3g.40gb]
//	  pinned:                       # Run:ai form: explicit placements
//	  - devices: [2]
//	    mig-enabled: true
//	    mig-devices: [{name: 3g.40gb, position: 4, size: 4}]
//
// Decisions worth knowing:
//
//   - Work is bounded whatever a document holds (it comes from a Node's
//     annotation, which anyone allowed to edit the Node writes): the limits
//     in limits.go (size, YAML values counting aliases, depth, configs,
//     entries, devices, errors reported) are checked before and while
//     decoding, and duplicates and overlaps are found by sorting or hashing,
//     never by comparing every pair.
//   - version is required and must be "v1". mig-parted rejects a document
//     without it, and a document migflex accepts should not stop parsing the
//     day a second version exists; the extra line costs users nothing.
//   - Unknown fields are errors that name the field and where it is; every
//     error in a document is reported, not just the first.
//   - A GPU index is a whole number or a string of decimal digits: Run:ai
//     and fake-gpu-operator write devices: ["0"].
//   - devices and mig-enabled are required in every entry, and mig-devices
//     is required when mig-enabled is true (mig-devices: {} enables MIG with no
//     instances), as in mig-parted. mig-devices with mig-enabled: false is an
//     error.
//   - Counts start at 1. mig-parted tolerates 0; here it is an error, because
//     a zero next to real counts is almost always a typo.
//   - Profile names are checked for syntax (<n>g.<m>gb with optional
//     attribute suffixes such as +me, +me.all, +gfx, -me) at parse time.
//     Whether a GPU supports the profile is Validate's job. Compute-instance
//     profiles (1c.2g.10gb) are rejected: migflex gives every GPU instance one
//     compute instance spanning it.
//   - device-filter takes the mig-parted strings ("0x233010DE"), one or a
//     list. An unquoted YAML hex number is accepted too: it is the same value.
//     Subsystem-qualified filters ("0x...:0x...") are rejected, because NVML's
//     device/vendor id is all migflex matches on.
//
// # Selecting a configuration
//
// An explicit name wins (the agent's label or the CLI's --config-name); else a
// configuration named "selected"; else the only one; else an error listing
// the names.
//
// # Matching entries to GPUs (mirrors mig-parted)
//
// An entry applies to a GPU when its device-filter (if any) matches the GPU's
// PCI device id and its devices are "all" or list the GPU's index. An entry
// whose filter matches no GPU on the node is skipped, so one file can carry
// entries for several GPU models. Where the filter matches (or there is none),
// an index in devices that the node does not have is an error. A GPU matched
// by two entries is an error (mig-parted would apply both in turn, and the
// last one would win silently). GPUs no entry matches are left untouched.
// Unlike mig-parted, a configuration whose entries all filter themselves out
// is an error rather than a silent no-op: it was written for other GPUs.
//
// # Validating, planning, applying
//
// Validate proves each covered GPU can hold what its entry asks from empty:
// known profiles, pinned placements at valid, non-overlapping starts, then
// memory slices, per-profile maximum counts and compute slices (one error per
// GPU, the plainest), then an exact placement search. MakePlan compares with
// the current layout: instances that still fit where they are stay (as many
// as possible, lowest placements on ties), the rest are destroyed, and new
// ones get explicit starts. A GPU whose multiset of profiles already matches
// (and whose pinned placements match) is left alone.
//
// Apply runs destroy, mode change, create per GPU, and on a failed step
// restores that GPU's old layout and mode before moving on; recreated
// instances get new GPU-instance ids and MIG UUIDs. A mode change the GPU
// holds pending until a reset (Ampere) is reported, not undone.
package migconfig
