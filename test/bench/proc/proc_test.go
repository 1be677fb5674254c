package proc

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func fixture(t *testing.T, pid, file, content string) Root {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, pid), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, pid, file), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return Root(dir)
}

func TestMemory(t *testing.T) {
	for name, tc := range map[string]struct {
		status  string
		want    Memory
		wantErr string
	}{
		"process": {
			status: "Name:\twebhook\nVmPeak:\t 1000 kB\nVmHWM:\t   51200 kB\nVmRSS:\t   40960 kB\n",
			want:   Memory{Peak: 50 << 20, Current: 40 << 20},
		},
		"kernel thread": {status: "Name:\tkthreadd\nState:\tS\n", wantErr: "no VmHWM"},
		"other unit":    {status: "VmHWM:\t 1 MB\nVmRSS:\t 1 kB\n", wantErr: "unexpected VmHWM"},
		"not a number":  {status: "VmHWM:\t x kB\nVmRSS:\t 1 kB\n", wantErr: "VmHWM"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := fixture(t, "42", "status", tc.status).Memory(42)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if _, err := Root(t.TempDir()).Memory(1); err == nil {
		t.Error("no error for a missing process")
	}
}

func TestCPU(t *testing.T) {
	// A comm with a space and a parenthesis; utime 250 and stime 50 ticks.
	stat := "42 (kube (api) x) S 7 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 10 0 100 1000 50\n"
	r := fixture(t, "42", "stat", stat)
	got, err := r.CPU(42)
	if err != nil {
		t.Fatal(err)
	}
	if got != 3*time.Second {
		t.Errorf("CPU %v, want 3s", got)
	}
	s, err := r.stat(42)
	if err != nil {
		t.Fatal(err)
	}
	if s.comm != "kube (api) x" || s.ppid != 7 {
		t.Errorf("comm %q ppid %d, want %q 7", s.comm, s.ppid, "kube (api) x")
	}
	if _, err := fixture(t, "42", "stat", "42 (x) S 7\n").CPU(42); err == nil {
		t.Error("no error for a short stat")
	}
	if _, err := fixture(t, "42", "stat", "garbage").CPU(42); err == nil {
		t.Error("no error for a stat without comm")
	}
}

// TestLiveProcess reads a real child of the test.
func TestLiveProcess(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sleep binary: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	pid, err := Default.Child(os.Getpid(), "sleep")
	if err != nil {
		t.Fatal(err)
	}
	if pid != cmd.Process.Pid {
		t.Errorf("Child found %d, want %d", pid, cmd.Process.Pid)
	}
	m, err := Default.Memory(pid)
	if err != nil {
		t.Fatal(err)
	}
	if m.Peak <= 0 || m.Current <= 0 || m.Current > m.Peak {
		t.Errorf("implausible memory %+v", m)
	}
	if _, err := Default.CPU(pid); err != nil {
		t.Error(err)
	}
	if _, err := Default.Child(os.Getpid(), "no-such-command"); err == nil {
		t.Error("Child found a command that does not run")
	}
}

func TestProcess(t *testing.T) {
	dir := t.TempDir()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skipf("no sh: %v", err)
	}
	log := filepath.Join(dir, "log")

	// waitLog waits for the shell to have set its trap, which it says in
	// its log: a SIGTERM before that would kill it by default.
	waitLog := func(want string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			out, _ := os.ReadFile(log)
			if strings.TrimSpace(string(out)) == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("log %q, want %q", out, want)
			}
			time.Sleep(10 * time.Millisecond) // polling a file nothing signals
		}
	}

	// Stops on SIGTERM: clean.
	p, err := Start(log, sh, []string{"BENCH_WORD=hello"}, "-c", `trap 'exit 0' TERM; echo "$BENCH_WORD"; while :; do sleep 0.01; done`)
	if err != nil {
		t.Fatal(err)
	}
	waitLog("hello")
	if err := p.Exited(); err != nil {
		t.Fatalf("running process: %v", err)
	}
	if _, err := Default.Memory(p.PID()); err != nil {
		t.Error(err)
	}
	if err := p.Stop(30 * time.Second); err != nil {
		t.Errorf("Stop: %v", err)
	}

	// Exits on its own before Stop: an error.
	p, err = Start(log, sh, nil, "-c", "exit 3")
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if err := p.Stop(time.Second); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("Stop after exit: %v, want the exit status", err)
	}

	// Ignores SIGTERM: killed after the timeout, an error.
	p, err = Start(log, sh, nil, "-c", `trap '' TERM; echo trapped; while :; do sleep 0.01; done`)
	if err != nil {
		t.Fatal(err)
	}
	waitLog("trapped")
	if err := p.Stop(200 * time.Millisecond); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("Stop of a process ignoring SIGTERM: %v, want killed", err)
	}

	if _, err := Start(filepath.Join(dir, "missing", "log"), sh, nil); err == nil {
		t.Error("no error for an unwritable log")
	}
	if _, err := Start(log, filepath.Join(dir, "no-such-binary"), nil); err == nil {
		t.Error("no error for a missing binary")
	}
}
