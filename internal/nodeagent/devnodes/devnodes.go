// Package devnodes says which device nodes a container needs to use NVIDIA
// GPUs and MIG devices: the control nodes, each parent GPU's /dev/nvidiaN,
// and for a MIG device the capability nodes that grant its GPU instance
// and compute instance, whose minors the driver lists in
// /proc/driver/nvidia-caps/mig-minors.
//
// The DRA driver's CDI specs and the device plugin's Allocate both use it,
// so a container gets the same nodes whichever serves it.
package devnodes

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// MigMinorsPath is the driver's table of MIG capability minors, relative to
// the host root.
const MigMinorsPath = "proc/driver/nvidia-caps/mig-minors"

// Device is a GPU or MIG device by the numbers its nodes are named by.
type Device struct {
	// ID names the device in errors (its UUID).
	ID string
	// Minor is the (parent) GPU's /dev/nvidiaN minor.
	Minor int
	// MIG is true for a MIG device, GPU instance GI with compute
	// instance CI.
	MIG    bool
	GI, CI uint32
}

// Node is one device node: its path in the container and on the host.
type Node struct {
	Path     string
	HostPath string
}

// Nodes lists the nodes devs need, each once, control nodes first.
// hostRoot is where this process sees the host's filesystem (the
// mig-minors table and the UVM nodes are looked up under it); driverRoot
// prefixes the host paths of the nodes, for drivers installed under a root
// such as /run/nvidia/driver. The error is the host's fault: no mig-minors
// table, or no capability listed for a MIG device (a layout that changed
// under the caller).
func Nodes(hostRoot, driverRoot string, devs []Device) ([]Node, error) {
	var paths []string
	seen := map[string]bool{}
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			paths = append(paths, p)
		}
	}
	add("/dev/nvidiactl")
	// The UVM nodes exist only once nvidia-uvm is loaded; naming a missing
	// node would fail the container rather than run it without UVM.
	for _, p := range []string{"/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"} {
		if _, err := os.Stat(filepath.Join(hostRoot, driverRoot, p)); err == nil {
			add(p)
		}
	}
	var minors map[string]int
	for _, d := range devs {
		add(fmt.Sprintf("/dev/nvidia%d", d.Minor))
		if !d.MIG {
			continue
		}
		if minors == nil {
			var err error
			if minors, err = ReadMigMinors(filepath.Join(hostRoot, MigMinorsPath)); err != nil {
				return nil, err
			}
		}
		for _, c := range []string{
			fmt.Sprintf("gpu%d/gi%d/access", d.Minor, d.GI),
			fmt.Sprintf("gpu%d/gi%d/ci%d/access", d.Minor, d.GI, d.CI),
		} {
			minor, ok := minors[c]
			if !ok {
				return nil, fmt.Errorf("device %s: no %q in /%s; is the MIG layout current?", d.ID, c, MigMinorsPath)
			}
			add(fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", minor))
		}
	}
	out := make([]Node, len(paths))
	for i, p := range paths {
		out[i] = Node{Path: p, HostPath: filepath.Join(driverRoot, p)}
	}
	return out, nil
}

// ReadMigMinors reads the mig-minors table at path.
func ReadMigMinors(path string) (map[string]int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading MIG capability minors: %w", err)
	}
	defer f.Close()
	m, err := ParseMigMinors(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// ParseMigMinors reads lines such as "gpu0/gi1/access 12" (and "config",
// "monitor") into a map from capability to minor.
func ParseMigMinors(r io.Reader) (map[string]int, error) {
	out := map[string]int{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("line %d: %q is not \"<capability> <minor>\"", n, line)
		}
		minor, err := strconv.Atoi(f[1])
		if err != nil || minor < 0 {
			return nil, fmt.Errorf("line %d: minor %q is not a non-negative number", n, f[1])
		}
		out[f[0]] = minor
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
