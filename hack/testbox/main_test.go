package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRun(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"b", "a"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("content of "+n+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("TESTBOX_PROBE", "value")

	for name, tc := range map[string]struct {
		args       []string
		wantCode   int
		wantOut    string // exact stdout unless wantOutHas
		wantOutHas string
		wantErrHas string
	}{
		"env prints the environment":  {args: []string{"env"}, wantOutHas: "\nTESTBOX_PROBE=value\n"},
		"ls lists a directory":        {args: []string{"ls", dir}, wantOut: "a\nb\n"},
		"ls of a missing dir fails":   {args: []string{"ls", filepath.Join(dir, "nope")}, wantCode: 1, wantErrHas: "no such file"},
		"sleep 0 returns":             {args: []string{"sleep", "0"}},
		"sleep rejects words":         {args: []string{"sleep", "ten"}, wantCode: 2, wantErrHas: `got "ten"`},
		"sleep rejects negatives":     {args: []string{"sleep", "-1"}, wantCode: 2, wantErrHas: `got "-1"`},
		"sleep rejects two args":      {args: []string{"sleep", "1", "2"}, wantCode: 2, wantErrHas: "at most one"},
		"unknown mode":                {args: []string{"frobnicate"}, wantCode: 2, wantErrHas: `unknown mode "frobnicate"`},
		"no mode":                     {args: nil, wantCode: 2, wantErrHas: "usage"},
		"cat prints a file":           {args: []string{"cat", filepath.Join(dir, "a")}, wantOut: "content of a\n"},
		"cat of a missing file fails": {args: []string{"cat", filepath.Join(dir, "nope")}, wantCode: 1, wantErrHas: "no such file"},
		"cat wants one file":          {args: []string{"cat"}, wantCode: 2, wantErrHas: "want one file"},
	} {
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(tc.args, &out, &errOut)
			if code != tc.wantCode {
				t.Errorf("exit code = %d, want %d (stderr %q)", code, tc.wantCode, errOut.String())
			}
			if tc.wantOutHas != "" {
				if !strings.Contains("\n"+out.String(), tc.wantOutHas) {
					t.Errorf("stdout %q lacks %q", out.String(), tc.wantOutHas)
				}
			} else if diff := cmp.Diff(tc.wantOut, out.String()); diff != "" {
				t.Errorf("stdout (-want +got):\n%s", diff)
			}
			if !strings.Contains(errOut.String(), tc.wantErrHas) {
				t.Errorf("stderr %q lacks %q", errOut.String(), tc.wantErrHas)
			}
		})
	}
}

func TestSleepDuration(t *testing.T) {
	d, err := sleepDuration([]string{"3"})
	if err != nil || d != 3*time.Second {
		t.Errorf("sleepDuration(3) = %v, %v; want 3s", d, err)
	}
	if d, err := sleepDuration(nil); err != nil || d < 24*time.Hour {
		t.Errorf("sleepDuration() = %v, %v; want effectively forever", d, err)
	}
}

// TestPause runs the real binary: a SIGCHLD must not stop it, SIGTERM must
// end it with status 0.
func TestPause(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "pause") // named after the mode
	if b, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	cmd := exec.Command(bin)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	// Signals sent before the handlers are installed would kill it.
	waitCaught(t, cmd.Process.Pid, syscall.SIGTERM, syscall.SIGCHLD)
	// A SIGCHLD without a child to reap must not stop it.
	if err := cmd.Process.Signal(syscall.SIGCHLD); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("pause exited with %v, want 0 on SIGTERM", err)
		}
	case <-time.After(time.Minute): // hang protection only
		t.Fatal("pause did not exit on SIGTERM")
	}
}

// waitCaught polls /proc until pid has handlers for sigs.
func waitCaught(t *testing.T, pid int, sigs ...syscall.Signal) {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // hang protection only
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			hex, ok := strings.CutPrefix(line, "SigCgt:")
			if !ok {
				continue
			}
			mask, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
			if err != nil {
				t.Fatalf("SigCgt %q: %v", hex, err)
			}
			all := true
			for _, s := range sigs {
				all = all && mask&(1<<(uint(s)-1)) != 0
			}
			if all {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d never installed handlers for %v", pid, sigs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestReap checks that reap collects an exited child, which would otherwise
// stay a zombie.
func TestReap(t *testing.T) {
	cmd := exec.Command("/bin/true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	state := func() string {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return "gone"
		}
		// pid (comm) S ...: the state follows the last ')'.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		return f[0]
	}
	deadline := time.Now().Add(time.Minute) // hang protection only
	for state() != "Z" {
		if time.Now().After(deadline) {
			t.Fatalf("child %d never exited (state %s)", pid, state())
		}
		time.Sleep(10 * time.Millisecond)
	}
	reap()
	if got := state(); got != "gone" {
		t.Errorf("after reap the child is in state %s, want gone", got)
	}
}
