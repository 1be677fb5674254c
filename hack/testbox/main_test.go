package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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

// TestPause checks that pause reaps a child that exits while it waits and
// returns 0 when told to stop. (Signals reach it through the channel run
// registers; sending real ones to a freshly started binary would race with
// its handler installation.)
func TestPause(t *testing.T) {
	stop := make(chan os.Signal, 1)
	done := make(chan int, 1)
	go func() { done <- pause(stop) }()

	cmd := exec.Command("/bin/true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	deadline := time.Now().Add(time.Minute) // hang protection only
	for procState(pid) != "gone" {
		if time.Now().After(deadline) {
			t.Fatalf("pause never reaped child %d (state %s)", pid, procState(pid))
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case code := <-done:
		t.Fatalf("pause returned %d before being told to stop", code)
	default:
	}

	stop <- syscall.SIGTERM
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("pause returned %d on SIGTERM, want 0", code)
		}
	case <-time.After(time.Minute): // hang protection only
		t.Fatal("pause did not return on SIGTERM")
	}
}

// procState is the state letter of a process in /proc, or "gone".
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "gone"
	}
	// pid (comm) S ...: the state follows the last ')'.
	return strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))[0]
}

// TestReap checks that reap collects an exited child, which would otherwise
// stay a zombie.
func TestReap(t *testing.T) {
	cmd := exec.Command("/bin/true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	state := func() string { return procState(pid) }
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
