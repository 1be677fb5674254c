package cli

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/migflex/migflex/internal/platform/memlimit"
)

func TestLogMemoryLimit(t *testing.T) {
	defer func(l memlimit.Limit, err error) { memLimit, memLimitErr = l, err }(memLimit, memLimitErr)
	for name, tc := range map[string]struct {
		limit memlimit.Limit
		err   error
		want  string
	}{
		"set":        {limit: memlimit.Limit{Cgroup: 1000, Set: 900, Reason: "/sys/fs/cgroup/memory.max"}, want: `INFO Go memory limit set under the container's limit=900 container=1000 from="/sys/fs/cgroup/memory.max"`},
		"not set":    {limit: memlimit.Limit{Reason: "GOMEMLIMIT=1GiB"}, want: `INFO No Go memory limit set reason="GOMEMLIMIT=1GiB"`},
		"unreadable": {err: errors.New("reading x: boom"), want: `ERROR No Go memory limit: reading the container's failed err="reading x: boom"`},
	} {
		t.Run(name, func(t *testing.T) {
			memLimit, memLimitErr = tc.limit, tc.err
			log := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true), ktesting.Verbosity(2)))
			LogMemoryLimit(log)
			if got := log.GetSink().(ktesting.Underlier).GetBuffer().String(); !strings.Contains(got, tc.want) {
				t.Errorf("logged %q, want it to contain %q", got, tc.want)
			}
		})
	}
}
