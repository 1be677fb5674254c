package cluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/migflex/migflex/internal/testsupport/testenv"
	"github.com/migflex/migflex/test/bench/proc"
)

// envHelper, set to the envtest assets directory, turns the test binary into
// a benchmark stand-in for TestStartDiesWithParent: it starts a control
// plane, prints the PIDs of etcd and kube-apiserver, and waits.
const envHelper = "MIGFLEX_BENCH_CONTROLPLANE_HELPER"

// exitTimeout bounds the wait for a killed process to go: hang protection;
// the kernel delivers the parent-death signal as the parent exits.
const exitTimeout = time.Minute

func TestMain(m *testing.M) {
	if assets := os.Getenv(envHelper); assets != "" {
		os.Exit(controlPlaneHelper(assets))
	}
	os.Exit(m.Run())
}

// controlPlaneHelper starts a control plane and keeps it until stdin closes
// (or, as TestStartDiesWithParent does, it is killed).
func controlPlaneHelper(assets string) int {
	cp, err := Start(assets, io.Discard)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	etcd, err1 := proc.Default.Child(os.Getpid(), "etcd")
	api, err2 := proc.Default.Child(os.Getpid(), "kube-apiserver")
	if err := errors.Join(err1, err2); err != nil {
		fmt.Fprintln(os.Stderr, errors.Join(err, cp.Stop()))
		return 1
	}
	fmt.Printf("%d %d\n", etcd, api)
	_, _ = io.Copy(io.Discard, os.Stdin)
	if err := cp.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// TestStartDiesWithParent: a benchmark killed outright (SIGKILL, so Stop
// never runs) takes its etcd and kube-apiserver with it, and the API server
// runs with aggregator routing.
func TestStartDiesWithParent(t *testing.T) {
	assets := envtestAssets(t)
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), envHelper+"="+assets)
	stdin, err := helper.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	helper.Stderr = &stderr
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	exited := false
	t.Cleanup(func() {
		if !exited {
			_ = stdin.Close() // the helper stops its control plane
			_ = helper.Wait()
		}
	})

	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the control plane's PIDs from the helper: %v; its stderr:\n%s", err, stderr.String())
	}
	var etcd, api int
	if _, err := fmt.Sscanf(line, "%d %d", &etcd, &api); err != nil {
		t.Fatalf("helper printed %q: %v", line, err)
	}
	// Whatever happens below, never leave them running.
	for pid, name := range map[int]string{etcd: "etcd", api: "kube-apiserver"} {
		t.Cleanup(func() { killIfNamed(pid, name) })
	}

	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", api))
	if err != nil {
		t.Fatal(err)
	}
	if args := strings.Split(string(cmdline), "\x00"); !slices.Contains(args, "--enable-aggregator-routing=true") {
		t.Errorf("kube-apiserver runs without --enable-aggregator-routing=true: %q", args)
	}

	if err := helper.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = helper.Wait()
	exited = true
	for pid, name := range map[int]string{etcd: "etcd", api: "kube-apiserver"} {
		if err := waitGone(t.Context(), pid); err != nil {
			t.Errorf("%s (PID %d) outlived the killed process that started it: %v", name, pid, err)
		}
	}
}

// TestDieWithParent: a process started through a dieWithParent wrapper is
// killed when its parent dies; started directly, the same process lives on
// (the control case: killing the parent alone does not end it).
func TestDieWithParent(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	wrapped, err := testenv.DieWithParent(t.TempDir(), sleep)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		bin        string
		wantKilled bool
	}{
		{name: "through the wrapper", bin: wrapped[0], wantKilled: true},
		{name: "directly", bin: sleep, wantKilled: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pid := orphanSleep(t, tc.bin, sleep)
			if tc.wantKilled {
				if err := waitGone(t.Context(), pid); err != nil {
					t.Errorf("sleep (PID %d) outlived its parent: %v", pid, err)
				}
				return
			}
			if st, ok := procState(pid); !ok || st == "Z" {
				t.Errorf("sleep (PID %d) died with its parent without the wrapper (state %q, exists %v)", pid, st, ok)
			}
		})
	}
}

// orphanSleep starts bin (sleep or its wrapper) under a shell, waits until
// the process runs sleep itself (the wrapper has set its parent-death
// signal by then), kills the shell and returns the PID. The process is
// killed when the test ends if it is still there.
func orphanSleep(t *testing.T, bin, sleep string) int {
	t.Helper()
	want, err := filepath.EvalSymlinks(sleep)
	if err != nil {
		t.Fatal(err)
	}
	shell := exec.Command("sh", "-c", `"$0" 600 & echo $!; wait`, bin)
	out, err := shell.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := shell.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	if _, err := fmt.Fscanf(out, "%d\n", &pid); err != nil {
		_ = shell.Process.Kill()
		_ = shell.Wait()
		t.Fatalf("reading the PID from the shell: %v", err)
	}
	t.Cleanup(func() { killIfNamed(pid, "sleep") })
	err = wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, exitTimeout, true, func(context.Context) (bool, error) {
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		return err == nil && exe == want, nil
	})
	if err != nil {
		t.Fatalf("PID %d never ran %s: %v", pid, want, err)
	}
	if err := shell.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = shell.Wait()
	return pid
}

// waitGone waits until pid has exited: gone, or a zombie nobody reaps.
func waitGone(ctx context.Context, pid int) error {
	return wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, exitTimeout, true, func(context.Context) (bool, error) {
		st, ok := procState(pid)
		return !ok || st == "Z", nil
	})
}

// procState is the state letter of pid in /proc (R, S, Z, ...), and
// whether it exists.
func procState(pid int) (string, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", false
	}
	// "pid (comm) state ...": comm may hold spaces and parentheses.
	_, rest, ok := strings.Cut(string(b[bytes.LastIndexByte(b, ')')+1:]), " ")
	if !ok || rest == "" {
		return "", true
	}
	return rest[:1], true
}

// killIfNamed SIGKILLs pid if it still runs a program named comm, so a
// reused PID is never signalled.
func killIfNamed(pid int, comm string) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err == nil && strings.TrimSpace(string(b)) == comm {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// envtestAssets is the directory holding etcd, kube-apiserver and kubectl:
// $KUBEBUILDER_ASSETS, else .cache/envtest in the module root. Without them
// the test is skipped, or fails under MIGFLEX_REQUIRE_ENVTEST=1 (make
// test-integration), as internal/testsupport/testenv does.
func envtestAssets(t *testing.T) string {
	t.Helper()
	dir := os.Getenv(testenv.EnvAssets)
	if dir == "" {
		root, err := moduleRoot()
		if err == nil {
			dir = filepath.Join(root, ".cache", "envtest")
		}
	}
	for _, name := range []string{"etcd", "kube-apiserver", "kubectl"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			if os.Getenv(testenv.EnvRequire) == "1" {
				t.Fatalf("no control plane binaries: %v (run `make envtest-assets`)", err)
			}
			t.Skipf("no control plane binaries: %v (run `make envtest-assets` to run this test)", err)
		}
	}
	return dir
}

// moduleRoot is the first directory upwards from the working directory
// whose go.mod declares the migflex module.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && slices.Contains(strings.Split(string(b), "\n"), "module github.com/migflex/migflex") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the github.com/migflex/migflex module")
		}
		dir = parent
	}
}
