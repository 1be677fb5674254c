// Package cdi writes the Container Device Interface specs through which
// the container runtime gives a container the devices the DRA driver
// prepared: one spec file per prepared claim, removed when the claim is
// unprepared, with one CDI device per request of the claim.
//
// A CDI device per request, not per device, because the runtime applies
// the edits of a container's CDI devices one after the other and an
// environment variable set twice keeps the last value: a request for two
// MIG devices must set NVIDIA_VISIBLE_DEVICES to both UUIDs at once, as the
// device-plugin path does.
//
// The spec's types come from tags.cncf.io/container-device-interface/
// specs-go, which k8s.io/dynamic-resource-allocation already brings; the
// files are written here (a few lines, atomic) rather than through the
// CDI library's cache, which would add its dependencies to the agent for
// what is one JSON file. The tests read every spec back through that
// library, as the container runtime does.
package cdi

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/nodeagent/devnodes"
	"github.com/migflex/migflex/internal/platform/atomicfile"
)

const (
	// DefaultDir is where the runtime looks for transient CDI specs
	// (containerd's default cdi_spec_dirs are /etc/cdi and /var/run/cdi).
	DefaultDir = "/var/run/cdi"
	// DefaultKind is the CDI vendor/class of migflex's devices; it is not
	// the NVIDIA toolkit's nvidia.com/gpu, whose specs may be on the same
	// node.
	DefaultKind = "migflex.io/gpu"

	// EnvVisibleDevices lists the devices' UUIDs for the NVIDIA container
	// runtime, as the device plugin's envvar strategy does.
	EnvVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
)

// Editor gives the container edits that let a container use devs, besides
// NVIDIA_VISIBLE_DEVICES which every spec sets.
type Editor interface {
	Edits(devs []dra.Device) (specs.ContainerEdits, error)
}

// DeviceEnv is the optional capability of an NVML backend whose devices
// have no device nodes (the simulator's): the environment that names them
// to a container instead. ids are the devices' UUIDs in allocation order,
// profiles[i] the MIG profile of ids[i] (empty for a whole GPU). The agent
// finds it on its backend by type assertion.
type DeviceEnv interface {
	ContainerEnv(ids, profiles []string) map[string]string
}

// EnvEditor is the Editor of a backend with DeviceEnv: no device nodes,
// and the environment e gives, as the device plugin's Allocate gives it
// for the same devices (a test checks they agree).
func EnvEditor(e DeviceEnv) Editor { return envEditor{e} }

type envEditor struct{ env DeviceEnv }

func (e envEditor) Edits(devs []dra.Device) (specs.ContainerEdits, error) {
	ids := make([]string, len(devs))
	profiles := make([]string, len(devs))
	for i, d := range devs {
		ids[i] = d.UUID
		if d.MIG {
			profiles[i] = d.Profile
		}
	}
	env := e.env.ContainerEnv(ids, profiles)
	// Sorted, so that writing a claim's spec again gives the same file.
	keys := slices.Sorted(maps.Keys(env))
	var edits specs.ContainerEdits
	for _, k := range keys {
		edits.Env = append(edits.Env, k+"="+env[k])
	}
	return edits, nil
}

// DeviceNodes is the Editor for real GPUs: the device nodes the device
// plugin's Allocate hands the kubelet for the same devices (devnodes).
type DeviceNodes struct {
	// HostRoot is where this process sees the host's filesystem; "/"
	// when empty.
	HostRoot string
	// DriverRoot prefixes the nodes' host paths; "/" when empty.
	DriverRoot string
}

// Edits implements Editor.
func (n DeviceNodes) Edits(devs []dra.Device) (specs.ContainerEdits, error) {
	refs := make([]devnodes.Device, len(devs))
	for i, d := range devs {
		refs[i] = devnodes.Device{ID: d.UUID, Minor: d.Minor, MIG: d.MIG, GI: d.GI, CI: d.CI}
	}
	nodes, err := devnodes.Nodes(orRoot(n.HostRoot), orRoot(n.DriverRoot), refs)
	if err != nil {
		return specs.ContainerEdits{}, err
	}
	var e specs.ContainerEdits
	for _, nd := range nodes {
		e.DeviceNodes = append(e.DeviceNodes, &specs.DeviceNode{Path: nd.Path, HostPath: nd.HostPath, Permissions: "rw"})
	}
	return e, nil
}

func orRoot(p string) string {
	if p == "" {
		return "/"
	}
	return p
}

// Writer writes and removes the specs of prepared claims in one directory.
type Writer struct {
	dir           string
	vendor, class string
	editor        Editor
}

// NewWriter returns a Writer for specs of kind ("vendor/class") in dir,
// which must exist, whose devices reach containers through e.
func NewWriter(dir, kind string, e Editor) (*Writer, error) {
	vendor, class, ok := strings.Cut(kind, "/")
	if !ok || !validVendorOrClass(vendor) || !validVendorOrClass(class) {
		return nil, fmt.Errorf("CDI kind %q is not vendor/class (each a letter, then letters, digits, '_', '-' or '.', ending in a letter or digit)", kind)
	}
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("CDI spec directory %q is not an absolute path", dir)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("CDI spec directory %s: not a directory (%v)", dir, err)
	}
	if e == nil {
		return nil, errors.New("no CDI editor")
	}
	return &Writer{dir: dir, vendor: vendor, class: class, editor: e}, nil
}

// Request is the devices allocated for one request of a claim.
type Request struct {
	// Name is the request's name in the claim's allocation result
	// ("gpu", or "gpu/small" for a subrequest).
	Name    string
	Devices []dra.Device
}

// WriteClaim writes (or rewrites) the spec of the claim with this UID and
// returns each request's fully qualified CDI device ID, in the order of
// requests.
func (w *Writer) WriteClaim(claimUID string, requests []Request) ([]string, error) {
	if err := validUID(claimUID); err != nil {
		return nil, err
	}
	spec := &specs.Spec{Kind: w.vendor + "/" + w.class}
	ids := make([]string, len(requests))
	seen := map[string]string{}
	for i, r := range requests {
		if len(r.Devices) == 0 {
			return nil, fmt.Errorf("claim %s: request %q has no devices", claimUID, r.Name)
		}
		name := claimUID + "-" + strings.ReplaceAll(r.Name, "/", ".")
		if other, ok := seen[name]; ok {
			return nil, fmt.Errorf("claim %s: requests %q and %q have one CDI name %q", claimUID, other, r.Name, name)
		}
		seen[name] = r.Name
		edits, err := w.editor.Edits(r.Devices)
		if err != nil {
			return nil, fmt.Errorf("claim %s request %q: %w", claimUID, r.Name, err)
		}
		uuids := make([]string, len(r.Devices))
		for j, d := range r.Devices {
			uuids[j] = d.UUID
		}
		edits.Env = append([]string{EnvVisibleDevices + "=" + strings.Join(uuids, ",")}, edits.Env...)
		spec.Devices = append(spec.Devices, specs.Device{Name: name, ContainerEdits: edits})
		ids[i] = spec.Kind + "=" + name
	}
	v, err := specs.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, fmt.Errorf("claim %s: CDI spec version: %w", claimUID, err)
	}
	// The oldest version that can say it, so older runtimes read it too.
	spec.Version = v
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("claim %s: encoding CDI spec: %w", claimUID, err)
	}
	if err := atomicfile.Write(w.SpecPath(claimUID), append(data, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("claim %s: %w", claimUID, err)
	}
	return ids, nil
}

// RemoveClaim removes the claim's spec; a spec that is not there is no
// error (Unprepare is idempotent).
func (w *Writer) RemoveClaim(claimUID string) error {
	if err := validUID(claimUID); err != nil {
		return err
	}
	if err := os.Remove(w.SpecPath(claimUID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing CDI spec of claim %s: %w", claimUID, err)
	}
	return nil
}

// SpecPath is where the claim's spec is written: the CDI library's name
// for a transient spec, <vendor>-<class>_<claim UID>.json.
func (w *Writer) SpecPath(claimUID string) string {
	return filepath.Join(w.dir, w.prefix()+claimUID+".json")
}

// Claims lists the UIDs of the claims whose specs are in the directory,
// sorted: after a restart, specs no checkpointed claim explains are
// leftovers to remove.
func (w *Writer) Claims() ([]string, error) {
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		return nil, fmt.Errorf("listing CDI specs: %w", err)
	}
	var out []string
	for _, e := range entries {
		uid, ok := strings.CutPrefix(e.Name(), w.prefix())
		if uid, isJSON := strings.CutSuffix(uid, ".json"); ok && isJSON && validUID(uid) == nil {
			out = append(out, uid)
		}
	}
	slices.Sort(out)
	return out, nil
}

func (w *Writer) prefix() string { return w.vendor + "-" + w.class + "_" }

// validUID accepts what a Kubernetes UID looks like, and nothing that could
// leave the directory or break a CDI device name.
func validUID(uid string) error {
	if uid == "" || len(uid) > 128 {
		return fmt.Errorf("claim UID %q: empty or too long", uid)
	}
	for i, c := range uid {
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && (c != '-' || i == 0 || i == len(uid)-1) {
			return fmt.Errorf("claim UID %q: only letters, digits and inner '-' can be part of a CDI device name", uid)
		}
	}
	return nil
}

func validVendorOrClass(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		letter := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
		other := '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.'
		if !letter && (i == 0 || !other) {
			return false
		}
	}
	last := s[len(s)-1]
	return 'a' <= last && last <= 'z' || 'A' <= last && last <= 'Z' || '0' <= last && last <= '9'
}
