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
//   - Errors are scoped as one file shared by a fleet needs them: what is
//     wrong with the document as a whole (YAML, limits, version, unknown
//     top-level fields) fails Parse; what is wrong inside one configuration
//     (an unknown field, a malformed or compute-instance profile, a key or
//     the configuration's name given twice) is that configuration's Err,
//     which Select returns, and the others stay usable. mig-parted fails
//     the whole file on some of these. Every problem names where it is.
//   - A GPU index is a whole number or a string of decimal digits: Run:ai
//     and fake-gpu-operator write devices: ["0"]. An index listed twice
//     counts once; devices: [] names no GPU.
//   - devices and mig-enabled are required in every entry, and mig-devices
//     is required when mig-enabled is true (mig-devices: {} enables MIG with no
//     instances), as in mig-parted. mig-devices with mig-enabled: false is an
//     error.
//   - Counts are read as mig-parted reads them: a zero beside other counts
//     is none of that profile, every count zero is an error.
//   - Profile names are read with mig-parted's rules ([<c>c.]<g>g.<m>gb,
//     then +/- and comma-separated attributes) and kept canonical:
//     "1g.05gb" is "1g.5gb", "1c.1g.5gb" (a compute instance spanning its
//     GPU instance) is "1g.5gb". Whether a GPU has the profile is
//     Validate's job. Compute-instance profiles proper (1c.7g.40gb: several
//     compute instances in one GPU instance) fail their configuration:
//     migflex gives every GPU instance one compute instance spanning it, and
//     the device plugin serves that, as NVIDIA's does.
//   - device-filter is read as mig-parted reads it: absent, "" or [] match
//     every GPU; otherwise PCI ids ("0x233010DE", optionally with the
//     subsystem, "0x233010DE:0x16C110DE"), one or a list. A string that is
//     no such id (a model name) matches no GPU. An unquoted YAML hex number
//     is the same id.
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
// PCI ids and its devices list the GPU's index or are "all" (every GPU with
// MIG, and every GPU when the entry turns MIG off). A GPU matched by two
// entries is an error (mig-parted would apply both in turn, and the last one
// would win silently). GPUs no entry matches are left untouched.
//
// What of a configuration does not fit the node depends on whom it was
// written for (Scope). An entry whose filter matches none of the node's
// GPUs is left out in both, with a note: one file carries entries for
// several GPU models. A file shared by a fleet (ScopeFleet, the GPU
// operator's label) is read as mig-parted reads it: indices the node lacks,
// devices: [], and a configuration nothing of which applies are left out
// with a note, and nothing changes. A document written for this node
// (ScopeNode, the annotations) makes those errors: it names GPUs that are
// not there, or was written for other GPUs.
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
