// Package report holds what every benchmark report shares: the machine the
// numbers were taken on and how durations are written.
package report

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// Machine describes where the numbers were taken.
type Machine struct {
	CPUs     int    `json:"cpus"`
	CPUModel string `json:"cpuModel"`
	MemoryGB int    `json:"memoryGiB"`
	Kernel   string `json:"kernel"`
	Go       string `json:"go"`
	// LoadBefore and LoadAfter are /proc/loadavg's 1, 5 and 15 minute load
	// averages when the run started and ended.
	LoadBefore string `json:"loadBefore"`
	LoadAfter  string `json:"loadAfter,omitempty"`
}

// DescribeMachine reads the machine from /proc and the Go runtime, with the
// load average now as LoadBefore.
func DescribeMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version(), LoadBefore: LoadAverage()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		m.CPUModel = field(b, "model name")
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if kb, err := strconv.ParseInt(strings.TrimSuffix(field(b, "MemTotal"), " kB"), 10, 64); err == nil {
			m.MemoryGB = int(kb >> 20)
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// LoadAverage is the first three fields of /proc/loadavg.
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// field is the value of the first "key: value" line with key.
func field(b []byte, key string) string {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
