// Package memlimit gives the Go runtime a soft memory limit below the
// container's, read from its cgroup, so that the garbage collector works
// harder as the process nears the limit instead of letting the heap grow
// to twice what is live (GOGC=100) and the kernel kill the process.
//
// An explicit GOMEMLIMIT wins: the runtime has read it at start, and
// Apply leaves it alone.
package memlimit

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
)

// Ratio is the share of the cgroup's limit the runtime may use: the rest is
// for what the runtime does not count (the binary's text, C libraries,
// the kernel's page cache charged to the cgroup).
const Ratio = 0.9

// Limit is what Apply found and did.
type Limit struct {
	// Cgroup is the container's memory limit in bytes; 0 when it has none
	// or none was found.
	Cgroup int64
	// Set is the limit Apply gave the runtime; 0 when it set none.
	Set int64
	// Why Apply set none, or where the limit came from.
	Reason string
}

// Apply sets the runtime's memory limit to Ratio of the cgroup's limit,
// unless GOMEMLIMIT is set (lookupEnv reads it) or the cgroup has no limit.
// fsys is the root of the filesystem: os.DirFS("/") for the process.
func Apply(fsys fs.FS, lookupEnv func(string) (string, bool)) (Limit, error) {
	if v, ok := lookupEnv("GOMEMLIMIT"); ok && v != "" {
		return Limit{Reason: "GOMEMLIMIT=" + v}, nil
	}
	limit, where, err := FromCgroup(fsys)
	if err != nil {
		return Limit{}, err
	}
	if limit == 0 {
		return Limit{Reason: "the cgroup has no memory limit"}, nil
	}
	set := int64(float64(limit) * Ratio)
	debug.SetMemoryLimit(set)
	return Limit{Cgroup: limit, Set: set, Reason: where}, nil
}

// FromCgroup returns the smallest memory limit of the process's cgroup and
// its ancestors (cgroup v2 memory.max, or v1 memory.limit_in_bytes), and
// the file it came from; 0 when there is none. Levels whose file is
// missing are skipped: inside a container only its own cgroup is mounted,
// at the root, whatever path /proc/self/cgroup names.
func FromCgroup(fsys fs.FS) (int64, string, error) {
	data, err := fs.ReadFile(fsys, "proc/self/cgroup")
	if errors.Is(err, fs.ErrNotExist) {
		return 0, "", nil // not Linux, or no /proc
	}
	if err != nil {
		return 0, "", fmt.Errorf("reading the process's cgroup: %w", err)
	}
	var dir, file string
	for line := range strings.Lines(string(data)) {
		// hierarchy-ID:controller-list:cgroup-path
		fields := strings.SplitN(strings.TrimSuffix(line, "\n"), ":", 3)
		if len(fields) != 3 {
			continue
		}
		switch {
		case fields[0] == "0" && fields[1] == "" && file == "":
			dir, file = path.Join("sys/fs/cgroup", fields[2]), "memory.max"
		case slices.Contains(strings.Split(fields[1], ","), "memory"):
			dir, file = path.Join("sys/fs/cgroup/memory", fields[2]), "memory.limit_in_bytes"
		}
	}
	if file == "" {
		return 0, "", nil
	}
	var (
		least int64
		from  string
	)
	for d := dir; ; d = path.Dir(d) {
		p := path.Join(d, file)
		v, err := readLimit(fsys, p)
		if err != nil {
			return 0, "", err
		}
		if v > 0 && (least == 0 || v < least) {
			least, from = v, "/"+p
		}
		if d == "sys/fs/cgroup" || d == "sys/fs/cgroup/memory" || d == "." {
			break
		}
	}
	return least, from, nil
}

// readLimit reads one limit file; 0 for a missing file or no limit ("max"
// in v2, a page-rounded huge number in v1).
func readLimit(fsys fs.FS, p string) (int64, error) {
	data, err := fs.ReadFile(fsys, p)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", p, err)
	}
	s := strings.TrimSpace(string(data))
	if s == "max" {
		return 0, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", p, err)
	}
	if v <= 0 || v >= math.MaxInt64/2 {
		return 0, nil
	}
	return v, nil
}

// Process applies the limit to this process from its real filesystem.
func Process() (Limit, error) {
	return Apply(os.DirFS("/"), os.LookupEnv)
}
