package framework

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// PodRSS is the resident memory, in bytes, of the processes of the pod
// with uid whose command is cmd (a container's entrypoint: /device-plugin,
// /webhook, /planner), summed, as /proc/<pid>/status's VmRSS has it: the
// cluster's nodes run on this host, so every pod's processes are ours to
// read, found by the pod's cgroups as KillAgent finds them.
func PodRSS(uid types.UID, cmd string) (int64, error) {
	pids, err := podPIDs(string(uid))
	if err != nil {
		return 0, err
	}
	var total int64
	found := false
	for _, pid := range pids {
		dir := filepath.Join("/proc", strconv.Itoa(pid))
		cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil || !bytes.HasPrefix(cmdline, []byte(cmd+"\x00")) {
			continue // the pause process, another container's, or gone
		}
		rss, err := vmRSS(filepath.Join(dir, "status"))
		if err != nil {
			continue // exited meanwhile
		}
		total += rss
		found = true
	}
	if !found {
		return 0, fmt.Errorf("no %s process in the cgroups of pod UID %s on this host", cmd, uid)
	}
	return total, nil
}

// vmRSS reads the VmRSS line of a /proc/<pid>/status file, in bytes.
func vmRSS(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: VmRSS %q: %w", path, v, err)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("%s: no VmRSS (a kernel thread or a zombie)", path)
}
