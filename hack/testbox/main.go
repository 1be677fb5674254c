// Command testbox is the one static binary in the local cluster's test
// images (no registry, no distro images here):
//
//	testbox pause      the pod sandbox: reap zombies, exit 0 on SIGTERM/SIGINT
//	testbox env        print the environment (sorted) and exit
//	testbox sleep N    sleep N seconds (default: until SIGTERM)
//	testbox ls DIR     list a directory (default /)
//	testbox cat FILE   print a file
//	testbox whoami     ask the API server who this pod's service account is,
//	                   through KUBERNETES_SERVICE_HOST/PORT; prints username=...
//
// Called through a link named after a mode (pause -> testbox), it runs that
// mode. Build it with CGO_ENABLED=0.
package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"
)

func main() {
	args := os.Args[1:]
	if base := filepath.Base(os.Args[0]); base != "testbox" {
		args = append([]string{base}, args...)
	}
	os.Exit(run(args, os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: testbox pause | env | sleep [SECONDS] | ls [DIR] | cat FILE | whoami")
		return 2
	}
	mode, args := args[0], args[1:]
	switch mode {
	case "pause":
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		return pause(sig)
	case "env":
		env := os.Environ()
		sort.Strings(env)
		for _, e := range env {
			fmt.Fprintln(stdout, e)
		}
		return 0
	case "sleep":
		d, err := sleepDuration(args)
		if err != nil {
			fmt.Fprintf(stderr, "testbox sleep: %v\n", err)
			return 2
		}
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		select {
		case <-time.After(d):
		case <-sig:
		}
		return 0
	case "ls":
		dir := "/"
		if len(args) > 0 {
			dir = args[0]
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			fmt.Fprintf(stderr, "testbox ls: %v\n", err)
			return 1
		}
		for _, e := range entries {
			fmt.Fprintln(stdout, e.Name())
		}
		return 0
	case "cat":
		if len(args) != 1 {
			fmt.Fprintln(stderr, "testbox cat: want one file")
			return 2
		}
		b, err := os.ReadFile(args[0])
		if err != nil {
			fmt.Fprintf(stderr, "testbox cat: %v\n", err)
			return 1
		}
		_, _ = stdout.Write(b)
		return 0
	case "whoami":
		name, err := whoami(os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"), serviceAccountDir)
		if err != nil {
			fmt.Fprintf(stderr, "testbox whoami: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "username=%s\n", name)
		return 0
	default:
		fmt.Fprintf(stderr, "testbox: unknown mode %q\n", mode)
		return 2
	}
}

// sleepDuration parses sleep's optional argument; no argument means "until
// signalled", which a year stands in for.
func sleepDuration(args []string) (time.Duration, error) {
	switch len(args) {
	case 0:
		return 365 * 24 * time.Hour, nil
	case 1:
		n, err := strconv.Atoi(args[0])
		if err != nil || n < 0 {
			return 0, fmt.Errorf("want a non-negative number of seconds, got %q", args[0])
		}
		return time.Duration(n) * time.Second, nil
	default:
		return 0, fmt.Errorf("want at most one argument, got %q", args)
	}
}

// pause waits for a signal on stop while reaping any child that exits: as a
// pod's PID 1 with a shared process namespace, orphans are re-parented here.
func pause(stop <-chan os.Signal) int {
	children := make(chan os.Signal, 1)
	signal.Notify(children, syscall.SIGCHLD)
	defer signal.Stop(children)
	reap()
	for {
		select {
		case <-stop:
			return 0
		case <-children:
			reap()
		}
	}
}

// reap collects every exited child without blocking.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
