// Package sharing reads the sharing section of the NVIDIA device plugin's
// config file (time-slicing and MPS) and works out what a node serves under
// it. Parse reads a document, Expand turns the devices a node serves into
// replicas, SelectName picks a named config for a node as NVIDIA's config
// manager does (the nvidia.com/device-plugin.config label, else a default,
// else fallbacks), and Load does the same over a mounted ConfigMap given as
// an fs.FS. Nothing here serves, labels or watches.
//
// The caller that wires this in must keep serving what it served when
// Load, Parse or Expand fails (an invalid file, a label naming no config, a
// devices list the node cannot satisfy), report the error, and try again
// when the file or label changes: a bad edit must not take devices away
// from a node.
//
// # Accepted document
//
// The device plugin's own file, so a user's existing file works unchanged:
//
//	version: v1                  # optional, as in the device plugin; only v1
//	flags: {...}                 # the device plugin's other keys (flags,
//	resources: {...}             # resources, imex) are accepted and ignored
//	sharing:
//	  timeSlicing:               # or mps; never both
//	    renameByDefault: false   # serve <name>.shared instead of <name>
//	    failRequestsGreaterThanOne: false
//	    resources:
//	    - name: nvidia.com/mig-1g.10gb   # "mig-1g.10gb" gets nvidia.com/
//	      replicas: 4                    # at least 2
//	      devices: all                   # default; or a count, or a list
//	      rename: nvidia.com/small       # optional
//
// Decisions worth knowing, each checked against NVIDIA's api/config/v1 and
// its README:
//
//   - Every problem is reported with its path and value, all at once; a
//     document with any problem yields no Config, so the caller keeps what
//     the node served before.
//   - timeSlicing and mps together are refused. NVIDIA's README calls them
//     mutually exclusive; its code silently uses mps and ignores the rest,
//     which hides half of the file.
//   - MPS on MIG resources is refused, as NVIDIA's README and device plugin
//     refuse it. MPS replicas are at most 100, since NVIDIA gives each
//     client 100/replicas percent of the threads, which is 0 beyond that.
//   - MPS implies failRequestsGreaterThanOne unless the file sets it false,
//     as in NVIDIA's config loader; time-slicing defaults it to false.
//   - devices and rename are honoured as the config type documents them.
//     NVIDIA's current device plugin ignores both (with a warning) and
//     shares every device of the resource; a file that sets them therefore
//     shares fewer devices here than there.
//   - Unknown keys inside sharing are errors, and so are unknown top-level
//     keys other than the device plugin's own: a misspelt "timeslicing"
//     would otherwise mean "no sharing" without a word.
package sharing
