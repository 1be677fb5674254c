package memlimit

import (
	"runtime/debug"
	"strings"
	"testing"
	"testing/fstest"
)

func files(kv ...string) fstest.MapFS {
	fsys := fstest.MapFS{}
	for i := 0; i+1 < len(kv); i += 2 {
		fsys[kv[i]] = &fstest.MapFile{Data: []byte(kv[i+1])}
	}
	return fsys
}

func TestFromCgroup(t *testing.T) {
	const mi = 1 << 20
	for name, tc := range map[string]struct {
		fsys    fstest.MapFS
		want    int64
		from    string
		wantErr string
	}{
		"v2, the container's own cgroup at the root": {
			fsys: files("proc/self/cgroup", "0::/\n", "sys/fs/cgroup/memory.max", "268435456\n"),
			want: 256 * mi, from: "/sys/fs/cgroup/memory.max",
		},
		"v2, no limit": {
			fsys: files("proc/self/cgroup", "0::/\n", "sys/fs/cgroup/memory.max", "max\n"),
		},
		"v2, the host's view: the pod's limit": {
			fsys: files("proc/self/cgroup", "0::/kubepods/burstable/pod1/c1\n",
				"sys/fs/cgroup/kubepods/memory.max", "8589934592",
				"sys/fs/cgroup/kubepods/burstable/pod1/memory.max", "536870912",
				"sys/fs/cgroup/kubepods/burstable/pod1/c1/memory.max", "268435456"),
			want: 256 * mi, from: "/sys/fs/cgroup/kubepods/burstable/pod1/c1/memory.max",
		},
		"v2, a parent's limit is smaller": {
			fsys: files("proc/self/cgroup", "0::/a/b\n",
				"sys/fs/cgroup/a/memory.max", "134217728",
				"sys/fs/cgroup/a/b/memory.max", "max"),
			want: 128 * mi, from: "/sys/fs/cgroup/a/memory.max",
		},
		"v2, the named path is not mounted": {
			fsys: files("proc/self/cgroup", "0::/kubepods/pod1/c1\n", "sys/fs/cgroup/memory.max", "268435456"),
			want: 256 * mi, from: "/sys/fs/cgroup/memory.max",
		},
		"v1": {
			fsys: files("proc/self/cgroup", "12:pids:/x\n4:cpu,cpuacct:/x\n9:memory:/kubepods/pod1\n0::/\n",
				"sys/fs/cgroup/memory/memory.limit_in_bytes", "268435456"),
			want: 256 * mi, from: "/sys/fs/cgroup/memory/memory.limit_in_bytes",
		},
		"v1, no limit": {
			fsys: files("proc/self/cgroup", "9:memory:/\n", "sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712"),
		},
		"no /proc": {fsys: files()},
		"no memory controller": {
			fsys: files("proc/self/cgroup", "4:cpu:/\n"),
		},
		"garbage in the limit": {
			fsys:    files("proc/self/cgroup", "0::/\n", "sys/fs/cgroup/memory.max", "lots"),
			wantErr: "reading sys/fs/cgroup/memory.max",
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, from, err := FromCgroup(tc.fsys)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want || from != tc.from {
				t.Errorf("FromCgroup = %d from %q, want %d from %q", got, from, tc.want, tc.from)
			}
		})
	}
}

func TestApply(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	limited := files("proc/self/cgroup", "0::/\n", "sys/fs/cgroup/memory.max", "1000000000")
	noEnv := func(string) (string, bool) { return "", false }

	l, err := Apply(limited, func(k string) (string, bool) { return "200MiB", k == "GOMEMLIMIT" })
	if err != nil || l.Set != 0 || l.Reason != "GOMEMLIMIT=200MiB" {
		t.Errorf("with GOMEMLIMIT: %+v, %v; want nothing set", l, err)
	}
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Errorf("with GOMEMLIMIT the runtime's limit changed to %d", got)
	}

	l, err = Apply(limited, noEnv)
	if err != nil || l.Cgroup != 1e9 || l.Set != 9e8 {
		t.Errorf("Apply = %+v, %v; want 90%% of 1e9", l, err)
	}
	if got := debug.SetMemoryLimit(-1); got != 9e8 {
		t.Errorf("runtime limit %d, want 9e8", got)
	}

	debug.SetMemoryLimit(before)
	l, err = Apply(files("proc/self/cgroup", "0::/\n", "sys/fs/cgroup/memory.max", "max"), noEnv)
	if err != nil || l.Set != 0 {
		t.Errorf("no limit: %+v, %v", l, err)
	}
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Errorf("without a cgroup limit the runtime's limit changed to %d", got)
	}
}
