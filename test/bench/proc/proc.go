// Package proc reads what the benchmarks report about processes from
// Linux's /proc: peak and current resident memory, CPU time, and the
// children of a process (to find the API server envtest started).
package proc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Root is where proc is mounted; tests point it at a fixture.
type Root string

// Default is the system's /proc.
const Default Root = "/proc"

// Memory is a process's resident memory in bytes.
type Memory struct {
	// Peak is VmHWM, the high-water mark of the resident set.
	Peak int64
	// Current is VmRSS.
	Current int64
}

// Memory reads VmHWM and VmRSS of pid.
func (r Root) Memory(pid int) (Memory, error) {
	b, err := os.ReadFile(filepath.Join(string(r), strconv.Itoa(pid), "status"))
	if err != nil {
		return Memory{}, fmt.Errorf("reading the status of process %d: %w", pid, err)
	}
	var m Memory
	var found int
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "VmHWM" && key != "VmRSS") {
			continue
		}
		f := strings.Fields(val)
		if len(f) != 2 || f[1] != "kB" {
			return Memory{}, fmt.Errorf("process %d: unexpected %s line %q", pid, key, sc.Text())
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return Memory{}, fmt.Errorf("process %d: %s: %w", pid, key, err)
		}
		if key == "VmHWM" {
			m.Peak = kb << 10
		} else {
			m.Current = kb << 10
		}
		found++
	}
	if found != 2 {
		return Memory{}, fmt.Errorf("process %d: no VmHWM and VmRSS in its status (a kernel thread or a zombie?)", pid)
	}
	return m, nil
}

// clockTick is USER_HZ, the unit of the CPU times in /proc/PID/stat. It is
// 100 on every Linux architecture Go supports.
const clockTick = 100

// stat holds the fields of /proc/PID/stat the package uses.
type stat struct {
	comm string
	ppid int
	cpu  time.Duration
}

func (r Root) stat(pid int) (stat, error) {
	b, err := os.ReadFile(filepath.Join(string(r), strconv.Itoa(pid), "stat"))
	if err != nil {
		return stat{}, fmt.Errorf("reading the stat of process %d: %w", pid, err)
	}
	// comm is in parentheses and may hold spaces and parentheses itself.
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return stat{}, fmt.Errorf("process %d: malformed stat %q", pid, b)
	}
	f := strings.Fields(string(b[end+1:]))
	// After comm: state(3) ppid(4) ... utime(14) stime(15).
	if len(f) < 13 {
		return stat{}, fmt.Errorf("process %d: stat has %d fields after comm", pid, len(f))
	}
	ppid, err1 := strconv.Atoi(f[1])
	utime, err2 := strconv.ParseInt(f[11], 10, 64)
	stime, err3 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return stat{}, fmt.Errorf("process %d: stat: %w", pid, err)
	}
	return stat{
		comm: string(b[open+1 : end]),
		ppid: ppid,
		cpu:  time.Duration(utime+stime) * time.Second / clockTick,
	}, nil
}

// CPU is the user plus system CPU time pid has used, in USER_HZ steps.
func (r Root) CPU(pid int) (time.Duration, error) {
	s, err := r.stat(pid)
	return s.cpu, err
}

// Child finds the child of parent whose command name is comm.
func (r Root) Child(parent int, comm string) (int, error) {
	entries, err := os.ReadDir(string(r))
	if err != nil {
		return 0, fmt.Errorf("listing processes: %w", err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		s, err := r.stat(pid)
		if err != nil {
			continue // gone meanwhile
		}
		if s.ppid == parent && s.comm == comm {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("process %d has no child named %q", parent, comm)
}
